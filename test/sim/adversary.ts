/**
 * The hostile clients of a run: Mallory (`hostile-clients.ts`) and the times of her
 * attacks, each fence attack aimed at a key an honest writer then writes; with `rotate`, a
 * thief with a replaced server's retired key; with `rebuild`, a writer with a valid
 * identity that stores a write encoded inconsistently. Correct servers are held to what
 * each request expects ({@link Expectation}).
 */
import {
  computeCrossChecksum,
  crossChecksumDigest,
  decodeMessage,
  encodeMessage,
  namespacePrefix,
  nonceHash,
  ownerIdOf,
  receiptMessage,
  signCertificate,
  storeProof,
  WriterSession,
  ackReceipt,
  type Candidate,
  type ReceiptSignature,
  type Reply,
  type Signer,
  type Timestamp,
} from '@powerstore/protocol';
import { HostileClient, type Attack, type Expectation, type FenceTarget } from './hostile-clients.js';
import type { InFlight } from './network.js';
import type { Prng } from './prng.js';
import type { World } from './world.js';

const isFence = (a: Attack) => a === 'fence-expired' || a === 'fence-revoked';

/** When each fenced identity's authority has ended at every correct server. */
export interface AuthorityLost {
  readonly expiring: number;
  readonly turncoat: number;
}

/** Mallory, her attack schedule, and the run's other hostile writers. */
export class Adversary {
  readonly #world: World;
  /** What correct servers must do with each hostile request, by opId (shared with the cluster, which checks it). */
  readonly #expectations: Map<number, Expectation>;
  readonly mallory: HostileClient;
  /** Attacks still to launch, in time order. */
  readonly #attacks: { at: number; attack: Attack; target?: FenceTarget }[];
  /** The inconsistent writer (`rebuild`), once it has stored its write. */
  #forger: { receive(from: number, reply: Reply): void } | undefined;

  /** Mallory's stream is forked from the main one, then her attacks' times are drawn from it. */
  constructor(world: World, expectations: Map<number, Expectation>) {
    this.#world = world;
    this.#expectations = expectations;
    const { config, crypto, codec, cast, keys, prng, network, checker, drawn } = world;
    this.mallory = new HostileClient({
      config,
      crypto,
      codec,
      cast,
      keys,
      prng: prng.fork(),
      send(to, request, expect) {
        if (expect) expectations.set(request.opId, expect);
        network.send('mallory', `s${to}`, encodeMessage(request));
      },
      writes: {
        stored: (key, ts, id, bytes) => checker.hostileStore(key, ts, id, bytes),
        proven: (key, id, identity) => checker.hostileWrite(key, id, identity),
        completed: (id) => checker.hostileWriteDone(id),
      },
    });
    const fenceKinds = new Set<Attack>();
    this.#attacks = drawn.adversary.attacks
      .map((a) => ({ at: prng.range(0, 1500), attack: a }))
      .sort((a, b) => a.at - b.at)
      // One fence attack of each kind a run: each brings a writer and a reader of its key,
      // and a second adds little but concurrency for the linearizability check to untangle.
      // None under heavy contention, whose one key has all the concurrency that check can take.
      .filter((a) => !isFence(a.attack) || (!drawn.workload.contention && !fenceKinds.has(a.attack) && fenceKinds.add(a.attack)));
  }

  /**
   * Aims each fence attack (from the fence stream): the attacker plants on its key while
   * its authority lasts; `addWrite` brings the owner's or the admin's write of that key
   * once the authority has ended everywhere (at `lost`; the attacker then completes its
   * plants), and a reader of the key after that write.
   */
  aimFences(lostAt: AuthorityLost, addWrite: (fence: number, key: string, lost: number) => void): void {
    const { streams, keys } = this.#world;
    for (const [number, a] of this.#attacks.filter((x) => isFence(x.attack)).entries()) {
      const lost = a.attack === 'fence-expired' ? lostAt.expiring : lostAt.turncoat;
      const key = streams.fences.pick(keys);
      a.at = Math.max(0, Math.min(a.at, lost - streams.fences.range(60, 400)));
      a.target = { key, fence: number };
      addWrite(number, key, lost);
    }
    this.#attacks.sort((a, b) => a.at - b.at);
  }

  /** When the next attack is due, if any is left. */
  get nextAttackAt(): number | undefined {
    return this.#attacks[0]?.at;
  }

  /** Mallory launches the next attack. */
  launchNext(): void {
    const { attack, target } = this.#attacks.shift()!;
    this.mallory.launch(attack, target);
  }

  /** A reply from a server to Mallory or to the forger. */
  receive(m: InFlight): Promise<void> | void {
    const { n } = this.#world.config;
    if (m.to === 'mallory') return this.mallory.receive(Number(m.from.slice(1)), decodeMessage(m.frame, { n }) as Reply);
    return this.#forger?.receive(Number(m.from.slice(1)), decodeMessage(m.frame, { n }) as Reply);
  }

  /**
   * Mallory, with the retired key of server `j` and every Byzantine server's key: STOREs
   * an epoch-0 certificate naming epoch 1 (correct servers must refuse it), then offers
   * candidates whose proofs hold every receipt it can sign, in COMPLETE and FILTER.
   */
  async tryRetiredKey(retired: Signer, j: number, rng: Prng): Promise<void> {
    const { config, crypto, codec, cast, byzantine } = this.#world;
    const { n } = config;
    const send = this.#world.send;
    const expectations = this.#expectations;
    const key = `${namespacePrefix(ownerIdOf(crypto, cast.mallory.publicKey))}thief`;
    const writerId = new WriterSession({ crypto, cluster: cast.cluster, signer: cast.mallory, instance: rng.bytes(16) }).writerId;
    const bytes = new TextEncoder().encode('signed with a retired key');
    const fragments = codec.encode(bytes);
    const cc = await computeCrossChecksum(crypto, fragments, bytes.length, false);
    const refuse: Expectation = { kind: 'refuse', attack: 'retired-key' };
    let opId = 3_000_000;
    for (const epoch of [0, 1]) {
      const ts = { num: 1 + epoch, writerId };
      const nonce = rng.bytes(32);
      const cert = await signCertificate(crypto, cast.cluster.id, cast.mallory, {
        key,
        ts,
        nonceHash: nonceHash(crypto, nonce),
        ccDigest: crossChecksumDigest(crypto, cc),
        tombstone: false,
        grant: undefined,
        epoch,
      });
      if (epoch === 0) {
        const id = opId++;
        expectations.set(id, refuse);
        for (let i = 0; i < n; i++)
          send('mallory', `s${i}`, { type: 'STORE', key, opId: id, epoch: 1, ts, stripe: 0, fragment: fragments[i]!, cc, cert });
      }
      const signers = [...byzantine].map((i) => ({ server: i, by: cast.servers[i]! }));
      const proof = await Promise.all(
        [{ server: j, by: retired }, ...signers]
          .sort((a, b) => a.server - b.server)
          .map(async ({ server, by }) => ({
            server,
            signature: await by.sign(receiptMessage(crypto, cast.cluster.id, key, ts, cert, server)),
          })),
      );
      const candidate = { ts, nonce, cert, proof };
      const complete = opId++;
      expectations.set(complete, refuse);
      const filter = opId++;
      expectations.set(filter, { kind: 'not-selected', attack: 'retired-key', ts });
      for (let i = 0; i < n; i++) {
        send('mallory', `s${i}`, { type: 'COMPLETE', key, opId: complete, epoch: 1, candidate });
        send('mallory', `s${i}`, { type: 'FILTER', key, opId: filter, epoch: 1, stripe: 0, fragment: true, candidates: [candidate] });
      }
    }
  }

  /**
   * A writer with a valid identity of its own (any identity may write its namespace) that
   * encodes a value, swaps one fragment for garbage and signs the cross-checksum of what it
   * has: every fragment matches its hash, so every server stores its own, but no two sets of
   * `t + 1` decode alike. STOREd at exactly `n − t` correct servers (the other correct ones
   * miss it, and try to repair it when they catch up), then COMPLETEd at every server.
   */
  async forgeUneven(rng: Prng): Promise<void> {
    const { config, crypto, codec, cast, checker, correct } = this.#world;
    const { n, t } = config;
    const send = this.#world.send;
    const signer = await crypto.signerFromSeed(rng.bytes(32));
    const key = `${namespacePrefix(ownerIdOf(crypto, signer.publicKey))}uneven`;
    const writerId = new WriterSession({ crypto, cluster: cast.cluster, signer, instance: rng.bytes(16) }).writerId;
    const bytes = rng.bytes(rng.range(2 * (t + 1), 80));
    const fragments = codec.encode(bytes).map((f) => f.slice());
    const bad = rng.int(n);
    fragments[bad] = fragments[bad]!.map((b) => b ^ 0x5a);
    const cc = await computeCrossChecksum(crypto, fragments, bytes.length, false);
    const ts: Timestamp = { num: 1, writerId };
    const nonce = rng.bytes(32);
    const cert = await signCertificate(crypto, cast.cluster.id, signer, {
      key,
      ts,
      nonceHash: nonceHash(crypto, nonce),
      ccDigest: crossChecksumDigest(crypto, cc),
      tombstone: false,
      grant: undefined,
    });
    checker.unevenWrite(key, ts);
    const receipts = new Map<number, ReceiptSignature>();
    let completed = false;
    this.#forger = {
      receive(from, reply) {
        if (reply.type !== 'STORE_ACK' || completed) return;
        receipts.set(from, ackReceipt(reply));
        if (receipts.size < n - t) return;
        completed = true;
        const proof = storeProof(receipts);
        const candidate: Candidate = { ts, nonce, cert, proof };
        for (let i = 0; i < n; i++) send('forger', `s${i}`, { type: 'COMPLETE', key, opId: 2, candidate });
      },
    };
    for (const i of rng.shuffle(correct).slice(0, n - t))
      send('forger', `s${i}`, { type: 'STORE', key, opId: 1, ts, stripe: 0, fragment: fragments[i]!, cc, cert });
  }
}
