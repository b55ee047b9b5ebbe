/**
 * The hostile client ("Mallory"): a client with an identity of its own (it may write only
 * its own namespace, within a small quota), an expired grant from the owner and the keys of
 * a revoked identity, and those of two grantees that lose their authority mid-run (the one
 * whose grant expires, and a turncoat the operator revokes). It watches the victim's key
 * like any reader would (COLLECT, FILTER), then sends the servers crafted STORE, COMPLETE
 * and FILTER requests. Every crafted request carries an expectation the checker holds
 * correct servers to: refused (for a given reason, where only one is possible), or (FILTER)
 * its forged candidate never chosen. The fence attacks' writes carry none: they are
 * genuine while the grant is good, and the checker records them as writes that never
 * return, whose values no read may return once the owner has written over them.
 */
import type { ErasureCodec } from '@powerstore/erasure';
import {
  certificatesEqual,
  CertificateVerifier,
  compareTimestamps,
  computeCrossChecksum,
  crossChecksumDigest,
  layoutDigest,
  makeWriterId,
  MIN_STRIPE_SIZE,
  nonceHash,
  ownerIdOf,
  signCertificate,
  TIMESTAMP_WINDOW,
  writerTagOf,
  ackReceipt,
  siblingCount,
  type Candidate,
  type ReceiptSignature,
  type ClusterConfig,
  type CrossChecksum,
  type CryptoProvider,
  type FilterAck,
  type Grant,
  type ProtocolErrorCode,
  type Reply,
  type Request,
  type Signer,
  type Timestamp,
  storeProof,
} from '@powerstore/protocol';
import { EPOCH, type Cast } from './cast.js';
import type { Prng } from './prng.js';

/** Every attack the hostile client knows. */
export const ATTACKS = [
  /** The forgery: a completed write's genuine certificate with another value (cross-checksum recomputed). */
  'restore-forged-value',
  /** The genuine certificate and cross-checksum with a fragment that does not match. */
  'restore-mismatched-fragment',
  /** Mallory's own certificate for the owner's key (her writer id, then the owner's). */
  'foreign-namespace',
  /** The owner named as signer with a made-up signature, at the owner's next timestamps (squatting). */
  'forged-signature',
  /** A genuine certificate, entry and candidate of one key sent for another. */
  'replay-other-key',
  /** The owner's genuine certificate of another cluster. */
  'replay-other-cluster',
  /** A write of the owner's key under a grant that expired long ago. */
  'expired-grant',
  /** A write by a revoked identity under its still-live grant. */
  'revoked-grant',
  /** Mallory filling her own namespace past her quota. */
  'over-quota',
  /** Poisoned candidates written back through FILTER and COMPLETE. */
  'forged-writeback',
  /** Mallory signing two values for one timestamp of her own key, racing them to different servers. */
  'equivocating-writer',
  /**
   * A certificate whose delete flag contradicts its cross-checksum: Mallory's own validly
   * signed STOREs (delete flag on a value, and off on a delete), and a completed write of the
   * victim key written back with the flag flipped (the signature no longer covers it).
   */
  'tombstone-flag-contradicts-cc',
  /**
   * A striped write of a key of her own (a second identity with the default quota, so
   * refusals are not for quota) whose stripe 0 carries a layout listing stripes she never
   * uploaded, or other stripes than those she did: no correct server may sign a receipt.
   */
  'stripe-layout-unheld',
  /**
   * Stripes uploaded for the owner's key: under her own stripe certificate, under one
   * signed for her key, and a stripe 0 with a layout she signed.
   */
  'stripe-foreign-key',
  /**
   * The fence against a grantee whose grant expires: while its grant is good, it takes
   * CLOCK like a writer and plants writes (STOREd with their receipts, never completed) at
   * numbers of its choosing inside its window (the top, `lc + W`, just below it, just above
   * `lc`, and sometimes beyond it), keeps the store proofs, and once its grant has expired
   * and the owner or the admin has written the key, COMPLETEs them and writes them back
   * through FILTER. The checker's fence holds reads to the owner's write.
   */
  'fence-expired',
  /** The same by the turncoat grantee, whose key or grant the operator revokes mid-run. */
  'fence-revoked',
  /**
   * STOREs far beyond the writer's timestamp window, which would leave a key unwritable:
   * the turncoat grantee's on the owner's key (`lc + 1000·W`, 2^52, 2^53 − 1), her puppet's
   * on a fresh key of its own (`2W + 1`, 2^40, 2^53 − 1: refused for the window), and a
   * STORE whose basis (the candidate the window is measured from) is made up to widen it.
   */
  'timestamp-burn',
  /**
   * Stripes no writer makes, on a key of her puppet's: an empty stripe, a short stripe
   * below a stored one, stripes after a short one (each refused); many stripes of one write
   * never finished, then a completed write above them (they must be collected), then one
   * more of its stripes below `lc`.
   */
  'stripe-flood',
  /**
   * Spliced stripes: stripes uploaded under timestamp Y, then a stripe 0 under timestamp X
   * of the same key whose layout lists Y's stripes, none uploaded at X: no correct server
   * may sign its receipt (`STRIPES_MISSING`).
   */
  'stripe-splice',
] as const;
/** One of {@link ATTACKS}. */
export type Attack = (typeof ATTACKS)[number];

/**
 * What correct servers must do with a crafted request: refuse it (with `code`, and a
 * message containing `because`, when given: only where no other refusal is possible, a
 * duplicate delivered late included), or never choose its forged candidate in FILTER.
 */
export type Expectation =
  | { readonly kind: 'refuse'; readonly attack: Attack | RotationAttack; readonly code?: ProtocolErrorCode; readonly because?: string }
  | { readonly kind: 'not-selected'; readonly attack: Attack | RotationAttack; readonly ts: Timestamp };

/** The attack a `rotate` run mounts (`rotation.ts`): a replaced server's retired key, in a thief's hands. */
export type RotationAttack = 'retired-key';

/** Identities that lose their authority mid-run: the grantee whose grant expires, the turncoat revoked. */
export type FencedIdentity = 'expiring' | 'turncoat';

/** Where a fence attack strikes, chosen by the simulator (which also runs the owner's write the fence is about). */
export interface FenceTarget {
  readonly key: string;
  /** The fence attack's number in the run, for {@link HostileClient.lateComplete}. */
  readonly fence: number;
}

export interface HostileContext {
  readonly config: ClusterConfig;
  readonly crypto: CryptoProvider;
  readonly codec: ErasureCodec;
  readonly cast: Cast;
  /** The honest clients' keys (all in the owner's namespace). */
  readonly keys: readonly string[];
  readonly prng: Prng;
  /** Sends `request` to server `to` (0-based), holding correct servers to `expect`. */
  send(to: number, request: Request, expect: Expectation | undefined): void;
  /**
   * A fence attack's write of an honest key, through its life: about to be STOREd (servers
   * may report its number as pending from now on), with its store proof (from then on it
   * may take effect: the checker records it as a write of `identity`'s invoked then), and
   * completed (`n − t` servers acknowledged its COMPLETE, so later reads see it or newer).
   */
  readonly writes?: {
    stored(key: string, ts: Timestamp, id: string, bytes: Uint8Array): void;
    proven(key: string, id: string, identity: FencedIdentity): void;
    completed(id: string): void;
  };
}

/** A write a fence attack planted: STOREd everywhere, its receipts kept, completed late. */
interface Plant {
  readonly id: string;
  readonly fence: Fence;
  candidate: Candidate;
  readonly receipts: Map<number, ReceiptSignature>;
  /** Completed as soon as it has its proof (allowed: before the fence), not late. */
  readonly early: boolean;
  proven: boolean;
  /** `n − t` servers acknowledged a COMPLETE of it. */
  completed: boolean;
}

/** One fence attack: its CLOCK round, then its plants. */
interface Fence {
  readonly attack: Attack;
  readonly target: FenceTarget;
  readonly signer: Signer;
  readonly grant: Grant;
  readonly identity: FencedIdentity;
  readonly writerId: Uint8Array;
  readonly clock: Map<number, Candidate | undefined>;
  planted: boolean;
  /** The owner has written: proven plants are completed as soon as they are. */
  late: boolean;
  readonly plants: Plant[];
}

/** `W`. */
const W = TIMESTAMP_WINDOW;

/** A value (or stripe) erasure-coded with its cross-checksum. */
interface Encoded {
  readonly fragments: readonly Uint8Array[];
  readonly cc: CrossChecksum;
  readonly length: number;
}

interface Probe {
  readonly attack: Attack;
  readonly key: string;
  readonly opId: number;
  readonly collected: Map<number, Candidate | undefined>;
  candidate?: Candidate;
  entry?: NonNullable<FilterAck['entry']>;
  phase: 'collect' | 'filter' | 'done';
}

/** Mallory. */
export class HostileClient {
  readonly #ctx: HostileContext;
  readonly #verifier: CertificateVerifier;
  readonly #probes = new Map<number, Probe>();
  /** Equivocating writes in flight: receipts per content. */
  readonly #equivocations = new Map<number, { key: string; candidates: Candidate[]; receipts: Map<number, ReceiptSignature>[] }>();
  /** Fence attacks, by their CLOCK's opId and by their number. */
  readonly #fences = new Map<number, Fence>();
  readonly #fenceByNumber = new Map<number, Fence>();
  /** Planted writes, by their STORE's opId. */
  readonly #plants = new Map<number, Plant>();
  /** What to do with acknowledgements of a multi-step attack's requests, by opId. */
  readonly #onAck = new Map<number, (from: number, reply: Reply) => Promise<void>>();
  #opId = 2_000_000;
  /** Attacks mounted, for coverage reports. */
  readonly mounted: Attack[] = [];
  /** What the fence attacks achieved: writes planted, planted with their store proof, completed after the owner wrote. */
  readonly fenceStats = { planted: 0, proven: 0, 'completed late': 0 };

  constructor(ctx: HostileContext) {
    this.#ctx = ctx;
    this.#verifier = new CertificateVerifier(ctx.crypto, ctx.cast.cluster);
  }

  /** Starts an attack: first watch the victim key like a reader (a fence attack: `target`'s key, like a writer). */
  launch(attack: Attack, target?: FenceTarget): void {
    const { prng, keys, config } = this.#ctx;
    if (attack === 'fence-expired' || attack === 'fence-revoked') return this.#fence(attack, target ?? { key: prng.pick(keys), fence: -1 });
    if (attack === 'stripe-flood') return void this.#stripeFlood();
    if (attack === 'stripe-splice') return void this.#stripeSplice();
    if (attack === 'over-quota') return void this.#overQuota();
    if (attack === 'equivocating-writer') return void this.#equivocate();
    if (attack === 'stripe-layout-unheld') return void this.#stripeLayoutUnheld();
    if (attack === 'stripe-foreign-key') return void this.#stripeForeignKey();
    const probe: Probe = { attack, key: prng.pick(keys), opId: this.#opId++, collected: new Map(), phase: 'collect' };
    this.#probes.set(probe.opId, probe);
    for (let i = 0; i < config.n; i++) this.#ctx.send(i, { type: 'COLLECT', key: probe.key, opId: probe.opId }, undefined);
  }

  /** A reply from server `from`. */
  async receive(from: number, reply: Reply): Promise<void> {
    const eq = this.#equivocations.get(reply.opId);
    if (eq && reply.type === 'STORE_ACK') return this.#equivocationAck(reply.opId, from, reply);
    const fence = this.#fences.get(reply.opId);
    if (fence && reply.type === 'CLOCK_ACK') return this.#fenceClock(fence, from, reply.candidate);
    const plant = this.#plants.get(reply.opId);
    if (plant && reply.type === 'STORE_ACK') return this.#plantAck(plant, from, ackReceipt(reply));
    const onAck = this.#onAck.get(reply.opId);
    if (onAck) return onAck(from, reply);
    const probe = this.#probes.get(reply.opId);
    if (!probe) return;
    if (probe.phase === 'collect' && reply.type === 'COLLECT_ACK') {
      probe.collected.set(from, reply.candidate);
      if (probe.collected.size < this.#ctx.config.n - this.#ctx.config.t) return;
      probe.phase = 'filter';
      // Like a reader, believe only valid candidates (Byzantine servers may offer forgeries).
      for (const c of probe.collected.values()) {
        if (c && (!probe.candidate || c.ts.num > probe.candidate.ts.num) && (await this.#verifier.valid(probe.key, c))) probe.candidate = c;
      }
      if (!probe.candidate) return this.#mount(probe);
      for (let i = 0; i < this.#ctx.config.n; i++)
        this.#ctx.send(
          i,
          { type: 'FILTER', key: probe.key, opId: probe.opId, stripe: 0, fragment: true, candidates: [probe.candidate] },
          undefined,
        );
    } else if (
      probe.phase === 'filter' &&
      reply.type === 'FILTER_ACK' &&
      reply.entry &&
      probe.candidate &&
      certificatesEqual(reply.entry.cert, probe.candidate.cert)
    ) {
      probe.entry = reply.entry;
      await this.#mount(probe);
    }
  }

  async #mount(probe: Probe): Promise<void> {
    if (probe.phase === 'done') return;
    probe.phase = 'done';
    const { attack, key } = probe;
    const c = probe.candidate;
    const { cast, prng } = this.#ctx;
    const refuse = { kind: 'refuse', attack } as const;
    const next = c ? c.ts.num + 1 : 1;
    switch (attack) {
      case 'restore-forged-value': {
        if (!c) return;
        const { fragments, cc } = await this.#encode(prng.bytes(prng.range(1, 40)));
        this.#toAll(
          (i) => ({ type: 'STORE', key, opId: this.#opId, ts: c.ts, stripe: 0, fragment: fragments[i]!, cc, cert: c.cert }),
          refuse,
        );
        break;
      }
      case 'restore-mismatched-fragment': {
        const e = probe.entry;
        if (!c || !e?.fragment) return;
        const fragment = e.fragment.length > 0 ? e.fragment.map((b, i) => (i === 0 ? b ^ 1 : b)) : Uint8Array.of(1);
        this.#toAll(() => ({ type: 'STORE', key, opId: this.#opId, ts: c.ts, stripe: 0, fragment, cc: e.cc, cert: e.cert }), refuse);
        break;
      }
      case 'foreign-namespace': {
        const own = this.#writerId(cast.mallory);
        await this.#writeAs(cast.mallory, key, { num: next, writerId: own }, undefined, refuse);
        if (c) await this.#writeAs(cast.mallory, key, { num: next + 1, writerId: c.ts.writerId }, undefined, refuse);
        break;
      }
      case 'forged-signature': {
        if (!c) return;
        // The owner's next timestamps: if a server stored these, the owner's own write there would be a CONFLICT.
        for (let k = 1; k <= 3; k++) {
          const { fragments, cc } = await this.#encode(prng.bytes(prng.range(1, 20)));
          const ts = { num: c.ts.num + k, writerId: c.ts.writerId };
          const cert = {
            nonceHash: prng.bytes(32),
            ccDigest: crossChecksumDigest(this.#ctx.crypto, cc),
            signer: c.cert.signer,
            grant: c.cert.grant,
            tombstone: cc.tombstone,
            signature: prng.bytes(64),
          };
          // The last one carries the owner's genuine signature (of her completed write's
          // certificate) with a made-up batch path: no path leads from this certificate to it.
          const count = prng.range(2, 8);
          const index = prng.int(count);
          const borrowed = {
            signature: c.cert.signature,
            batch: { index, count, siblings: Array.from({ length: siblingCount(index, count) }, () => prng.bytes(32)) },
          };
          const sent = k === 3 ? { ...cert, ...borrowed } : cert;
          this.#toAll((i) => ({ type: 'STORE', key, opId: this.#opId, ts, stripe: 0, fragment: fragments[i]!, cc, cert: sent }), refuse);
        }
        break;
      }
      case 'replay-other-key': {
        if (!c) return;
        const other = `${cast.prefix}elsewhere-${prng.int(3)}`;
        const e = probe.entry;
        const fragment = e?.fragment;
        if (e && fragment)
          this.#toAll(
            () => ({ type: 'STORE', key: other, opId: this.#opId, ts: c.ts, stripe: 0, fragment, cc: e.cc, cert: e.cert }),
            refuse,
          );
        this.#toAll(() => ({ type: 'COMPLETE', key: other, opId: this.#opId, candidate: c }), refuse);
        this.#toAll(() => ({ type: 'FILTER', key: other, opId: this.#opId, stripe: 0, fragment: true, candidates: [c] }), {
          kind: 'not-selected',
          attack,
          ts: c.ts,
        });
        break;
      }
      case 'replay-other-cluster': {
        // The owner's genuine certificate, signed for another cluster the owner also uses.
        const ts = { num: next, writerId: this.#writerId(cast.owner) };
        await this.#writeAs(cast.owner, key, ts, undefined, refuse, cast.otherClusterId);
        break;
      }
      case 'expired-grant':
        await this.#writeAs(cast.mallory, key, { num: next, writerId: this.#writerId(cast.mallory) }, cast.malloryExpiredGrant, refuse);
        break;
      case 'revoked-grant':
        await this.#writeAs(cast.revoked, key, { num: next, writerId: this.#writerId(cast.revoked) }, cast.revokedGrant, refuse);
        break;
      case 'forged-writeback': {
        if (!c) return;
        const forged: Candidate[] = [
          { ...c, nonce: prng.bytes(32) },
          { ...c, ts: { num: c.ts.num + prng.range(1, 50), writerId: c.ts.writerId } },
          { ...c, proof: c.proof.slice(1) },
          { ...c, cert: { ...c.cert, signature: prng.bytes(64) } },
        ];
        // The genuine receipts with made-up batch paths: their signatures sign other
        // messages (a lone receipt's, or another root), so no path can lead to them.
        const count = prng.range(2, 8);
        const rebatched: Candidate = {
          ...c,
          proof: c.proof.map((r) => {
            const index = prng.int(count);
            return { ...r, batch: { index, count, siblings: Array.from({ length: siblingCount(index, count) }, () => prng.bytes(32)) } };
          }),
        };
        forged.push(rebatched, rebatched);
        const f = prng.pick(forged);
        for (const i of prng.subset(Array.from({ length: this.#ctx.config.n }, (_, j) => j))) {
          const opId = this.#opId++;
          // Shown again and again: a verifier must not remember a forgery it refused.
          if (f === rebatched)
            for (let k = 0; k < this.#ctx.config.n - this.#ctx.config.t; k++)
              this.#ctx.send(i, { type: 'COMPLETE', key, opId, candidate: f }, refuse);
          if (prng.chance(0.5)) this.#ctx.send(i, { type: 'COMPLETE', key, opId, candidate: f }, refuse);
          else
            this.#ctx.send(
              i,
              { type: 'FILTER', key, opId, stripe: 0, fragment: true, candidates: [f] },
              { kind: 'not-selected', attack, ts: f.ts },
            );
        }
        break;
      }
      case 'timestamp-burn':
        await this.#burn(key, c);
        break;
      case 'tombstone-flag-contradicts-cc': {
        await this.#contradictTombstone();
        if (!c) break;
        const flipped: Candidate = { ...c, cert: { ...c.cert, tombstone: !c.cert.tombstone } };
        this.#toAll(() => ({ type: 'COMPLETE', key, opId: this.#opId, candidate: flipped }), refuse);
        this.#toAll(() => ({ type: 'FILTER', key, opId: this.#opId, stripe: 0, fragment: true, candidates: [flipped] }), {
          kind: 'not-selected',
          attack,
          ts: c.ts,
        });
        break;
      }
      default:
        return;
    }
    this.mounted.push(attack);
  }

  /** A complete write signed by `signer` (STORE everywhere, then COMPLETE with whatever receipts came back: none from correct servers). */
  async #writeAs(
    signer: Signer,
    key: string,
    ts: Timestamp,
    grant: Grant | undefined,
    expect: Expectation,
    clusterId = this.#ctx.cast.cluster.id,
  ): Promise<void> {
    const { crypto, prng } = this.#ctx;
    const { fragments, cc } = await this.#encode(prng.bytes(prng.range(1, 40)));
    const nonce = prng.bytes(32);
    const cert = await signCertificate(crypto, clusterId, signer, {
      key,
      ts,
      nonceHash: nonceHash(crypto, nonce),
      ccDigest: crossChecksumDigest(crypto, cc),
      tombstone: cc.tombstone,
      grant,
    });
    this.#toAll((i) => ({ type: 'STORE', key, opId: this.#opId, ts, stripe: 0, fragment: fragments[i]!, cc, cert }), expect);
    this.#toAll(() => ({ type: 'COMPLETE', key, opId: this.#opId, candidate: { ts, nonce, cert, proof: [] } }), expect);
  }

  /**
   * Writes of Mallory's own key (she may write it) whose certificate, validly signed, says
   * delete over a value's cross-checksum and value over a delete's: correct servers refuse
   * both, or servers that learn the write only as a candidate would trust a lying flag.
   */
  async #contradictTombstone(): Promise<void> {
    const { cast, prng, crypto } = this.#ctx;
    const key = `~${ownerIdOf(crypto, cast.mallory.publicKey)}/t${prng.int(1000)}`;
    const writerId = this.#writerId(cast.mallory);
    const refuse = { kind: 'refuse', attack: 'tombstone-flag-contradicts-cc' } as const;
    for (const [num, tombstone] of [
      [1, false],
      [2, true],
    ] as const) {
      const { fragments, cc } = await this.#encode(tombstone ? new Uint8Array(0) : prng.bytes(prng.range(1, 40)), tombstone);
      const ts = { num, writerId };
      const nonce = prng.bytes(32);
      const cert = await signCertificate(crypto, cast.cluster.id, cast.mallory, {
        key,
        ts,
        nonceHash: nonceHash(crypto, nonce),
        ccDigest: crossChecksumDigest(crypto, cc),
        tombstone: !tombstone,
        grant: undefined,
      });
      this.#toAll((i) => ({ type: 'STORE', key, opId: this.#opId, ts, stripe: 0, fragment: fragments[i]!, cc, cert }), refuse);
      this.#toAll(() => ({ type: 'COMPLETE', key, opId: this.#opId, candidate: { ts, nonce, cert, proof: [] } }), refuse);
    }
  }

  /** Mallory's own keys, more than her quota allows: servers must stop charging at the quota. */
  async #overQuota(): Promise<void> {
    const { cast, prng, crypto } = this.#ctx;
    const prefix = `~${ownerIdOf(crypto, cast.mallory.publicKey)}/q`;
    for (let k = 0; k < 5; k++) {
      const key = `${prefix}${k}-${prng.int(1000)}`;
      const { fragments, cc } = await this.#encode(prng.bytes(250));
      const ts = { num: 1, writerId: this.#writerId(cast.mallory) };
      const cert = await signCertificate(crypto, cast.cluster.id, cast.mallory, {
        key,
        ts,
        nonceHash: prng.bytes(32),
        ccDigest: crossChecksumDigest(crypto, cc),
        tombstone: cc.tombstone,
        grant: undefined,
      });
      this.#toAll((i) => ({ type: 'STORE', key, opId: this.#opId, ts, stripe: 0, fragment: fragments[i]!, cc, cert }), undefined);
    }
    this.mounted.push('over-quota');
  }

  /** Two values for one timestamp of Mallory's own key, each to a different half of the servers, then each to the rest. */
  async #equivocate(): Promise<void> {
    const { cast, prng, crypto, config } = this.#ctx;
    const key = `~${ownerIdOf(crypto, cast.mallory.publicKey)}/e${prng.int(1000)}`;
    const ts = { num: 1, writerId: this.#writerId(cast.mallory) };
    const opId = this.#opId++;
    const writes = await Promise.all(
      [0, 1].map(async () => {
        const { fragments, cc } = await this.#encode(prng.bytes(prng.range(1, 30)));
        const nonce = prng.bytes(32);
        const cert = await signCertificate(crypto, cast.cluster.id, cast.mallory, {
          key,
          ts,
          nonceHash: nonceHash(crypto, nonce),
          ccDigest: crossChecksumDigest(crypto, cc),
          tombstone: cc.tombstone,
          grant: undefined,
        });
        return { fragments, cc, candidate: { ts, nonce, cert, proof: [] } };
      }),
    );
    this.#equivocations.set(opId, {
      key,
      candidates: writes.map((w) => w.candidate),
      receipts: [new Map<number, ReceiptSignature>(), new Map<number, ReceiptSignature>()],
    });
    const order = prng.shuffle(Array.from({ length: config.n }, (_, i) => i));
    const half = Math.ceil(config.n / 2);
    for (const [pos, i] of order.entries()) {
      for (const w of pos < half ? [writes[0]!, writes[1]!] : [writes[1]!, writes[0]!]) {
        this.#ctx.send(
          i,
          { type: 'STORE', key, opId, ts, stripe: 0, fragment: w.fragments[i]!, cc: w.cc, cert: w.candidate.cert },
          undefined,
        );
      }
    }
    this.mounted.push('equivocating-writer');
  }

  async #equivocationAck(opId: number, from: number, reply: Extract<Reply, { type: 'STORE_ACK' }>): Promise<void> {
    const eq = this.#equivocations.get(opId)!;
    for (const [v, c] of eq.candidates.entries()) {
      if (!(await this.#verifier.receiptValid(eq.key, c.ts, c.cert, from, ackReceipt(reply)))) continue;
      const receipts = eq.receipts[v]!;
      receipts.set(from, ackReceipt(reply));
      if (receipts.size === this.#ctx.config.n - this.#ctx.config.t) {
        // A store proof: complete this value everywhere (at most one of the two can get here).
        const proof = storeProof(receipts);
        this.#toAll(() => ({ type: 'COMPLETE', key: eq.key, opId: this.#opId, candidate: { ...c, proof } }), undefined);
      }
    }
  }

  #puppet: Promise<Signer> | undefined;

  /** An identity of Mallory's with no quota of its own (the default applies). */
  #sockPuppet(): Promise<Signer> {
    this.#puppet ??= this.#ctx.crypto.signerFromSeed(this.#ctx.prng.bytes(32));
    return this.#puppet;
  }

  /** Stripe `index` ≥ 1 of `bytes`, under a stripe certificate `signer` signs for (`certKey`, `ts`). */
  async #stripe(signer: Signer, certKey: string, ts: Timestamp, index: number, bytes: Uint8Array, nonce: Uint8Array) {
    const { crypto, cast } = this.#ctx;
    const { fragments, cc } = await this.#encode(bytes);
    const ccDigest = crossChecksumDigest(crypto, cc);
    const cert = await signCertificate(crypto, cast.cluster.id, signer, {
      key: certKey,
      ts,
      nonceHash: nonceHash(crypto, nonce),
      ccDigest,
      tombstone: false,
      grant: undefined,
      stripe: index,
    });
    return { fragments, cc, cert, ccDigest };
  }

  /** Stripe 0 of a value of `count` stripes, with the write certificate over a layout listing `digests` for stripes 1 … */
  async #stripeZero(signer: Signer, key: string, ts: Timestamp, digests: Uint8Array[], nonce: Uint8Array) {
    const { crypto, cast, prng } = this.#ctx;
    const { fragments, cc } = await this.#encode(prng.bytes(MIN_STRIPE_SIZE));
    const layout = {
      valueLength: MIN_STRIPE_SIZE * digests.length + prng.range(1, 100),
      stripeSize: MIN_STRIPE_SIZE,
      digests: [crossChecksumDigest(crypto, cc), ...digests],
    };
    const cert = await signCertificate(crypto, cast.cluster.id, signer, {
      key,
      ts,
      nonceHash: nonceHash(crypto, nonce),
      ccDigest: layoutDigest(crypto, layout),
      tombstone: false,
      grant: undefined,
    });
    return (i: number): Request => ({ type: 'STORE', key, opId: this.#opId, ts, stripe: 0, fragment: fragments[i]!, cc, cert, layout });
  }

  async #stripeLayoutUnheld(): Promise<void> {
    const { crypto, prng } = this.#ctx;
    const puppet = await this.#sockPuppet();
    const key = `~${ownerIdOf(crypto, puppet.publicKey)}/s${prng.int(1000)}`;
    const ts = { num: 1, writerId: this.#writerId(puppet) };
    const nonce = prng.bytes(32);
    const refuse = { kind: 'refuse', attack: 'stripe-layout-unheld' } as const;
    // Stripe 1 uploaded; stripe 2 never, or listed with another stripe 1 than the one uploaded.
    const one = await this.#stripe(puppet, key, ts, 1, prng.bytes(MIN_STRIPE_SIZE), nonce);
    this.#toAll(
      (i) => ({ type: 'STORE', key, opId: this.#opId, ts, stripe: 1, fragment: one.fragments[i]!, cc: one.cc, cert: one.cert }),
      undefined,
    );
    const digests = prng.chance(0.5) ? [one.ccDigest, prng.bytes(32)] : [prng.bytes(32)];
    // Refused for the missing stripe 2, or for the stripe 1 the layout names (if the stripe 1 sent is there yet).
    this.#toAll(await this.#stripeZero(puppet, key, ts, digests, nonce), refuse);
    this.mounted.push('stripe-layout-unheld');
  }

  async #stripeForeignKey(): Promise<void> {
    const { crypto, prng, keys, cast } = this.#ctx;
    const key = prng.pick(keys);
    const refuse = { kind: 'refuse', attack: 'stripe-foreign-key' } as const;
    const nonce = prng.bytes(32);
    const bytes = prng.bytes(MIN_STRIPE_SIZE);
    // Her own stripe certificate for the owner's key: not her namespace.
    const mine = { num: 1_000 + prng.int(1000), writerId: this.#writerId(cast.mallory) };
    const a = await this.#stripe(cast.mallory, key, mine, 1, bytes, nonce);
    this.#toAll(
      (i) => ({ type: 'STORE', key, opId: this.#opId, ts: mine, stripe: 1, fragment: a.fragments[i]!, cc: a.cc, cert: a.cert }),
      refuse,
    );
    // A stripe certificate for her puppet's key, replayed under the owner's key: the signature does not cover it.
    const puppet = await this.#sockPuppet();
    const theirs = { num: 1_000 + prng.int(1000), writerId: this.#writerId(puppet) };
    const b = await this.#stripe(puppet, `~${ownerIdOf(crypto, puppet.publicKey)}/s${prng.int(1000)}`, theirs, 1, bytes, nonce);
    this.#toAll(
      (i) => ({ type: 'STORE', key, opId: this.#opId, ts: theirs, stripe: 1, fragment: b.fragments[i]!, cc: b.cc, cert: b.cert }),
      refuse,
    );
    // Stripe 0 with a layout over that stripe, signed by Mallory for the owner's key.
    this.#toAll(await this.#stripeZero(cast.mallory, key, mine, [a.ccDigest], nonce), refuse);
    this.mounted.push('stripe-foreign-key');
  }

  /**
   * A fence attack: the grantee that is about to lose its authority takes CLOCK on the
   * target key like a writer (its plants are measured from what CLOCK shows it).
   */
  #fence(attack: 'fence-expired' | 'fence-revoked', target: FenceTarget): void {
    const { cast, config } = this.#ctx;
    const expiring = attack === 'fence-expired';
    const signer = expiring ? cast.expiring : cast.turncoat;
    const fence: Fence = {
      attack,
      target,
      signer,
      grant: expiring ? cast.expiringGrant : cast.turncoatGrant,
      identity: expiring ? 'expiring' : 'turncoat',
      writerId: this.#writerId(signer),
      clock: new Map(),
      planted: false,
      late: false,
      plants: [],
    };
    const opId = this.#opId++;
    this.#fences.set(opId, fence);
    this.#fenceByNumber.set(target.fence, fence);
    for (let i = 0; i < config.n; i++) this.#ctx.send(i, { type: 'CLOCK', key: target.key, opId }, undefined);
  }

  /**
   * CLOCK answers: after `n − t`, the highest valid `lc` L is the basis, and the plants go
   * out at `L + W` (the top of a grantee's window), just below it, just above L, and
   * sometimes beyond the window (refused where `lc` is L, maybe stored where it is higher).
   */
  async #fenceClock(fence: Fence, from: number, candidate: Candidate | undefined): Promise<void> {
    const { config, prng } = this.#ctx;
    if (fence.planted) return;
    fence.clock.set(from, candidate);
    if (fence.clock.size < config.n - config.t) return;
    fence.planted = true;
    let basis: Candidate | undefined;
    for (const c of fence.clock.values())
      if (c && (!basis || compareTimestamps(c.ts, basis.ts) > 0) && (await this.#verifier.valid(fence.target.key, c))) basis = c;
    const L = basis?.ts.num ?? 0;
    const nums = [L + W, L + W - prng.range(1, 100), L + prng.range(1, 3)];
    if (prng.chance(0.5)) nums.push(L + W + prng.range(1, 2 * W));
    const early = prng.chance(0.5) ? prng.int(nums.length) : -1;
    for (const [k, num] of nums.entries()) await this.#plant(fence, k, num, basis, k === early);
    this.mounted.push(fence.attack);
  }

  async #plant(fence: Fence, k: number, num: number, basis: Candidate | undefined, early: boolean): Promise<void> {
    const { crypto, prng, cast, config } = this.#ctx;
    const { key } = fence.target;
    const id = `mallory.${fence.attack}${fence.target.fence}.${k}`;
    const bytes = new TextEncoder().encode(`${id}:${'x'.repeat(prng.range(0, 12))}`);
    const { fragments, cc } = await this.#encode(bytes);
    const ts = { num, writerId: fence.writerId };
    const nonce = prng.bytes(32);
    const cert = await signCertificate(crypto, cast.cluster.id, fence.signer, {
      key,
      ts,
      nonceHash: nonceHash(crypto, nonce),
      ccDigest: crossChecksumDigest(crypto, cc),
      tombstone: false,
      grant: fence.grant,
    });
    this.#ctx.writes?.stored(key, ts, id, bytes);
    const plant: Plant = {
      id,
      fence,
      candidate: { ts, nonce, cert, proof: [] },
      receipts: new Map(),
      early,
      proven: false,
      completed: false,
    };
    fence.plants.push(plant);
    this.fenceStats.planted++;
    const opId = this.#opId++;
    this.#plants.set(opId, plant);
    for (let i = 0; i < config.n; i++)
      this.#ctx.send(
        i,
        { type: 'STORE', key, opId, ts, stripe: 0, fragment: fragments[i]!, cc, cert, ...(basis ? { basis } : {}) },
        undefined,
      );
  }

  /** A receipt for a plant: with `n − t`, its store proof is kept (and used at once if the owner has written). */
  async #plantAck(plant: Plant, from: number, receipt: ReceiptSignature): Promise<void> {
    const { config } = this.#ctx;
    const { candidate } = plant;
    if (plant.proven) return;
    if (!(await this.#verifier.receiptValid(plant.fence.target.key, candidate.ts, candidate.cert, from, receipt))) return;
    plant.receipts.set(from, receipt);
    if (plant.receipts.size < config.n - config.t) return;
    plant.proven = true;
    this.fenceStats.proven++;
    const proof = storeProof(plant.receipts);
    plant.candidate = { ...candidate, proof };
    this.#ctx.writes?.proven(plant.fence.target.key, plant.id, plant.fence.identity);
    if (plant.early || plant.fence.late) this.#completePlant(plant);
  }

  /** COMPLETE a plant everywhere, and write it back through FILTER as a reader would. */
  #completePlant(plant: Plant): void {
    const { key } = plant.fence.target;
    if (plant.fence.late) this.fenceStats['completed late']++;
    const candidate = plant.candidate;
    const acks = new Set<number>();
    this.#toAllThen(
      (opId) => ({ type: 'COMPLETE', key, opId, candidate }),
      undefined,
      (from, reply) => {
        if (reply.type !== 'COMPLETE_ACK' || plant.completed) return;
        acks.add(from);
        if (acks.size < this.#ctx.config.n - this.#ctx.config.t) return;
        plant.completed = true;
        this.#ctx.writes?.completed(plant.id);
      },
    );
    this.#toAll(() => ({ type: 'FILTER', key, opId: this.#opId, stripe: 0, fragment: true, candidates: [candidate] }), undefined);
  }

  /**
   * The owner (or the admin) has written fence attack `fence`'s key, after the attacker
   * lost its authority everywhere: COMPLETE every plant that has its proof, now and as
   * soon as the others get theirs.
   */
  lateComplete(fence: number): void {
    const f = this.#fenceByNumber.get(fence);
    if (!f) return;
    f.late = true;
    for (const p of f.plants) if (p.proven) this.#completePlant(p);
  }

  /** See `timestamp-burn` in {@link ATTACKS}. */
  async #burn(key: string, c: Candidate | undefined): Promise<void> {
    const { cast, prng, crypto } = this.#ctx;
    const refuse = { kind: 'refuse', attack: 'timestamp-burn' } as const;
    const top = c?.ts.num ?? 0;
    const turncoat = this.#writerId(cast.turncoat);
    for (const num of [top + 1000 * W, 2 ** 52, Number.MAX_SAFE_INTEGER])
      await this.#writeAs(cast.turncoat, key, { num, writerId: turncoat }, cast.turncoatGrant, refuse);
    // A fresh key of her puppet's (no small quota to get in the way): its lc is c0 at every
    // server, so the puppet's window there (an owner's, 2W) ends at 2W.
    const puppet = await this.#sockPuppet();
    const own = `~${ownerIdOf(crypto, puppet.publicKey)}/b${prng.int(10 ** 6)}`;
    const writerId = this.#writerId(puppet);
    const window = { ...refuse, code: 'INVALID_ARGUMENT', because: 'window' } as const;
    for (const num of [2 * W + 1, 2 ** 40, Number.MAX_SAFE_INTEGER])
      await this.#storeOwn(puppet, own, { num, writerId }, window, undefined);
    // A basis she made up (her own certificate, no store proof) to move the window up: not valid.
    const fake = { num: 10 * W, writerId };
    const nonce = prng.bytes(32);
    const { cc } = await this.#encode(prng.bytes(8));
    const cert = await signCertificate(crypto, cast.cluster.id, puppet, {
      key: own,
      ts: fake,
      nonceHash: nonceHash(crypto, nonce),
      ccDigest: crossChecksumDigest(crypto, cc),
      tombstone: false,
      grant: undefined,
    });
    const basis: Candidate = { ts: fake, nonce, cert, proof: [] };
    await this.#storeOwn(puppet, own, { num: 10 * W + 1, writerId }, { ...refuse, code: 'UNAUTHENTICATED' }, basis);
  }

  /** A STORE of a small value of `signer`'s own key at `ts`. */
  async #storeOwn(signer: Signer, key: string, ts: Timestamp, expect: Expectation, basis: Candidate | undefined): Promise<void> {
    const { cast, prng, crypto } = this.#ctx;
    const { fragments, cc } = await this.#encode(prng.bytes(prng.range(1, 20)));
    const cert = await signCertificate(crypto, cast.cluster.id, signer, {
      key,
      ts,
      nonceHash: prng.bytes(32),
      ccDigest: crossChecksumDigest(crypto, cc),
      tombstone: false,
      grant: undefined,
    });
    this.#toAll(
      (i) => ({ type: 'STORE', key, opId: this.#opId, ts, stripe: 0, fragment: fragments[i]!, cc, cert, ...(basis ? { basis } : {}) }),
      expect,
    );
  }

  /** Stripe `index` ≥ 1 of an encoded stripe, under a stripe certificate of `signer`'s. */
  async #stripeOf(signer: Signer, key: string, ts: Timestamp, index: number, encoded: Encoded, nonce: Uint8Array) {
    const { crypto, cast } = this.#ctx;
    const cert = await signCertificate(crypto, cast.cluster.id, signer, {
      key,
      ts,
      nonceHash: nonceHash(crypto, nonce),
      ccDigest: crossChecksumDigest(crypto, encoded.cc),
      tombstone: false,
      grant: undefined,
      stripe: index,
    });
    return (opId: number, i: number): Request => ({
      type: 'STORE',
      key,
      opId,
      ts,
      stripe: index,
      fragment: encoded.fragments[i]!,
      cc: encoded.cc,
      cert,
    });
  }

  /** Sends `make(opId, i)` to every server under a fresh opId, calling `onAck` with each answer. */
  #toAllThen(
    make: (opId: number, i: number) => Request,
    expect: Expectation | undefined,
    onAck?: (from: number, reply: Reply) => Promise<void> | void,
  ): void {
    const opId = this.#opId++;
    if (onAck) this.#onAck.set(opId, async (from, reply) => onAck(from, reply));
    for (let i = 0; i < this.#ctx.config.n; i++) this.#ctx.send(i, make(opId, i), expect);
  }

  /** See `stripe-flood` in {@link ATTACKS}. Each server is led through the steps by its own acknowledgements. */
  async #stripeFlood(): Promise<void> {
    const { crypto, prng, config } = this.#ctx;
    const puppet = await this.#sockPuppet();
    const key = `~${ownerIdOf(crypto, puppet.publicKey)}/f${prng.int(10 ** 6)}`;
    // The shape checks on a key of their own: the completed write on `key` would collect
    // their upload once idle, and a stripe sent after that starts a new upload (accepted).
    const shapeKey = `${key}-shape`;
    const writerId = this.#writerId(puppet);
    const refuse = { kind: 'refuse', attack: 'stripe-flood' } as const;
    const nonce = prng.bytes(32);
    const [shape, flood, done] = [1, 2, 3].map((num) => ({ num, writerId })) as [Timestamp, Timestamp, Timestamp];
    const full = await this.#encode(prng.bytes(MIN_STRIPE_SIZE));
    const short = await this.#encode(prng.bytes(prng.range(1, MIN_STRIPE_SIZE - 1)));
    const empty = await this.#encode(new Uint8Array(0));
    const to = (i: number, make: (opId: number, i: number) => Request, expect: Expectation | undefined) =>
      this.#ctx.send(i, make(this.#opId++, i), expect);
    // An empty stripe: refused.
    const emptyOne = await this.#stripeOf(puppet, shapeKey, shape, 1, empty, nonce);
    this.#toAllThen(emptyOne, refuse);
    // Stripe 3 stored, then (at each server that stored it) a short stripe 2 below it: refused;
    // a short stripe 4, then stripes 5 and 6 after it: refused.
    const [three, twoShort, fourShort, five, sixShort] = await Promise.all([
      this.#stripeOf(puppet, shapeKey, shape, 3, full, nonce),
      this.#stripeOf(puppet, shapeKey, shape, 2, short, nonce),
      this.#stripeOf(puppet, shapeKey, shape, 4, short, nonce),
      this.#stripeOf(puppet, shapeKey, shape, 5, full, nonce),
      this.#stripeOf(puppet, shapeKey, shape, 6, short, nonce),
    ]);
    this.#toAllThen(three, undefined, (i, reply) => {
      if (reply.type !== 'STORE_ACK') return;
      to(i, twoShort, refuse);
      const opId = this.#opId++;
      this.#onAck.set(opId, async (j, r) => {
        if (r.type !== 'STORE_ACK' || j !== i) return;
        to(i, five, refuse);
        to(i, sixShort, refuse);
      });
      this.#ctx.send(i, fourShort(opId, i), undefined);
    });
    // Many stripes of a write never finished; once n − t servers hold them, a write above
    // them completes, and one more of their stripes goes out below lc.
    const count = prng.range(4, 10);
    const stripes = await Promise.all(Array.from({ length: count }, (_, s) => this.#stripeOf(puppet, key, flood, s + 1, full, nonce)));
    const late = await this.#stripeOf(puppet, key, flood, count + 1, full, nonce);
    const held = new Map<number, number>();
    let started = false;
    for (const make of stripes)
      this.#toAllThen(make, undefined, async (i, reply) => {
        if (reply.type !== 'STORE_ACK') return;
        held.set(i, (held.get(i) ?? 0) + 1);
        if (started || [...held.values()].filter((h) => h === count).length < config.n - config.t) return;
        started = true;
        await this.#completeOwn(puppet, key, done, () => this.#toAllThen(late, undefined));
      });
    this.mounted.push('stripe-flood');
  }

  /** A small write of `signer`'s own key at `ts`, completed with its receipts; then `after`. */
  async #completeOwn(signer: Signer, key: string, ts: Timestamp, after: () => void): Promise<void> {
    const { crypto, cast, prng, config } = this.#ctx;
    const { fragments, cc } = await this.#encode(prng.bytes(prng.range(1, 20)));
    const nonce = prng.bytes(32);
    const cert = await signCertificate(crypto, cast.cluster.id, signer, {
      key,
      ts,
      nonceHash: nonceHash(crypto, nonce),
      ccDigest: crossChecksumDigest(crypto, cc),
      tombstone: false,
      grant: undefined,
    });
    const receipts = new Map<number, ReceiptSignature>();
    let completed = false;
    this.#toAllThen(
      (opId, i) => ({ type: 'STORE', key, opId, ts, stripe: 0, fragment: fragments[i]!, cc, cert }),
      undefined,
      async (i, reply) => {
        if (completed || reply.type !== 'STORE_ACK' || !(await this.#verifier.receiptValid(key, ts, cert, i, ackReceipt(reply)))) return;
        receipts.set(i, ackReceipt(reply));
        if (receipts.size < config.n - config.t) return;
        completed = true;
        const proof = storeProof(receipts);
        this.#toAllThen((opId) => ({ type: 'COMPLETE', key, opId, candidate: { ts, nonce, cert, proof } }), undefined);
        after();
      },
    );
  }

  /** See `stripe-splice` in {@link ATTACKS}. */
  async #stripeSplice(): Promise<void> {
    const { crypto, prng, cast } = this.#ctx;
    const puppet = await this.#sockPuppet();
    const key = `~${ownerIdOf(crypto, puppet.publicKey)}/p${prng.int(10 ** 6)}`;
    const writerId = this.#writerId(puppet);
    const [x, y] = prng.chance(0.5) ? [1, 2] : [2, 1];
    const X = { num: x, writerId };
    const Y = { num: y, writerId };
    // Y: stripes 1 … m, the last short; X's stripe 0 lists them after its own.
    const m = prng.range(1, 2);
    const encoded = await Promise.all(
      Array.from({ length: m }, (_, s) => this.#encode(prng.bytes(s === m - 1 ? prng.range(1, MIN_STRIPE_SIZE - 1) : MIN_STRIPE_SIZE))),
    );
    const nonceY = prng.bytes(32);
    const ys = await Promise.all(encoded.map((e, s) => this.#stripeOf(puppet, key, Y, s + 1, e, nonceY)));
    const digests = encoded.map((e) => crossChecksumDigest(crypto, e.cc));
    const valueLength = MIN_STRIPE_SIZE * m + encoded[m - 1]!.length;
    const zero = async (ts: Timestamp) => {
      const e = await this.#encode(prng.bytes(MIN_STRIPE_SIZE));
      const layout = { valueLength, stripeSize: MIN_STRIPE_SIZE, digests: [crossChecksumDigest(crypto, e.cc), ...digests] };
      const nonce = ts === Y ? nonceY : prng.bytes(32);
      const cert = await signCertificate(crypto, cast.cluster.id, puppet, {
        key,
        ts,
        nonceHash: nonceHash(crypto, nonce),
        ccDigest: layoutDigest(crypto, layout),
        tombstone: false,
        grant: undefined,
      });
      return (opId: number, i: number): Request => ({
        type: 'STORE',
        key,
        opId,
        ts,
        stripe: 0,
        fragment: e.fragments[i]!,
        cc: e.cc,
        cert,
        layout,
      });
    };
    const spliced = await zero(X);
    // Sometimes Y is made whole too (its own stripe 0): its stripes are then a completed write's.
    const whole = prng.chance(0.5) ? await zero(Y) : undefined;
    const acked = new Map<number, Set<number>>();
    for (const [s, make] of ys.entries())
      this.#toAllThen(make, undefined, (i, reply) => {
        if (reply.type !== 'STORE_ACK') return;
        const mine = acked.get(i) ?? new Set<number>();
        acked.set(i, mine.add(s));
        if (mine.size !== m) return;
        // Server i holds every stripe of Y: the spliced stripe 0 goes to it now.
        this.#ctx.send(i, spliced(this.#opId++, i), { kind: 'refuse', attack: 'stripe-splice', code: 'STRIPES_MISSING' });
        if (whole) this.#ctx.send(i, whole(this.#opId++, i), undefined);
      });
    this.mounted.push('stripe-splice');
  }

  #writerId(signer: Signer): Uint8Array {
    return makeWriterId(writerTagOf(this.#ctx.crypto, signer.publicKey), this.#ctx.prng.bytes(16));
  }

  async #encode(value: Uint8Array, tombstone = false): Promise<Encoded> {
    const fragments = this.#ctx.codec.encode(value);
    return { fragments, cc: await computeCrossChecksum(this.#ctx.crypto, fragments, value.length, tombstone), length: value.length };
  }

  /** Sends `make(i)` to every server under one fresh opId. */
  #toAll(make: (i: number) => Request, expect: Expectation | undefined): void {
    for (let i = 0; i < this.#ctx.config.n; i++) this.#ctx.send(i, make(i), expect);
    this.#opId++;
  }
}

export { EPOCH };
