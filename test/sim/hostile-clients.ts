/**
 * The hostile client ("Mallory"): a client with an identity of its own (it may write only
 * its own namespace, within a small quota), an expired grant from the owner and the keys of
 * a revoked identity. It watches the victim's key like any reader would (COLLECT, FILTER),
 * then sends the servers crafted STORE, COMPLETE and FILTER requests. Every crafted request
 * carries an expectation the checker holds correct servers to: refused, or (FILTER) its
 * forged candidate never chosen.
 */
import type { ErasureCodec } from '@powerstore/erasure';
import {
  certificatesEqual,
  CertificateVerifier,
  computeCrossChecksum,
  crossChecksumDigest,
  layoutDigest,
  makeWriterId,
  MIN_STRIPE_SIZE,
  nonceHash,
  ownerIdOf,
  signCertificate,
  writerTagOf,
  type Candidate,
  type ClusterConfig,
  type CryptoProvider,
  type FilterAck,
  type Grant,
  type Reply,
  type Request,
  type Signer,
  type Timestamp,
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
] as const;
/** One of {@link ATTACKS}. */
export type Attack = (typeof ATTACKS)[number];

/** What correct servers must do with a crafted request. */
export type Expectation =
  | { readonly kind: 'refuse'; readonly attack: Attack | RotationAttack }
  | { readonly kind: 'not-selected'; readonly attack: Attack | RotationAttack; readonly ts: Timestamp };

/** The attack a `rotate` run mounts (`simulate.ts`): a replaced server's retired key, in a thief's hands. */
export type RotationAttack = 'retired-key';

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
  readonly #equivocations = new Map<number, { key: string; candidates: Candidate[]; receipts: Map<number, Uint8Array>[] }>();
  #opId = 2_000_000;
  /** Attacks mounted, for coverage reports. */
  readonly mounted: Attack[] = [];

  constructor(ctx: HostileContext) {
    this.#ctx = ctx;
    this.#verifier = new CertificateVerifier(ctx.crypto, ctx.cast.cluster);
  }

  /** Starts an attack: first watch the victim key like a reader. */
  launch(attack: Attack): void {
    const { prng, keys, config } = this.#ctx;
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
          this.#toAll((i) => ({ type: 'STORE', key, opId: this.#opId, ts, stripe: 0, fragment: fragments[i]!, cc, cert }), refuse);
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
        const f = prng.pick(forged);
        for (const i of prng.subset(Array.from({ length: this.#ctx.config.n }, (_, j) => j))) {
          const opId = this.#opId++;
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
      receipts: [new Map<number, Uint8Array>(), new Map<number, Uint8Array>()],
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
      if (!(await this.#verifier.receiptValid(eq.key, c.ts, c.cert, from, reply.receipt))) continue;
      const receipts = eq.receipts[v]!;
      receipts.set(from, reply.receipt);
      if (receipts.size === this.#ctx.config.n - this.#ctx.config.t) {
        // A store proof: complete this value everywhere (at most one of the two can get here).
        const proof = [...receipts].sort(([a], [b]) => a - b).map(([server, signature]) => ({ server, signature }));
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

  #writerId(signer: Signer): Uint8Array {
    return makeWriterId(writerTagOf(this.#ctx.crypto, signer.publicKey), this.#ctx.prng.bytes(16));
  }

  async #encode(value: Uint8Array, tombstone = false) {
    const fragments = this.#ctx.codec.encode(value);
    return { fragments, cc: await computeCrossChecksum(this.#ctx.crypto, fragments, value.length, tombstone) };
  }

  /** Sends `make(i)` to every server under one fresh opId. */
  #toAll(make: (i: number) => Request, expect: Expectation | undefined): void {
    for (let i = 0; i < this.#ctx.config.n; i++) this.#ctx.send(i, make(i), expect);
    this.#opId++;
  }
}

export { EPOCH };
