/**
 * A server's connections to the other servers of its cluster, as a client: what catch-up
 * and scrub (`heal.ts`, `scrub.ts`) drive the protocol's client operations over
 * (`ListOperation`, `RepairOperation`). The server is one of the `n`: its own answers come
 * from its protocol `Server.handle`, called directly, never over a socket.
 *
 * Peers are not trusted. Every answer goes to the operation, which checks it (candidates
 * against their certificates and store proofs, fragments against their hashes), so the
 * worst a Byzantine peer can do here is cost time and memory, and both are bounded:
 *
 * - frames over `maxFrameBytes` are refused by `ws` before they are buffered;
 * - every round goes out under a wire `opId` of its own, and a peer's answers to it are
 *   taken only as many times as it was sent the request (once, twice after a supplement),
 *   judged from the frame's header before the body is decoded: a peer repeating answers
 *   cannot queue frames, and late answers to an earlier round are dropped;
 * - every operation has a deadline, and frames that do not decode or are not replies are
 *   reported as evidence and dropped.
 *
 * Connections open when an operation needs them, reconnect with backoff while operations
 * run, and close once none has run for a few seconds, so an idle server holds no slot in
 * its peers' connection limits.
 */
import type { Logger } from 'pino';
import WebSocket from 'ws';
import {
  decodeHeader,
  decodeMessage,
  encodeMessage,
  isRequest,
  ProtocolError,
  type ClientOperation,
  type Outgoing,
  type Reply,
  type Request,
  type Step,
} from '@powerstore/protocol';

/** Reconnection backoff: doubles from the first delay up to the last, with jitter. */
const BACKOFF_MIN_MS = 100;
const BACKOFF_MAX_MS = 5_000;
/** Connections close after this long without an operation. */
const IDLE_CLOSE_MS = 5_000;
/** The shortest wait for fragments asked of some servers before asking the others (see `ReadOperation.stalled`). */
const FRAGMENT_WAIT_MIN_MS = 20;

/** How a peer looks from here. */
export interface PeerStatus {
  /** 1-based server id. */
  readonly id: number;
  readonly url: string;
  readonly state: 'open' | 'connecting' | 'closed';
  /** Why the connection last failed or closed, if it did. */
  readonly lastError: string | undefined;
  /** What the peer was last caught answering that no correct server would, if anything. */
  readonly misbehaving: string | undefined;
}

/** What a {@link PeerSet} needs. */
export interface PeerSetOptions {
  readonly n: number;
  /** This server's protocol index: its requests go to `handleSelf`. */
  readonly self: number;
  /** Each server's URL by protocol index (this server's is not used). */
  readonly urls: readonly string[];
  /** This server's own protocol `Server.handle`. */
  readonly handleSelf: (request: Request) => Promise<Reply>;
  /** Largest frame taken from a peer (the cluster's frame limit). */
  readonly maxFrameBytes: number;
  /** CA certificates trusted for `wss://` peers, besides Node's. */
  readonly ca?: string | Buffer;
  readonly log: Logger;
  /** A peer was caught misbehaving (an answer no correct server sends). */
  readonly onEvidence?: (server: number, reason: string) => void;
}

/** How to run one operation. */
export interface RunOptions {
  readonly timeoutMs: number;
  readonly signal?: AbortSignal;
  /**
   * Hand this server's own answers to the operation only after this long (ms), and only if
   * it has not finished by then: a server that lost its disk asks its peers first (see
   * `heal.ts`). Default 0: at once.
   */
  readonly deferSelfMs?: number;
  /** Called with the size of every peer frame handed to the operation. */
  readonly onBytes?: (bytes: number) => void;
  /** Answers this server's own requests of this operation instead of {@link PeerSetOptions.handleSelf}. */
  readonly handleSelf?: (request: Request) => Promise<Reply>;
}

/** An operation that did not finish in time. */
export class PeerTimeout extends Error {
  readonly code = 'TIMEOUT';
}

interface Round {
  readonly wire: number;
  readonly run: Running;
  /** Frames of this round per server (resent on reconnect to a server that has not answered). */
  readonly frames: Map<number, Uint8Array>;
  /** Requests sent per server in this round (2 after a supplement asked it again). */
  readonly sent: Map<number, number>;
  /** Answers taken per server. */
  readonly taken: Map<number, number>;
  readonly started: number;
}

interface Running {
  readonly op: ClientOperation<unknown> & { readonly opId: number };
  readonly options: RunOptions;
  chain: Promise<void>;
  round: Round | undefined;
  done: boolean;
  resolve(v: unknown): void;
  reject(e: Error): void;
  fragmentTimer?: ReturnType<typeof setTimeout>;
  readonly timers: Set<ReturnType<typeof setTimeout>>;
}

/** An operation that may ask the host to wait for fragments (a read or a repair). */
interface Stallable {
  readonly awaitingFragments: boolean;
  stalled(): Step<unknown>;
}

function stallable(op: object): op is Stallable {
  return 'awaitingFragments' in op && typeof (op as { stalled?: unknown }).stalled === 'function';
}

class Peer {
  ws: WebSocket | undefined;
  state: 'open' | 'connecting' | 'closed' = 'closed';
  lastError: string | undefined;
  misbehaving: string | undefined;
  attempt = 0;
  timer: ReturnType<typeof setTimeout> | undefined;
  constructor(
    readonly index: number,
    public url: string,
  ) {}
}

/** Connections to the other servers, and the driver of operations over them. */
export class PeerSet {
  readonly #options: PeerSetOptions;
  readonly #peers: (Peer | undefined)[];
  readonly #rounds = new Map<number, Round>();
  readonly #running = new Set<Running>();
  #nextWire = 1 + Math.floor(Math.random() * 2 ** 40);
  #idleTimer: ReturnType<typeof setTimeout> | undefined;
  #closed = false;

  constructor(options: PeerSetOptions) {
    this.#options = options;
    this.#peers = options.urls.map((url, i) => (i === options.self ? undefined : new Peer(i, url)));
  }

  /** Each peer's state, for status pages. */
  status(): PeerStatus[] {
    return this.#peers.flatMap((p) =>
      p ? [{ id: p.index + 1, url: p.url, state: p.state, lastError: p.lastError, misbehaving: p.misbehaving }] : [],
    );
  }

  /**
   * The servers' URLs from a reloaded cluster file: a peer whose URL changed (its machine
   * was replaced) is disconnected and reached at the new one from its next request.
   */
  setUrls(urls: readonly string[]): void {
    for (const p of this.#peers) {
      const url = urls[p?.index ?? -1];
      if (!p || url === undefined || url === p.url) continue;
      this.#disconnect(p);
      p.url = url;
    }
  }

  /** Peers with an open connection. */
  get connected(): number {
    return this.#peers.filter((p) => p?.state === 'open').length;
  }

  /** Records evidence against `server` (from the operations' `onEvidence`). */
  evidence(server: number, reason: string): void {
    const p = this.#peers[server];
    if (!p) return;
    p.misbehaving = reason;
    this.#options.onEvidence?.(server, reason);
  }

  /** Runs `op` to its result; rejects with its error, {@link PeerTimeout}, or the signal's reason. */
  run<R>(op: ClientOperation<R> & { readonly opId: number }, options: RunOptions): Promise<R> {
    if (this.#closed) return Promise.reject(new Error('peer connections closed'));
    if (this.#idleTimer) clearTimeout(this.#idleTimer);
    this.#idleTimer = undefined;
    return new Promise<R>((resolve, reject) => {
      const onAbort = () => this.#finish(run, options.signal?.reason instanceof Error ? options.signal.reason : new Error('aborted'));
      const run: Running = {
        op,
        options,
        chain: Promise.resolve(),
        round: undefined,
        done: false,
        timers: new Set(),
        resolve: (v) => {
          options.signal?.removeEventListener('abort', onAbort);
          resolve(v as R);
        },
        reject: (e) => {
          options.signal?.removeEventListener('abort', onAbort);
          reject(e);
        },
      };
      this.#running.add(run);
      run.timers.add(
        setTimeout(
          () => this.#finish(run, new PeerTimeout(`${describe(op)} did not finish within ${options.timeoutMs} ms`)),
          options.timeoutMs,
        ),
      );
      if (options.signal?.aborted) return onAbort();
      options.signal?.addEventListener('abort', onAbort, { once: true });
      run.chain = op.start().then(
        (step) => this.#step(run, step),
        (e: unknown) => this.#finish(run, e),
      );
    });
  }

  /** Closes the connections now if no operation runs (a pass ended); they open again when needed. */
  release(): void {
    if (this.#running.size > 0) return;
    if (this.#idleTimer) clearTimeout(this.#idleTimer);
    this.#idleTimer = undefined;
    for (const p of this.#peers) if (p) this.#disconnect(p);
  }

  /** Closes every connection; running operations fail. */
  close(): void {
    this.#closed = true;
    for (const run of [...this.#running]) this.#finish(run, new Error('peer connections closed'));
    if (this.#idleTimer) clearTimeout(this.#idleTimer);
    for (const p of this.#peers) if (p) this.#disconnect(p);
  }

  #finish(run: Running, outcome: unknown, result?: unknown): void {
    if (run.done) return;
    run.done = true;
    for (const t of run.timers) clearTimeout(t);
    clearTimeout(run.fragmentTimer);
    if (run.round) this.#rounds.delete(run.round.wire);
    run.round = undefined;
    this.#running.delete(run);
    if (this.#running.size === 0 && !this.#closed) {
      this.#idleTimer = setTimeout(() => {
        if (this.#running.size === 0) for (const p of this.#peers) if (p) this.#disconnect(p);
      }, IDLE_CLOSE_MS);
      this.#idleTimer.unref();
    }
    if (outcome === undefined) run.resolve(result);
    else run.reject(outcome instanceof Error ? outcome : new Error(typeof outcome === 'string' ? outcome : 'operation failed'));
  }

  #step(run: Running, step: Step<unknown>): void {
    if (run.done) return;
    if (step.error) return this.#finish(run, step.error);
    if (step.result !== undefined) return this.#finish(run, undefined, step.result);
    const send = step.send ?? [];
    if (send.length > 0 && (!step.supplement || !run.round)) {
      // A new round: its own wire opId, so answers to the previous one cannot count for it.
      if (run.round) this.#rounds.delete(run.round.wire);
      clearTimeout(run.fragmentTimer);
      run.fragmentTimer = undefined;
      const wire = this.#nextWire++;
      run.round = { wire, run, frames: new Map(), sent: new Map(), taken: new Map(), started: performance.now() };
      this.#rounds.set(wire, run.round);
    }
    const round = run.round;
    if (round) for (const o of send) this.#send(run, round, o);
    this.#armFragmentTimer(run);
  }

  #armFragmentTimer(run: Running): void {
    const op = run.op;
    const round = run.round;
    if (!round || run.fragmentTimer !== undefined || !stallable(op) || !op.awaitingFragments) return;
    // As @powerstore/client: twice as long as the quorum took, at least 20 ms.
    const wait = Math.max(FRAGMENT_WAIT_MIN_MS, 2 * (performance.now() - round.started));
    run.fragmentTimer = setTimeout(() => {
      run.chain = run.chain.then(() => (run.done ? undefined : this.#step(run, op.stalled()))).catch((e: unknown) => this.#finish(run, e));
    }, wait);
  }

  #send(run: Running, round: Round, o: Outgoing): void {
    round.sent.set(o.to, (round.sent.get(o.to) ?? 0) + 1);
    if (o.to === this.#options.self) {
      const message = o.message;
      const deliver = () => {
        run.chain = run.chain.then(async () => {
          if (run.done || run.round !== round) return;
          let reply: Reply;
          try {
            reply = await (run.options.handleSelf ?? this.#options.handleSelf)(message);
          } catch (err) {
            this.#options.log.warn({ err, key: message.key }, 'this server could not answer its own request');
            return;
          }
          const taken = round.taken.get(o.to) ?? 0;
          if (taken >= (round.sent.get(o.to) ?? 0)) return;
          round.taken.set(o.to, taken + 1);
          await this.#deliver(run, round, o.to, reply);
        });
      };
      const defer = run.options.deferSelfMs ?? 0;
      if (defer <= 0) deliver();
      else run.timers.add(setTimeout(deliver, defer));
      return;
    }
    const frame = encodeMessage({ ...o.message, opId: round.wire });
    round.frames.set(o.to, frame);
    const peer = this.#peers[o.to];
    if (!peer) return;
    if (peer.state === 'open' && peer.ws?.readyState === WebSocket.OPEN) peer.ws.send(frame);
    else this.#connect(peer);
  }

  /** Hands `reply` (counted against `round` by the caller) to the operation; called in its chain, so one at a time. */
  async #deliver(run: Running, round: Round, from: number, reply: Reply): Promise<void> {
    if (run.done || run.round !== round) return;
    let step: Step<unknown>;
    try {
      step = await run.op.onReply(from, { ...reply, opId: run.op.opId });
    } catch (e) {
      this.#finish(run, e);
      return;
    }
    this.#step(run, step);
  }

  #onFrame(peer: Peer, data: Buffer): void {
    const frame = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    const header = decodeHeader(frame);
    const round = header ? this.#rounds.get(header.opId) : undefined;
    // Late answers to a finished round, or made-up ones: dropped unread.
    if (!round || round.run.done) return;
    const sent = round.sent.get(peer.index) ?? 0;
    const taken = round.taken.get(peer.index) ?? 0;
    if (taken >= sent) return;
    // Counted before it is decoded or waits in the chain: a peer repeating answers, or
    // sending garbage under a live opId, gets no more than its turn.
    round.taken.set(peer.index, taken + 1);
    let reply;
    try {
      reply = decodeMessage(frame, { n: this.#options.n, maxFragmentLength: this.#options.maxFrameBytes });
    } catch (err) {
      this.evidence(peer.index, `sent a frame that does not decode (${(err as Error).message})`);
      return;
    }
    if (isRequest(reply)) {
      this.evidence(peer.index, `sent a ${reply.type} request instead of an answer`);
      return;
    }
    const run = round.run;
    run.options.onBytes?.(frame.length);
    run.chain = run.chain.then(() => this.#deliver(run, round, peer.index, reply));
  }

  #connect(peer: Peer): void {
    if (this.#closed || peer.state !== 'closed' || peer.timer) return;
    peer.state = 'connecting';
    let ws: WebSocket;
    try {
      ws = new WebSocket(peer.url, {
        perMessageDeflate: false,
        maxPayload: this.#options.maxFrameBytes,
        handshakeTimeout: 10_000,
        ...(this.#options.ca ? { ca: this.#options.ca } : {}),
      });
    } catch (err) {
      peer.lastError = (err as Error).message;
      this.#reconnectLater(peer);
      return;
    }
    peer.ws = ws;
    ws.binaryType = 'nodebuffer';
    ws.on('open', () => {
      if (peer.ws !== ws) return;
      peer.state = 'open';
      peer.attempt = 0;
      peer.lastError = undefined;
      // What the live rounds meant for this peer and it has not answered: its answers on a
      // connection that closed will never come.
      for (const round of this.#rounds.values()) {
        const frame = round.frames.get(peer.index);
        if (frame && (round.taken.get(peer.index) ?? 0) < (round.sent.get(peer.index) ?? 0)) ws.send(frame);
      }
    });
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      if (peer.ws !== ws) return;
      if (!isBinary) {
        this.evidence(peer.index, 'sent a text frame');
        return;
      }
      this.#onFrame(peer, data);
    });
    ws.on('error', (err: Error & { code?: string }) => {
      if (peer.ws !== ws) return;
      peer.lastError =
        err.code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH' ? `sent a frame over ${this.#options.maxFrameBytes} bytes` : err.message;
      if (err.code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH') this.evidence(peer.index, peer.lastError);
    });
    ws.on('close', (code: number, reason: Buffer) => {
      if (peer.ws !== ws) return;
      peer.ws = undefined;
      peer.state = 'closed';
      peer.lastError ??= `closed (${code}${reason.length ? ` ${reason.toString()}` : ''})`;
      if (this.#running.size > 0) this.#reconnectLater(peer);
    });
  }

  #reconnectLater(peer: Peer): void {
    peer.state = 'closed';
    if (this.#closed || peer.timer) return;
    const base = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * 2 ** peer.attempt++);
    peer.timer = setTimeout(
      () => {
        peer.timer = undefined;
        if (this.#running.size > 0) this.#connect(peer);
      },
      base / 2 + Math.random() * (base / 2),
    );
    peer.timer.unref();
  }

  #disconnect(peer: Peer): void {
    if (peer.timer) clearTimeout(peer.timer);
    peer.timer = undefined;
    const ws = peer.ws;
    peer.ws = undefined;
    peer.state = 'closed';
    if (ws) {
      ws.removeAllListeners('message');
      ws.on('error', () => undefined);
      if (ws.readyState === WebSocket.CONNECTING) ws.terminate();
      else ws.close(1000, 'idle');
    }
  }
}

function describe(op: object): string {
  const { key, prefix } = op as { key?: unknown; prefix?: unknown };
  const what = typeof key === 'string' ? key : typeof prefix === 'string' ? `prefix ${JSON.stringify(prefix)}` : '';
  return `${op.constructor.name} of ${typeof key === 'string' ? JSON.stringify(what) : what}`;
}

/** Whether `err` is a protocol error with `code`. */
export function isProtocolError(err: unknown, code?: string): err is ProtocolError {
  return err instanceof ProtocolError && (code === undefined || err.code === code);
}
