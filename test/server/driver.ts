/**
 * A thin test driver: one WebSocket per server, the protocol core's WriteOperation and
 * ReadOperation driven over them. Not the client library (issue 5): it reconnects
 * lazily, drops messages for servers that are down (the protocol needs only n − t), and
 * gives every operation a deadline.
 */
import { randomBytes } from 'node:crypto';
import WebSocket from 'ws';
import { createCodec, type ErasureCodec } from '@powerstore/erasure';
import {
  CertificateVerifier,
  decodeMessage,
  encodeMessage,
  ReadOperation,
  WriteOperation,
  WriterSession,
  type ClientOperation,
  type Cluster,
  type ClusterConfig,
  type Grant,
  type ReadResult,
  type ReadTarget,
  type Reply,
  type Signer,
  type Step,
  type WriteResult,
  type WriteValue,
} from '@powerstore/protocol';
import { createCryptoProvider } from '@powerstore/protocol/crypto';

export const crypto = createCryptoProvider();

/** An operation that missed its deadline. */
export class OperationTimeout extends Error {
  readonly code = 'OPERATION_TIMEOUT';
}

interface Running {
  readonly op: ClientOperation<unknown>;
  chain: Promise<void>;
  resolve(v: unknown): void;
  reject(e: Error): void;
  done: boolean;
  /** A read's wait for the fragments it asked for (as @powerstore/client's). */
  fragmentTimer?: ReturnType<typeof setTimeout>;
}

/** How long a read waits on servers it asked for fragments before asking the others (a server may be down). */
const FRAGMENT_WAIT_MS = 50;

/** Connections to every server of a cluster. */
export class ClusterClient {
  readonly #urls: readonly string[];
  readonly #config: ClusterConfig;
  readonly #sockets: (WebSocket | undefined)[];
  readonly #lastAttempt: number[];
  readonly #running = new Map<number, Running>();
  readonly #queued = new WeakMap<WebSocket, Uint8Array[]>();
  #nextOpId = 1 + Math.floor(Math.random() * 1e9);
  #closed = false;
  /** Called for every decoded reply (tests record acknowledgements per server). */
  onReply: ((from: number, reply: Reply) => void) | undefined;

  constructor(urls: readonly string[], config: ClusterConfig) {
    this.#urls = urls;
    this.#config = config;
    this.#sockets = urls.map(() => undefined);
    this.#lastAttempt = urls.map(() => 0);
  }

  /** Opens every connection it can within `timeoutMs`; resolves with how many opened. */
  async connect(timeoutMs = 5000): Promise<number> {
    const opened = await Promise.all(
      this.#urls.map(
        (_, i) =>
          new Promise<boolean>((resolve) => {
            const ws = this.#socket(i);
            if (!ws) return resolve(false);
            if (ws.readyState === WebSocket.OPEN) return resolve(true);
            const timer = setTimeout(() => resolve(false), timeoutMs);
            ws.once('open', () => {
              clearTimeout(timer);
              resolve(true);
            });
            ws.once('close', () => {
              clearTimeout(timer);
              resolve(false);
            });
          }),
      ),
    );
    return opened.filter(Boolean).length;
  }

  /** A fresh operation id. */
  opId(): number {
    return this.#nextOpId++;
  }

  /** Runs `op` to completion or rejects with {@link OperationTimeout}. */
  run<R>(op: ClientOperation<R> & { readonly opId: number }, timeoutMs: number): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      const timer = setTimeout(() => {
        entry.done = true;
        this.#running.delete(op.opId);
        reject(new OperationTimeout(`operation ${op.opId} timed out after ${timeoutMs} ms`));
      }, timeoutMs);
      const entry: Running = {
        op,
        chain: Promise.resolve(),
        done: false,
        resolve: (v) => {
          clearTimeout(timer);
          clearTimeout(entry.fragmentTimer);
          resolve(v as R);
        },
        reject: (e) => {
          clearTimeout(timer);
          clearTimeout(entry.fragmentTimer);
          reject(e);
        },
      };
      this.#running.set(op.opId, entry);
      // Replies are fed one at a time: the state machines must be awaited between inputs.
      entry.chain = op.start().then(
        (step) => this.#step(entry, op.opId, step),
        (e: unknown) => this.#fail(entry, op.opId, e),
      );
    });
  }

  #step(entry: Running, opId: number, step: Step<unknown>): void {
    if (entry.done) return;
    if (step.error) return this.#fail(entry, opId, step.error);
    if (step.result !== undefined) {
      entry.done = true;
      this.#running.delete(opId);
      entry.resolve(step.result);
      return;
    }
    if (step.send && !step.supplement) {
      // A new round: its own wait for fragments.
      clearTimeout(entry.fragmentTimer);
      entry.fragmentTimer = undefined;
    }
    for (const o of step.send ?? []) this.send(o.to, encodeMessage(o.message));
    const op = entry.op;
    if (op instanceof ReadOperation && op.awaitingFragments && entry.fragmentTimer === undefined) {
      entry.fragmentTimer = setTimeout(() => {
        entry.chain = entry.chain.then(() => this.#step(entry, opId, op.stalled())).catch((e: unknown) => this.#fail(entry, opId, e));
      }, FRAGMENT_WAIT_MS);
    }
  }

  #fail(entry: Running, opId: number, e: unknown): void {
    entry.done = true;
    this.#running.delete(opId);
    entry.reject(e instanceof Error ? e : new Error(String(e)));
  }

  /** Sends raw bytes to server `i` if it is reachable; otherwise drops them. */
  send(i: number, frame: Uint8Array): void {
    const ws = this.#socket(i);
    if (!ws) return;
    if (ws.readyState === WebSocket.OPEN) ws.send(frame);
    else if (ws.readyState === WebSocket.CONNECTING) this.#queued.get(ws)?.push(frame);
  }

  #socket(i: number): WebSocket | undefined {
    if (this.#closed) return undefined;
    const existing = this.#sockets[i];
    if (existing && (existing.readyState === WebSocket.OPEN || existing.readyState === WebSocket.CONNECTING)) return existing;
    // Reconnect at most every 200 ms so a dead server costs nothing per message.
    if (Date.now() - this.#lastAttempt[i]! < 200) return undefined;
    this.#lastAttempt[i] = Date.now();
    const ws = new WebSocket(this.#urls[i]!, { perMessageDeflate: false, maxPayload: 64 * 1024 * 1024 });
    this.#sockets[i] = ws;
    // Frames sent while connecting go out in order once open (one listener, not one per frame).
    const queued: Uint8Array[] = [];
    this.#queued.set(ws, queued);
    ws.once('open', () => {
      for (const f of queued.splice(0)) ws.send(f);
    });
    ws.on('error', () => undefined);
    ws.on('message', (data: Buffer) => {
      let reply: Reply;
      try {
        reply = decodeMessage(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), { n: this.#config.n }) as Reply;
      } catch {
        return;
      }
      this.onReply?.(i, reply);
      const entry = this.#running.get(reply.opId);
      if (!entry) return;
      entry.chain = entry.chain.then(() =>
        entry.done
          ? undefined
          : entry.op.onReply(i, reply).then(
              (step) => this.#step(entry, reply.opId, step),
              (e: unknown) => this.#fail(entry, reply.opId, e),
            ),
      );
    });
    return ws;
  }

  /** Closes every connection; running operations time out. */
  close(): void {
    this.#closed = true;
    for (const ws of this.#sockets) ws?.terminate();
  }
}

/** A writer and reader over a {@link ClusterClient}. */
export class TestClient {
  readonly cluster: ClusterClient;
  readonly config: ClusterConfig;
  readonly codec: ErasureCodec;
  /** The writer session, when the client has an identity. */
  readonly session: WriterSession | undefined;
  readonly verifier: CertificateVerifier;

  private constructor(
    cluster: ClusterClient,
    config: ClusterConfig,
    codec: ErasureCodec,
    session: WriterSession | undefined,
    verifier: CertificateVerifier,
  ) {
    this.cluster = cluster;
    this.config = config;
    this.codec = codec;
    this.session = session;
    this.verifier = verifier;
  }

  /** Connects to `target`'s servers; a `signer` makes it a writer (with a fresh random instance id). */
  static async open(
    target: { readonly urls: readonly string[]; readonly cluster: Cluster },
    signer?: Signer,
    grants: readonly Grant[] = [],
  ): Promise<TestClient> {
    const { config, identity } = target.cluster;
    const codec = await createCodec({ k: config.t + 1, n: config.n });
    const session = signer
      ? new WriterSession({ crypto, cluster: identity, signer, instance: new Uint8Array(randomBytes(16)), grants })
      : undefined;
    const cluster = new ClusterClient(target.urls, config);
    await cluster.connect();
    return new TestClient(cluster, config, codec, session, session?.verifier ?? new CertificateVerifier(crypto, identity));
  }

  write(key: string, value: WriteValue, timeoutMs = 10_000): Promise<WriteResult> {
    if (!this.session) throw new Error('not a writer');
    const random = (n: number) => new Uint8Array(randomBytes(n));
    const op = new WriteOperation(
      { config: this.config, crypto, codec: this.codec, random, session: this.session, now: Date.now },
      key,
      value,
      this.cluster.opId(),
    );
    return this.cluster.run(op, timeoutMs).finally(() => op.abandon());
  }

  /** Reads `key`: its latest value, or with `target` one stripe of a striped value (see `ReadTarget`). */
  read(key: string, timeoutMs = 10_000, target?: ReadTarget): Promise<ReadResult> {
    const op = new ReadOperation(
      { config: this.config, crypto, codec: this.codec, verifier: this.verifier },
      key,
      this.cluster.opId(),
      target,
    );
    return this.cluster.run(op, timeoutMs);
  }

  close(): void {
    this.cluster.close();
  }
}
