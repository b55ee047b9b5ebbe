/**
 * Byzantine servers. Each wraps a correct server with its own storage (so it has real
 * state to lie about), bends its answers, and may send requests of its own to the other
 * servers (a Byzantine server sees every STORE a writer sends it). Colluding servers
 * derive forged data from shared inputs, so `t` of them can agree on the same lie.
 */
import type { ErasureCodec } from '@powerstore/erasure';
import {
  receiptRootMessage,
  buildBatch,
  compareKeys,
  receiptLeaf,
  computeCrossChecksum,
  HASH_LENGTH,
  receiptMessage,
  TIMESTAMP_WINDOW,
  TS0,
  type Candidate,
  type ClusterConfig,
  type ReceiptBatch,
  type StoreAck,
  type StoreRequest,
  type CryptoProvider,
  type FilterAck,
  type Reply,
  type Request,
  type Server,
  type Signer,
  type Timestamp,
  type WriteCertificate,
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
  'corrupt-cert',
  'equivocate',
  'replay-acks',
  'lying-ack',
  'front-run-store',
  'relay-requests',
  'claim-collected',
  'corrupt-stripe',
  'lie-layout',
  'wrong-stripe',
  'lie-pending',
  'bad-batch',
] as const;
/** One of {@link BEHAVIOURS}. */
export type Behaviour = (typeof BEHAVIOURS)[number];

/**
 * How a Byzantine server lies to a rebuilding (or catching-up) server's host (`rebuild.ts`),
 * on top of its behaviour towards everyone else (`--rebuild`): its LIST answers carry
 * candidates stripped of their store proof, or with inflated timestamps; its FILTER answers
 * corrupted fragments, another stripe, a self-consistent made-up value beside the genuine
 * certificate, or a claim that the version is gone.
 */
export const REBUILD_LIES = ['strip-proof', 'corrupt-fragment', 'wrong-stripe', 'forge-value', 'forge-inflate', 'claim-collected'] as const;
/** One of {@link REBUILD_LIES}. */
export type RebuildLie = (typeof REBUILD_LIES)[number];

/** A reply to the requester (possibly held back: a slow server), or a request of its own to another server. */
export type Emitted = { readonly reply: Reply; readonly slow?: boolean } | { readonly to: string; readonly request: Request };

/** What every Byzantine server may consult. */
export interface AdversaryContext {
  readonly config: ClusterConfig;
  readonly crypto: CryptoProvider;
  readonly codec: ErasureCodec;
  readonly clusterId: Uint8Array;
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
  /** The last batched receipt it gave (`bad-batch`), to hand out again for another write. */
  #lastBatched: { signature: Uint8Array; batch: ReceiptBatch } | undefined;

  constructor(
    readonly index: number,
    readonly behaviour: Behaviour,
    readonly inner: Server,
    /** Its own receipt key: a Byzantine server can sign receipts for writes it never stored. */
    readonly signer: Signer,
    readonly ctx: AdversaryContext,
    readonly prng: Prng,
    /** What it tells rebuilding servers' hosts (`rb…`), if it lies to them in particular. */
    readonly rebuildLie?: RebuildLie,
  ) {
    this.#crashAt = prng.range(0, 400);
    this.#equivocationSalt = prng.u32();
  }

  /** Replies to `request` from `from`, and requests of its own. */
  async receive(from: string, request: Request): Promise<Emitted[]> {
    if (this.rebuildLie && /^rb\d+$/.test(from)) return this.#lieToRebuild(this.rebuildLie, from, request);
    const emitted = await this.#actWithLayout(from, request);
    // Colluding servers relaying each other's relays would flood the network forever;
    // requests of its own answer only what clients sent.
    return /^s\d+$/.test(from) ? emitted.filter((e) => 'reply' in e) : emitted;
  }

  /**
   * A FILTER asking for no layout is answered as if it had asked for one (the lies look at
   * the layout), and the layout then left out as asked, or sent regardless.
   */
  async #actWithLayout(from: string, req: Request): Promise<Emitted[]> {
    if (req.type !== 'FILTER' || !req.withoutLayout) return this.#act(this.behaviour, from, req);
    const { withoutLayout: _, ...full } = req;
    const emitted = await this.#act(this.behaviour, from, full);
    if (this.prng.chance(0.25)) return emitted;
    return emitted.map((e) => {
      if (!('reply' in e) || e.reply.type !== 'FILTER_ACK' || !e.reply.entry?.layout) return e;
      const { layout: _layout, ...entry } = e.reply.entry;
      return { ...e, reply: { ...e.reply, entry } };
    });
  }

  /** Answers a rebuilding server's host with `lie` (see {@link REBUILD_LIES}); it relays nothing. */
  async #lieToRebuild(lie: RebuildLie, from: string, req: Request): Promise<Emitted[]> {
    if (lie !== 'strip-proof') return (await this.#act(lie, from, req)).filter((e) => 'reply' in e);
    const reply = await this.inner.handle(req);
    if (reply.type !== 'LIST_ACK') return [{ reply }];
    // Every listed candidate without its proof, or with only t receipts: what a writer that
    // never got n − t servers to store its write could show.
    const t = this.ctx.config.t;
    const entries = reply.entries.map((e) => ({
      ...e,
      candidate: { ...e.candidate, proof: this.prng.chance(0.5) ? [] : e.candidate.proof.slice(0, t) },
    }));
    return [{ reply: { ...reply, entries } }];
  }

  async #batchLie(req: StoreRequest, ack: StoreAck): Promise<StoreAck> {
    const { crypto, clusterId } = this.ctx;
    const leaf = receiptLeaf(crypto, receiptMessage(crypto, clusterId, req.key, req.ts, req.cert, this.index));
    const count = this.prng.range(2, 6);
    const at = this.prng.range(0, count - 1);
    const leaves = Array.from({ length: count }, (_, i) => (i === at ? leaf : crypto.sha256Sync([Uint8Array.of(i), this.prng.bytes(32)])));
    const { root, paths } = buildBatch(crypto, leaves);
    const genuine = await this.signer.sign(receiptRootMessage(clusterId, this.index, count, root));
    const previous = this.#lastBatched;
    this.#lastBatched = { signature: genuine, batch: paths[at]! };
    switch (this.prng.pick(['valid', 'valid', 'other-root', 'bent-path', 'borrowed'] as const)) {
      case 'valid':
        return { ...ack, receipt: genuine, batch: paths[at]! };
      case 'other-root':
        return { ...ack, receipt: await this.signer.sign(receiptRootMessage(clusterId, this.index, count, leaves[0]!)), batch: paths[at]! };
      case 'bent-path': {
        const path = paths[at]!;
        const last = path.siblings.length - 1;
        const siblings = path.siblings.map((h, i) => (i === last ? Uint8Array.from(h, (x, j) => (j === 0 ? x ^ 1 : x)) : h));
        return { ...ack, receipt: genuine, batch: { ...path, siblings } };
      }
      case 'borrowed':
        return previous ? { ...ack, receipt: previous.signature, batch: previous.batch } : ack;
    }
  }

  #others(): string[] {
    return Array.from({ length: this.ctx.config.n }, (_, i) => `s${i}`).filter((s) => s !== `s${this.index}`);
  }

  async #act(behaviour: Behaviour, from: string, req: Request): Promise<Emitted[]> {
    const honest = async () => {
      const reply = await this.inner.handle(req);
      if (reply.type === 'COLLECT_ACK' && !this.#firstLc.has(req.key)) this.#firstLc.set(req.key, reply.candidate);
      this.#log.push(reply);
      return reply;
    };
    if (req.type === 'LIST') {
      const lie = await this.#listLie(behaviour, req, honest);
      if (lie) return [{ reply: lie }];
    }
    switch (behaviour) {
      case 'crash':
        return this.ctx.now() >= this.#crashAt ? [] : [{ reply: await honest() }];
      case 'mute':
        return [];
      case 'slow':
        return [{ reply: await honest(), slow: true }];
      case 'stale':
        return [{ reply: await this.#stale(req, honest) }];
      case 'forge-nonce':
        return [{ reply: this.#mapCandidate(await honest(), (c) => ({ ...c, nonce: this.prng.bytes(HASH_LENGTH) })) }];
      case 'forge-replay':
        return [{ reply: await this.#replayOtherKey(req, honest) }];
      case 'forge-inflate':
        return [{ reply: await this.#inflate(req, honest) }];
      case 'claim-collected': {
        // "Gone": no entry, and a newer candidate that is not valid (an inflated timestamp
        // on a genuine certificate), to lure readers past what they must return.
        const reply = await honest();
        if (reply.type !== 'FILTER_ACK' || req.type !== 'FILTER' || req.candidates.length === 0) return [{ reply }];
        const top = req.candidates.reduce((a, b) => (b.ts.num > a.ts.num ? b : a));
        return [{ reply: { ...reply, ts: top.ts, entry: undefined, newer: { ...top, ts: this.#inflated(top.ts) } } }];
      }
      case 'corrupt-stripe': {
        // One stripe of a striped value (the same for every read of it) answered with a corrupted fragment.
        const reply = await honest();
        if (reply.type !== 'FILTER_ACK' || !reply.entry?.layout || !reply.entry.fragment?.length) return [{ reply }];
        const victim = hashString(`${req.key}/${reply.ts.num}`) % reply.entry.layout.digests.length;
        if (reply.stripe !== victim) return [{ reply }];
        return [{ reply: { ...reply, entry: { ...reply.entry, fragment: flip(reply.entry.fragment, this.prng) } } }];
      }
      case 'lie-layout': {
        // The genuine stripe beside a layout the certificate does not sign: stripes swapped,
        // one dropped, or another length, so a reader would cut or order the value otherwise.
        const reply = await honest();
        if (reply.type !== 'FILTER_ACK' || !reply.entry?.layout) return [{ reply }];
        const l = reply.entry.layout;
        const digests = [...l.digests];
        const lie = this.prng.pick(['swap', 'drop', 'length'] as const);
        const layout =
          lie === 'swap'
            ? { ...l, digests: [...digests.slice(1), digests[0]!] }
            : lie === 'drop' && digests.length > 2
              ? { ...l, digests: digests.slice(0, -1), valueLength: l.stripeSize * (digests.length - 1) }
              : { ...l, valueLength: l.valueLength + this.prng.range(1, 100) };
        return [{ reply: { ...reply, entry: { ...reply.entry, layout } } }];
      }
      case 'lie-pending': {
        // CLOCK answers with the genuine lc, but a made-up pending write far above it
        // (2^53 − 1, 2^40, or many windows up), to make writers burn the key's numbers.
        const reply = await honest();
        if (reply.type !== 'CLOCK_ACK') return [{ reply }];
        const lc = reply.candidate?.ts.num ?? 0;
        const pending = this.prng.pick([
          Number.MAX_SAFE_INTEGER,
          2 ** 40 + this.prng.int(1000),
          lc + this.prng.range(1, 20) * TIMESTAMP_WINDOW,
        ]);
        return [{ reply: { ...reply, pending } }];
      }
      case 'wrong-stripe': {
        // Answers FILTER with another stripe of the same write, labelled either truthfully or as the one asked for.
        if (req.type !== 'FILTER') return [{ reply: await honest() }];
        const reply = await honest();
        if (reply.type !== 'FILTER_ACK' || !reply.entry?.layout) return [{ reply }];
        const count = reply.entry.layout.digests.length;
        const other = (reply.stripe + this.prng.range(1, count - 1)) % count;
        const moved = await this.inner.handle({ ...req, stripe: other });
        if (moved.type !== 'FILTER_ACK') return [{ reply }];
        return [{ reply: this.prng.chance(0.5) ? { ...moved, opId: req.opId } : { ...moved, opId: req.opId, stripe: reply.stripe } }];
      }
      case 'forge-value': {
        const reply = await honest();
        if (reply.type !== 'FILTER_ACK' || !reply.entry) return [{ reply }];
        return [{ reply: { ...reply, entry: await this.#forgedEntry(req.key, reply.ts, reply.entry.cc.valueLength, reply.entry.cert) } }];
      }
      case 'corrupt-fragment': {
        const reply = await honest();
        if (reply.type !== 'FILTER_ACK' || !reply.entry) return [{ reply }];
        // Asked for metadata only, it sends a fragment nobody asked for, which must not help either.
        const fragment = reply.entry.fragment?.length ? flip(reply.entry.fragment, this.prng) : this.prng.bytes(this.prng.range(1, 8));
        return [{ reply: { ...reply, entry: { ...reply.entry, fragment } } }];
      }
      case 'corrupt-cc': {
        const reply = await honest();
        if (reply.type !== 'FILTER_ACK' || !reply.entry) return [{ reply }];
        const cc = reply.entry.cc;
        const hashes = [...cc.hashes];
        hashes[this.prng.int(hashes.length)] = this.prng.bytes(HASH_LENGTH);
        const corrupted = this.prng.chance(0.5)
          ? { ...cc, hashes }
          : { ...cc, valueLength: cc.valueLength + this.prng.range(1, 5), tombstone: this.prng.chance(0.3) ? !cc.tombstone : cc.tombstone };
        return [{ reply: { ...reply, entry: { ...reply.entry, cc: corrupted } } }];
      }
      case 'corrupt-cert': {
        const reply = await honest();
        if (reply.type === 'FILTER_ACK' && reply.entry)
          return [{ reply: { ...reply, entry: { ...reply.entry, cert: this.#corruptCert(reply.entry.cert) } } }];
        return [{ reply: this.#mapCandidate(reply, (c) => ({ ...c, cert: this.#corruptCert(c.cert) })) }];
      }
      case 'equivocate': {
        // Honest to some clients, lying to others, consistently per client.
        const h = hashString(from) ^ this.#equivocationSalt;
        if (h % 2 === 0) return [{ reply: await honest() }];
        const lies: Behaviour[] = ['stale', 'forge-value', 'corrupt-cert', 'forge-inflate', 'forge-replay'];
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
        if (req.type === 'STORE') {
          // A genuine signature over a write it never stored.
          const receipt = await this.signer.sign(
            receiptMessage(this.ctx.crypto, this.ctx.clusterId, req.key, req.ts, req.cert, this.index),
          );
          return [{ reply: { type: 'STORE_ACK', key: req.key, opId: req.opId, ts: req.ts, stripe: req.stripe, receipt } }];
        }
        if (req.type === 'COMPLETE') return [{ reply: { type: 'COMPLETE_ACK', key: req.key, opId: req.opId, ts: req.candidate.ts } }];
        return [{ reply: await honest() }];
      case 'bad-batch': {
        // Stores honestly, but its receipt is a batch of its own making: a genuine root over
        // the write's leaf and made-up ones (valid: the proof carries a batched receipt
        // through completion, reads and write-backs), a signature over another root, a path
        // bent on the way up, or the batched receipt it gave another write.
        const reply = await honest();
        if (reply.type !== 'STORE_ACK' || reply.stripe !== 0 || req.type !== 'STORE') return [{ reply }];
        return [{ reply: await this.#batchLie(req, reply) }];
      }
      case 'front-run-store': {
        // Races the writer: sends every other server this STORE with its own fragment in
        // place of theirs, hoping to occupy Hist[ts] before the genuine one arrives.
        const out: Emitted[] = [];
        if (req.type === 'STORE') for (const to of this.#others()) out.push({ to, request: { ...req, opId: req.opId + 1_000_000 } });
        out.push({ reply: await honest() });
        return out;
      }
      case 'relay-requests': {
        // Replays every genuine request to the others: harmless if STORE is idempotent
        // and write-backs are checked.
        const out: Emitted[] = this.#others().map((to) => ({ to, request: req }));
        out.push({ reply: await honest() });
        return out;
      }
    }
  }

  /**
   * LIST answers that lie, for the behaviours that have a listing counterpart: hide every
   * key (stale); claim to have read no further than the first key after the cursor, with
   * nothing to list there, to hold the page back (claim-collected: "the rest is not here
   * yet"); name keys with other keys' candidates (forge-replay), inflate timestamps
   * (forge-inflate), or misstate sizes (corrupt-cc). `undefined`: answer as the behaviour
   * answers anything else.
   */
  async #listLie(behaviour: Behaviour, req: Request & { type: 'LIST' }, honest: () => Promise<Reply>): Promise<Reply | undefined> {
    if (!['stale', 'claim-collected', 'forge-replay', 'forge-inflate', 'corrupt-cc'].includes(behaviour)) return undefined;
    const reply = await honest();
    if (reply.type !== 'LIST_ACK') return reply;
    switch (behaviour) {
      case 'stale':
        return { ...reply, entries: [], more: false };
      case 'claim-collected': {
        // The smallest key in range: the prefix itself, or the cursor followed by U+0000.
        const resumeAfter = compareKeys(req.key, req.after) > 0 ? req.key : `${req.after}\u0000`;
        return { ...reply, entries: [], more: true, resumeAfter };
      }
      case 'forge-replay': {
        // Every key this server lists, under the names of keys it may not hold: invented keys.
        const names = this.prng.shuffle([...this.ctx.keys]).sort(compareKeys);
        const entries = reply.entries.map((e, i) => ({ ...e, key: names[i % names.length]! }));
        return { ...reply, entries: entries.filter((e, i) => i === 0 || compareKeys(e.key, entries[i - 1]!.key) > 0) };
      }
      case 'forge-inflate':
        return {
          ...reply,
          entries: reply.entries.map((e) => ({ ...e, candidate: { ...e.candidate, ts: this.#inflated(e.candidate.ts) } })),
        };
      default:
        return {
          ...reply,
          entries: reply.entries.map((e) => (e.cc ? { ...e, cc: { ...e.cc, valueLength: e.cc.valueLength + this.prng.range(1, 5) } } : e)),
        };
    }
  }

  #mapCandidate(reply: Reply, f: (c: Candidate) => Candidate): Reply {
    if ((reply.type === 'COLLECT_ACK' || reply.type === 'CLOCK_ACK') && reply.candidate) return { ...reply, candidate: f(reply.candidate) };
    return reply;
  }

  /** Answers as if frozen at the first state it reported; still accepts writes so it has history. */
  async #stale(req: Request, honest: () => Promise<Reply>): Promise<Reply> {
    switch (req.type) {
      case 'CLOCK':
        return { type: 'CLOCK_ACK', key: req.key, opId: req.opId, candidate: this.#firstLc.get(req.key), pending: 0 };
      case 'COLLECT':
        return { type: 'COLLECT_ACK', key: req.key, opId: req.opId, candidate: this.#firstLc.get(req.key) };
      case 'FILTER':
        return { type: 'FILTER_ACK', key: req.key, opId: req.opId, ts: TS0, stripe: 0, entry: undefined };
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
    return { ...reply, candidate: other.candidate };
  }

  async #inflate(req: Request, honest: () => Promise<Reply>): Promise<Reply> {
    const reply = await honest();
    switch (reply.type) {
      case 'CLOCK_ACK':
      case 'COLLECT_ACK': {
        const c = reply.candidate;
        if (!c) return reply;
        return { ...reply, candidate: { ...c, ts: this.#inflated(c.ts), nonce: this.prng.bytes(HASH_LENGTH) } };
      }
      case 'FILTER_ACK': {
        if (req.type !== 'FILTER' || req.candidates.length === 0) return reply;
        // Claim the highest candidate offered, with a self-consistent forged entry.
        const top = req.candidates.reduce((a, b) => (b.ts.num > a.ts.num ? b : a));
        return { ...reply, ts: top.ts, entry: await this.#forgedEntry(req.key, top.ts, this.prng.range(0, 24), top.cert) };
      }
      default:
        return reply;
    }
  }

  #inflated(ts: Timestamp): Timestamp {
    return { num: ts.num + this.prng.range(1, 1000), writerId: ts.writerId };
  }

  #corruptCert(cert: WriteCertificate): WriteCertificate {
    const field = this.prng.pick(['signature', 'ccDigest', 'nonceHash', 'signer', 'tombstone', 'envelope'] as const);
    if (field === 'tombstone') return { ...cert, tombstone: !cert.tombstone };
    if (field === 'envelope') return { ...cert, envelope: cert.envelope === 'encrypted' ? 'public' : 'encrypted' };
    return { ...cert, [field]: flip(cert[field], this.prng) };
  }

  /**
   * A fully self-consistent lie: a fake value encoded like a writer would, so fragment
   * `i` matches `cc[i]`, beside a genuine certificate (which does not cover it). Derived
   * from (key, ts) alone so colluding servers agree.
   */
  async #forgedEntry(key: string, ts: Timestamp, valueLength: number, cert: WriteCertificate): Promise<NonNullable<FilterAck['entry']>> {
    const { codec, crypto } = this.ctx;
    const seed = hashString(`${key}/${ts.num}/${ts.writerId.join(',')}`);
    const fake = new Uint8Array(valueLength);
    for (let i = 0; i < fake.length; i++) fake[i] = (seed >>> (i % 24)) ^ (i * 131);
    if (fake.length > 0) fake[0] = 0xee; // never a simulator value, whose first byte is ASCII
    const fragments = codec.encode(fake);
    const cc = await computeCrossChecksum(crypto, fragments, fake.length, false);
    return { fragment: fragments[this.index]!, cc, cert };
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
