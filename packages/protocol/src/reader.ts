/**
 * The reader of M-PoWerStore (Algorithm 6): COLLECT → FILTER → (REPAIR only under
 * attack). Readers hold no credentials: what they trust is agreement of `t + 1` servers.
 */
import type { ErasureCodec } from '@powerstore/erasure';
import { candidateId, vecsEqual, type Candidate } from './candidate.js';
import { MAX_VALUE_LENGTH, quorum, type ClusterConfig } from './config.js';
import { crossChecksumDigest, fragmentMatches, type CrossChecksum } from './cross-checksum.js';
import type { CryptoProvider } from './crypto.js';
import { check } from './errors.js';
import { toHex } from './bytes.js';
import type { ClientOperation, FilterAck, Outgoing, Reply, Step } from './messages.js';
import { TS0, compareTimestamps, timestampsEqual, type Timestamp } from './timestamp.js';

/** What a reader needs. */
export interface ReaderOptions {
  readonly config: ClusterConfig;
  readonly crypto: CryptoProvider;
  /** Injected so the WebAssembly codec and the reference one are interchangeable. */
  readonly codec: ErasureCodec;
}

/** What a finished read reports. */
export interface ReadResult {
  /** The value, or `undefined` when the key was never written or was deleted. */
  readonly value: Uint8Array | undefined;
  /** Timestamp of the write read (`ts0` when never written). */
  readonly ts: Timestamp;
  /** Communication rounds used: 2, or 3 when a candidate needed REPAIR. */
  readonly rounds: number;
}

/** `W[i]`: server `i`'s FILTER answer, with its fragment checked against its own `cc`. */
export interface FilterAnswer {
  readonly ts: Timestamp;
  readonly entry: FilterAck['entry'];
  /** `H(fr_i) = cc[i]` and the length fits `cc`'s value length. */
  readonly fragmentOk: boolean;
  /** Groups answers with the same `cc` and `vec`. */
  readonly groupKey: string;
}

/** A set of `t + 1` (or more) agreeing answers for one timestamp. */
export interface SafeGroup {
  readonly ts: Timestamp;
  readonly members: readonly number[];
  readonly cc: CrossChecksum;
  readonly vec: readonly Uint8Array[];
}

type Phase = 'idle' | 'collect' | 'filter' | 'repair' | 'done';

/**
 * One READ of one key. The host sends what `start` and `onReply` return and must await
 * each call before the next (fragment hashing may be asynchronous).
 */
export class ReadOperation implements ClientOperation<ReadResult> {
  protected readonly options: ReaderOptions;
  readonly key: string;
  readonly opId: number;
  #phase: Phase = 'idle';
  /** Q in COLLECT, then R in FILTER, then the REPAIR acks. */
  readonly #responded = new Set<number>();
  /** The candidate set C, by {@link candidateId}. */
  protected readonly candidates = new Map<string, Candidate>();
  /** W[1 … n]. */
  protected readonly answers = new Map<number, FilterAnswer>();
  #pending: ReadResult | undefined;

  constructor(options: ReaderOptions, key: string, opId: number) {
    const { config, codec } = options;
    check(codec.n === config.n && codec.k === config.t + 1, `codec must be (k = t + 1, n = 3t + 1), got (${codec.k}, ${codec.n})`);
    this.options = options;
    this.key = key;
    this.opId = opId;
  }

  /** The round in progress. */
  get phase(): Phase {
    return this.#phase;
  }

  async start(): Promise<Step<ReadResult>> {
    check(this.#phase === 'idle', 'operation already started');
    this.#phase = 'collect';
    return { send: this.#toAll({ type: 'COLLECT', key: this.key, opId: this.opId }) };
  }

  async onReply(from: number, reply: Reply): Promise<Step<ReadResult>> {
    const { config } = this.options;
    if (reply.key !== this.key || reply.opId !== this.opId || from < 0 || from >= config.n) return {};
    if (this.#responded.has(from)) return {};
    switch (this.#phase) {
      case 'collect':
        if (reply.type !== 'COLLECT_ACK') return {};
        this.#responded.add(from);
        if (reply.candidate && compareTimestamps(reply.candidate.ts, TS0) > 0) {
          this.candidates.set(candidateId(reply.candidate), reply.candidate);
        }
        return this.#responded.size >= quorum(config) ? this.#filter() : {};
      case 'filter':
        if (reply.type !== 'FILTER_ACK') return {};
        this.#responded.add(from);
        this.answers.set(from, await this.#answer(from, reply));
        this.#dropInvalid();
        return this.#responded.size >= quorum(config) ? this.#tryFinishFilter() : {};
      case 'repair':
        if (reply.type !== 'REPAIR_ACK') return {};
        this.#responded.add(from);
        if (this.#responded.size < quorum(config)) return {};
        return this.#finish(this.#pending!);
      default:
        return {};
    }
  }

  /** `invalid(c) ≜ |{i ∈ R : W[i].ts < c.ts}| ≥ n − t`: enough servers vouch nothing that high is valid. */
  protected isInvalid(c: Candidate): boolean {
    let lower = 0;
    for (const w of this.answers.values()) if (compareTimestamps(w.ts, c.ts) < 0) lower++;
    return lower >= quorum(this.options.config);
  }

  /** `safe(c)`: `t + 1` servers answered `c.ts` with the same `cc` and `vec` and fragments matching `cc`. */
  protected safeGroup(ts: Timestamp): SafeGroup | undefined {
    const groups = new Map<string, number[]>();
    for (const [i, w] of this.answers) {
      if (!w.entry || !w.fragmentOk || !timestampsEqual(w.ts, ts)) continue;
      const g = groups.get(w.groupKey);
      if (g) g.push(i);
      else groups.set(w.groupKey, [i]);
    }
    for (const members of groups.values()) {
      if (members.length >= this.matchingServersForSafe()) {
        const entry = this.answers.get(members[0]!)!.entry!;
        return { ts, members, cc: entry.cc, vec: entry.vec };
      }
    }
    return undefined;
  }

  /** `t + 1`: at least one of them is correct. */
  protected matchingServersForSafe(): number {
    return this.options.config.t + 1;
  }

  /** Whether server `i`'s fragment is entry `i` of its own cross-checksum. */
  protected async fragmentVerifies(i: number, entry: NonNullable<FilterAck['entry']>): Promise<boolean> {
    const { codec, crypto } = this.options;
    const { valueLength } = entry.cc;
    // Bounded before the codec sees it: the entry may come from a Byzantine server.
    if (!Number.isSafeInteger(valueLength) || valueLength < 0 || valueLength > MAX_VALUE_LENGTH) return false;
    return (
      entry.fragment.length === codec.fragmentLength(valueLength) &&
      (await fragmentMatches(crypto, entry.cc, i, entry.fragment))
    );
  }

  /**
   * REPAIR (line 154): candidates at the selected timestamp whose `vec` differs from the
   * one `t + 1` servers hold, with that `vec` put in; empty when nothing needs repair.
   */
  protected repairs(group: SafeGroup): Candidate[] {
    const out = new Map<string, Candidate>();
    for (const c of this.candidates.values()) {
      if (!timestampsEqual(c.ts, group.ts) || vecsEqual(c.vec, group.vec)) continue;
      const repaired = { ts: c.ts, nonce: c.nonce, vec: group.vec };
      out.set(candidateId(repaired), repaired);
    }
    return [...out.values()];
  }

  async #answer(from: number, reply: FilterAck): Promise<FilterAnswer> {
    const { crypto } = this.options;
    const entry = reply.entry;
    if (!entry) return { ts: reply.ts, entry, fragmentOk: false, groupKey: '' };
    const shapeOk = entry.cc.hashes.length === this.options.config.n && entry.vec.length === this.options.config.n;
    const fragmentOk = shapeOk && (await this.fragmentVerifies(from, entry));
    const groupKey = shapeOk ? `${crossChecksumDigest(crypto, entry.cc)}/${entry.vec.map(toHex).join('')}` : '';
    return { ts: reply.ts, entry, fragmentOk, groupKey };
  }

  #dropInvalid(): void {
    for (const [id, c] of this.candidates) if (this.isInvalid(c)) this.candidates.delete(id);
  }

  #filter(): Step<ReadResult> {
    this.#phase = 'filter';
    this.#responded.clear();
    const candidates = [...this.candidates.values()];
    return { send: this.#toAll({ type: 'FILTER', key: this.key, opId: this.opId, stripe: 0, candidates }) };
  }

  #highest(): Timestamp | undefined {
    let best: Timestamp | undefined;
    for (const c of this.candidates.values()) if (!best || compareTimestamps(c.ts, best) > 0) best = c.ts;
    return best;
  }

  /** FILTER's exit (line 66): `n − t` answers and the highest candidate is safe, or C = ∅. */
  #tryFinishFilter(): Step<ReadResult> {
    const high = this.#highest();
    if (!high) return this.#finish({ value: undefined, ts: TS0, rounds: 2 });
    const group = this.safeGroup(high);
    if (!group) return {};
    const value = this.#restore(group);
    const repairs = this.repairs(group);
    if (repairs.length === 0) return this.#finish({ value, ts: high, rounds: 2 });
    this.#phase = 'repair';
    this.#responded.clear();
    this.#pending = { value, ts: high, rounds: 3 };
    return { send: this.#toAll({ type: 'REPAIR', key: this.key, opId: this.opId, candidates: repairs }) };
  }

  /** RESTORE: decode from the group's verified fragments. */
  #restore(group: SafeGroup): Uint8Array | undefined {
    if (group.cc.tombstone) return undefined;
    const fragments: (Uint8Array | undefined)[] = new Array(this.options.config.n).fill(undefined);
    for (const i of group.members) fragments[i] = this.answers.get(i)!.entry!.fragment;
    return this.options.codec.decode(fragments, group.cc.valueLength);
  }

  #finish(result: ReadResult): Step<ReadResult> {
    this.#phase = 'done';
    return { result };
  }

  #toAll(message: Outgoing['message']): Outgoing[] {
    return Array.from({ length: this.options.config.n }, (_, to) => ({ to, message }));
  }
}
