/**
 * One storage server as the client sees it: a WebSocket that reconnects with backoff,
 * bounded send buffering, frames sent in the same turn bundled into one message
 * (`bundle.ts`), and what we know of the server's health.
 */
import { BundleOutbox, framesOf } from '@powerstore/protocol';
import { openSocket } from '#websocket';
import type { Link, ServerState, ServerStatus } from './link.js';
import type { Socket } from './socket.js';

/** Reconnection backoff: doubles from the first delay up to the last, with jitter. */
const BACKOFF_MIN_MS = 100;
const BACKOFF_MAX_MS = 5_000;

/**
 * When a connection is presumed dead. TCP itself notices a peer that vanished silently (a
 * partition, a host powered off, a frozen VM) only after minutes of retransmissions, and
 * browsers cannot send WebSocket pings, so the client watches for signs of life itself.
 */
export interface Liveness {
  /**
   * A connection that owes answers and shows no sign of life for this long (no frame
   * arrives, and what is queued to it does not drain) is dropped and reopened, and the
   * operation host resends it the rounds it owes. Default 15 s: longer than a correct
   * server takes to answer under load, short enough that a server cut off silently comes
   * back soon after the partition heals.
   */
  readonly silenceMs: number;
  /** A connection not open after this long is dropped and tried again. Default 10 s. */
  readonly connectTimeoutMs: number;
}

export const DEFAULT_LIVENESS: Liveness = { silenceMs: 15_000, connectTimeoutMs: 10_000 };

export interface ConnectionEvents {
  onFrame(index: number, frame: Uint8Array): void;
  onOpen(index: number): void;
  onStatus(): void;
  /**
   * The server sent a frame over the size limit; it was discarded and the connection is
   * closing. `reason` says so in words; `head` is the frame's first bytes when the
   * platform shows them (browsers), to tell whose answer it was. Whether that is
   * misbehaving depends on what the server was asked, which only the store knows.
   */
  onOversized(index: number, reason: string, head: Uint8Array | undefined): void;
}

/** A server over a real WebSocket: the {@link Link} `connect` gives the operation host. */
export class ServerConnection implements Link {
  readonly index: number;
  readonly url: string;
  #socket: Socket | undefined;
  #state: ServerState = 'connecting';
  #lastError: string | undefined;
  #misbehaving: string | undefined;
  #lastRoundTripMs: number | undefined;
  #attempt = 0;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #closed = false;
  readonly #events: ConnectionEvents;
  readonly #maxFrameBytes: number;
  readonly #liveness: Liveness;
  /** Frames sent on the current socket that no frame has answered yet (every request is answered by one frame). */
  #unanswered = 0;
  /** When the current socket last showed a sign of life while it owed answers. */
  #aliveAt = 0;
  /** Its `bufferedAmount` then: a queue that drains is a sign of life too. */
  #buffered = 0;
  #watchdog: ReturnType<typeof setTimeout> | undefined;
  #refusals = 0;
  /** Frames sent in this turn, leaving together once it ends. */
  readonly #outbox = new BundleOutbox((message) => this.#socket?.send(message));

  constructor(index: number, url: string, maxFrameBytes: number, events: ConnectionEvents, liveness: Liveness = DEFAULT_LIVENESS) {
    this.index = index;
    this.url = url;
    this.#events = events;
    this.#maxFrameBytes = maxFrameBytes;
    this.#liveness = liveness;
    this.#connect();
  }

  get state(): ServerState {
    return this.#state;
  }

  get refusals(): number {
    return this.#refusals;
  }

  /** Bytes queued to this server and not yet sent. */
  get bufferedBytes(): number {
    return (this.#socket?.bufferedAmount ?? 0) + this.#outbox.queuedBytes;
  }

  status(): ServerStatus {
    return {
      id: this.index + 1,
      url: this.url,
      state: this.#state,
      lastError: this.#lastError,
      misbehaving: this.#misbehaving,
      bufferedBytes: this.bufferedBytes,
      lastRoundTripMs: this.#lastRoundTripMs,
    };
  }

  /**
   * Sends a frame if the server is connected and not too far behind: a server that has
   * `highWaterBytes` queued is slow, and the quorum will be met without it, so the frame
   * is dropped rather than buffered without bound. Returns whether it was sent.
   */
  send(frame: Uint8Array, highWaterBytes: number): boolean {
    const socket = this.#socket;
    if (this.#state !== 'open' || !socket) return false;
    const queued = this.bufferedBytes;
    if (queued > 0 && queued + frame.length > highWaterBytes) return false;
    this.#outbox.add(frame);
    if (this.#unanswered++ === 0) {
      this.#aliveAt = performance.now();
      this.#buffered = socket.bufferedAmount;
      this.#watch(this.#liveness.silenceMs / 4);
    }
    return true;
  }

  markMisbehaving(reason: string): void {
    if (this.#misbehaving === reason) return;
    this.#misbehaving = reason;
    this.#events.onStatus();
  }

  noteRoundTrip(ms: number): void {
    this.#lastRoundTripMs = ms;
  }

  close(): void {
    this.#closed = true;
    if (this.#timer) clearTimeout(this.#timer);
    if (this.#watchdog) clearTimeout(this.#watchdog);
    this.#outbox.flush();
    this.#socket?.close();
    this.#socket = undefined;
    this.#setState('closed');
  }

  #connect(): void {
    if (this.#closed) return;
    this.#setState('connecting');
    let socket: Socket;
    try {
      socket = openSocket(
        this.url,
        {
          onOpen: () => {
            if (this.#socket !== socket) return;
            this.#unanswered = 0;
            this.#attempt = 0;
            this.#lastError = undefined;
            this.#setState('open');
            this.#events.onOpen(this.index);
          },
          onMessage: (message) => {
            if (this.#socket !== socket) return;
            this.#aliveAt = performance.now();
            // A malformed bundle goes on as one frame, which the host finds undecodable.
            for (const frame of framesOf(message)) {
              if (this.#socket !== socket) return;
              this.#unanswered = Math.max(0, this.#unanswered - 1);
              this.#events.onFrame(this.index, frame);
            }
          },
          onError: (reason) => {
            if (this.#socket !== socket) return;
            this.#lastError = reason;
            if (reason === 'refused') this.#refusals++;
          },
          onOversized: (bytes, head) => {
            if (this.#socket !== socket) return;
            const reason =
              bytes === undefined
                ? `sent a frame over the limit of ${this.#maxFrameBytes} bytes`
                : `sent a frame of ${bytes} bytes, over the limit of ${this.#maxFrameBytes}`;
            this.#lastError = reason;
            this.#events.onOversized(this.index, reason, head);
          },
          onClose: (reason) => {
            if (this.#socket !== socket) return;
            this.#socket = undefined;
            this.#outbox.clear();
            this.#unanswered = 0;
            this.#lastError ??= reason;
            this.#scheduleReconnect();
          },
        },
        this.#maxFrameBytes,
      );
    } catch (e) {
      this.#lastError = e instanceof Error ? e.message : String(e);
      this.#scheduleReconnect();
      return;
    }
    this.#socket = socket;
    // A check still due was for the socket before this one.
    clearTimeout(this.#watchdog);
    this.#watchdog = undefined;
    this.#watch(this.#liveness.connectTimeoutMs);
  }

  /** Checks the current socket for signs of life in `ms`, unless a check is already due. */
  #watch(ms: number): void {
    if (this.#watchdog || this.#closed) return;
    const due = performance.now() + ms;
    this.#watchdog = setTimeout(() => {
      this.#watchdog = undefined;
      const socket = this.#socket;
      if (!socket) return;
      // Far later than due: this process was frozen (a laptop asleep, a paused VM, a stopped
      // process), not the server, and what it sent meanwhile may be waiting to be read:
      // timers run before sockets are read, so give the socket its turn first.
      if (performance.now() - due > this.#liveness.silenceMs / 4) {
        this.#aliveAt = performance.now();
        this.#watch(this.#state === 'open' ? this.#liveness.silenceMs / 4 : this.#liveness.connectTimeoutMs);
        return;
      }
      if (this.#state !== 'open') {
        this.#presumeDead(socket, `not connected after ${this.#liveness.connectTimeoutMs} ms`);
        return;
      }
      if (this.#unanswered === 0) return;
      const now = performance.now();
      if (socket.bufferedAmount < this.#buffered) this.#aliveAt = now;
      this.#buffered = socket.bufferedAmount;
      const silent = now - this.#aliveAt;
      if (silent >= this.#liveness.silenceMs) this.#presumeDead(socket, `no sign of life for ${Math.round(silent)} ms`);
      else this.#watch(this.#liveness.silenceMs / 4);
    }, ms);
    (this.#watchdog as { unref?: () => void }).unref?.();
  }

  /** Drops a connection that stopped answering, and reopens it (the host resends what it owes on open). */
  #presumeDead(socket: Socket, reason: string): void {
    this.#socket = undefined;
    this.#outbox.clear();
    this.#unanswered = 0;
    this.#lastError = reason;
    socket.abort();
    this.#scheduleReconnect();
  }

  #scheduleReconnect(): void {
    if (this.#closed) return;
    this.#setState('closed');
    const base = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * 2 ** this.#attempt++);
    this.#timer = setTimeout(() => this.#connect(), base / 2 + Math.random() * (base / 2));
    // A Node process should be free to exit while a server is down.
    (this.#timer as { unref?: () => void }).unref?.();
  }

  #setState(state: ServerState): void {
    if (this.#state === state) return;
    this.#state = state;
    this.#events.onStatus();
  }
}
