/**
 * One storage server as the client sees it: a WebSocket that reconnects with backoff,
 * bounded send buffering, and what we know of the server's health.
 */
import { openSocket } from '#websocket';
import type { Link, ServerState, ServerStatus } from './link.js';
import type { Socket } from './socket.js';

/** Reconnection backoff: doubles from the first delay up to the last, with jitter. */
const BACKOFF_MIN_MS = 100;
const BACKOFF_MAX_MS = 5_000;

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

  constructor(index: number, url: string, maxFrameBytes: number, events: ConnectionEvents) {
    this.index = index;
    this.url = url;
    this.#events = events;
    this.#maxFrameBytes = maxFrameBytes;
    this.#connect();
  }

  get state(): ServerState {
    return this.#state;
  }

  /** Bytes queued to this server and not yet sent. */
  get bufferedBytes(): number {
    return this.#socket?.bufferedAmount ?? 0;
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
    if (socket.bufferedAmount > 0 && socket.bufferedAmount + frame.length > highWaterBytes) return false;
    socket.send(frame);
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
            this.#attempt = 0;
            this.#lastError = undefined;
            this.#setState('open');
            this.#events.onOpen(this.index);
          },
          onMessage: (frame) => {
            if (this.#socket === socket) this.#events.onFrame(this.index, frame);
          },
          onError: (reason) => {
            if (this.#socket === socket) this.#lastError = reason;
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
