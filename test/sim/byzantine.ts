/**
 * Byzantine servers. Each wraps a correct server with its own storage (so it has real
 * state to lie about) and bends its answers. Colluding servers derive forged data from
 * shared inputs, so `t` of them can agree on the same lie.
 */
import type { ErasureCodec } from '@powerstore/erasure';
import {
  computeCrossChecksum,
  HASH_LENGTH,
  TS0,
  WRITER_ID_LENGTH,
  type Candidate,
  type ClusterConfig,
  type CryptoProvider,
  type FilterAck,
  type Reply,
  type Request,
  type Server,
  type Timestamp,
} from '@powerstore/protocol';
import type { Prng } from './prng.js';

/** Every way a simulated server can misbehave. */
export const BEHAVIOURS = [
  'crash',
  'mute',
  'slow',
  'stale',
  'forge-nonce',
  'forge-replay',
  'forge-inflate',
  'forge-value',
  'corrupt-fragment',
  'corrupt-cc',
  'corrupt-vec',
  'bigmac',
  'equivocate',
  'replay-acks',
  'lying-ack',
] as const;
/** One of {@link BEHAVIOURS}. */
export type Behaviour = (typeof BEHAVIOURS)[number];

/** A reply and whether the network should hold it back (slow server). */
export interface Emitted {
  readonly reply: Reply;
  readonly slow?: boolean;
}

/** What every Byzantine server may consult. */
export interface AdversaryContext {
  readonly config: ClusterConfig;
  readonly crypto: CryptoProvider;
  readonly codec: ErasureCodec;
  /** The simulation step, for crash times. */
  now(): number;
  /** Keys the workload uses, to replay candidates across keys. */
  readonly keys: readonly string[];
}

/** A server that answers according to `behaviour`. */
export class ByzantineServer {
  readonly #log: Reply[] = [];
  readonly #firstLc = new Map<string, Candidate | undefined>();
  readonly #crashAt: number;
  readonly #equivocationSalt: number;

  constructor(
    readonly index: number,
    readonly behaviour: Behaviour,
    readonly inner: Server,
    readonly ctx: AdversaryContext,
    readonly prng: Prng,
  ) {
    this.#crashAt = prng.range(0, 400);
    this.#equivocationSalt = prng.u32();
  }

  /** Replies to `request` from client `from`. */
  async receive(from: string, request: Request): Promise<Emitted[]> {
    return this.#act(this.behaviour, from, request);
  }

  async #act(behaviour: Behaviour, from: string, req: Request): Promise<Emitted[]> {
    const honest = async () => {
      const reply = await this.inner.handle(req);
      if (reply.type === 'COLLECT_ACK' && !this.#firstLc.has(req.key)) this.#firstLc.set(req.key, reply.candidate);
      this.#log.push(reply);
      return reply;
    };
    switch (behaviour) {
      case 'crash':
        return this.ctx.now() >= this.#crashAt ? [] : [{ reply: await honest() }];
      case 'mute':
        return [];
      case 'slow':
        return [{ reply: await honest(), slow: true }];
      case 'stale':
        return [{ reply: await this.#stale(req, honest) }];
      case 'forge-nonce': {
        const reply = await honest();
        if (reply.type !== 'COLLECT_ACK' || !reply.candidate) return [{ reply }];
        return [{ reply: { ...reply, candidate: { ...reply.candidate, nonce: this.prng.bytes(HASH_LENGTH) } } }];
      }
      case 'forge-replay':
        return [{ reply: await this.#replayOtherKey(req, honest) }];
      case 'forge-inflate':
        return [{ reply: await this.#inflate(req, honest) }];
      case 'forge-value': {
        const reply = await honest();
        if (reply.type !== 'FILTER_ACK' || !reply.entry) return [{ reply }];
        return [{ reply: { ...reply, entry: await this.#forgedEntry(req.key, reply.ts, reply.entry.cc.valueLength, reply.entry.vec) } }];
      }
      case 'corrupt-fragment': {
        const reply = await honest();
        if (reply.type !== 'FILTER_ACK' || !reply.entry) return [{ reply }];
        const fragment = reply.entry.fragment.length > 0 ? flip(reply.entry.fragment, this.prng) : this.prng.bytes(this.prng.range(1, 8));
        return [{ reply: { ...reply, entry: { ...reply.entry, fragment } } }];
      }
      case 'corrupt-cc': {
        const reply = await honest();
        if (reply.type !== 'FILTER_ACK' || !reply.entry) return [{ reply }];
        const cc = reply.entry.cc;
        const hashes = [...cc.hashes];
        const j = this.prng.int(hashes.length);
        hashes[j] = this.prng.bytes(HASH_LENGTH);
        const corrupted = this.prng.chance(0.5)
          ? { ...cc, hashes }
          : { ...cc, valueLength: cc.valueLength + this.prng.range(1, 5), tombstone: this.prng.chance(0.3) ? !cc.tombstone : cc.tombstone };
        return [{ reply: { ...reply, entry: { ...reply.entry, cc: corrupted } } }];
      }
      case 'corrupt-vec': {
        const reply = await honest();
        if (reply.type === 'COLLECT_ACK' && reply.candidate) {
          return [{ reply: { ...reply, candidate: { ...reply.candidate, vec: this.#corruptVec(reply.candidate.vec) } } }];
        }
        if (reply.type === 'FILTER_ACK' && reply.entry && this.prng.chance(0.5)) {
          return [{ reply: { ...reply, entry: { ...reply.entry, vec: this.#corruptVec(reply.entry.vec) } } }];
        }
        return [{ reply }];
      }
      case 'bigmac': {
        // Offers some clients its lc with every other server's MAC corrupted (servers
        // holding the history entry still accept it, the others cannot, so only REPAIR
        // spreads it) and hides it from the other clients, answering FILTER honestly.
        const reply = await honest();
        if (reply.type !== 'COLLECT_ACK' || !reply.candidate) return [{ reply }];
        if ((hashString(from) ^ this.#equivocationSalt) % 2 === 1) return [{ reply: { ...reply, candidate: this.#firstLc.get(req.key) } }];
        const vec = reply.candidate.vec.map((m, j) => (j === this.index ? m : this.prng.bytes(HASH_LENGTH)));
        return [{ reply: { ...reply, candidate: { ...reply.candidate, vec } } }];
      }
      case 'equivocate': {
        // Honest to some clients, lying to others, consistently per client.
        const h = hashString(from) ^ this.#equivocationSalt;
        if (h % 2 === 0) return [{ reply: await honest() }];
        const lies: Behaviour[] = ['stale', 'forge-value', 'corrupt-vec', 'forge-inflate', 'bigmac'];
        return this.#act(lies[(h >>> 1) % lies.length]!, from, req);
      }
      case 'replay-acks': {
        const reply = await honest();
        const out: Emitted[] = [];
        if (this.#log.length > 1 && this.prng.chance(0.6)) {
          const old = this.prng.pick(this.#log);
          out.push({ reply: old });
          // An old ack dressed up as an answer to the current operation.
          if (old.type === reply.type) out.push({ reply: { ...old, opId: req.opId, key: req.key } as Reply });
        }
        if (this.prng.chance(0.7)) out.push({ reply });
        return this.prng.shuffle(out);
      }
      case 'lying-ack':
        if (req.type === 'STORE') return [{ reply: { type: 'STORE_ACK', key: req.key, opId: req.opId, ts: req.ts } }];
        if (req.type === 'COMPLETE') return [{ reply: { type: 'COMPLETE_ACK', key: req.key, opId: req.opId, ts: req.candidate.ts } }];
        if (req.type === 'REPAIR') return [{ reply: { type: 'REPAIR_ACK', key: req.key, opId: req.opId } }];
        return [{ reply: await honest() }];
    }
  }

  /** Answers as if frozen at the first state it reported; still accepts writes so it has history. */
  async #stale(req: Request, honest: () => Promise<Reply>): Promise<Reply> {
    switch (req.type) {
      case 'CLOCK':
        return { type: 'CLOCK_ACK', key: req.key, opId: req.opId, ts: TS0 };
      case 'COLLECT':
        return { type: 'COLLECT_ACK', key: req.key, opId: req.opId, candidate: this.#firstLc.get(req.key) };
      case 'FILTER':
        return { type: 'FILTER_ACK', key: req.key, opId: req.opId, ts: TS0, stripe: 0, entry: undefined };
      case 'REPAIR':
        return { type: 'REPAIR_ACK', key: req.key, opId: req.opId };
      default:
        return honest();
    }
  }

  async #replayOtherKey(req: Request, honest: () => Promise<Reply>): Promise<Reply> {
    const reply = await honest();
    const others = this.ctx.keys.filter((k) => k !== req.key);
    if (others.length === 0 || (reply.type !== 'COLLECT_ACK' && reply.type !== 'CLOCK_ACK')) return reply;
    const other = await this.inner.handle({ type: 'COLLECT', key: this.prng.pick(others), opId: 0 });
    if (other.type !== 'COLLECT_ACK' || !other.candidate) return reply;
    if (reply.type === 'CLOCK_ACK') return { ...reply, ts: other.candidate.ts };
    return { ...reply, candidate: other.candidate };
  }

  async #inflate(req: Request, honest: () => Promise<Reply>): Promise<Reply> {
    const reply = await honest();
    const { n } = this.ctx.config;
    switch (reply.type) {
      case 'CLOCK_ACK':
        return { ...reply, ts: this.#inflated(reply.ts) };
      case 'COLLECT_ACK': {
        const base = reply.candidate?.ts ?? TS0;
        const vec = Array.from({ length: n }, () => this.prng.bytes(HASH_LENGTH));
        return { ...reply, candidate: { ts: this.#inflated(base), nonce: this.prng.bytes(HASH_LENGTH), vec } };
      }
      case 'FILTER_ACK': {
        if (req.type !== 'FILTER' || req.candidates.length === 0) return reply;
        // Claim the highest candidate offered, with a self-consistent forged entry.
        const top = req.candidates.reduce((a, b) => (b.ts.num > a.ts.num ? b : a));
        const vec = Array.from({ length: n }, () => this.prng.bytes(HASH_LENGTH));
        return { ...reply, ts: top.ts, entry: await this.#forgedEntry(req.key, top.ts, this.prng.range(0, 24), vec) };
      }
      default:
        return reply;
    }
  }

  #inflated(ts: Timestamp): Timestamp {
    return { num: ts.num + this.prng.range(1, 1000), writerId: this.prng.bytes(WRITER_ID_LENGTH), mac: this.prng.bytes(HASH_LENGTH) };
  }

  /**
   * A fully self-consistent lie: a fake value encoded like a writer would, so fragment
   * `i` matches `cc[i]`. Derived from (key, ts) alone so colluding servers agree.
   */
  async #forgedEntry(key: string, ts: Timestamp, valueLength: number, vec: readonly Uint8Array[]): Promise<NonNullable<FilterAck['entry']>> {
    const { codec, crypto } = this.ctx;
    const seed = hashString(`${key}/${ts.num}/${ts.writerId.join(',')}`);
    const fake = new Uint8Array(valueLength);
    for (let i = 0; i < fake.length; i++) fake[i] = (seed >>> (i % 24)) ^ (i * 131);
    fake[0] = 0xee; // never a simulator value, whose first byte is ASCII
    const fragments = codec.encode(fake);
    const cc = await computeCrossChecksum(crypto, fragments, fake.length, false);
    return { fragment: fragments[this.index]!, cc, vec };
  }

  #corruptVec(vec: readonly Uint8Array[]): Uint8Array[] {
    return vec.map((m, j) => (j !== this.index && this.prng.chance(0.6) ? this.prng.bytes(HASH_LENGTH) : m));
  }
}

function flip(b: Uint8Array, prng: Prng): Uint8Array {
  const out = b.slice();
  out[prng.int(out.length)]! ^= 1 << prng.int(8);
  return out;
}

/** FNV-1a, for deterministic per-client and per-write choices. */
export function hashString(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}
