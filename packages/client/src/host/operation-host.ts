/**
 * The operation host: drives the protocol's client operations (writes, reads, listings)
 * over a set of server links. It sends each round to every server at once, matches
 * replies to rounds by their wire id, feeds them to the operation one at a time, resends
 * a round to a server that reconnects, holds FILTERs back where an oversized answer could
 * not be told apart, waits a little for stragglers where that pays, blames servers on
 * evidence, and ends each operation with its result, its error, a timeout or an abort.
 *
 * It owns neither sockets nor timers: it is given links ({@link Link}) and a clock
 * ({@link Clock}), and whoever owns the links hands it what arrives on them. `connect`
 * wires it to WebSockets and the platform's timers; the simulator to its seeded network
 * and virtual time, so the host users run is the host the simulator tests.
 */
import {
  decodeHeader,
  decodeMessage,
  encodeMessage,
  ListOperation,
  quorum,
  ReadOperation,
  serverNames,
  type ClientOperation,
  type ClusterConfig,
  type Message,
  type Outgoing,
  type Reply,
  type Step,
} from '@powerstore/protocol';
import { PowerStoreError, toClientError } from '../errors.js';
import type { Progress } from '../types.js';
import type { CancelTimer, Clock } from './clock.js';
import type { Link } from './link.js';
import { trackProgress, type SentFrame } from './progress.js';
import { RoundBook, type Round } from './rounds.js';
import { unreachable } from './unreachable.js';

/** Bytes queued to one server beyond which a frame is dropped for it (the quorum goes on without it). */
export const SEND_HIGH_WATER_BYTES = 64 * 1024 * 1024;
/** What an operation that fails before its timeout says of a server it still waits for. */
const NOT_ANSWERED = 'has not answered';
/** Shortest wait for fragments a read asked for before it asks the other servers (see #armFragmentTimer). */
export const FRAGMENT_WAIT_MIN_MS = 20;
/**
 * Shortest wait of a listing for the answers beyond `n − t` when its page would come out
 * thin (see #armFragmentTimer): only then does it wait, and a page returned without them
 * may be held back by a Byzantine server to just past its cursor, so it waits longer than
 * a read does for fragments.
 */
export const LIST_WAIT_MIN_MS = 100;

/** What the host needs to know once, for all its operations. */
export interface HostOptions {
  /** `n` and `t`: how many servers, how many answers make a quorum. */
  readonly config: ClusterConfig;
  /** One per server, in the cluster file's order. */
  readonly links: readonly Link[];
  readonly clock: Clock;
  /** An operation's timeout unless its options say otherwise. */
  readonly timeoutMs: number;
  /** Largest frame accepted from a server (the transport enforces it; replies are decoded with it as their bound). */
  readonly maxFrameBytes: number;
  /** `connect`'s `maxValueBytes`, quoted when a read's value is over it. */
  readonly maxValueBytes: number;
  /** Makes the book of rounds (by default a {@link RoundBook}): the simulator's mutants swap in a subclass. */
  readonly roundBook?: <F>() => RoundBook<F>;
}

/** How one operation is run. */
export interface RunOptions {
  readonly signal?: AbortSignal | undefined;
  readonly timeoutMs?: number | undefined;
  readonly onProgress?: ((progress: Progress) => void) | undefined;
  /** The timeout is per round, not for the whole operation (streamed writes: each stripe is a round). */
  readonly perRound?: boolean;
  /** Where evidence the host finds against a server goes (a read's `stat` lists it). */
  readonly onEvidence: (server: number, reason: string) => void;
}

/** An operation in flight: the protocol state machine plus what its host tracks. */
interface InFlight {
  readonly op: ClientOperation<unknown>;
  /** The id the operation's messages carry; each round goes out under a wire id of its own (`round.id`). */
  readonly opId: number;
  /** Replies are fed one at a time: the operation may hash and verify asynchronously. */
  chain: Promise<void>;
  /** The round in progress: its frames (resent to a server that reconnects) and who answered it how. */
  round: Round<InFlight> | undefined;
  readonly onEvidence: (server: number, reason: string) => void;
  readonly onProgress: ((progress: Progress) => void) | undefined;
  /** Set for operations whose timeout is per round (streamed writes): called as each round starts. */
  restartTimer: (() => void) | undefined;
  stopProgress: CancelTimer | undefined;
  /** A read's wait for the servers it asked for fragments, or a listing's for more answers (see `stalled` of either). */
  stopFragmentTimer: CancelTimer | undefined;
  /** Each link's refused connection attempts when the operation started (see {@link OperationHost.linksChanged}). */
  readonly refusals: readonly number[];
  finish(result: unknown): void;
  fail(error: unknown): void;
}

export class OperationHost {
  readonly #config: ClusterConfig;
  readonly #links: readonly Link[];
  readonly #clock: Clock;
  readonly #options: HostOptions;
  readonly #inFlight = new Map<number, InFlight>();
  /** Every round on the wire, by the opId its frames carry. */
  readonly #rounds: RoundBook<InFlight>;
  readonly #quorumWaiters = new Set<() => void>();
  /** Work under way on the operations' chains, for {@link idle}. */
  readonly #work = new Set<Promise<void>>();
  #closed = false;

  constructor(options: HostOptions) {
    this.#options = options;
    this.#config = options.config;
    this.#links = options.links;
    this.#clock = options.clock;
    this.#rounds = options.roundBook ? options.roundBook<InFlight>() : new RoundBook<InFlight>();
  }

  /** Whether {@link close} was called. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Fails every operation in flight with `CLOSED` and closes the links. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const l of this.#links) l.close();
    for (const f of [...this.#inFlight.values()]) f.fail(new PowerStoreError('CLOSED', 'the store was closed'));
    this.#inFlight.clear();
  }

  /** Evidence against server `index`: shown in its status. */
  blame(index: number, reason: string): void {
    this.#links[index]?.markMisbehaving(reason);
  }

  /**
   * Resolves once every operation's work on hand has settled: the replies and timers
   * handed over so far are fully processed. The simulator steps on it; clients need not.
   */
  async idle(): Promise<void> {
    while (this.#work.size > 0) await Promise.all([...this.#work]);
  }

  /** The operation whose round went out under wire id `id`, while that round is live or recently ended. */
  operationOf(id: number): ClientOperation<unknown> | undefined {
    return this.#rounds.get(id)?.flight?.op;
  }

  /** Resolves once `n − t` links are open. */
  waitForQuorum(timeoutMs: number, signal: AbortSignal | undefined): Promise<void> {
    return new Promise((resolve, reject) => {
      const need = quorum(this.#config);
      const since = this.#refusals();
      const check = () => {
        if (this.#links.filter((c) => c.state === 'open').length >= need) {
          done();
          resolve();
        } else if (!this.#canGather(since)) {
          done();
          reject(unreachable(this.#config, this.#links, need, undefined, 'connecting'));
        }
      };
      const stopTimer = this.#clock.setTimer(timeoutMs, () => {
        done();
        reject(unreachable(this.#config, this.#links, need, undefined, 'connecting'));
      });
      const onAbort = () => {
        done();
        reject(new PowerStoreError('ABORTED', 'connect was aborted', { cause: signal?.reason }));
      };
      const done = () => {
        stopTimer();
        this.#quorumWaiters.delete(check);
        signal?.removeEventListener('abort', onAbort);
      };
      if (signal?.aborted) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#quorumWaiters.add(check);
      check();
    });
  }

  /**
   * Drives `op` (whose messages carry `opId`) to its result, its failure, a timeout or an
   * abort. Failures are the client's errors (`PowerStoreError`, the protocol's error as `cause`).
   */
  run<R>(op: ClientOperation<R>, opId: number, options: RunOptions): Promise<R> {
    if (this.#closed) return Promise.reject(new PowerStoreError('CLOSED', 'the store was closed'));
    const signal = options.signal;
    const timeoutMs = options.timeoutMs ?? this.#options.timeoutMs;
    if (signal?.aborted) return Promise.reject(new PowerStoreError('ABORTED', 'the operation was aborted', { cause: signal.reason }));
    return new Promise<R>((resolve, reject) => {
      const need = quorum(this.#config);
      const cleanup = (succeeded: boolean) => {
        stopTimer();
        flight.stopFragmentTimer?.();
        flight.stopProgress?.();
        signal?.removeEventListener('abort', onAbort);
        this.#inFlight.delete(opId);
        this.#endRound(flight, succeeded);
      };
      let ended = false;
      const flight: InFlight = {
        op,
        opId,
        chain: Promise.resolve(),
        round: undefined,
        onEvidence: options.onEvidence,
        onProgress: options.onProgress,
        stopProgress: undefined,
        restartTimer: options.perRound
          ? () => {
              stopTimer();
              stopTimer = this.#clock.setTimer(timeoutMs, onTimeout);
            }
          : undefined,
        stopFragmentTimer: undefined,
        refusals: this.#refusals(),
        finish: (r) => {
          if (ended) return;
          ended = true;
          cleanup(true);
          resolve(r as R);
        },
        fail: (e) => {
          if (ended) return;
          ended = true;
          cleanup(false);
          reject(toClientError(e));
        },
      };
      const onTimeout = () => flight.fail(unreachable(this.#config, this.#links, need, flight.round, 'timed out', op.waiting?.()));
      let stopTimer = this.#clock.setTimer(timeoutMs, onTimeout);
      const onAbort = () => flight.fail(new PowerStoreError('ABORTED', 'the operation was aborted', { cause: signal?.reason }));
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#inFlight.set(opId, flight);
      this.#chain(
        flight,
        op.start().then((step) => this.#apply(flight, step)),
      );
    });
  }

  /**
   * A link changed state. Servers that refuse connections outright (nothing listens at
   * their address) will not answer before the timeout unless they restart, so once too
   * many have refused since an operation (or `connect`) began for a quorum to form, it
   * fails at once, naming them, instead of waiting out its timeout. Only refusals after
   * it began count: a server refused while it restarted, and listening again by now, gets
   * its next attempt first. (Browsers hide why a connection failed, so there they wait.)
   * Servers whose answers the operation cannot count (a listing's that fail verification:
   * `ClientOperation.unusable`) count against the quorum too, checked as each answer comes.
   */
  linksChanged(): void {
    for (const check of [...this.#quorumWaiters]) check();
    for (const flight of [...this.#inFlight.values()]) this.#failIfHopeless(flight);
  }

  /** Fails `flight` at once, saying server by server why, if its round can no longer gather a quorum. */
  #failIfHopeless(flight: InFlight): boolean {
    if (!this.#hopeless(flight)) return false;
    flight.fail(unreachable(this.#config, this.#links, quorum(this.#config), flight.round, NOT_ANSWERED, flight.op.waiting?.()));
    return true;
  }

  #refusals(): number[] {
    return this.#links.map((l) => l.refusals ?? 0);
  }

  /**
   * Whether a quorum can still be gathered: too few servers refused connections since the
   * refusal counts `since` were taken (those in `acked` already answered, and count, unless
   * they are `unusable`: answers the operation cannot count).
   */
  #canGather(since: readonly number[], acked?: ReadonlySet<number>, unusable?: ReadonlySet<number>): boolean {
    const refused = (link: Link, i: number) => link.state !== 'open' && (link.refusals ?? 0) > since[i]!;
    const may = (link: Link, i: number) => !unusable?.has(i) && (acked?.has(i) || !refused(link, i));
    return this.#links.filter(may).length >= quorum(this.#config);
  }

  /** Whether `flight`'s round can no longer gather a quorum. */
  #hopeless(flight: InFlight): boolean {
    return !this.#canGather(flight.refusals, flight.round?.acked, flight.op.unusable?.());
  }

  /** A frame arrived from server `index`. */
  receive(index: number, frame: Uint8Array): void {
    let message: Message;
    try {
      // Fragments are bounded by the frame limit the transport enforced, not by the
      // fragment length of maxValueBytes: an answer carrying a value a little over
      // maxValueBytes is honest, and the reader fails such a read with VALUE_TOO_LARGE.
      message = decodeMessage(frame, { n: this.#config.n, maxFragmentLength: this.#options.maxFrameBytes });
    } catch (e) {
      this.blame(index, `sent an undecodable frame: ${(e as Error).message}`);
      return;
    }
    if (!isReply(message)) return;
    // Replies name their round by its wire id, never reused: any other id is not ours, or long gone.
    const round = this.#rounds.get(message.opId);
    if (!round) return;
    const answer = round.answerOf(message);
    if (!answer) {
      this.blame(
        index,
        `answered a ${round.request} with ${message.type === 'ERROR' ? 'an ERROR' : message.type} of key ${JSON.stringify(message.key.slice(0, 64))}`,
      );
      return;
    }
    round.pending.answered(index);
    if (!round.pending.has(index)) round.askedAgain.delete(index);
    if (answer === 'ack' && !round.acked.has(index)) {
      round.acked.add(index);
      if (round.flight) this.#links[index]!.noteRoundTrip(this.#clock.now() - round.started);
    }
    const flight = round.flight;
    if (!flight) {
      // A late answer to a round that is over: only a refusal of what the quorum accepted tells anything.
      if (message.type === 'ERROR') {
        const evidence = round.refusalEvidence(index, message, quorum(this.#config));
        if (evidence) round.report(index, evidence);
      }
      this.#releaseHeld(index);
      return;
    }
    if (message.type === 'ERROR') round.refused.set(index, message);
    this.#releaseHeld(index);
    // The operation sees its own id: the wire id is the host's business.
    const reply: Reply = { ...message, opId: flight.opId };
    this.#chain(flight, async () => {
      // Queued replies may outlive their round: a later round's answers moved the operation on.
      if (round.flight !== flight) return;
      this.#apply(flight, await flight.op.onReply(index, reply));
    });
  }

  /** Server `index`'s link came (back) up: send it the current round of every operation it has not acknowledged. */
  opened(index: number): void {
    this.#rounds.reconnected(index);
    const link = this.#links[index]!;
    for (const round of this.#rounds.live()) {
      const frame = round.frames.get(index);
      if (!frame || !round.awaits(index)) continue;
      round.refused.delete(index);
      if (link.send(frame, SEND_HIGH_WATER_BYTES)) round.pending.add(index);
    }
    this.#releaseHeld(index);
    for (const check of [...this.#quorumWaiters]) check();
  }

  /**
   * `index` sent a frame over the size limit (the link is closing). Only a FILTER answer
   * can honestly be that large, and only when the value read is over `maxValueBytes`: see
   * {@link RoundBook.oversized} for how the frame is matched to a round. Once `t + 1`
   * servers answered one FILTER so, one of them is correct, so the value the read would
   * return (correct servers answer with the highest candidate's entry) is too large: the
   * read fails with VALUE_TOO_LARGE instead of reconnecting and asking again, and nobody
   * is blamed.
   */
  oversized(index: number, reason: string, head: Uint8Array | undefined): void {
    let opId: number | undefined;
    if (head) {
      const header = decodeHeader(head);
      if (header?.type !== 'FILTER_ACK') {
        this.blame(index, reason);
        return;
      }
      opId = header.opId;
    }
    const verdict = this.#rounds.oversized(index, opId);
    if (verdict.kind === 'misbehaving') this.blame(index, reason);
    if (verdict.kind !== 'answer') return;
    const { round } = verdict;
    round.oversized.set(index, reason);
    if (round.flight) this.#armFragmentTimer(round.flight);
    if (round.oversized.size > this.#config.t) {
      const servers = serverNames(round.oversized.keys());
      round.flight?.fail(
        new PowerStoreError(
          'VALUE_TOO_LARGE',
          `the value of ${JSON.stringify(round.key)} is over the ${this.#options.maxValueBytes} bytes this store accepts (connect's maxValueBytes): ${servers} answered with frames over the limit of ${this.#options.maxFrameBytes} bytes`,
        ),
      );
    }
  }

  /** Queues `work` on `flight`'s chain (one step at a time); a throw fails the operation. */
  #chain(flight: InFlight, work: Promise<void> | (() => Promise<void>)): void {
    const next = (typeof work === 'function' ? flight.chain.then(work) : flight.chain.then(() => work)).catch((e) => flight.fail(e));
    flight.chain = next;
    this.#work.add(next);
    void next.then(() => this.#work.delete(next));
  }

  #apply(flight: InFlight, step: Step<unknown>): void {
    if (step.error) {
      flight.fail(step.error);
      return;
    }
    if (step.result !== undefined) {
      flight.finish(step.result);
      return;
    }
    if (step.supplement && step.send && flight.round?.flight === flight) {
      this.#supplement(flight, flight.round, step.send);
      return;
    }
    if (!step.send) {
      if (!this.#failIfHopeless(flight)) this.#armFragmentTimer(flight);
      return;
    }
    flight.stopFragmentTimer?.();
    flight.stopFragmentTimer = undefined;
    flight.restartTimer?.();
    this.#endRound(flight, false);
    const send = step.send;
    const round = this.#rounds.start(
      flight,
      send[0]!.message.key,
      send[0]!.message.type,
      (id) => this.#encodeRound(send, id),
      flight.onEvidence,
      this.#clock.now(),
    );
    flight.round = round;
    const sent: SentFrame[] = [];
    for (const [to, frame] of round.frames) {
      const link = this.#links[to]!;
      const before = link.bufferedBytes;
      if (link.send(frame, SEND_HIGH_WATER_BYTES)) {
        round.pending.add(to);
        sent.push([link, frame.length, before]);
      }
    }
    if (flight.onProgress) {
      flight.stopProgress?.();
      flight.stopProgress = trackProgress(this.#clock, phaseOf(send[0]!.message.type), sent, flight.onProgress);
    }
  }

  /** Sends a supplement's messages under the round in progress's wire id. */
  #supplement(flight: InFlight, round: Round<InFlight>, send: readonly Outgoing[]): void {
    for (const [to, frame] of this.#encodeRound(send, round.id)) {
      if (round.frames.has(to)) round.askedAgain.add(to);
      round.frames.set(to, frame);
      if (this.#links[to]!.send(frame, SEND_HIGH_WATER_BYTES)) round.pending.add(to);
    }
    this.#armFragmentTimer(flight);
  }

  /**
   * A read that has `n − t` answers but waits on the servers it asked for fragments gives
   * them twice as long as the quorum took (at least {@link FRAGMENT_WAIT_MIN_MS}), then asks
   * the others; a listing that has `n − t` answers but waits for more (its page would come
   * out thin and the answers disagree) gives the others four times as long (at least
   * {@link LIST_WAIT_MIN_MS}), then returns the page without them. Either way a slow or
   * dead server costs one timer, not the operation's timeout.
   */
  #armFragmentTimer(flight: InFlight): void {
    const op = flight.op;
    const round = flight.round;
    const list = op instanceof ListOperation;
    // Answers over the frame limit count as answers here: with one from a correct server
    // and a silent Byzantine one, the others would otherwise never be asked for fragments,
    // and the read could neither finish nor fail as too large.
    const waits = (op instanceof ReadOperation && op.waitsOnFragments(round?.oversized.size ?? 0)) || (list && op.awaitingAnswers);
    if (!waits || flight.stopFragmentTimer !== undefined || !round) return;
    const took = this.#clock.now() - round.started;
    const wait = list ? Math.max(LIST_WAIT_MIN_MS, 4 * took) : Math.max(FRAGMENT_WAIT_MIN_MS, 2 * took);
    flight.stopFragmentTimer = this.#clock.setTimer(wait, () => this.#chain(flight, async () => this.#apply(flight, op.stalled())));
  }

  /**
   * Encodes each distinct message once (most rounds send the same one to every server),
   * under the round's wire id `id` in place of the operation's.
   */
  #encodeRound(send: readonly Outgoing[], id: number): Map<number, Uint8Array> {
    const encoded = new Map<Outgoing['message'], Uint8Array>();
    const frames = new Map<number, Uint8Array>();
    for (const { to, message } of send) {
      let frame = encoded.get(message);
      if (!frame) {
        frame = encodeMessage({ ...message, opId: id });
        encoded.set(message, frame);
      }
      frames.set(to, frame);
    }
    return frames;
  }

  /**
   * The round of `flight` in progress is over: the operation moved on to the next round
   * (`succeeded` false) or finished. Refusals of a request `n − t` other servers accepted
   * are misbehaving; so are oversized FILTER answers once the read returned a value
   * within the limit, since a correct server's answer carries that value's fragment.
   */
  #endRound(flight: InFlight, succeeded: boolean): void {
    const round = flight.round;
    if (!round || round.flight !== flight) return;
    const held = [...round.held];
    this.#rounds.end(round, succeeded);
    for (const [index, reply] of round.refused) {
      const evidence = round.refusalEvidence(index, reply, quorum(this.#config));
      if (evidence) round.report(index, evidence);
    }
    if (succeeded) for (const [index, reason] of round.oversized) round.report(index, reason);
    for (const index of new Set([...held, ...round.pending])) this.#releaseHeld(index);
  }

  /** Sends `index` the next FILTER held back for it, if its link is up and none is outstanding. */
  #releaseHeld(index: number): void {
    const link = this.#links[index];
    if (link?.state !== 'open') return;
    const round = this.#rounds.nextHeld(index);
    const frame = round?.frames.get(index);
    if (round && frame && link.send(frame, SEND_HIGH_WATER_BYTES)) round.pending.add(index);
  }
}

function phaseOf(type: Outgoing['message']['type']): Progress['phase'] {
  return type.toLowerCase() as Progress['phase'];
}

function isReply(m: Message): m is Reply {
  return m.type.endsWith('_ACK') || m.type === 'ERROR';
}
