/**
 * Server `s_i` of M-PoWerStore (Algorithm 5), over an abstract {@link ServerStorage}.
 *
 * Departures from the paper, all from DESIGN.md: STORE is accepted only when `vec[i]`
 * verifies (servers authenticate writers); COMPLETE, like the FILTER and REPAIR
 * write-backs, changes `lc` only for a valid candidate; every MAC binds the key name.
 */
import { bytesEqual } from './bytes.js';
import { candidateMac, type Candidate } from './candidate.js';
import { decodeMessage, encodeMessage } from './codec.js';
import type { ClusterConfig } from './config.js';
import { nonceHash, type CryptoProvider } from './crypto.js';
import { ProtocolError } from './errors.js';
import type {
  ClockRequest,
  CollectRequest,
  CompleteRequest,
  ErrorReply,
  FilterRequest,
  Message,
  Reply,
  RepairRequest,
  Request,
  StoreRequest,
} from './messages.js';
import type { KeyRecord, ServerStorage } from './storage.js';
import { TS0, compareTimestamps, timestampsEqual } from './timestamp.js';

/** What a server needs. */
export interface ServerOptions {
  readonly config: ClusterConfig;
  /** This server's position `i` (0-based) in the cluster. */
  readonly index: number;
  /** `k_i`, shared with the writers. */
  readonly serverKey: Uint8Array;
  readonly crypto: CryptoProvider;
  readonly storage: ServerStorage;
}

/**
 * Answers requests. `handle` runs each request under the storage's per-key exclusion and
 * resolves after the effects are durable, so the reply may be sent at once.
 */
export class Server {
  protected readonly config: ClusterConfig;
  protected readonly index: number;
  protected readonly crypto: CryptoProvider;
  readonly #serverKey: Uint8Array;
  readonly #storage: ServerStorage;

  constructor(options: ServerOptions) {
    this.config = options.config;
    this.index = options.index;
    this.crypto = options.crypto;
    this.#serverKey = options.serverKey;
    this.#storage = options.storage;
  }

  /**
   * Handles one request. A malformed or unauthenticated request gets an ERROR reply;
   * only storage failures reject.
   */
  async handle(request: Request): Promise<Reply> {
    try {
      this.checkShape(request);
      return await this.#storage.withKey(request.key, (record) => this.dispatch(record, request));
    } catch (err) {
      if (err instanceof ProtocolError) return errorReply(request, err);
      throw err;
    }
  }

  /**
   * Wire-level entry point: decodes a frame, handles it, encodes the reply. A frame that
   * does not decode, or is not a request, gets an ERROR frame (key "" and opId 0 when the
   * frame's own could not be read); only storage failures reject.
   */
  async handleFrame(frame: Uint8Array, maxFragmentLength?: number): Promise<Uint8Array> {
    let message: Message;
    try {
      message = decodeMessage(frame, { n: this.config.n, ...(maxFragmentLength !== undefined ? { maxFragmentLength } : {}) });
    } catch (err) {
      if (!(err instanceof ProtocolError)) throw err;
      return encodeMessage({ type: 'ERROR', key: '', opId: 0, code: err.code, message: err.message.slice(0, 200) });
    }
    if (!REQUEST_TYPES.has(message.type)) {
      return encodeMessage({ type: 'ERROR', key: message.key, opId: message.opId, code: 'INVALID_ARGUMENT', message: `${message.type} is not a request` });
    }
    return encodeMessage(await this.handle(message as Request));
  }

  protected dispatch(record: KeyRecord, request: Request): Promise<Reply> {
    switch (request.type) {
      case 'CLOCK':
        return this.onClock(record, request);
      case 'STORE':
        return this.onStore(record, request);
      case 'COMPLETE':
        return this.onComplete(record, request);
      case 'COLLECT':
        return this.onCollect(record, request);
      case 'FILTER':
        return this.onFilter(record, request);
      case 'REPAIR':
        return this.onRepair(record, request);
    }
  }

  /** CLOCK: answer with `lc.ts`. */
  protected async onClock(record: KeyRecord, req: ClockRequest): Promise<Reply> {
    const lc = await record.getLc();
    return { type: 'CLOCK_ACK', key: req.key, opId: req.opId, ts: lc?.ts ?? TS0 };
  }

  /** STORE: `Hist[ts] ← (fr, cc, Nbar, vec)` once `vec[i]` proves a writer sent it. */
  protected async onStore(record: KeyRecord, req: StoreRequest): Promise<Reply> {
    const expected = candidateMac(this.crypto, this.#serverKey, this.index, req.key, req.ts, req.nonceHash);
    if (!bytesEqual(expected, req.vec[this.index]!)) {
      throw new ProtocolError('UNAUTHENTICATED', `vec[${this.index}] does not verify`);
    }
    const { ts, stripe, fragment, cc, nonceHash, vec } = req;
    await record.putEntry({ ts, stripe, fragment, cc, nonceHash, vec });
    return { type: 'STORE_ACK', key: req.key, opId: req.opId, ts: req.ts };
  }

  /** COMPLETE: `lc ← (ts, N, vec)` if valid and higher. */
  protected async onComplete(record: KeyRecord, req: CompleteRequest): Promise<Reply> {
    if (!(await this.valid(record, req.key, req.candidate))) {
      throw new ProtocolError('UNAUTHENTICATED', 'candidate is not valid');
    }
    await this.writeBack(record, req.candidate);
    return { type: 'COMPLETE_ACK', key: req.key, opId: req.opId, ts: req.candidate.ts };
  }

  /** COLLECT: answer with `lc`. */
  protected async onCollect(record: KeyRecord, req: CollectRequest): Promise<Reply> {
    return { type: 'COLLECT_ACK', key: req.key, opId: req.opId, candidate: await record.getLc() };
  }

  /**
   * FILTER: pick the highest valid candidate `c_hv`, write it back to `lc` if higher (the
   * metadata write-back that makes reads linearizable), answer with `Hist[c_hv.ts]`.
   */
  protected async onFilter(record: KeyRecord, req: FilterRequest): Promise<Reply> {
    const chv = await this.highestValid(record, req.key, req.candidates);
    if (chv) await this.writeBack(record, chv);
    const ts = chv?.ts ?? TS0;
    const entry = chv ? await record.getEntry(ts) : undefined;
    return {
      type: 'FILTER_ACK',
      key: req.key,
      opId: req.opId,
      ts,
      stripe: req.stripe,
      entry:
        entry && timestampsEqual(entry.ts, ts) ? { fragment: entry.fragment, cc: entry.cc, vec: entry.vec } : undefined,
    };
  }

  /** REPAIR: write back the highest valid repaired candidate. */
  protected async onRepair(record: KeyRecord, req: RepairRequest): Promise<Reply> {
    const c = await this.highestValid(record, req.key, req.candidates);
    if (c) await this.writeBack(record, c);
    return { type: 'REPAIR_ACK', key: req.key, opId: req.opId };
  }

  /** `lc ← c` if `c.ts > lc.ts`; callers have checked `valid(c)`. */
  protected async writeBack(record: KeyRecord, c: Candidate): Promise<void> {
    const lc = await record.getLc();
    if (compareTimestamps(c.ts, lc?.ts ?? TS0) > 0) await record.setLc(c);
  }

  /** `max({c ∈ C : valid(c)})`, or `undefined` for `c0`. */
  protected async highestValid(record: KeyRecord, key: string, candidates: readonly Candidate[]): Promise<Candidate | undefined> {
    const sorted = [...candidates].sort((a, b) => compareTimestamps(b.ts, a.ts));
    for (const c of sorted) {
      if (await this.valid(record, key, c)) return c;
    }
    return undefined;
  }

  /**
   * `valid(c) ≜ H(c.N) = Hist[c.ts].Nbar ∨ verify(c.vec[i], c.ts, H(c.N), k_i)`: a proof
   * that a writer revealed `N`, hence finished the STORE round for `c.ts`.
   */
  protected async valid(record: KeyRecord, key: string, c: Candidate): Promise<boolean> {
    if (c.ts.num === 0) return false;
    const nbar = nonceHash(this.crypto, c.nonce);
    const entry = await record.getEntry(c.ts);
    if (entry && timestampsEqual(entry.ts, c.ts) && bytesEqual(entry.nonceHash, nbar)) return true;
    const mac = c.vec[this.index];
    return mac !== undefined && bytesEqual(mac, candidateMac(this.crypto, this.#serverKey, this.index, key, c.ts, nbar));
  }

  /** Bounds the wire decoder cannot know (cluster shape, code geometry). */
  protected checkShape(req: Request): void {
    const { n, t } = this.config;
    const bad = (m: string): never => {
      throw new ProtocolError('INVALID_ARGUMENT', m);
    };
    const checkVec = (vec: readonly Uint8Array[]) => {
      if (vec.length !== n) bad(`vec has ${vec.length} entries, the cluster has ${n} servers`);
    };
    switch (req.type) {
      case 'STORE': {
        if (req.stripe !== 0) throw new ProtocolError('UNSUPPORTED', 'multi-stripe values are not supported yet');
        checkVec(req.vec);
        if (req.cc.hashes.length !== n) bad('cross-checksum must have one hash per server');
        if (req.fragment.length !== Math.ceil(req.cc.valueLength / (t + 1))) bad('fragment length does not match the value length');
        if (req.cc.tombstone && req.cc.valueLength !== 0) bad('a tombstone has no value');
        break;
      }
      case 'COMPLETE':
        checkVec(req.candidate.vec);
        break;
      case 'FILTER':
      case 'REPAIR':
        if (req.type === 'FILTER' && req.stripe !== 0) throw new ProtocolError('UNSUPPORTED', 'multi-stripe values are not supported yet');
        if (req.candidates.length > n) bad(`at most ${n} candidates`);
        req.candidates.forEach((c) => checkVec(c.vec));
        break;
      default:
        break;
    }
  }
}

const REQUEST_TYPES: ReadonlySet<Message['type']> = new Set(['CLOCK', 'STORE', 'COMPLETE', 'COLLECT', 'FILTER', 'REPAIR']);

function errorReply(req: Request, err: ProtocolError): ErrorReply {
  return { type: 'ERROR', key: req.key, opId: req.opId, code: err.code, message: err.message.slice(0, 200) };
}
