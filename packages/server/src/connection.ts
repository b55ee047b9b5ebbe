/**
 * One client's WebSocket as the server sees it: the requests it has sent and the replies
 * it has not yet taken, counted against the server's {@link MemoryBudget}, and the rules for
 * when the socket is read and when it is closed.
 *
 * The socket is read only while the connection has no request waiting to start, fewer
 * than `maxInFlightPerConnection` requests unanswered, less than `maxSendBufferBytes` of
 * replies unsent, and the server's budget has room. Otherwise TCP backpressure holds the
 * client's next bytes in its own buffers, not ours. A LIST also needs one of the server's
 * LIST slots ({@link ListSlots}): until it gets one it is set aside (its bytes counted in
 * the budget, and counted as unanswered) and the requests behind it go on, so a client's
 * reads and writes never wait behind its LIST's turn. A connection is closed when its
 * replies make no progress for `sendTimeoutMs` (it stopped reading), when a frame takes
 * longer than `frameTimeoutMs` to arrive whole (slowloris), or when it sends nothing for
 * `idleTimeoutMs` while nothing is pending.
 *
 * A bundle (`bundle.ts`) is split into its frames, each a request of its own in every count
 * above; their replies leave bundled when several are ready in the same turn.
 */
import type { Socket } from 'node:net';
import { BundleOutbox, decodeBundle } from '@powerstore/protocol';
import type { RawData, WebSocket } from 'ws';
import type { BudgetUser, ListSlots, MemoryBudget } from './budgets.js';
import type { ServerLimits } from './limits.js';

/** Why the server closed a connection on its own. */
export type CloseReason = 'send_timeout' | 'frame_timeout' | 'idle' | 'heartbeat_timeout';

/** Why a connection is not being read (`powerstore_paused_connections{reason}`). */
export type PauseReason = 'in_flight' | 'send_buffer' | 'budget' | 'shutdown';

/** What a connection needs from the server it belongs to. */
export interface ConnectionHost {
  readonly limits: ServerLimits;
  readonly budget: MemoryBudget;
  readonly lists: ListSlots;
  /** Room to reserve for the reply to `frame`, beyond the frame's own bytes. */
  replyRoom(frame: Uint8Array): number;
  /** Whether `frame` is a LIST, which needs one of the server's LIST slots. */
  isList(frame: Uint8Array): boolean;
  /** Handles one request; resolves to the reply and never rejects. */
  handle(frame: Uint8Array, isBinary: boolean): Promise<Uint8Array>;
  /** A reply `handle` gave is with the socket (or was dropped): its memory may be reused. */
  replySent?(reply: Uint8Array): void;
  /** A bundle of `frames` frames arrived (`received`) or was sent (`sent`). */
  onBundle?(direction: 'received' | 'sent', frames: number): void;
  /** Called when the server closes the connection for `reason`, before the close event. */
  onEnforced(reason: CloseReason): void;
  /** Called once all this connection's requests are answered and sent. */
  onSettled(): void;
  onClose(connection: ClientConnection): void;
}

interface Pending {
  readonly frame: Uint8Array;
  readonly isBinary: boolean;
  /** It came in a bundle: its reply may leave in one. */
  readonly bundled?: boolean;
}

export class ClientConnection implements BudgetUser {
  /** The client's address (without port): the unit of per-address limits. */
  readonly address: string;
  readonly ws: WebSocket;
  readonly #host: ConnectionHost;
  readonly #limits: ServerLimits;
  readonly #pending: Pending[] = [];
  /** LISTs set aside until a LIST slot is free, in arrival order; their frames' bytes are counted under `requests`. */
  readonly #lists: Pending[] = [];
  /** Requests started whose reply has not been sent. */
  #inFlight = 0;
  #unsent = 0;
  #partial = 0;
  /** Bytes held in the budget under `requests` (frames plus reply room) and `replies`. */
  #requestsHeld = 0;
  #repliesHeld = 0;
  #reading = true;
  #stopped = false;
  #closed = false;
  #lastMessageAt = Date.now();
  #partialSince = 0;
  #sendProgressAt = 0;
  /** Heartbeat: a pong arrived since the last ping. */
  alive = true;
  /** Replies to bundled requests, leaving together when ready in the same turn. */
  readonly #replies = new BundleOutbox(
    (message, replies) => this.#send(message, replies),
    (run) => setImmediate(run),
  );

  constructor(ws: WebSocket, socket: Socket, address: string, host: ConnectionHost) {
    this.ws = ws;
    this.address = address;
    this.#host = host;
    this.#limits = host.limits;
    // Before ws's own listener: a chunk is counted before ws parses it, so a frame it
    // completes is released by the message event that follows.
    socket.prependListener('data', (chunk: Buffer) => this.#onData(chunk.length));
    ws.on('message', (data: RawData, isBinary: boolean) => this.#onMessage(toBytes(data), isBinary));
    // Control frames arrive as bytes too but raise no message event.
    ws.on('pong', () => {
      this.alive = true;
      this.#releasePartial();
    });
    ws.on('ping', () => this.#releasePartial());
    ws.on('close', () => this.#onClose());
  }

  /** Requests started whose reply has not been sent yet. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** Why the socket is not read right now, or undefined while it is. */
  get pausedFor(): PauseReason | undefined {
    if (this.#reading || this.#closed) return undefined;
    if (this.#stopped) return 'shutdown';
    if (this.#unanswered >= this.#limits.maxInFlightPerConnection) return 'in_flight';
    if (this.#unsent >= this.#limits.maxSendBufferBytes) return 'send_buffer';
    return 'budget';
  }

  /** Requests received and not yet answered, started or not. */
  get busy(): boolean {
    return this.#inFlight > 0 || this.#pending.length > 0 || this.#lists.length > 0;
  }

  /** Started or set aside: what `maxInFlightPerConnection` bounds. */
  get #unanswered(): number {
    return this.#inFlight + this.#lists.length;
  }

  /** Shutdown: read nothing more; what was received is still answered. */
  stopReading(): void {
    this.#stopped = true;
    this.#updateReading();
  }

  /** Closes for `reason` at once, without the closing handshake. */
  enforce(reason: CloseReason): void {
    if (this.#closed) return;
    this.#host.onEnforced(reason);
    this.ws.terminate();
  }

  /** Applies the time limits; the server calls this periodically for every connection. */
  sweep(now: number): void {
    const l = this.#limits;
    if (this.#unsent > 0 && now - this.#sendProgressAt > l.sendTimeoutMs) this.enforce('send_timeout');
    else if (this.#partial > 0 && now - this.#partialSince > l.frameTimeoutMs) this.enforce('frame_timeout');
    else if (l.idleTimeoutMs > 0 && !this.busy && this.#partial === 0 && now - this.#lastMessageAt > l.idleTimeoutMs && !this.#closed) {
      this.#host.onEnforced('idle');
      this.ws.close(1000, 'idle');
    }
  }

  /** The budget has room again: start what waits, read again if allowed. */
  retry(): void {
    this.#pump();
  }

  #onData(bytes: number): void {
    if (this.#closed) return;
    if (this.#partial === 0) this.#partialSince = Date.now();
    this.#partial += bytes;
    this.#host.budget.add(this.address, 'partial', bytes);
    if (this.#host.budget.full) this.#updateReading();
  }

  #releasePartial(): void {
    if (this.#partial === 0) return;
    const bytes = this.#partial;
    this.#partial = 0;
    this.#host.budget.release(this.address, 'partial', bytes);
  }

  #onMessage(frame: Uint8Array, isBinary: boolean): void {
    if (this.#closed) return;
    this.#lastMessageAt = Date.now();
    const frames = isBinary ? decodeBundle(frame) : undefined;
    if (frames) {
      this.#host.onBundle?.('received', frames.length);
      for (const f of frames) this.#pending.push({ frame: f, isBinary, bundled: true });
    } else {
      // A malformed bundle is one frame the handler cannot decode, and answers as such.
      this.#pending.push({ frame, isBinary });
    }
    this.#releasePartial();
    this.#pump();
  }

  #pump(): void {
    const budget = this.#host.budget;
    this.#startLists();
    while (
      !this.#closed &&
      this.#pending.length > 0 &&
      this.#unanswered < this.#limits.maxInFlightPerConnection &&
      this.#unsent < this.#limits.maxSendBufferBytes
    ) {
      const next = this.#pending[0]!;
      if (this.#host.isList(next.frame)) {
        // Set aside for a LIST slot; its bytes are already held, so counted unchecked.
        this.#pending.shift();
        budget.add(this.address, 'requests', next.frame.length);
        this.#requestsHeld += next.frame.length;
        this.#lists.push(next);
        this.#startLists();
        continue;
      }
      const room = next.frame.length + this.#host.replyRoom(next.frame);
      if (!budget.tryReserve(this.address, 'requests', room)) {
        budget.wait(this);
        break;
      }
      this.#pending.shift();
      this.#requestsHeld += room;
      this.#inFlight++;
      void this.#run(next, room, false);
    }
    this.#updateReading();
  }

  /** Starts the LISTs set aside, in order, while a LIST slot is free and their replies' room fits. */
  #startLists(): void {
    const budget = this.#host.budget;
    const lists = this.#host.lists;
    while (!this.#closed && this.#lists.length > 0 && this.#unsent < this.#limits.maxSendBufferBytes) {
      if (!lists.canStart(this.address)) {
        lists.wait(this.address, this);
        return;
      }
      const next = this.#lists[0]!;
      const reply = this.#host.replyRoom(next.frame);
      if (!budget.tryReserve(this.address, 'requests', reply)) {
        budget.wait(this);
        return;
      }
      lists.start(this.address);
      this.#lists.shift();
      this.#requestsHeld += reply;
      this.#inFlight++;
      void this.#run(next, next.frame.length + reply, true);
    }
    if (this.#lists.length === 0) lists.stopWaiting(this.address, this);
  }

  async #run(request: Pending, room: number, list: boolean): Promise<void> {
    const reply = await this.#host.handle(request.frame, request.isBinary);
    // The slot is free once the LIST is handled, whether or not its reply can be sent.
    if (list) this.#host.lists.finish(this.address);
    if (this.#closed) return;
    const budget = this.#host.budget;
    // The reply takes the place of the room reserved for it: count it before giving the
    // room back, so nobody is woken into bytes that are in fact taken.
    budget.add(this.address, 'replies', reply.length);
    this.#repliesHeld += reply.length;
    this.#requestsHeld -= room;
    budget.release(this.address, 'requests', room);
    if (this.#unsent === 0) this.#sendProgressAt = Date.now();
    this.#unsent += reply.length;
    if (this.ws.readyState !== this.ws.OPEN) return; // the close event releases everything
    if (request.bundled) this.#replies.add(reply);
    else this.#send(reply, [reply]);
  }

  /** Sends one message: a reply, or a bundle of `replies`. */
  #send(message: Uint8Array, replies: readonly Uint8Array[]): void {
    if (replies.length > 1) this.#host.onBundle?.('sent', replies.length);
    this.ws.send(message, { binary: true }, () => {
      // ws calls back once the socket has taken the frame (or failed): nothing reads it after.
      for (const reply of replies) {
        this.#host.replySent?.(reply);
        this.#sent(reply.length);
      }
    });
  }

  #sent(bytes: number): void {
    if (this.#closed) return;
    this.#sendProgressAt = Date.now();
    this.#unsent -= bytes;
    this.#repliesHeld -= bytes;
    this.#inFlight--;
    this.#host.budget.release(this.address, 'replies', bytes);
    this.#pump();
    if (!this.busy) this.#host.onSettled();
  }

  #updateReading(): void {
    if (this.#closed) return;
    const own =
      !this.#stopped &&
      this.#pending.length === 0 &&
      this.#unanswered < this.#limits.maxInFlightPerConnection &&
      this.#unsent < this.#limits.maxSendBufferBytes;
    const read = own && !this.#host.budget.full;
    // Paused only because the server's budget is spent: ask to be told when it has room.
    if (own && !read) this.#host.budget.wait(this);
    if (read === this.#reading) return;
    this.#reading = read;
    if (read) this.ws.resume();
    else this.ws.pause();
  }

  #onClose(): void {
    if (this.#closed) return;
    this.#closed = true;
    const budget = this.#host.budget;
    budget.stopWaiting(this);
    this.#host.lists.stopWaiting(this.address, this);
    this.#pending.length = 0;
    this.#lists.length = 0;
    const partial = this.#partial;
    const requests = this.#requestsHeld;
    const replies = this.#repliesHeld;
    this.#partial = this.#requestsHeld = this.#repliesHeld = this.#unsent = this.#inFlight = 0;
    budget.release(this.address, 'partial', partial);
    budget.release(this.address, 'requests', requests);
    budget.release(this.address, 'replies', replies);
    this.#host.onClose(this);
    this.#host.onSettled();
  }
}

function toBytes(data: RawData): Uint8Array {
  if (Array.isArray(data)) return Buffer.concat(data);
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  return data;
}
