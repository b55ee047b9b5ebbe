/**
 * The rounds of the operations in flight, and which reply answers which.
 *
 * Every round of an operation (CLOCK, STORE, COMPLETE; COLLECT, FILTER) goes out under a
 * wire `opId` of its own, so every reply names the round it answers, ERROR replies
 * included (they carry no request type): a COLLECT_ACK arriving after FILTER went out, or
 * a refusal of the previous round, cannot pass for an answer to the current one. Per
 * round the book records which servers were sent the request on their current connection
 * and how each answered, which is what a reconnect resends from. It keeps recently ended
 * rounds too, so that late answers can still be judged: a refusal of a request the quorum
 * accepted, or a frame over the size limit where no correct server's answer could be one.
 */
import type { ErrorReply, Reply, RequestType } from '@powerstore/protocol';

/** Ended rounds remembered for judging late answers; the oldest are forgotten first. */
const ENDED_ROUNDS_KEPT = 1024;

/** Longest part of a server's ERROR message quoted in a misbehaving reason. */
const QUOTED_MESSAGE_CHARS = 120;

const ACK_OF: { readonly [T in RequestType]: Reply['type'] } = {
  CLOCK: 'CLOCK_ACK',
  STORE: 'STORE_ACK',
  COMPLETE: 'COMPLETE_ACK',
  COLLECT: 'COLLECT_ACK',
  FILTER: 'FILTER_ACK',
  LIST: 'LIST_ACK',
  PENDING: 'PENDING_ACK',
};

/**
 * Refusals of a STORE a correct server may give while others accept it. Admission
 * depends on each server's own write policy, clock and usage (a policy reload not yet
 * everywhere, skewed clocks near a grant's expiry, a server holding more than others);
 * `CONFLICT` means the server holds an abandoned write of this client at the same
 * timestamp, which the others never received; `PENDING_LIMIT` and `SUPERSEDED` depend on
 * which writes of the key reached that server first; `STRIPES_MISSING` (a striped write's
 * last STORE, of stripe 0, reached a server missing some of its other stripes) on which of
 * the earlier rounds' frames reached it: one dropped for a slow server (over the send
 * high-water mark) or lost with a connection that closed is not resent once the quorum
 * answered that round. (The simulator found this, by blaming correct servers.)
 */
const STORE_REFUSALS_EXCUSED: ReadonlySet<string> = new Set([
  'NOT_AUTHORIZED',
  'GRANT_EXPIRED',
  'REVOKED',
  'QUOTA_EXCEEDED',
  'CONFLICT',
  'PENDING_LIMIT',
  'SUPERSEDED',
  'STRIPES_MISSING',
]);

/**
 * Refusals of any request a correct server gives while others accept it: its cluster file
 * is of another key epoch than this client's (a server was replaced, and the new file has
 * not reached every server yet, or the other servers not yet this server's).
 */
const EPOCH_REFUSALS: ReadonlySet<string> = new Set(['CLUSTER_OUTDATED', 'SERVER_OUTDATED']);

/**
 * The answers each server owes a round on its current connection. Usually one; a server a
 * supplement asks again (a read's FILTER, for its fragment) before it answered owes two,
 * and its second answer must not pass for one it did not owe. (The simulator found the
 * host blaming correct servers for an oversized second answer.)
 */
export class Owed {
  readonly #count = new Map<number, number>();

  add(server: number): void {
    this.#count.set(server, (this.#count.get(server) ?? 0) + 1);
  }

  /** One answer came from `server`. */
  answered(server: number): void {
    const count = this.#count.get(server);
    if (count === undefined) return;
    if (count <= 1) this.#count.delete(server);
    else this.#count.set(server, count - 1);
  }

  has(server: number): boolean {
    return this.#count.has(server);
  }

  /** `server`'s connection closed: what it owed on it will not come. */
  forget(server: number): void {
    this.#count.delete(server);
  }

  [Symbol.iterator](): IterableIterator<number> {
    return this.#count.keys();
  }
}

/** One round of one operation: one request per server under one wire `opId`. */
export class Round<F> {
  readonly id: number;
  readonly key: string;
  readonly request: RequestType;
  /** When it went out (the host's clock), for round-trip times. */
  readonly started: number;
  /** Each server's frame (the latest, when a supplement asked it again); emptied when the round ends. */
  frames: Map<number, Uint8Array>;
  /** Servers sent the request on their current connection that have not answered it (as often as they were sent it). */
  readonly pending = new Owed();
  /** Servers that acknowledged it. */
  readonly acked = new Set<number>();
  /**
   * Servers a supplement asked again (a read's FILTER, for a fragment) that have not
   * answered everything they were asked: a reconnect resends the request to them, as to
   * servers that never answered.
   */
  readonly askedAgain = new Set<number>();
  /** Servers that refused it, with their ERROR reply. */
  readonly refused = new Map<number, ErrorReply>();
  /** FILTER: servers whose answer was a frame over the size limit, and how it was described. */
  readonly oversized = new Map<number, string>();
  /** FILTER: servers this request is resent to one round at a time (see {@link RoundBook.oversized}). */
  readonly held = new Set<number>();
  /**
   * Where evidence against a server found in this round goes, also after it ended (a late
   * refusal): the operation's evidence, which a read's `stat` lists.
   */
  readonly report: (server: number, reason: string) => void;
  #flight: F | undefined;
  #succeeded = false;

  constructor(
    id: number,
    flight: F,
    key: string,
    request: RequestType,
    frames: Map<number, Uint8Array>,
    report: (server: number, reason: string) => void,
    started: number,
  ) {
    this.id = id;
    this.started = started;
    this.#flight = flight;
    this.key = key;
    this.request = request;
    this.frames = frames;
    this.report = report;
  }

  /** The operation, while this is its current round. */
  get flight(): F | undefined {
    return this.#flight;
  }

  /** Whether its operation finished, with this as its last round (a read's value was within the limits). */
  get succeeded(): boolean {
    return this.#succeeded;
  }

  /**
   * Whether a (re)connected `server` should be sent this round's request: it was meant to
   * get it and has not acknowledged it (or a supplement asked it again, unanswered). A refusal is asked again: the server may have
   * restarted since, and a fresh answer supersedes it.
   */
  awaits(server: number): boolean {
    return (
      this.#flight !== undefined &&
      this.frames.has(server) &&
      (!this.acked.has(server) || this.askedAgain.has(server)) &&
      !this.oversized.has(server) &&
      !this.held.has(server)
    );
  }

  /** How `reply` (with this round's opId) answers it: an acknowledgement, a refusal, or neither (a reply of another request type). */
  answerOf(reply: Reply): 'ack' | 'refusal' | undefined {
    if (reply.key !== this.key) return undefined;
    if (reply.type === 'ERROR') return 'refusal';
    return reply.type === ACK_OF[this.request] ? 'ack' : undefined;
  }

  /**
   * Why `server`'s refusal of this round is misbehaving, or `undefined` while it may be
   * honest: once `quorum` (n − t) other servers acknowledged the same request, a correct
   * server has no reason to refuse it (validity and shapes are the same at every correct
   * server), except for the STORE refusals above. A server whose storage fails
   * (`INTERNAL`) while the quorum's does not is reported too: it is faulty. One that says
   * its disk failed (`UNAVAILABLE`) is not: it is as good as a server that did not answer.
   */
  refusalEvidence(server: number, reply: ErrorReply, quorum: number): string | undefined {
    const others = this.acked.size - (this.acked.has(server) ? 1 : 0);
    if (others < quorum || (this.request === 'STORE' && STORE_REFUSALS_EXCUSED.has(reply.code))) return undefined;
    if (EPOCH_REFUSALS.has(reply.code)) return undefined;
    // Its disk failed (full, a failed write or fsync): a server that is down, not one that
    // lies. From a Byzantine server it is only an answer withheld, which it may always do.
    if (reply.code === 'UNAVAILABLE') return undefined;
    const message = reply.message.length > QUOTED_MESSAGE_CHARS ? `${reply.message.slice(0, QUOTED_MESSAGE_CHARS)}…` : reply.message;
    return `refused a ${this.request} that ${others} other servers accepted (${reply.code}: ${message})`;
  }

  /** Called by {@link RoundBook.end} only: the round keeps what late answers are judged by, and lets go of the rest. */
  end(succeeded: boolean): void {
    this.#flight = undefined;
    this.#succeeded = succeeded;
    this.frames = new Map();
    this.held.clear();
    this.askedAgain.clear();
  }
}

/** What a frame over the size limit from a server was, as far as the book can tell. */
export type OversizedVerdict<F> =
  /** No correct server would have sent it: no FILTER it could answer, or only reads whose value was within the limits. */
  | { readonly kind: 'misbehaving' }
  /** The answer to this FILTER round (of a read in flight). */
  | { readonly kind: 'answer'; readonly round: Round<F> }
  /** It may be a correct answer to a read that ended without seeing its value (failed, timed out). */
  | { readonly kind: 'excused' }
  /** It answers one of several reads in flight (the platform did not show which): they are held for that server. */
  | { readonly kind: 'ambiguous' };

/** The live rounds of every operation in flight, by wire `opId`, and the recently ended ones. */
export class RoundBook<F> {
  #nextId = 1;
  readonly #live = new Map<number, Round<F>>();
  readonly #ended = new Map<number, Round<F>>();
  /** Per server, the held round released to it last: one at a time until it is answered. */
  readonly #released = new Map<number, Round<F>>();
  /** Servers that may have rounds held for them (so {@link nextHeld} is cheap for all others). */
  readonly #holding = new Set<number>();

  /**
   * Opens a round under a fresh wire `opId`, at time `now`; `encode` makes each server's
   * frame carrying that id, and `report` takes the evidence against servers found in the round.
   */
  start(
    flight: F,
    key: string,
    request: RequestType,
    encode: (id: number) => Map<number, Uint8Array>,
    report: (server: number, reason: string) => void,
    now: number,
  ): Round<F> {
    const id = this.newId(flight);
    const round = new Round(id, flight, key, request, encode(id), report, now);
    this.#live.set(id, round);
    return round;
  }

  /** A wire id never used before (`flight`'s next round goes out under it). */
  protected newId(_flight: F): number {
    return this.#nextId++;
  }

  /** The round a reply's `opId` names, live or recently ended. */
  get(id: number): Round<F> | undefined {
    return this.#live.get(id) ?? this.#ended.get(id);
  }

  /** The rounds of the operations in flight. */
  live(): IterableIterator<Round<F>> {
    return this.#live.values();
  }

  /** The round is over: its operation moved on (`succeeded` false) or finished (`succeeded` says how). */
  end(round: Round<F>, succeeded: boolean): void {
    if (!this.#live.delete(round.id)) return;
    round.end(succeeded);
    this.#ended.set(round.id, round);
    if (this.#ended.size > ENDED_ROUNDS_KEPT) this.#ended.delete(this.#ended.keys().next().value!);
  }

  /** `server` has a new connection: what was sent on the old one will not be answered. */
  reconnected(server: number): void {
    for (const round of this.#live.values()) round.pending.forget(server);
    for (const round of this.#ended.values()) round.pending.forget(server);
  }

  /**
   * `server` sent a frame over the limit, answering the request with wire `opId` when the
   * platform showed its header (browsers), or some request (Node). The connection is
   * closing, so whatever it still owed on it is lost.
   *
   * Only a FILTER answer carries a value, so only a FILTER that `server` has not answered
   * can excuse the frame; a read that finished proved its value within the limit, so it
   * cannot. Without the header, several reads may be waiting on `server`, and counting
   * the frame against each could fail a small read along with the large one: instead
   * they are held, and resent to `server` one at a time ({@link nextHeld}), so the next
   * oversized frame has only one round it can answer.
   */
  oversized(server: number, opId: number | undefined): OversizedVerdict<F> {
    const owed = [...this.#live.values(), ...this.#ended.values()].filter(
      (r) => r.request === 'FILTER' && r.pending.has(server) && (opId === undefined || r.id === opId),
    );
    for (const r of owed) r.pending.forget(server);
    const possible = owed.filter((r) => r.flight !== undefined || !r.succeeded);
    if (possible.length === 0) return { kind: 'misbehaving' };
    if (possible.length === 1) return possible[0]!.flight !== undefined ? { kind: 'answer', round: possible[0]! } : { kind: 'excused' };
    for (const r of possible) if (r.flight !== undefined) r.held.add(server);
    this.#holding.add(server);
    return { kind: 'ambiguous' };
  }

  /**
   * The next round held for `server` to send it now, oldest first, unless the one released
   * before is still awaiting its answer on the current connection.
   */
  nextHeld(server: number): Round<F> | undefined {
    if (!this.#holding.has(server)) return undefined;
    const previous = this.#released.get(server);
    if (previous && previous.flight !== undefined && previous.pending.has(server)) return undefined;
    let next: Round<F> | undefined;
    for (const r of this.#live.values()) if (r.held.has(server) && (!next || r.id < next.id)) next = r;
    if (!next) {
      this.#released.delete(server);
      this.#holding.delete(server);
      return undefined;
    }
    next.held.delete(server);
    this.#released.set(server, next);
    return next;
  }
}
