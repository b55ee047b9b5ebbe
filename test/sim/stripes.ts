/**
 * Striped values in the simulator. Every stripe of an honest striped write carries the
 * write's identity and its own index in a header, and a filler derived from both, so a
 * value assembled from stripes of two writes (or from a stripe of a crashed write's
 * partial upload) names the wrong write in some stripe, whatever the checker compares.
 */
import { createHash } from 'node:crypto';
import { MIN_STRIPE_SIZE, type StripeLayout, type StripeSource } from '@powerstore/protocol';
import { hashString } from './byzantine.js';

/** The stripes of write `id`: `count` stripes of {@link MIN_STRIPE_SIZE} bytes, the last `lastLength` (1 … MIN_STRIPE_SIZE). */
export function stripedValue(id: string, count: number, lastLength: number): Uint8Array[] {
  return Array.from({ length: count }, (_, s) => stripeBytes(id, s, s === count - 1 ? lastLength : MIN_STRIPE_SIZE));
}

function stripeBytes(id: string, index: number, length: number): Uint8Array {
  const out = new Uint8Array(length);
  const header = new TextEncoder().encode(`${id}#${index}/`);
  let x = hashString(`${id}#${index}`) | 1;
  for (let i = 0; i < length; i++) {
    // xorshift: cheap, and different for every (write, stripe)
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = i < header.length ? header[i]! : 0x61 + ((x >>> 0) % 26);
  }
  return out;
}

/** Which write and stripe `bytes` claims to be, from its header; `undefined` if it has none. */
export function stripeOrigin(bytes: Uint8Array): { id: string; index: number } | undefined {
  const head = new TextDecoder().decode(bytes.subarray(0, Math.min(bytes.length, 64)));
  const m = /^([^#/]+)#(\d+)\//.exec(head);
  return m ? { id: m[1]!, index: Number(m[2]) } : undefined;
}

/** Whether `bytes` is exactly stripe `index` of write `id` (header and filler). */
export function isStripeOf(bytes: Uint8Array, id: string, index: number): boolean {
  const expected = stripeBytes(id, index, bytes.length);
  return (
    Buffer.compare(
      Buffer.from(expected.buffer, expected.byteOffset, expected.length),
      Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length),
    ) === 0
  );
}

/** A source that hands out `stripes` one at a time, as a streaming client would. */
export function sourceOf(stripes: readonly Uint8Array[]): StripeSource {
  let next = 0;
  return { stripeSize: MIN_STRIPE_SIZE, next: async () => stripes[next++] };
}

/** The whole value of `stripes`. */
export function concat(parts: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** What the checker keys values by: the bytes themselves when short, a digest of them when striped (hundreds of KiB). */
export function fingerprint(bytes: Uint8Array): string {
  if (bytes.length <= 256) return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).toString('hex');
  return `sha256:${bytes.length}:${createHash('sha256').update(bytes).digest('hex')}`;
}

/** Layouts equal field by field. */
export function sameLayout(a: StripeLayout, b: StripeLayout): boolean {
  return (
    a.valueLength === b.valueLength &&
    a.stripeSize === b.stripeSize &&
    a.digests.length === b.digests.length &&
    a.digests.every((d, i) => Buffer.compare(Buffer.from(d), Buffer.from(b.digests[i]!)) === 0)
  );
}
