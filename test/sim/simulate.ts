/**
 * Deterministic simulation of a PowerStore cluster: `3t + 1` in-memory servers (up to
 * `t` Byzantine, some sending requests of their own), honest writers with identities and
 * grants (the owner, a grantee, the admin, a grantee whose grant expires mid-run), each
 * running overlapping operations on the same keys, honest readers, a hostile client
 * forging writes and write-backs, writers crashing mid-round (striped writes too, between
 * stripes), striped values read stripe by stripe, a grantee revoked mid-run by a policy
 * change that reaches servers one by one, and an adversarial network (`network.ts`).
 * Each fence attack of the hostile client brings an owner's (or the admin's) write of its
 * key after the attacker lost its authority, and a reader of that key after the write.
 * Every message crosses the real wire codec; correct servers run the same frame handler
 * as `powerstore-server`. One seed fixes everything; the checks are in `checkers.ts`, the
 * run's shape in `options.ts`. With `rotate`, a correct server's key is replaced mid-run
 * (`epochs.ts`) while everything else goes on.
 */
import { createReferenceCodec } from '@powerstore/erasure/reference';
import type { ErasureCodec } from '@powerstore/erasure';
import {
  CertificateVerifier,
  clusterConfig,
  compareTimestamps,
  computeCrossChecksum,
  crossChecksumDigest,
  decodeHeader,
  decodeMessage,
  encodeMessage,
  isRequest,
  MIN_STRIPE_SIZE,
  namespacePrefix,
  nonceHash,
  ownerIdOf,
  TS0,
  ProtocolError,
  receiptMessage,
  signCertificate,
  toHex,
  WriterSession,
  type ClientOperation,
  type ClusterConfig,
  type Candidate,
  type ClusterIdentity,
  type CryptoProvider,
  type Grant,
  type ListPage,
  type Message,
  type ReadResult,
  type ReadTarget,
  type Reply,
  type Server,
  type Signer,
  type StripeLayout,
  type Timestamp,
  type WriteResult,
  type WriteValue,
  storeProof,
} from '@powerstore/protocol';
import { MemoryStorage } from '@powerstore/protocol/testing';
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import { PowerStoreError } from '@powerstore/client';
import { OperationHost } from '@powerstore/client/host';
import type { RegisterOp } from '../lincheck/lincheck.js';
import { ByzantineServer, REBUILD_LIES, type Behaviour } from './byzantine.js';
import { EPOCH, makeCast } from './cast.js';
import { SimClock, SimLink } from './client-host.js';
import { Checker, checkIndexMatchesEntries, type Author, type MutableOp } from './checkers.js';
import { HostileClient, type Attack, type Expectation, type FenceTarget } from './hostile-clients.js';
import { Network, type InFlight } from './network.js';
import { describeHostFaults, describeOptions, drawHostFaults, drawOptions, type HostFaultOptions } from './options.js';
import { correctProtocol, type ProtocolFactories } from './protocol-factories.js';
import { Prng } from './prng.js';
import { Rebuild } from './rebuild.js';
import { concat, sameLayout, sourceOf, stripedValue } from './stripes.js';

/** What to simulate. */
export interface SimOptions {
  readonly seed: number;
  readonly t: number;
  /** Protocol classes; mutants swap one. */
  readonly protocol?: ProtocolFactories;
  /** Always field `t` Byzantine servers and several hostile attacks (used for mutants). */
  readonly hostile?: boolean;
  /** Draw Byzantine behaviours only from these (to focus a hunt on one attack). */
  readonly behaviours?: readonly Behaviour[];
  /** Chance an operation is a delete, instead of the usual (a mutant that breaks what deletes do). */
  readonly deleteRate?: number;
  /** Client-host faults that replace those drawn (to focus a hunt on one situation). */
  readonly hostFaults?: Partial<HostFaultOptions>;
  /** Draw hostile attacks only from these. */
  readonly attacks?: readonly Attack[];
  /** Force heavy write contention on one key (otherwise drawn for some seeds). */
  readonly contention?: boolean;
  /**
   * Readers also list the keys (one page of a random size, instead of about one read in
   * four). Off by default so that other runs keep their seeds' schedules.
   */
  readonly lists?: boolean;
  /**
   * Many more writes are striped (about half, instead of a few): values of 2–4 stripes of
   * 64 KiB, read stripe by stripe. Off by default to keep `npm test` fast.
   */
  readonly stripes?: boolean;
  /**
   * A correct server's receipt key is replaced mid-run (key epoch 1, `epochs.ts`): a new
   * server takes its place (on an empty disk when fewer than `t` servers are Byzantine, so
   * the lost data stays within `t` faults; else keeping its data, as for a leaked key), the
   * other servers reload the new cluster file and the clients switch to it, each at its own
   * moment; a thief then tries the retired key. Operations refused by servers of another
   * epoch may fail (`CLUSTER_OUTDATED`, `SERVER_OUTDATED`); everything else is checked as
   * always. Off by default, so other runs keep their seeds' schedules.
   */
  readonly rotate?: boolean;
  /**
   * Servers lose their storage mid-run (a fresh, empty disk, the same key) and rebuild
   * from the others (`rebuild.ts`) while the workload runs, one more after each rebuild
   * finishes, the faulty servers (Byzantine, and lost but not yet rebuilt) never more than
   * `t` (so at most `t − 1` Byzantine servers); Byzantine servers lie to rebuilding hosts
   * in particular (`REBUILD_LIES`); correct servers cut off by a partition catch up once it
   * heals; a writer with a valid identity stores a write encoded inconsistently. Off by
   * default, so other runs keep their seeds' schedules.
   */
  readonly rebuild?: boolean;
}

/** Share of value writes that are striped without, and with, `SimOptions.stripes`. */
const STRIPED_SHARE = 0.06;
const STRIPED_SHARE_MANY = 0.5;

/** Outcome of one run. */
export interface SimReport {
  readonly seed: number;
  readonly t: number;
  readonly ok: boolean;
  readonly violations: string[];
  /** The run's options, as printed with a failure. */
  readonly options: string;
  /** Per-key history of correct clients, for the linearizability checkers. */
  readonly history: RegisterOp[];
  readonly steps: number;
  /** Listing pages finished (with `lists`). */
  readonly lists: number;
  readonly messages: number;
  readonly byzantine: string[];
  /** Attacks the hostile client mounted. */
  readonly attacks: string[];
  readonly crashedWriters: number;
  readonly reads: number;
  readonly writes: number;
  /** Writes of two operations of one session on one key overlapping in time. */
  readonly overlappingWrites: number;
  readonly failedWrites: Record<string, number>;
  /** Hostile requests correct servers refused, by code. */
  readonly refusals: Record<string, number>;
  /** Finished reads by the rounds they took. */
  readonly readRounds: Record<string, number>;
  /** Finished writes by the rounds they took. */
  readonly writeRounds: Record<string, number>;
  /** Whether the run had heavy write contention on one key. */
  readonly contention: boolean;
  /** Striped writes started, and completed. */
  readonly stripedWrites: number;
  readonly stripedWritesDone: number;
  /** Striped writes whose writer crashed in a STORE round of a stripe other than 0 (mid-upload). */
  readonly crashedMidStripe: number;
  /** Striped values read whole. */
  readonly stripedReads: number;
  /** Reads that gave up with VALUE_CHANGED while fetching further stripes (allowed, counted). */
  readonly valueChanged: number;
  /** Faults the clients' hosts met: links closed, frames over their limit, reads that failed as too large. */
  readonly hostFaults: { readonly linksClosed: number; readonly oversized: number; readonly tooLarge: number };
  /** With `rotate`: what was replaced when, and operations that ended refused by servers of another key epoch. */
  readonly rotation: string | undefined;
  readonly staleOps: number;
  /**
   * With `rebuild`: the servers that lost their disk and when each rebuild finished; and
   * for every run that caught up at its end, what the repairs did.
   */
  readonly rebuilds: string[];
  readonly repairs: Record<string, number>;
  /**
   * The fence at work: the fence attacks' writes planted, planted with their store proof,
   * and completed after the owner wrote; owners' and the admin's writes that jumped; reads
   * the fence check applied to.
   */
  readonly fences: Record<string, number>;
}

/**
 * node:crypto, with Ed25519 verification memoized across the whole simulated cluster.
 * Verification is a pure function of (key, message, signature), so sharing results
 * between simulated processes changes no outcome; every simulated server still asks, and
 * real ones verify for themselves. Without it, the same certificates and receipts are
 * verified by every server and client of a run, which dominates its time.
 */
function memoizedCrypto(inner: CryptoProvider): CryptoProvider {
  const memo = new Map<string, boolean>();
  return {
    ...inner,
    name: `${inner.name}, memoized`,
    async verifyEd25519(publicKey, message, signature) {
      const id = `${toHex(publicKey)}${toHex(signature)}${toHex(inner.sha256Sync([message]))}`;
      let ok = memo.get(id);
      if (ok === undefined) {
        ok = await inner.verifyEd25519(publicKey, message, signature);
        if (memo.size > 200_000) memo.clear();
        memo.set(id, ok);
      }
      return ok;
    },
  };
}

const crypto = memoizedCrypto(createCryptoProvider());
const codecs = new Map<number, ErasureCodec>();
function codecFor(config: ClusterConfig): ErasureCodec {
  let c = codecs.get(config.t);
  if (!c) {
    c = createReferenceCodec({ k: config.t + 1, n: config.n });
    codecs.set(config.t, c);
  }
  return c;
}

const MAX_STEPS = 250_000;

type Role = 'owner' | 'grantee' | 'admin' | 'expiring';
/** Each role's rank over the owner's keys (`window.ts`). */
const RANKS: Record<Role, Author['rank']> = { owner: 2, admin: 3, grantee: 1, expiring: 1 };
type Planned = { key: string; readonly kind: 'write' | 'delete' | 'read' | 'list' };

/** A read of a striped value, stripe by stripe: the first read's result, then pinned reads of the others. */
interface Assembly {
  readonly first: ReadResult & { layout: StripeLayout; candidate: NonNullable<ReadResult['candidate']> };
  readonly stripes: (Uint8Array | undefined)[];
  /** Stripes still to read, in order. */
  readonly queue: number[];
  /** The stripe the pinned read in flight asked for. */
  asked?: number;
}

interface Running {
  /** Replaced, with a fresh opId, for each further stripe of a striped read. */
  op: ClientOperation<ReadResult> | ClientOperation<WriteResult> | ClientOperation<ListPage>;
  readonly record: MutableOp;
  readonly listing: boolean;
  readonly name: string;
  readonly crashIn: 'STORE' | 'COMPLETE' | undefined;
  readonly valueBytes: Uint8Array | undefined;
  /** For a striped write: its stripes. */
  readonly stripes?: number;
  /** With `crashIn: 'STORE'`, the STORE round to crash in (1 = the first; a striped write has one per stripe). */
  readonly crashAtStore?: number;
  storeRounds: number;
  assembly?: Assembly;
  /** Aborts it: how its client gives up on it (as an application's `AbortSignal` does). */
  abort?: AbortController;
  /** The give-up timer armed by a refusal, cancelled when it ends. */
  cancelGiveUp?: () => void;
  /** The wire id of its STORE round last seen on the way out (a new one is another round). */
  lastStoreWire?: number;
  /** Its first allowed refusal: once it is given up, it failed as allowed. */
  refused?: ProtocolError;
  /** With `rotate`: its first refusal by a server of another key epoch. */
  epochRefusal?: ProtocolError;
}

/**
 * How long a striped write some server refused (or any operation a server of another key
 * epoch refused) may go on before its client gives up on it: it may neither reach `n − t`
 * answers nor `t + 1` refusals (a silent Byzantine server), and a real client's timeout
 * would end it. Other allowed refusals are given up at once.
 */
const WRITE_TIMEOUT = 2000;
/**
 * The operation timeout of the simulated clients' hosts, in virtual time: far beyond what
 * any operation of a correct client takes on the simulated network (its slowest message
 * takes 60 000), so an honest operation that times out is stuck, a violation.
 */
const SIM_OP_TIMEOUT = 1_200_000;
/** The simulated clients' frame limit: far above any frame of the run. */
const SIM_MAX_FRAME = 16 * 1024 * 1024;
/**
 * The frame limit of readers with a small one (`HostFaultOptions.smallReaders`): above
 * any answer but a FILTER's of a large stripe, so correct servers' answers to them are
 * sometimes over the limit, and such a read fails with VALUE_TOO_LARGE.
 */
const SMALL_FRAME = 16 * 1024;
/**
 * Servers' `uploadIdleMs` in simulated time: long enough for a slow honest upload overtaken
 * by a newer write (a tenth of it below `lc`), short enough that the end-of-run sweep is real.
 */
const UPLOAD_IDLE = 10_000;

interface Client {
  readonly name: string;
  readonly role: Role | 'reader';
  /** Replaced when the client loads a new cluster file (`rotate`). */
  session: WriterSession | undefined;
  verifier: CertificateVerifier;
  readonly plan: Planned[];
  readonly running: Map<number, Running>;
  nextOpId: number;
  nextStart: number | undefined;
  crashed: boolean;
  /** The production operation host, on links to every server. */
  readonly host: OperationHost;
  /** The largest frame its host accepts (and value it reads). */
  readonly maxFrame: number;
  readonly links: readonly SimLink[];
  /** The wire id of the round the client crashed in: some of its frames still go out, nothing else does. */
  crashWire?: number;
  /**
   * A fence attack's owner (or admin) write, with the reader that reads its key after it
   * ends: it never crashes, and its end lets the attacker complete its plants late.
   */
  readonly fence?: { readonly number: number; readonly reader: Client };
}

/** Runs one seeded simulation and checks every property on its history. */
export async function simulate(options: SimOptions): Promise<SimReport> {
  const { seed } = options;
  const protocol = options.protocol ?? correctProtocol;
  const config = clusterConfig(options.t);
  const { n, t } = config;
  const prng = new Prng(seed);
  const opts = drawOptions(prng.fork(), {
    t,
    hostile: options.hostile ?? false,
    ...(options.behaviours ? { behaviours: options.behaviours } : {}),
    ...(options.attacks ? { attacks: options.attacks } : {}),
    ...(options.contention !== undefined ? { contention: options.contention } : {}),
    ...(options.deleteRate !== undefined ? { deleteRate: options.deleteRate } : {}),
  });
  const network = new Network(prng.fork(), opts.network);
  const clock = new SimClock(network);
  // Faults between the clients' hosts and the servers: a stream of their own.
  const faultRng = new Prng(seed * 7_368_787 + 23);
  const hostFaults: HostFaultOptions = { ...drawHostFaults(faultRng.fork(), options.hostile ?? false), ...options.hostFaults };
  const advRng = prng.fork();
  const cast = await makeCast(crypto, prng.fork(), n);
  const codec = codecFor(config);
  const checker = new Checker(opts.storage.historyKeep);
  const keys = Array.from({ length: opts.workload.keys }, (_, i) => `${cast.prefix}k${i}`);
  const time = () => EPOCH + network.now;
  let step = 0;

  // Servers: correct ones with watched storage, up to t Byzantine ones.
  // With `rebuild`, a server that lost its disk counts against t until it has rebuilt: at most t − 1 Byzantine servers.
  const byzantineCount = options.rebuild ? Math.min(opts.adversary.byzantineServers, t - 1) : opts.adversary.byzantineServers;
  const byzIndices = new Set(prng.shuffle(Array.from({ length: n }, (_, i) => i)).slice(0, byzantineCount));
  // Rebuilds: their own stream, so every other draw of the seed stays as it was.
  const rebuildRng = new Prng(seed * 49_979_687 + 13);
  const storages: MemoryStorage[] = [];
  const skews: number[] = [];
  const servers: (Server | ByzantineServer)[] = [];
  /** The protocol servers, Byzantine ones' too (what a cluster file reload reaches). */
  const inners: Server[] = [];
  const byzantine: string[] = [];
  const adversary = { config, crypto, codec, clusterId: cast.cluster.id, now: () => step, keys };
  for (let i = 0; i < n; i++) {
    const storage = new MemoryStorage();
    storages.push(storage);
    const skew = prng.range(-opts.network.clockSkew, opts.network.clockSkew);
    skews.push(skew);
    const server = protocol.server({
      config,
      index: i,
      crypto,
      storage: byzIndices.has(i) ? storage : checker.watch(`s${i}`, storage),
      cluster: cast.cluster,
      signer: cast.servers[i]!,
      policy: cast.policy,
      now: () => time() + skew,
      history: { keep: opts.storage.historyKeep, uploadIdleMs: UPLOAD_IDLE },
    });
    inners.push(server);
    if (byzIndices.has(i)) {
      const behaviour: Behaviour = advRng.pick(opts.adversary.behaviours);
      byzantine.push(`s${i}:${behaviour}`);
      const lie = options.rebuild ? rebuildRng.pick(REBUILD_LIES) : undefined;
      if (lie) byzantine[byzantine.length - 1] += `, to rebuilds ${lie}`;
      servers.push(new ByzantineServer(i, behaviour, server, cast.servers[i]!, adversary, advRng.fork(), lie));
    } else {
      servers.push(server);
    }
  }
  const isServer = (name: string) => /^s\d+$/.test(name);

  // Honest clients: each runs the client's operation host, on links to every server.
  const hostOf = (name: string, maxFrame = SIM_MAX_FRAME) => {
    const links = Array.from(
      { length: n },
      (_, i) =>
        new SimLink(
          i,
          (frame, connection) => clientSends(name, i, frame, connection),
          (reason) => blamed(name, i, reason),
        ),
    );
    const host = new OperationHost({
      config,
      links,
      clock,
      timeoutMs: SIM_OP_TIMEOUT,
      maxFrameBytes: maxFrame,
      maxValueBytes: maxFrame,
      ...(protocol.roundBook ? { roundBook: protocol.roundBook } : {}),
    });
    return { host, links, maxFrame };
  };
  const identities: Record<Role, { signer: Signer; grants: Grant[] }> = {
    owner: { signer: cast.owner, grants: [] },
    grantee: { signer: cast.grantee, grants: [cast.granteeGrant] },
    admin: { signer: cast.admin, grants: [] },
    expiring: { signer: cast.expiring, grants: [cast.expiringGrant] },
  };
  const roles: Role[] = (['owner', ...prng.shuffle(['grantee', 'admin', 'expiring'] as const)] as Role[]).slice(0, opts.workload.writers);
  const clients: Client[] = [];
  const planOf = (kind: 'read' | 'write') =>
    Array.from({ length: prng.range(...opts.workload.opsPerClient) }, (): Planned => ({
      key: prng.pick(keys),
      kind: kind === 'read' ? 'read' : prng.chance(opts.workload.deleteRate) ? 'delete' : 'write',
    }));
  for (const [w, role] of roles.entries()) {
    const { signer, grants } = identities[role];
    const session = new WriterSession({ crypto, cluster: cast.cluster, signer, instance: prng.bytes(16), grants });
    clients.push({
      name: `w${w}`,
      role,
      session,
      verifier: session.verifier,
      plan: planOf('write'),
      running: new Map(),
      nextOpId: 1,
      nextStart: network.now + prng.range(0, 100),
      crashed: false,
      ...hostOf(`w${w}`),
    });
  }
  for (let r = 0; r < opts.workload.readers; r++) {
    const verifier = new CertificateVerifier(crypto, cast.cluster);
    clients.push({
      name: `r${r}`,
      role: 'reader',
      session: undefined,
      verifier,
      plan: planOf('read'),
      running: new Map(),
      nextOpId: 1,
      nextStart: network.now + prng.range(0, 100),
      crashed: false,
      ...hostOf(`r${r}`, faultRng.chance(hostFaults.smallReaders) ? SMALL_FRAME : SIM_MAX_FRAME),
    });
  }
  if (options.lists) {
    // Its own stream, so listing leaves every other draw of the seed as it was.
    const listRng = new Prng(seed * 7919 + 17);
    for (const c of clients)
      if (c.role === 'reader') for (const p of c.plan) if (listRng.chance(0.25)) (p as { kind: Planned['kind'] }).kind = 'list';
  }
  const listLimit = new Prng(seed * 104729 + 3);
  const crashRng = prng.fork();
  const writerRandom = prng.fork();
  // Its own stream, so striping leaves every other draw of the seed as it was.
  const stripeRng = new Prng(seed * 6151 + 29);
  const stripedShare = options.stripes ? STRIPED_SHARE_MANY : STRIPED_SHARE;
  let stripedWrites = 0;
  /** Keys some striped write was made to (a reader with a small limit may find them too large). */
  const stripedKeys = new Set<string>();
  let oversizedFrames = 0;
  let linksClosed = 0;
  let tooLarge = 0;
  let stripedWritesDone = 0;
  let crashedMidStripe = 0;
  let crashedWriters = 0;
  let overlappingWrites = 0;

  // The hostile client.
  const expectations = new Map<number, Expectation>();
  const mallory = new HostileClient({
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
  const isFence = (a: Attack) => a === 'fence-expired' || a === 'fence-revoked';
  const fenceKinds = new Set<Attack>();
  const attackTimes: { at: number; attack: Attack; target?: FenceTarget }[] = opts.adversary.attacks
    .map((a) => ({ at: prng.range(0, 1500), attack: a }))
    .sort((a, b) => a.at - b.at)
    // One fence attack of each kind a run: each brings a writer and a reader of its key,
    // and a second adds little but concurrency for the linearizability check to untangle.
    // None under heavy contention, whose one key has all the concurrency that check can take.
    .filter((a) => !isFence(a.attack) || (!opts.workload.contention && !fenceKinds.has(a.attack) && fenceKinds.add(a.attack)));

  // Authority that ends mid-run. The expiring grantee's grant, by each correct server's
  // clock; the turncoat's, by a policy change each server takes at its own time. Once
  // every correct server refuses a grantee, the checker's fence applies to it.
  const correct = servers.map((_, i) => i).filter((i) => !byzIndices.has(i));
  const lostAt = {
    expiring: Math.max(...correct.map((i) => cast.expiringAt - skews[i]!)),
    turncoat: Math.max(...correct.map((i) => cast.turncoatRevokedAt + cast.revocationDelays[i]!)),
  };
  /** Each server's policy now (a server replaced by `rotate` starts with it). */
  const policies = servers.map(() => cast.policy);
  const events: { at: number; run: () => Promise<void> | void }[] = [
    ...servers.map((_, i) => ({
      at: cast.turncoatRevokedAt + cast.revocationDelays[i]!,
      run: () => {
        policies[i] = cast.revokedPolicy;
        inners[i]!.setPolicy(cast.revokedPolicy);
      },
    })),
    // After the policy changes due at the same time (the sort below is stable).
    { at: lostAt.turncoat, run: () => checker.authorityLost('turncoat') },
    { at: lostAt.expiring, run: () => checker.authorityLost('expiring') },
  ].sort((a, b) => a.at - b.at);

  // Each fence attack: the attacker plants while its authority lasts; the owner or the
  // admin writes the key once it has ended everywhere (and the attacker then completes its
  // plants); a reader reads the key after that write. From a stream of its own, so runs
  // without fence attacks keep their schedules.
  const fenceRng = new Prng(seed * 7243 + 11);
  for (const [number, a] of attackTimes.filter((x) => isFence(x.attack)).entries()) {
    const lost = a.attack === 'fence-expired' ? lostAt.expiring : lostAt.turncoat;
    const key = fenceRng.pick(keys);
    a.at = Math.max(0, Math.min(a.at, lost - fenceRng.range(60, 400)));
    a.target = { key, fence: number };
    const role: Role = fenceRng.chance(0.5) ? 'owner' : 'admin';
    const reader: Client = {
      name: `fr${number}`,
      role: 'reader',
      session: undefined,
      verifier: new CertificateVerifier(crypto, cast.cluster),
      plan: [
        { key, kind: 'read' },
        { key, kind: 'read' },
      ],
      running: new Map(),
      nextOpId: 1,
      nextStart: undefined,
      crashed: false,
      ...hostOf(`fr${number}`),
    };
    const { signer } = identities[role];
    const session = new WriterSession({ crypto, cluster: cast.cluster, signer, instance: fenceRng.bytes(16) });
    clients.push(
      {
        name: `fw${number}`,
        role,
        session,
        verifier: session.verifier,
        plan: [{ key, kind: fenceRng.chance(0.2) ? 'delete' : 'write' }],
        running: new Map(),
        nextOpId: 1,
        nextStart: lost + fenceRng.range(1, 300),
        crashed: false,
        ...hostOf(`fw${number}`),
        fence: { number, reader },
      },
      reader,
    );
  }
  attackTimes.sort((a, b) => a.at - b.at);

  /** A writer's operation ended (done, failed or given up): a fence write lets its attacker complete late, and its reader go. */
  const writeEnded = (client: Client) => {
    if (!client.fence) return;
    mallory.lateComplete(client.fence.number);
    client.fence.reader.nextStart = network.now + fenceRng.range(20, 300);
  };

  const send = (from: string, to: string, message: Message, slow = false) => network.send(from, to, encodeMessage(message), slow);

  // Key rotation: its own stream, so every other draw of the seed stays as it was.
  let rotation: string | undefined;
  let staleOps = 0;
  if (options.rotate) {
    const rotateRng = new Prng(seed * 15_485_863 + 11);
    const j = rotateRng.pick([...Array(n).keys()].filter((i) => !byzIndices.has(i)));
    const retired = cast.servers[j]!;
    const signer = await crypto.signerFromSeed(rotateRng.bytes(32));
    const next: ClusterIdentity = {
      ...cast.cluster,
      epoch: 1,
      servers: cast.cluster.servers.map((k, i) => (i === j ? signer.publicKey : k)),
      history: cast.cluster.servers.map((key, i) =>
        i === j
          ? [
              { from: 0, key },
              { from: 1, key: signer.publicKey },
            ]
          : [{ from: 0, key }],
      ),
    };
    // Its disk is lost too only while that keeps the faults within t.
    const lost = byzIndices.size < t;
    const at = rotateRng.range(100, 1200);
    rotation = `s${j} replaced at ${at}${lost ? ' with an empty disk' : ', keeping its data'}`;
    events.push({
      at,
      run: () => {
        const storage = lost ? new MemoryStorage() : storages[j]!;
        storages[j] = storage;
        const server = protocol.server({
          config,
          index: j,
          crypto,
          storage: checker.watch(`s${j}`, storage),
          cluster: next,
          signer,
          policy: policies[j]!,
          now: () => time() + skews[j]!,
          history: { keep: opts.storage.historyKeep, uploadIdleMs: UPLOAD_IDLE },
        });
        servers[j] = server;
        inners[j] = server;
      },
    });
    // The other servers reload the cluster file (SIGHUP), Byzantine ones too.
    for (let i = 0; i < n; i++) if (i !== j) events.push({ at: at + rotateRng.range(0, 300), run: () => inners[i]!.setCluster(next) });
    // Clients load the new file, each when it does: operations already running keep their old one.
    for (const c of clients) {
      events.push({
        at: at + rotateRng.range(0, 600),
        run: () => {
          if (c.role === 'reader') c.verifier = new CertificateVerifier(crypto, next);
          else {
            const { signer: who, grants } = identities[c.role];
            c.session = new WriterSession({ crypto, cluster: next, signer: who, instance: rotateRng.bytes(16), grants });
            c.verifier = c.session.verifier;
          }
        },
      });
    }
    // Once every server reloaded, a thief holding the retired key tries it with the
    // Byzantine servers' keys, for a certificate of the retired epoch and of the new one.
    events.push({ at: at + 301, run: () => tryRetiredKey(retired, j, rotateRng) });
    events.sort((a, b) => a.at - b.at);
  }

  /**
   * Mallory, with the retired key of server `j` and every Byzantine server's key: STOREs
   * an epoch-0 certificate naming epoch 1 (correct servers must refuse it), then offers
   * candidates whose proofs hold every receipt it can sign, in COMPLETE and FILTER.
   */
  const tryRetiredKey = async (retired: Signer, j: number, rng: Prng) => {
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
      const signers = [...byzIndices].map((i) => ({ server: i, by: cast.servers[i]! }));
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
  };

  // Rebuilds and catch-ups (`rebuild.ts`): one host per server at a time, on the network as
  // `rb<index>`, cut off by partitions with its server.
  const rebuilds = new Map<string, Rebuild>();
  /** Servers that lost their disk and have not finished rebuilding: they count against t. */
  const lost = new Set<number>();
  /** Servers that ever lost their disk. */
  const diskLost = new Set<number>();
  const rebuildLog: string[] = [];
  let rebuildOpId = 1;
  /** The newest cluster identity any server has (with `rotate`, the new epoch's, which keeps every older one). */
  const finalCluster = () => inners.map((s) => s.cluster).reduce((a, b) => ((b.epoch ?? 0) > (a.epoch ?? 0) ? b : a));
  const startHost = async (j: number, kind: 'rebuild' | 'catch-up') => {
    const name = `rb${j}`;
    network.alias(name, `s${j}`);
    const honest = new CertificateVerifier(crypto, finalCluster());
    const host = new Rebuild(
      name,
      kind,
      {
        config,
        crypto,
        codec,
        protocol,
        verifier: protocol.rebuildVerifier(crypto, finalCluster()),
        index: j,
        server: () => inners[j]!,
        storage: () => storages[j]!,
        send: (to, request) => send(name, `s${to}`, { ...request, opId: request.opId }),
        now: () => network.now,
        pageLimit: rebuildRng.chance(0.5) ? rebuildRng.range(1, 3) : 1000,
        nextOpId: () => rebuildOpId++,
        reports: {
          repairStarted: async (server, key, c) => {
            if (!(await honest.valid(key, c)))
              checker.violations.push(`repair: ${server} set out to repair ${key} at ${c.ts.num}, a candidate that is not valid`);
          },
          pendingRepairStarted: async (server, key, c) => {
            if (!(await honest.check(key, c.ts, c.cert)).ok)
              checker.violations.push(
                `repair: ${server} set out to repair ${key} at ${c.ts.num}, a write under way whose certificate does not check out`,
              );
          },
          repairEnded: (server, key, c, error) => checker.repairEnded(server, key, c, error),
          repairStored: (server, key, c, stripe, outcome) => checker.repairStored(server, key, c, stripe, outcome),
          repairTimedOut: (server, key, c) => checker.repairTimedOut(server, key, c),
          violation: (message) => checker.violations.push(message),
        },
      },
      (done) => {
        if (rebuilds.get(name) === done) rebuilds.delete(name);
        if (done.kind === 'rebuild') {
          lost.delete(j);
          rebuildLog.push(
            `s${j} rebuilt at ${network.now} (${done.passes} passes, ${done.repaired} writes repaired, ${done.pendingRepaired} of them under way, ${done.pendingUnfinished} under way unfinished)`,
          );
          scheduleLoss();
        }
      },
    );
    rebuilds.set(name, host);
    await host.start();
  };

  /**
   * Server `j` loses its disk: a new server with the same key on an empty one, rebuilding
   * from the others. Only while the faulty servers stay within t.
   */
  const loseDisk = async (j: number) => {
    if (byzIndices.size + lost.size + 1 > t || lost.has(j)) return;
    lost.add(j);
    diskLost.add(j);
    rebuildLog.push(`s${j} lost its disk at ${network.now}`);
    const storage = new MemoryStorage();
    storages[j] = storage;
    const server = protocol.server({
      config,
      index: j,
      crypto,
      storage: checker.watch(`s${j}`, storage),
      cluster: inners[j]!.cluster,
      signer: cast.servers[j]!,
      policy: policies[j]!,
      now: () => time() + skews[j]!,
      history: { keep: opts.storage.historyKeep, uploadIdleMs: UPLOAD_IDLE },
    });
    servers[j] = server;
    inners[j] = server;
    await startHost(j, 'rebuild');
  };
  let lossesLeft = 0;
  /** The next loss, some time after the last rebuild finished (a correct server, possibly one rebuilt before). */
  const scheduleLoss = () => {
    if (lossesLeft === 0) return;
    lossesLeft--;
    const j = rebuildRng.pick(correct.filter((i) => !lost.has(i)));
    events.push({ at: network.now + rebuildRng.range(0, 400), run: () => loseDisk(j) });
    events.sort((a, b) => a.at - b.at);
  };

  /**
   * A writer with a valid identity of its own (any identity may write its namespace) that
   * encodes a value, swaps one fragment for garbage and signs the cross-checksum of what it
   * has: every fragment matches its hash, so every server stores its own, but no two sets of
   * `t + 1` decode alike. STOREd at exactly `n − t` correct servers (the other correct ones
   * miss it, and try to repair it when they catch up), then COMPLETEd at every server.
   */
  let forger: { receive(from: number, reply: Reply): void } | undefined;
  const forgeUneven = async (rng: Prng) => {
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
    const receipts = new Map<number, Uint8Array>();
    let completed = false;
    forger = {
      receive(from, reply) {
        if (reply.type !== 'STORE_ACK' || completed) return;
        receipts.set(from, reply.receipt);
        if (receipts.size < n - t) return;
        completed = true;
        const proof = storeProof(receipts);
        const candidate: Candidate = { ts, nonce, cert, proof };
        for (let i = 0; i < n; i++) send('forger', `s${i}`, { type: 'COMPLETE', key, opId: 2, candidate });
      },
    };
    for (const i of rng.shuffle(correct).slice(0, n - t))
      send('forger', `s${i}`, { type: 'STORE', key, opId: 1, ts, stripe: 0, fragment: fragments[i]!, cc, cert });
  };
  if (options.rebuild) {
    lossesLeft = rebuildRng.range(1, 3);
    lossesLeft--;
    const j = rebuildRng.pick(correct);
    events.push({ at: rebuildRng.range(50, 1200), run: () => loseDisk(j) });
    events.push({ at: rebuildRng.range(0, 1500), run: () => forgeUneven(rebuildRng.fork()) });
    events.sort((a, b) => a.at - b.at);
  }

  /**
   * A frame a client's host sends to server `to` on its link's `connection`: recorded (a
   * STORE), cut short where the writer crashes part-way through a round if planned, and
   * put on the network. Returns whether it went out.
   */
  const clientSends = (name: string, to: number, frame: Uint8Array, connection: number): boolean => {
    const client = clientByName.get(name)!;
    const header = decodeHeader(frame)!;
    if (client.crashed) return header.opId === client.crashWire && crashRng.chance(0.5) && put(client, to, frame, connection);
    const op = client.host.operationOf(header.opId);
    const run = op && [...client.running.values()].find((r) => r.op === op);
    if (!run) return put(client, to, frame, connection);
    const m = header.type === 'STORE' ? decodeMessage(frame, { n }) : undefined;
    const store = m?.type === 'STORE' ? m : undefined;
    if (store && run.lastStoreWire !== header.opId) {
      run.lastStoreWire = header.opId;
      run.storeRounds++;
    }
    if (run.crashIn === header.type && (run.crashIn !== 'STORE' || run.storeRounds >= (run.crashAtStore ?? 1))) {
      client.crashed = true;
      client.crashWire = header.opId;
      crashedWriters++;
      if ((store && store.stripe > 0) || (store && run.stripes && run.storeRounds < run.stripes)) crashedMidStripe++;
      if (!crashRng.chance(0.5)) return false;
    }
    if (store) checker.store(client.name, run.name, store.key, store.ts, run.record.value, run.valueBytes, RANKS[client.role as Role]);
    return put(client, to, frame, connection);
  };
  /** Clients by name (all of them exist before the first operation starts). */
  const clientByName = new Map<string, Client>();
  const put = (client: Client, to: number, frame: Uint8Array, connection: number): boolean => {
    network.send(client.name, `s${to}`, frame, false, connection);
    return true;
  };

  /** Outcomes of operations, as their hosts report them, handled in order by {@link settle}. */
  const outcomes: { client: Client; run: Running; opId: number; result?: unknown; error?: unknown }[] = [];

  /** Hands `run` (its operation carrying `opId`) to its client's host. */
  const launch = async (client: Client, run: Running, opId: number) => {
    const abort = new AbortController();
    run.abort = abort;
    client.host
      .run(run.op as ClientOperation<unknown>, opId, {
        signal: abort.signal,
        // A striped write's timeout is per round, as putStream's.
        perRound: run.stripes !== undefined,
        onEvidence: (i, reason) => client.host.blame(i, reason),
      })
      .then(
        (result) => outcomes.push({ client, run, opId, result }),
        (error: unknown) => outcomes.push({ client, run, opId, error }),
      );
    await client.host.idle();
  };

  /** Lets every host finish what it was handed, then handles the operations that ended, until nothing more happens. */
  const settle = async () => {
    while (true) {
      for (const c of clients) await c.host.idle();
      // Reactions to a host's promise run after its work settled: one more turn for them.
      await Promise.resolve();
      const o = outcomes.shift();
      if (!o) break;
      await ended(o);
    }
    // A crashed client's host is gone, and its operations with it.
    for (const c of clients) if (c.crashed && !c.host.closed) c.host.close();
  };

  /** A client's host blamed server `i`: never a correct server that kept its disk and its key. */
  const blamed = (client: string, i: number, reason: string) => {
    if (byzIndices.has(i) || diskLost.has(i) || options.rotate) return;
    checker.violations.push(`${client} blamed correct s${i}: ${reason}`);
  };

  const scheduleNext = (client: Client, soon: boolean) => {
    if (client.plan.length === 0) client.nextStart = undefined;
    else client.nextStart = network.now + (soon ? prng.range(0, 30) : prng.range(0, 200));
  };

  const startOp = async (client: Client) => {
    const planned = client.plan.shift()!;
    const opId = client.nextOpId++;
    const name = `${client.name}.${opId}`;
    client.nextStart = undefined;
    let valueBytes: Uint8Array | undefined;
    let stripes: number | undefined;
    let record: MutableOp;
    let op: Running['op'];
    if (planned.kind === 'list') {
      op = protocol.lister({ config, crypto, verifier: client.verifier }, cast.prefix, '', listLimit.range(1, keys.length), opId);
      record = checker.listCall(client.name);
    } else if (client.role === 'reader') {
      // Some reads start at another stripe than 0: a striped value is then read from there.
      const target: ReadTarget = stripeRng.chance(0.5) ? {} : { stripe: stripeRng.range(1, 4) };
      op = protocol.reader({ config, crypto, codec, verifier: client.verifier }, planned.key, opId, target);
      record = checker.call(planned.key, client.name, 'read', null);
    } else {
      if (planned.kind === 'write') {
        const pad = prng.bytes(prng.range(0, 3 * (t + 1) + 2)).map((b) => 0x61 + (b % 26));
        valueBytes = new Uint8Array([...new TextEncoder().encode(`${name}:`), ...pad]);
      }
      let value: WriteValue = valueBytes ? { kind: 'value', value: valueBytes } : { kind: 'tombstone' };
      if (valueBytes && !client.fence && stripeRng.chance(stripedShare)) {
        stripes = stripeRng.range(2, 4);
        const parts = stripedValue(name, stripes, stripeRng.range(1, MIN_STRIPE_SIZE));
        valueBytes = concat(parts);
        value = { kind: 'stripes', source: sourceOf(parts) };
        stripedWrites++;
        stripedKeys.add(planned.key);
      }
      if (valueBytes) checker.registerValue(name, valueBytes);
      try {
        op = protocol.writer(
          { config, crypto, codec, session: client.session!, random: (len) => writerRandom.bytes(len), now: time },
          planned.key,
          value,
          opId,
        );
      } catch (err) {
        // Refused before any traffic (an expired grant, by the client's clock): no effect.
        if (!(err instanceof ProtocolError)) throw err;
        checker.writeFailed(client.name, planned.key, err, allowedFailure(client, err.code, undefined));
        scheduleNext(client, false);
        writeEnded(client);
        return;
      }
      if ([...client.running.values()].some((r) => r.record.key === planned.key && r.record.kind === 'write')) overlappingWrites++;
      const role = client.role;
      record = checker.call(planned.key, client.name, 'write', valueBytes ? name : null, { identity: role, rank: RANKS[role] });
    }
    const crashIn =
      client.role !== 'reader' && !client.fence && crashRng.chance(opts.adversary.writerCrashRate)
        ? crashRng.chance(0.5)
          ? 'STORE'
          : 'COMPLETE'
        : undefined;
    // A striped write crashes in any of its STORE rounds: mid-upload, or at stripe 0.
    const crashAtStore = crashIn === 'STORE' && stripes ? crashRng.range(1, stripes) : undefined;
    const run: Running = {
      op,
      record,
      name,
      crashIn,
      valueBytes,
      listing: planned.kind === 'list',
      storeRounds: 0,
      ...(stripes ? { stripes } : {}),
      ...(crashAtStore ? { crashAtStore } : {}),
    };
    client.running.set(opId, run);
    // A writer may start its next operation before this one ends, often on the same key.
    if (
      client.role !== 'reader' &&
      !client.fence &&
      client.running.size < opts.workload.maxOverlap &&
      prng.chance(opts.workload.overlapRate)
    ) {
      if (client.plan[0] && prng.chance(0.7)) client.plan[0].key = planned.key;
      scheduleNext(client, true);
    } else if (
      client.role === 'reader' &&
      !client.name.startsWith('fr') &&
      !opts.workload.contention &&
      client.plan[0] !== undefined &&
      client.running.size < 2 &&
      faultRng.chance(hostFaults.readerOverlapRate)
    ) {
      // So does a reader, of another key (a key's concurrency is what the linearizability
      // check pays for): one server then owes two FILTERs to one host.
      const others = keys.filter((k) => k !== planned.key);
      if (others.length > 0) {
        client.plan[0].key = faultRng.pick(others);
        client.nextStart = network.now + faultRng.range(0, 30);
      }
    }
    await launch(client, run, opId);
  };

  /**
   * A read finished. A striped value is read whole: the first read named its version and
   * layout, each other stripe is read pinned to that version. Returns whether a further
   * stripe read is under way (the operation goes on).
   */
  const readStripes = async (client: Client, run: Running, r: ReadResult): Promise<boolean> => {
    const a = run.assembly;
    if (!a) {
      if (!r.layout || !r.candidate) {
        checker.readDone(run.record, client.name, r);
        return false;
      }
      const count = r.layout.digests.length;
      const stripes = new Array<Uint8Array | undefined>(count).fill(undefined);
      stripes[r.stripe ?? 0] = r.value;
      const queue = Array.from({ length: count }, (_, i) => i).filter((i) => i !== (r.stripe ?? 0));
      run.assembly = { first: { ...r, layout: r.layout, candidate: r.candidate }, stripes, queue };
    } else {
      // A pinned read returns that version's stripe, or fails: never another version or stripe.
      const { first } = a;
      if (compareTimestamps(r.ts, first.ts) !== 0 || !r.layout || !sameLayout(r.layout, first.layout) || r.stripe !== a.asked)
        checker.violations.push(
          `pinned read: ${client.name} asked ${run.record.key} for stripe ${a.asked} at ${first.ts.num} and got stripe ${r.stripe} at ${r.ts.num}${r.layout ? '' : ' without a layout'}`,
        );
      a.stripes[a.asked!] = r.value;
    }
    const asm = run.assembly!;
    const next = asm.queue.shift();
    if (next === undefined) {
      const parts = asm.stripes.map((p) => p ?? new Uint8Array(0));
      checker.stripesRead(client.name, run.record.key, parts);
      checker.readDone(run.record, client.name, { ...asm.first, value: concat(parts) });
      return false;
    }
    asm.asked = next;
    const opId = client.nextOpId++;
    // Half the pinned reads pass the layout on (servers then answer without it).
    const op = protocol.reader({ config, crypto, codec, verifier: client.verifier }, run.record.key, opId, {
      stripe: next,
      pinned: asm.first.candidate,
      ...(stripeRng.chance(0.5) ? { layout: asm.first.layout } : {}),
    });
    for (const [id, r2] of client.running) if (r2 === run) client.running.delete(id);
    run.op = op;
    client.running.set(opId, run);
    await launch(client, run, opId);
    return true;
  };

  const deliverToServer = async (m: InFlight) => {
    const index = Number(m.to.slice(1));
    const server = servers[index]!;
    if (server instanceof ByzantineServer) {
      const message = decodeMessage(m.frame, { n });
      if (!isRequest(message)) return; // a correct server's reply to this server's own request
      for (const e of await server.receive(m.from, message)) {
        if ('reply' in e) network.send(m.to, m.from, encodeMessage(e.reply), e.slow ?? false, m.connection);
        else send(m.to, e.to, e.request);
      }
      return;
    }
    const r = await server.handleFrame(m.frame);
    if (r.failure)
      checker.violations.push(`s${index} failed: ${r.failure instanceof Error ? r.failure.message : JSON.stringify(r.failure)}`);
    network.send(m.to, m.from, r.reply, false, m.connection);
    if (m.from === 'mallory') {
      const reply = decodeMessage(r.reply, { n }) as Reply;
      // A server that lost its disk lost what made some forgeries refusable (a stored stripe,
      // an entry held): it counted against t, and is held to no expectation from then on.
      checker.hostileReply(index, reply, diskLost.has(index) ? undefined : expectations.get(reply.opId));
    }
  };

  const deliverToClient = async (m: InFlight) => {
    if (m.to === 'mallory') return mallory.receive(Number(m.from.slice(1)), decodeMessage(m.frame, { n }) as Reply);
    if (m.to === 'forger') return forger?.receive(Number(m.from.slice(1)), decodeMessage(m.frame, { n }) as Reply);
    if (m.to.startsWith('rb')) return rebuilds.get(m.to)?.receive(Number(m.from.slice(1)), decodeMessage(m.frame, { n }) as Reply);
    const client = clientByName.get(m.to)!;
    const from = Number(m.from.slice(1));
    const link = client.links[from]!;
    // A reply sent on a connection that closed since never arrives.
    if (client.crashed || link.state !== 'open' || m.connection !== link.connection) return;
    if (faultRng.chance(hostFaults.dropRate)) {
      // The connection closes as this reply comes: lost, with whatever else was on its way back.
      linkDown(client, link, 'connection closed');
      return;
    }
    // A frame over the client's limit: from a correct server, an answer carrying a value too
    // large for this client; from a Byzantine one, that or garbage padded past the limit.
    const padded = byzIndices.has(from) && faultRng.chance(hostFaults.oversizeRate);
    if (padded || m.frame.length > client.maxFrame) {
      oversizedArrives(client, link, from, m.frame);
      return;
    }
    if (decodeHeader(m.frame)?.type === 'ERROR') {
      const reply = decodeMessage(m.frame, { n }) as Reply;
      const op = client.host.operationOf(reply.opId);
      const run = op && [...client.running.values()].find((r) => r.op === op);
      if (run && reply.type === 'ERROR') {
        if (options.rotate && EPOCH_CODES.has(reply.code)) {
          // A server of another key epoch: the operation may still get n − t answers of its
          // own epoch, or fail with t + 1 refusals; if neither (a silent Byzantine server),
          // its client gives up on it, as a real client's timeout would.
          run.epochRefusal ??= new ProtocolError(reply.code, reply.message);
          giveUp(run, WRITE_TIMEOUT);
        } else if (allowedFailure(client, reply.code, run)) {
          // A refused write may neither reach n − t acks nor more than t refusals (a silent
          // Byzantine server); a real client ends it with its timeout, so its client gives
          // up on it: the write stays pending in the history (it may still take effect). One
          // straggler's refusal need not end a striped write, which fails at t + 1 refusals:
          // that one gets a while longer.
          run.refused ??= new ProtocolError(reply.code, reply.message);
          giveUp(run, run.stripes ? WRITE_TIMEOUT : 0);
        }
      }
    }
    client.host.receive(from, m.frame);
  };

  /**
   * A frame over `client`'s limit arrives from server `from`: the transport discards it and
   * closes the connection, showing the frame's header or not as the platform does.
   */
  const oversizedArrives = (client: Client, link: SimLink, from: number, frame: Uint8Array) => {
    oversizedFrames++;
    const reason = `sent a frame over the limit of ${client.maxFrame} bytes`;
    const head = faultRng.chance(hostFaults.headShown) ? frame.slice(0, 2048) : undefined;
    linkDown(client, link, reason);
    const before = link.blames;
    client.host.oversized(from, reason, head);
    // No correct server's answer is that large unless it answers a FILTER: one a writer
    // gets (writers never read), or one whose header says it is not a FILTER_ACK, is
    // misbehaving, at once.
    const unexcused = client.role !== 'reader' || (head !== undefined && decodeHeader(head)?.type !== 'FILTER_ACK');
    if (unexcused && link.blames === before)
      checker.violations.push(`${client.name}'s host did not blame s${from} for a frame over its limit that no correct server sends`);
  };

  /** `client`'s link closes; it reopens a while later, and the host is told. */
  const linkDown = (client: Client, link: SimLink, reason: string) => {
    linksClosed++;
    link.drop(reason);
    clock.setTimer(faultRng.range(...hostFaults.reopenAfter), () => {
      if (client.crashed) return;
      link.reopen();
      client.host.opened(link.index);
    });
  };

  /** `run`'s client gives up on it in `ms`, unless it ends first. */
  const giveUp = (run: Running, ms: number) => {
    if (run.cancelGiveUp) return;
    run.cancelGiveUp = clock.setTimer(ms, () => run.abort?.abort());
  };

  /** An operation ended at its host: check its result, or whether it was allowed to fail. */
  const ended = async ({ client, run, opId, result, error }: (typeof outcomes)[number]) => {
    client.running.delete(opId);
    run.cancelGiveUp?.();
    run.cancelGiveUp = undefined;
    if (client.crashed) return;
    if (error !== undefined) {
      (run.op as { abandon?: () => void }).abandon?.();
      const what = run.listing ? 'listing' : `${run.record.kind} of ${run.record.key}`;
      if (!(error instanceof PowerStoreError)) {
        // The operation is dead; the client stops, and the run fails.
        checker.violations.push(`${client.name}'s ${what} threw: ${error instanceof Error ? error.message : JSON.stringify(error)}`);
        client.crashed = true;
        return;
      }
      if (error.code === 'ABORTED' || error.code === 'QUORUM_UNREACHABLE') {
        // Given up after an allowed refusal, or timed out (which no correct client's operation should).
        const refusal = run.epochRefusal ?? run.refused;
        if (!refusal) {
          checker.violations.push(`${client.name}'s ${what} failed: ${error.code}: ${error.message}`);
        } else {
          if (run.epochRefusal) staleOps++;
          if (client.role !== 'reader') {
            checker.writeFailed(client.name, run.record.key, refusal, true);
            writeEnded(client);
          }
        }
        if (client.nextStart === undefined) scheduleNext(client, false);
        return;
      }
      if (error.code === 'VALUE_TOO_LARGE' && client.maxFrame < SIM_MAX_FRAME && stripedKeys.has(run.record.key)) {
        // A reader with a small limit asked for a large stripe: it fails, as it must, and
        // stays out of the history, like any failed read.
        tooLarge++;
        if (client.nextStart === undefined) scheduleNext(client, false);
        return;
      }
      const cause = error.cause;
      if (!(cause instanceof ProtocolError)) {
        checker.violations.push(`${client.name}'s ${what} failed: ${error.code}: ${error.message}`);
      } else if (run.assembly && cause.code === 'VALUE_CHANGED') {
        // The version being read was collected before its other stripes were: the read
        // fails (as a streaming get does) and stays out of the history, like any failed read.
        checker.valueChanged++;
      } else if (client.role === 'reader' && options.rotate && epochFailure(cause, byzIndices)) {
        // Refused by servers of another key epoch: it fails, as it must, and stays out of the history.
        staleOps++;
      } else if (client.role === 'reader') {
        checker.violations.push(`${client.name}'s ${what} failed: ${cause.code}: ${cause.message}`);
      } else {
        const stale = options.rotate === true && epochFailure(cause, byzIndices);
        if (stale) staleOps++;
        checker.writeFailed(
          client.name,
          run.record.key,
          cause,
          stale || allowedFailure(client, cause.code, run, cause.message, byzIndices),
        );
        writeEnded(client);
      }
    } else if (run.listing) {
      checker.listDone(run.record, client.name, result as ListPage, keys);
    } else if (client.role === 'reader') {
      if (await readStripes(client, run, result as ReadResult)) return;
    } else {
      if (run.stripes) stripedWritesDone++;
      checker.writeDone(run.record, client.name, result as WriteResult);
      writeEnded(client);
    }
    if (client.nextStart === undefined) scheduleNext(client, false);
  };

  /**
   * Once a partition heals, the correct servers on its smaller side catch up (those not
   * rebuilding already): they may have missed writes the other side completed.
   */
  const partitionHealed = async (cut: { readonly a: ReadonlySet<string>; readonly b: ReadonlySet<string> }) => {
    const side = (x: ReadonlySet<string>) => correct.filter((i) => x.has(`s${i}`));
    const a = side(cut.a);
    const b = side(cut.b);
    for (const j of a.length <= b.length ? a : b) if (!rebuilds.has(`rb${j}`)) await startHost(j, 'catch-up');
  };

  /** Runs the simulation until nothing is left to happen (or the step bound). */
  const drain = async () => {
    for (const c of clients) clientByName.set(c.name, c);
    while (true) {
      await settle();
      step++;
      if (step > MAX_STEPS) {
        checker.violations.push(`no termination within ${MAX_STEPS} steps`);
        return;
      }
      const cut = network.partition;
      network.updatePartition([...servers.map((_, i) => `s${i}`), ...clients.map((c) => c.name), 'mallory']);
      if (options.rebuild && cut && !network.partition) await partitionHealed(cut);
      const message = network.next();
      let starter: Client | undefined;
      for (const c of clients) {
        if (c.crashed || c.nextStart === undefined || c.plan.length === 0) continue;
        if (!starter || c.nextStart < starter.nextStart!) starter = c;
      }
      const attackAt = attackTimes[0]?.at;
      const eventAt = events[0]?.at;
      let host: Rebuild | undefined;
      for (const h of rebuilds.values()) if (h.timerAt !== undefined && (!host || h.timerAt < host.timerAt!)) host = h;
      const hostAt = host?.timerAt;
      // Clients' hosts' timers (fragment waits, timeouts) and their clients' give-ups.
      const clockAt = clock.nextAt;
      const times = [message?.at, starter?.nextStart, attackAt, clockAt, eventAt, hostAt].filter((x): x is number => x !== undefined);
      // Policy changes, the ends of authority and rotation steps alone do not keep a run going.
      if (times.length === 0 || (times.length === 1 && eventAt !== undefined)) {
        const healed = network.partition;
        if (network.heal()) {
          if (options.rebuild && healed) await partitionHealed(healed);
          continue;
        }
        return;
      }
      const at = Math.min(...times);
      // Timers reach far (a rebuild host's give-up is 200 000 away, a client's timeout
      // further): a partition ending before one fires ends first, so the answers it held arrive.
      const ends = network.partitionEnds;
      if ((at === hostAt || at === clockAt) && ends !== undefined && ends < at && ends >= network.now) {
        network.now = ends;
        continue;
      }
      network.now = Math.max(network.now, at);
      if (starter && starter.nextStart === at) {
        await startOp(starter);
        continue;
      }
      if (attackAt === at) {
        const { attack, target } = attackTimes.shift()!;
        mallory.launch(attack, target);
        continue;
      }
      if (eventAt === at) {
        await events.shift()!.run();
        continue;
      }
      if (clockAt === at) {
        clock.fireNext();
        continue;
      }
      if (host && hostAt === at) {
        await host.fire();
        continue;
      }
      const m = message!;
      network.take(m);
      const batch = [m, ...network.concurrentWith(m, isServer)];
      if (batch.length > 1) await Promise.all(batch.map(deliverToServer));
      else if (isServer(m.to)) await deliverToServer(m);
      else await deliverToClient(m);
    }
  };
  await drain();

  // Wait-freedom: every operation of a correct client finished (or failed as allowed).
  for (const c of clients) {
    if (c.crashed) continue;
    for (const run of c.running.values())
      checker.stuck(c.name, run.record.kind, run.record.key, (run.op as { phase?: string }).phase ?? '?');
    if (c.plan.length > 0) checker.violations.push(`${c.name} never got to start ${c.plan.length} operations`);
  }
  // Catch-up at the end, once the network has healed (it has: nothing is left in flight):
  // every correct server lists the cluster's completed writes and repairs what it misses.
  // After the run, so the run itself is what it was; for some ordinary seeds too (their own
  // stream), and never with `rotate` (a host of another key epoch would be refused).
  const catchUp = !options.rotate && (options.rebuild === true || new Prng(seed * 9973 + 5).chance(CATCH_UP_SHARE));
  if (catchUp) {
    for (const h of rebuilds.values())
      checker.violations.push(`${h.kind}: s${h.ctx.index}'s never finished (${h.passes} passes, ${h.state})`);
    rebuilds.clear();
    lost.clear();
    const floors = await lcFloors(checker, storages, correct, t);
    for (const j of correct) await startHost(j, 'catch-up');
    await drain();
    for (const h of rebuilds.values())
      checker.violations.push(`catch-up: s${h.ctx.index}'s never finished (${h.passes} passes, ${h.state})`);
    await checkConverged(checker, storages, inners, correct, floors);
  }
  await checker.verifyStoredEntries(crypto, new CertificateVerifier(crypto, finalCluster()));

  // Uploads never finished are gone once idle: the clock moves past uploadIdleMs (and any
  // skew) and every correct server sweeps the keys it lists as unfinished, as hosts do.
  network.now += UPLOAD_IDLE + 2 * opts.network.clockSkew + 1;
  for (const [i, s] of storages.entries()) {
    if (byzIndices.has(i)) continue;
    const unfinished: string[] = [];
    for await (const key of s.unfinishedKeys()) unfinished.push(key);
    for (const key of unfinished) await inners[i]!.sweep(key);
    for (const key of s.keys()) await s.withKey(key, (r) => checker.unfinishedKept(`s${i}`, key, r));
  }
  // Quotas held at every correct server. Repairs (a rebuild's, a catch-up's) are charged to
  // the owner but not refused by the quota (the write was admitted where it was made): a
  // server that repaired holds at most what its other servers do.
  const malloryOwner = ownerIdOf(crypto, cast.mallory.publicKey);
  for (const [i, s] of storages.entries()) {
    if (byzIndices.has(i)) continue;
    const repaired = diskLost.has(i) || catchUp;
    checker.quota(`s${i}`, malloryOwner, s.usage(malloryOwner).bytes, (repaired ? n - 1 : 1) * cast.malloryQuota);
  }
  // One valid content per timestamp: correct servers' lc agree wherever their timestamps do.
  await checkLcAgreement(
    checker,
    storages.filter((_, i) => !byzIndices.has(i)),
  );
  // Bounded history: below lc, at most δ entries (none below a completed delete).
  for (const [i, s] of storages.entries()) if (!byzIndices.has(i)) await checkHistoryBound(checker, `s${i}`, s, opts.storage.historyKeep);
  // Every stored entry is one its key's index lists, and the other way round.
  for (const [i, s] of storages.entries()) if (!byzIndices.has(i)) await checkIndexMatchesEntries(checker, `s${i}`, s);
  checker.fence();
  const history = checker.linearizability();

  return {
    seed,
    t,
    ok: checker.violations.length === 0,
    violations: checker.violations,
    options: `${describeOptions(opts)}\n${describeHostFaults(hostFaults)}`,
    history,
    steps: step,
    lists: checker.lists,
    messages: network.sent,
    byzantine,
    attacks: mallory.mounted,
    crashedWriters,
    reads: checker.history.filter((o) => o.kind === 'read' && o.ret !== undefined).length,
    writes: checker.history.filter((o) => o.kind === 'write' && o.ret !== undefined).length,
    overlappingWrites,
    failedWrites: Object.fromEntries(checker.failedWrites),
    refusals: Object.fromEntries(checker.refusals),
    readRounds: Object.fromEntries(checker.readRounds),
    writeRounds: Object.fromEntries(checker.writeRounds),
    contention: opts.workload.contention,
    stripedWrites,
    stripedWritesDone,
    crashedMidStripe,
    stripedReads: checker.stripedReads,
    valueChanged: checker.valueChanged,
    hostFaults: { linksClosed, oversized: oversizedFrames, tooLarge },
    rotation,
    staleOps,
    rebuilds: rebuildLog,
    repairs: catchUp || options.rebuild ? { ...checker.repairs, runs: 1 } : {},
    fences: { ...mallory.fenceStats, jumps: checker.jumps, 'fenced reads': checker.fencedReads },
  };
}

/** Share of ordinary seeds (not `rebuild`) that catch up at the end and are checked for it. */
const CATCH_UP_SHARE = 0.25;

/**
 * Before the final catch-up, for each key: the timestamp every correct server's `lc` must
 * reach by the end. The latest honest write that completed, and the (t + 1)-th highest `lc`
 * among correct servers: at least t + 1 correct servers hold a write at least that high, so
 * any n − t answers to a listing name it (or a newer one).
 */
async function lcFloors(
  checker: Checker,
  storages: readonly MemoryStorage[],
  correct: readonly number[],
  t: number,
): Promise<Map<string, Timestamp>> {
  const keys = new Set(correct.flatMap((i) => storages[i]!.keys()));
  const floors = new Map<string, Timestamp>();
  for (const key of keys) {
    const lcs: Timestamp[] = [];
    for (const i of correct) lcs.push((await storages[i]!.withKey(key, (r) => r.getLc()))?.ts ?? TS0);
    lcs.sort((a, b) => compareTimestamps(b, a));
    const done = checker.completedTop(key);
    floors.set(key, done && compareTimestamps(done, lcs[t]!) > 0 ? done : lcs[t]!);
  }
  for (const key of checker.completedKeys()) if (!floors.has(key)) floors.set(key, checker.completedTop(key)!);
  return floors;
}

/**
 * After the final catch-up: every completed write is on every correct server. For each
 * key, each correct server's `lc` reaches the key's floor ({@link lcFloors}: a newer write
 * may have superseded it), and the server holds `lc`'s entry (every stripe), unless its
 * writer encoded it inconsistently (no repair may store that).
 */
async function checkConverged(
  checker: Checker,
  storages: readonly MemoryStorage[],
  servers: readonly Server[],
  correct: readonly number[],
  floors: ReadonlyMap<string, Timestamp>,
): Promise<void> {
  for (const [key, floor] of floors) {
    for (const i of correct) {
      const lc = await storages[i]!.withKey(key, (r) => r.getLc());
      if (compareTimestamps(lc?.ts ?? TS0, floor) < 0) {
        checker.violations.push(`catch-up: s${i}'s lc of ${key} is ${lc ? lc.ts.num : 'none'}, below the completed write at ${floor.num}`);
        continue;
      }
      if (lc && !checker.isUneven(key, lc.ts) && !(await servers[i]!.holds(key, lc.ts))) {
        const holders: string[] = [];
        for (const j of correct) if (await servers[j]!.holds(key, lc.ts)) holders.push(`s${j}`);
        checker.violations.push(
          `catch-up: s${i} does not hold the entry of its lc of ${key} (${lc.ts.num}) after catching up (correct servers holding it: ${holders.join(', ') || 'none'})`,
        );
      }
    }
  }
}

/** Refusals by servers of another key epoch than the client's (`rotate`). */
const EPOCH_CODES: ReadonlySet<string> = new Set(['CLUSTER_OUTDATED', 'SERVER_OUTDATED']);

/**
 * Whether an operation's failure is the refusal of servers of another key epoch: its code,
 * or t + 1 refusals of different codes (`INTERNAL`), every correct server's among them an
 * epoch refusal or one the run allows anyway.
 */
function epochFailure(error: ProtocolError, byzantine: ReadonlySet<number>): boolean {
  if (EPOCH_CODES.has(error.code)) return true;
  if (error.code !== 'INTERNAL') return false;
  const codes = [...error.message.matchAll(/s(\d+): ([A-Z_]+) \(/g)].filter((m) => !byzantine.has(Number(m[1]) - 1)).map((m) => m[2]!);
  return (
    codes.some((c) => EPOCH_CODES.has(c)) &&
    codes.every((c) => EPOCH_CODES.has(c) || ['GRANT_EXPIRED', 'SUPERSEDED', 'STRIPES_MISSING'].includes(c))
  );
}

/** Garbage collection kept what it must and no more: below `lc`, at most δ entries, none below a completed delete. */
async function checkHistoryBound(checker: Checker, server: string, storage: MemoryStorage, keep: number): Promise<void> {
  for (const key of storage.keys()) {
    const { lc, index } = await storage.withKey(key, async (r) => ({ lc: await r.getLc(), index: await r.index() }));
    if (!lc) continue;
    // Writes with their head: an upload without stripe 0 overtaken by a completed write is
    // kept while its stripes keep arriving (not below a delete), then deleted once idle.
    const below = index.filter((e) => compareTimestamps(e.ts, lc.ts) < 0 && (e.head || lc.cert.tombstone)).length;
    // A completed delete erases everything below it, whether or not this server stored the delete.
    const bound = lc.cert.tombstone ? 0 : keep;
    if (below > bound)
      checker.violations.push(
        `history bound: ${server} keeps ${below} entries of ${key} below lc (δ = ${keep}${lc.cert.tombstone ? ', lc is a delete' : ''})`,
      );
  }
}

/**
 * The only ways an honest write may fail: the expiring grantee's grant has expired; or a
 * striped write, which cannot take a fresh timestamp (its stripes were pulled from a
 * source and are gone), was overtaken (`SUPERSEDED`), or its stripe 0 reached a server
 * before one of its other stripes did (`STRIPES_MISSING`: the simulated network does not
 * keep a link's messages in order, TCP does).
 */
function allowedFailure(
  client: Client,
  code: string,
  run: Running | undefined,
  message = '',
  byzantine: ReadonlySet<number> = new Set(),
): boolean {
  const allowed = (c: string) =>
    (client.role === 'expiring' && c === 'GRANT_EXPIRED') ||
    (run?.stripes !== undefined && (c === 'SUPERSEDED' || c === 'STRIPES_MISSING'));
  // t + 1 refusals, some of each kind: `Rejections` reports them as INTERNAL, listing each
  // as `s<index + 1>`. What Byzantine servers gave as their reason does not matter: they
  // may refuse anything, and the correct servers' refusals must each be allowed.
  const codes = [...message.matchAll(/s(\d+): ([A-Z_]+) \(/g)].filter((m) => !byzantine.has(Number(m[1]) - 1)).map((m) => m[2]!);
  return allowed(code) || (code === 'INTERNAL' && codes.length > 0 && codes.every(allowed));
}

/** Two correct servers whose `lc` of a key has the same timestamp hold the same candidate. */
async function checkLcAgreement(checker: Checker, storages: readonly MemoryStorage[]): Promise<void> {
  const seen = new Map<string, string>();
  for (const s of storages) {
    for (const key of s.keys()) {
      const lc = await s.withKey(key, (r) => r.getLc());
      if (!lc) continue;
      const id = `${key}@${lc.ts.num}:${Buffer.from(lc.ts.writerId).toString('hex')}`;
      // The delete flag too: a copy with it flipped is another content under the same signature.
      const sig = `${Buffer.from(lc.cert.signature).toString('hex')}${lc.cert.tombstone ? '/delete' : ''}`;
      const before = seen.get(id);
      if (before !== undefined && before !== sig) checker.violations.push(`two valid contents for one timestamp: ${id}`);
      seen.set(id, sig);
    }
  }
}

/** The command that replays one run exactly. */
export function replayCommand(
  seed: number,
  t: number,
  {
    mutant,
    hostile,
    contention,
    lists,
    stripes,
    rotate,
    rebuild,
  }: {
    mutant?: string;
    hostile?: boolean;
    contention?: boolean;
    lists?: boolean;
    stripes?: boolean;
    rotate?: boolean;
    rebuild?: boolean;
  } = {},
): string {
  // A mutant always runs hostile, so its replay needs no flag for it.
  const flags =
    (mutant ? ` --mutant ${mutant}` : hostile ? ' --hostile' : '') +
    (contention ? ' --contention' : '') +
    (lists ? ' --lists' : '') +
    (stripes ? ' --stripes' : '') +
    (rotate ? ' --rotate' : '') +
    (rebuild ? ' --rebuild' : '');
  return `pnpm sim -- --seed ${seed} --t ${t}${flags}`;
}
