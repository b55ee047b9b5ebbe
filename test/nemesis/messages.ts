/**
 * What the nemesis (run.ts) and its client processes (worker.ts) tell each other over the
 * IPC channel, and the values the clients write: `<id>:<size>:` repeated up to `<size>`
 * bytes, so a read can say which write it returned and whether its bytes are exactly that
 * write's (not, say, a mix of two versions' stripes).
 */
import type { OpKind } from './history.js';

/** What the parent sends first. */
export interface WorkerConfig {
  readonly type: 'config';
  /** This client's name (`c1`, …); also its value ids' prefix. */
  readonly client: string;
  readonly seed: number;
  readonly cluster: object;
  readonly identity: object;
  /** Keys, relative to the identity's namespace. */
  readonly keys: readonly string[];
  readonly opTimeoutMs: number;
  /** Share of writes made with putStream, in stripes. */
  readonly streamShare: number;
}

export type ParentMessage = WorkerConfig | { readonly type: 'stop' } | { readonly type: 'final' } | { readonly type: 'exit' };

export type WorkerMessage =
  /** Connected; `namespace` is the identity's, which the clients' keys are under. */
  | { readonly type: 'ready'; readonly namespace: string }
  | {
      readonly type: 'invoke';
      readonly seq: number;
      readonly kind: OpKind;
      readonly key: string;
      readonly written?: string | null;
      readonly bytes?: number;
      readonly final?: boolean;
      /** CLOCK_MONOTONIC, nanoseconds, as a decimal string (it outgrows a double's exact range). */
      readonly at: string;
    }
  | {
      readonly type: 'complete';
      readonly seq: number;
      readonly at: string;
      readonly outcome: string;
      readonly error?: string;
      readonly read?: string | null;
      readonly intact?: boolean;
      readonly listed?: readonly { readonly key: string; readonly size?: number; readonly storedSize?: number }[];
      readonly cursor?: string;
    }
  /** The client caught a server misbehaving (a correct one never should be). */
  | { readonly type: 'blamed'; readonly server: number; readonly reason: string }
  | { readonly type: 'stopped' }
  | { readonly type: 'final-done' }
  | { readonly type: 'failed'; readonly error: string };

/** The name a client's key `key` has in the store, under the identity's namespace. */
export const nemesisKey = (namespace: string, key: string): string => `${namespace}nemesis/${key}`;

/** Smallest stripe the protocol allows: striped values of a few stripes stay small. */
export const STRIPE_BYTES = 64 * 1024;

/** The bytes of value `id` of `size` bytes. */
export function valueBytes(id: string, size: number): Uint8Array {
  const unit = new TextEncoder().encode(`${id}:${size}:`);
  const out = new Uint8Array(size);
  for (let i = 0; i < size; i += unit.length) out.set(unit.subarray(0, Math.min(unit.length, size - i)), i);
  return out;
}

/** Which value `bytes` is, and whether they are exactly that value's. */
export function identify(bytes: Uint8Array): { id: string; intact: boolean } {
  const head = new TextDecoder().decode(bytes.subarray(0, 200));
  const m = /^([a-z0-9]+\.\d+):(\d+):/.exec(head);
  if (!m) return { id: `?${head.slice(0, 40)}`, intact: false };
  const expected = valueBytes(m[1]!, Number(m[2]));
  return { id: m[1]!, intact: expected.length === bytes.length && Buffer.from(expected).equals(Buffer.from(bytes)) };
}
