/**
 * The reader of PowerStore (M-PoWerStore's Algorithm 6 with signed write certificates):
 * COLLECT → FILTER, two rounds. Readers hold no credentials; they check certificates
 * themselves with the same `valid(c)` as servers.
 *
 * Servers garbage-collect history (`HistoryLimits`): a server that no longer holds the
 * selected version's entry answers with its newer `lc` instead. When `n − t` answers have
 * come and the selected candidate is not yet safe, a reader that has been told of a valid
 * newer candidate adds it to C and runs FILTER again (a third round, and so on): it moves
 * forward to a write that completed meanwhile instead of waiting for entries that are
 * gone. A reader concurrent with at most δ writes (`HistoryLimits.keep`) never needs to.
 *
 * FILTER asks `t + 1` servers for fragments and the others for metadata only (the
 * entry's timestamp, cross-checksum and certificate): `t + 1` fragments that match the
 * signed cross-checksum are all a decode needs, so a read moves about one value's worth of
 * bytes instead of `n / (t + 1)` of it. Nothing else changes: every server still validates
 * and writes back the candidates, and `invalid()` counts metadata answers as before (they
 * report the server's timestamp). `safe(c)` still needs `t + 1` answers carrying `c`'s
 * certificate *and* a fragment that matches it, so a metadata-only answer never makes a
 * candidate safe, and fragments cannot be forged (each is bound by its hash in the
 * cross-checksum the writer signed). Fallback, at most once per round: the servers not yet
 * asked are asked for fragments as soon as an answer from a server asked for its fragment
 * does not carry one that verifies for the highest candidate, when `n − t` have answered,
 * the highest candidate is not safe and every server asked for a fragment has answered,
 * or when the host calls {@link ReadOperation.stalled} (its timer: a server asked for a
 * fragment is slow or gone). After a fallback every server has been asked for its
 * fragment, which is the protocol without this optimisation, so liveness is as before:
 * the `n − t ≥ 2t + 1` correct servers answer, at least `t + 1` of them with `c`'s entry.
 *
 * REPAIR is gone: the paper needs it because a MAC vector can verify at some correct
 * servers and not at others (BigMac). A certificate verifies at every correct server or
 * at none, so every correct server in FILTER's quorum writes back the selected candidate
 * (or a higher one), which is all Lemma 5.8 (read atomicity) needs.
 */
import type { ErasureCodec } from '@powerstore/erasure';
import { bytesEqual } from '../core/bytes.js';
import { candidateId, certificateId, type Candidate } from '../auth/candidate.js';
import type { CertificateVerifier } from '../auth/certificate.js';
import { MAX_VALUE_LENGTH, quorum, type ClusterConfig } from '../core/config.js';
import { crossChecksumDigest, fragmentMatches } from '../core/cross-checksum.js';
import { entryCovered, layoutCovered, MAX_STRIPES, stripeMatches, type StripeLayout } from '../core/stripes.js';
import type { CryptoProvider } from '../core/crypto.js';
import { currentEpoch, withEpoch } from '../auth/epochs.js';
import { check, ProtocolError } from '../core/errors.js';
import type { ClientOperation, FilterAck, FilterRequest, Outgoing, Reply, Step } from '../wire/messages.js';
import { Rejections } from './rejections.js';
import { whoDidWhat } from './server-names.js';
import { TS0, compareTimestamps, timestampsEqual, type Timestamp } from '../auth/timestamp.js';

/** What a reader needs. */
export interface ReaderOptions {
  readonly config: ClusterConfig;
  readonly crypto: CryptoProvider;
  /** Injected so the WebAssembly codec and the reference one are interchangeable. */
  readonly codec: ErasureCodec;
  /** Checks candidates and their certificates for this cluster (and caches what it verified). */
  readonly verifier: CertificateVerifier;
  /** Called when a server is caught answering what no correct server would. */
  readonly onEvidence?: (server: number, reason: string) => void;
  /**
   * Longest value this reader accepts, in bytes (default: no limit beyond the codec's).
   * A read of a longer value fails with `VALUE_TOO_LARGE` at the first FILTER answer that
   * shows the length the writer signed, instead of decoding it.
   */
  readonly maxValueLength?: number;
  /**
   * The `t + 1` servers (protocol indices) a FILTER round asks for fragments first.
   * Default: `t + 1` consecutive servers from `(opId + round) mod n`, which spreads the
   * fragment traffic of many reads over all servers.
   */
  readonly fragmentServers?: (opId: number, round: number) => readonly number[];
}

/** What a finished read reports. */
export interface ReadResult {
  /** The value, or `undefined` when the key was never written or was deleted. */
  readonly value: Uint8Array | undefined;
  /** Timestamp of the write read (`ts0` when never written). */
  readonly ts: Timestamp;
  /** The certificate of the write read (who wrote it, and under which grant); `undefined` at `ts0`. */
  readonly cert: Candidate['cert'] | undefined;
  /** Communication rounds used: 2, more when garbage collection moved the read forward. */
  readonly rounds: number;
  /** For a striped value: the stripe `value` holds (the one asked for, or the last), and the layout. */
  readonly stripe?: number;
  readonly layout?: StripeLayout;
  /** The candidate read, to fetch more stripes of the same version with {@link ReadTarget.pinned}. */
  readonly candidate?: Candidate;
}

/** Which stripe a read returns, and of which version. */
export interface ReadTarget {
  /** The stripe to return (default 0); a value with fewer stripes returns its last. A value of one stripe returns it whole. */
  readonly stripe?: number;
  /**
   * Read this version, skipping COLLECT: for the further stripes of a value another read
   * chose. Fails with `VALUE_CHANGED` when servers collected it (newer writes completed)
   * rather than moving on to a newer version, so a stream never mixes two versions.
   */
  readonly pinned?: Candidate;
  /**
   * The pinned version's layout, as the read that chose the version returned it (checked
   * here against the pinned certificate): servers then answer without it, which saves 32
   * bytes per stripe in every answer and the reader hashing them again.
   */
  readonly layout?: StripeLayout;
  /**
   * The pinned version is a write still under way, named by timestamp and certificate
   * without nonce or proof (a rebuilding server's repair, `repair.ts`): servers answer with
   * their entry of exactly it (`FilterRequest.pending`), never with a newer one.
   */
  readonly pending?: boolean;
}

/** `W[i]`: server `i`'s FILTER answer, checked against its own certificate. */
export interface FilterAnswer {
  readonly ts: Timestamp;
  readonly entry: FilterAck['entry'];
  /** {@link certificateId} of the entry's certificate. */
  readonly certId: string | undefined;
  /** The stripe the answer is about. */
  readonly stripe: number;
  /** The certificate covers `cc`, `H(fr_i) = cc[i]` and the length fits the value length. */
  readonly fragmentOk: boolean;
}

type Phase = 'idle' | 'collect' | 'filter' | 'done';

/**
 * One READ of one key. The host sends what `start` and `onReply` return and must await
 * each call before the next (verification and hashing may be asynchronous).
 */
export class ReadOperation implements ClientOperation<ReadResult> {
  protected readonly options: ReaderOptions;
  readonly key: string;
  readonly opId: number;
  #phase: Phase = 'idle';
  /** Q in COLLECT, then R in FILTER. */
  readonly #responded = new Set<number>();
  readonly #rejections = new Rejections();
  /** The candidate set C, by {@link candidateId}: only candidates that are valid. */
  protected readonly candidates = new Map<string, Candidate>();
  /** W[1 … n]. */
  protected readonly answers = new Map<number, FilterAnswer>();
  /** The highest valid candidate servers named because they collected the one asked for. */
  #newer: Candidate | undefined;
  #rounds = 0;
  /** The highest timestamp in C when this FILTER round went out. */
  #asked: Timestamp = TS0;
  /** This FILTER round's candidates, as sent. */
  #sent: readonly Candidate[] = [];
  /** Servers this FILTER round asked for their fragment. */
  readonly #fragmentAsked = new Set<number>();
  #fellBack = false;
  readonly #stripe: number;
  readonly #pinned: Candidate | undefined;
  readonly #pending: boolean;
  /** The pinned version's layout, when the caller gave it. */
  readonly #layout: StripeLayout | undefined;

  constructor(options: ReaderOptions, key: string, opId: number, target: ReadTarget = {}) {
    const { config, codec } = options;
    check(codec.n === config.n && codec.k === config.t + 1, `codec must be (k = t + 1, n = 3t + 1), got (${codec.k}, ${codec.n})`);
    const stripe = target.stripe ?? 0;
    check(Number.isSafeInteger(stripe) && stripe >= 0 && stripe < MAX_STRIPES, `stripe must be an integer in 0..${MAX_STRIPES - 1}`);
    this.options = options;
    this.key = key;
    this.opId = opId;
    this.#stripe = stripe;
    this.#pinned = target.pinned;
    check(!target.pending || target.pinned !== undefined, 'only a pinned version can be a pending one');
    this.#pending = target.pending ?? false;
    if (target.layout) {
      check(target.pinned !== undefined, 'a layout is given only with the pinned version it belongs to');
      check(
        layoutCovered(options.crypto, target.pinned.cert, target.layout),
        "the layout must be the one the pinned version's certificate signs",
      );
      check(stripe < target.layout.digests.length, `stripe ${stripe} is past the layout's ${target.layout.digests.length} stripes`);
    }
    this.#layout = target.layout;
  }

  /** The round in progress. */
  get phase(): Phase {
    return this.#phase;
  }

  /** Servers that answered FILTER, in protocol indices. */
  answered(): number[] {
    return [...this.answers.keys()].sort((a, b) => a - b);
  }

  async start(): Promise<Step<ReadResult>> {
    check(this.#phase === 'idle', 'operation already started');
    if (this.#pinned) {
      this.candidates.set(candidateId(this.#pinned), this.#pinned);
      return this.#filter();
    }
    this.#phase = 'collect';
    return { send: this.#toAll({ type: 'COLLECT', key: this.key, opId: this.opId }) };
  }

  async onReply(from: number, reply: Reply): Promise<Step<ReadResult>> {
    const { config } = this.options;
    if (reply.key !== this.key || reply.opId !== this.opId || from < 0 || from >= config.n) return {};
    if (this.#phase === 'idle' || this.#phase === 'done') return {};
    // In FILTER, a server asked again for its fragment (a fallback) may answer twice.
    if (this.#responded.has(from) && !(this.#phase === 'filter' && this.#upgrades(from, reply))) return {};
    if (reply.type === 'ERROR') {
      const failure = this.#rejections.add(config, from, reply);
      if (!failure) return {};
      this.#phase = 'done';
      return { error: failure };
    }
    switch (this.#phase) {
      case 'collect': {
        if (reply.type !== 'COLLECT_ACK') return {};
        this.#responded.add(from);
        const c = reply.candidate;
        if (c && compareTimestamps(c.ts, TS0) > 0) {
          // An invalid candidate is invalid at every correct server too: drop it now.
          if (await this.options.verifier.valid(this.key, c)) this.candidates.set(candidateId(c), c);
          else this.options.onEvidence?.(from, 'sent a candidate that is not valid');
        }
        return this.#responded.size >= quorum(config) ? this.#filter() : {};
      }
      case 'filter': {
        if (reply.type !== 'FILTER_ACK') return {};
        // After a restart, an answer below what this round asked for answers an earlier
        // round (every candidate in C is valid, so a correct server answers the highest).
        if (this.#rounds > 1 && compareTimestamps(reply.ts, this.#asked) < 0) return {};
        const tooLarge = this.#tooLarge(reply);
        if (tooLarge) {
          this.#phase = 'done';
          return { error: tooLarge };
        }
        this.#responded.add(from);
        const answer = await this.#answer(from, reply);
        this.answers.set(from, answer);
        if (reply.newer) await this.#noteNewer(from, reply.newer);
        this.#dropInvalid();
        // A server asked for its fragment did not send one that serves the highest candidate.
        const disappointed = this.#fragmentAsked.has(from) && !this.#servesHighest(answer);
        if (this.#responded.size < quorum(config)) return disappointed ? this.#fallBack() : {};
        const step = this.#tryFinish();
        if (step.result) return step;
        if (!this.#newer) {
          const outstanding = [...this.#fragmentAsked].some((i) => !this.answers.has(i));
          return disappointed || !outstanding ? this.#fallBack() : {};
        }
        if (this.#pinned) {
          // The version is gone at some server: ask every server once, then give up on it.
          if (!this.#fellBack) return this.#fallBack();
          return this.#changed();
        }
        // Not safe yet, and the version asked for is gone at some server: move forward.
        // Only the highest candidate can be returned, so the older ones are dropped (C
        // stays within the n candidates a FILTER carries).
        this.candidates.clear();
        this.candidates.set(candidateId(this.#newer), this.#newer);
        this.#newer = undefined;
        return this.#filter();
      }
      default:
        return {};
    }
  }

  /**
   * The host's timer fired: a server asked for its fragment has not answered. Asks the
   * servers not yet asked (once per round; nothing to send otherwise).
   */
  stalled(): Step<ReadResult> {
    return this.#phase === 'filter' ? this.#fallBack() : {};
  }

  /**
   * Whether the read waits on fragments from servers it asked for them, with `n − t`
   * answers in: when the host should arm the timer that calls {@link stalled}.
   */
  get awaitingFragments(): boolean {
    return this.waitsOnFragments(0);
  }

  /**
   * {@link awaitingFragments}, counting also `unread` servers whose answers the host could
   * not take (over its frame limit): they answered, so a server that never does (a silent
   * Byzantine one) must not keep the read from asking the others.
   */
  waitsOnFragments(unread: number): boolean {
    return this.#phase === 'filter' && !this.#fellBack && this.#responded.size + unread >= quorum(this.options.config);
  }

  /**
   * A second answer from `from` replaces its first when the first brought no usable fragment
   * and `from` has been asked for its fragment since: the new answer may bring the fragment,
   * or name the newer candidate the server moved on to.
   */
  #upgrades(from: number, reply: Reply): boolean {
    return reply.type === 'FILTER_ACK' && this.#fragmentAsked.has(from) && this.answers.get(from)?.fragmentOk === false;
  }

  /** A pinned read's end when its version is gone: `VALUE_CHANGED`. */
  #changed(): Step<ReadResult> {
    this.#phase = 'done';
    return {
      error: new ProtocolError(
        'VALUE_CHANGED',
        `the version of ${JSON.stringify(this.key)} being read was overwritten and collected meanwhile`,
      ),
    };
  }

  /** Whether `w` carries a verified fragment of the highest candidate in C (trivially, when C is empty). */
  #servesHighest(w: FilterAnswer): boolean {
    const high = this.#highest();
    if (!high) return true;
    return w.fragmentOk && timestampsEqual(w.ts, high.ts) && w.certId === certificateId(high.cert);
  }

  /** The highest candidate in C. */
  #highest(): Candidate | undefined {
    let high: Candidate | undefined;
    for (const c of this.candidates.values()) if (!high || compareTimestamps(c.ts, high.ts) > 0) high = c;
    return high;
  }

  /**
   * Why the read has not finished while it waits in FILTER, server by server (1-based, as
   * users name them), for the error of a read that times out although servers answered:
   * "the newest version (timestamp 7) needs 2 fragments that verify: s1 sent one; s2, s3
   * sent fragments that fail verification; s4 answered without a fragment of it". A
   * server's own word, checked where it can be: a fragment that fails verification is
   * evidence, a missing one is not. `undefined` outside FILTER.
   */
  waiting(): string | undefined {
    const high = this.#highest();
    if (this.#phase !== 'filter' || !high) return undefined;
    const did: [number, string][] = [];
    for (const [i, w] of [...this.answers].sort(([a], [b]) => a - b)) {
      const same = timestampsEqual(w.ts, high.ts) && w.certId === certificateId(high.cert);
      if (!same)
        did.push([i, compareTimestamps(w.ts, high.ts) < 0 ? 'answered with an older version only' : 'answered with another version']);
      else if (w.fragmentOk) did.push([i, 'sent one']);
      else if (w.entry?.fragment) did.push([i, 'sent a fragment that fails verification']);
      else did.push([i, 'answered without a fragment of it']);
    }
    const silent = [...this.#fragmentAsked].filter((i) => !this.answers.has(i));
    for (const i of silent.sort((a, b) => a - b)) did.push([i, 'did not answer']);
    return `the newest version (timestamp ${high.ts.num}) needs ${this.options.config.t + 1} fragments that verify: ${whoDidWhat(did) || 'no server answered'}`;
  }

  /** Asks every server not yet asked for its fragment (at most once per round). */
  #fallBack(): Step<ReadResult> {
    if (this.#fellBack) return {};
    this.#fellBack = true;
    const send: Outgoing[] = [];
    for (let to = 0; to < this.options.config.n; to++) {
      if (this.#fragmentAsked.has(to)) continue;
      this.#fragmentAsked.add(to);
      send.push({ to, message: this.#filterRequest(true) });
    }
    return send.length > 0 ? { send, supplement: true } : {};
  }

  /** This round's FILTER (its candidates as sent), asking for the fragment or not. */
  #filterRequest(fragment: boolean): FilterRequest {
    const { key, opId } = this;
    const request: FilterRequest = {
      type: 'FILTER',
      key,
      opId,
      stripe: this.#stripe,
      fragment,
      ...(this.#layout ? { withoutLayout: true } : {}),
      ...(this.#pending ? { pending: true } : {}),
      candidates: this.#sent,
    };
    return withEpoch(request, currentEpoch(this.options.verifier.cluster));
  }

  /** `invalid(c) ≜ |{i ∈ R : W[i].ts < c.ts}| ≥ n − t`: enough servers vouch nothing that high is valid. */
  protected isInvalid(c: Candidate): boolean {
    let lower = 0;
    for (const w of this.answers.values()) if (compareTimestamps(w.ts, c.ts) < 0) lower++;
    return lower >= quorum(this.options.config);
  }

  /**
   * `safe(c)`: the servers that answered `c.ts` with `c`'s certificate and a fragment
   * matching the cross-checksum it signs, once there are `t + 1` of them (enough to
   * decode); `undefined` before.
   */
  protected safeMembers(c: Candidate): number[] | undefined {
    const id = certificateId(c.cert);
    const members: number[] = [];
    for (const [i, w] of this.answers) {
      if (w.entry && w.fragmentOk && w.certId === id && timestampsEqual(w.ts, c.ts)) members.push(i);
    }
    return members.length >= this.options.config.t + 1 ? members : undefined;
  }

  /**
   * Whether the entry's certificate signs its cross-checksum (what a metadata-only answer
   * can show), as stripe `stripe`: for a striped value, the certificate signs the layout,
   * which lists the cross-checksum there, and `stripe` is the one this read wants.
   */
  protected entryConsistent(entry: NonNullable<FilterAck['entry']>, stripe: number): boolean {
    const { valueLength } = entry.cc;
    // Bounded before the codec sees it: the entry may come from a Byzantine server.
    if (!Number.isSafeInteger(valueLength) || valueLength < 0 || valueLength > MAX_VALUE_LENGTH) return false;
    if (entry.cc.hashes.length !== this.options.config.n) return false;
    if (entry.layout && stripe !== Math.min(this.#stripe, entry.layout.digests.length - 1)) return false;
    // Answered without a layout, under the pinned certificate's digest: the one given (and
    // checked against that digest) applies.
    const known = this.#layout;
    if (!entry.layout && known && !entry.cert.tombstone && bytesEqual(entry.cert.ccDigest, this.#pinned!.cert.ccDigest))
      return stripe === this.#stripe && stripeMatches(this.options.crypto, known, stripe, entry.cc);
    return entryCovered(this.options.crypto, entry.cert, stripe, entry.cc, entry.layout);
  }

  /** Whether server `i`'s fragment is entry `i` of the cross-checksum its certificate signs (false without a fragment). */
  protected async fragmentVerifies(i: number, entry: NonNullable<FilterAck['entry']>, stripe: number): Promise<boolean> {
    const { codec, crypto } = this.options;
    if (entry.fragment === undefined || !this.entryConsistent(entry, stripe)) return false;
    return (
      entry.fragment.length === codec.fragmentLength(entry.cc.valueLength) && (await fragmentMatches(crypto, entry.cc, i, entry.fragment))
    );
  }

  async #answer(from: number, reply: FilterAck): Promise<FilterAnswer> {
    const entry = reply.entry;
    const stripe = reply.stripe;
    if (!entry) return { ts: reply.ts, entry, certId: undefined, fragmentOk: false, stripe };
    const fragmentOk = await this.fragmentVerifies(from, entry, stripe);
    if (entry.fragment === undefined) {
      if (!this.entryConsistent(entry, stripe))
        this.options.onEvidence?.(from, 'sent an entry whose certificate does not sign its cross-checksum');
    } else if (!fragmentOk) {
      this.options.onEvidence?.(from, 'sent a fragment that does not match the cross-checksum its certificate signs');
    }
    return { ts: reply.ts, entry, certId: certificateId(entry.cert), fragmentOk, stripe };
  }

  /**
   * `VALUE_TOO_LARGE` when `reply` shows that the value this read would return is longer
   * than `maxValueLength`. One answer is enough, whoever sent it: its cross-checksum must
   * hash to the digest the writer signed in the certificate of the highest candidate in C,
   * and that candidate is what the read returns (every candidate in C is valid, so correct
   * servers answer FILTER with it and it is never dropped as invalid). An older, longer
   * value a Byzantine server might answer with does not count.
   */
  #tooLarge(reply: FilterAck): ProtocolError | undefined {
    const max = this.options.maxValueLength;
    const entry = reply.entry;
    if (max === undefined || !entry || entry.cc.valueLength <= max) return undefined;
    let high: Timestamp | undefined;
    for (const c of this.candidates.values()) if (!high || compareTimestamps(c.ts, high) > 0) high = c.ts;
    if (!high || !timestampsEqual(reply.ts, high)) return undefined;
    const id = certificateId(entry.cert);
    const selected = [...this.candidates.values()].some((c) => timestampsEqual(c.ts, high) && certificateId(c.cert) === id);
    if (!selected || entry.layout || !bytesEqual(crossChecksumDigest(this.options.crypto, entry.cc), entry.cert.ccDigest)) return undefined;
    return new ProtocolError('VALUE_TOO_LARGE', `the value is ${entry.cc.valueLength} bytes, over this reader's limit of ${max}`);
  }

  /**
   * A server collected the entry asked for and named its `lc`: remembered if it is valid
   * and newer than every candidate in C (anything else is no reason to move).
   */
  async #noteNewer(from: number, c: Candidate): Promise<void> {
    if (!(await this.acceptNewer(c))) {
      this.options.onEvidence?.(from, 'named a newer candidate that is not valid');
      return;
    }
    for (const known of this.candidates.values()) if (compareTimestamps(known.ts, c.ts) >= 0) return;
    if (!this.#newer || compareTimestamps(c.ts, this.#newer.ts) > 0) this.#newer = c;
  }

  /** `valid(c)` for a candidate a FILTER answer names as newer. */
  protected acceptNewer(c: Candidate): Promise<boolean> {
    return this.options.verifier.valid(this.key, c);
  }

  #dropInvalid(): void {
    for (const [id, c] of this.candidates) if (this.isInvalid(c)) this.candidates.delete(id);
  }

  #filter(): Step<ReadResult> {
    this.#phase = 'filter';
    this.#rounds++;
    this.#responded.clear();
    this.answers.clear();
    this.#rejections.clear();
    const candidates = [...this.candidates.values()];
    this.#asked = candidates.reduce((high, c) => (compareTimestamps(c.ts, high) > 0 ? c.ts : high), TS0);
    this.#sent = candidates;
    this.#fellBack = false;
    this.#fragmentAsked.clear();
    const { config } = this.options;
    const chosen =
      this.options.fragmentServers?.(this.opId, this.#rounds) ?? defaultFragmentServers(config.n, config.t, this.opId + this.#rounds);
    for (const i of chosen) if (Number.isInteger(i) && i >= 0 && i < config.n) this.#fragmentAsked.add(i);
    check(this.#fragmentAsked.size >= config.t + 1, `fragmentServers must name at least t + 1 = ${config.t + 1} distinct servers`);
    return { send: Array.from({ length: config.n }, (_, to) => ({ to, message: this.#filterRequest(this.#fragmentAsked.has(to)) })) };
  }

  /** FILTER's exit: `n − t` answers and a highest candidate that is safe, or C = ∅. */
  #tryFinish(): Step<ReadResult> {
    let high: Timestamp | undefined;
    for (const c of this.candidates.values()) if (!high || compareTimestamps(c.ts, high) > 0) high = c.ts;
    const rounds = (this.#pinned ? 0 : 1) + this.#rounds;
    if (!high) return this.#pinned ? this.#changed() : this.#finish({ value: undefined, ts: TS0, cert: undefined, rounds });
    // Several candidates share the highest timestamp only if their writer signed twice.
    for (const c of this.candidates.values()) {
      if (!timestampsEqual(c.ts, high)) continue;
      const members = this.safeMembers(c);
      if (!members) continue;
      const first = this.answers.get(members[0]!)!;
      const layout = first.entry!.layout ?? this.#layout;
      const striped = layout ? { stripe: first.stripe, layout } : {};
      return this.#finish({ value: this.#restore(members), ts: high, cert: c.cert, rounds, candidate: c, ...striped });
    }
    return {};
  }

  /** RESTORE: decode from verified fragments. */
  #restore(members: readonly number[]): Uint8Array | undefined {
    const first = this.answers.get(members[0]!)!.entry!;
    if (first.cc.tombstone) return undefined;
    const fragments = new Array<Uint8Array | undefined>(this.options.config.n).fill(undefined);
    for (const i of members) fragments[i] = this.answers.get(i)!.entry!.fragment;
    return this.options.codec.decode(fragments, first.cc.valueLength);
  }

  #finish(result: ReadResult): Step<ReadResult> {
    this.#phase = 'done';
    return { result };
  }

  #toAll(request: Outgoing['message']): Outgoing[] {
    const message = withEpoch(request, currentEpoch(this.options.verifier.cluster));
    return Array.from({ length: this.options.config.n }, (_, to) => ({ to, message }));
  }
}

/** `t + 1` consecutive servers from `start mod n`. */
export function defaultFragmentServers(n: number, t: number, start: number): number[] {
  const first = ((start % n) + n) % n;
  return Array.from({ length: t + 1 }, (_, k) => (first + k) % n);
}
