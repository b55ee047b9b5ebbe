/**
 * The honest clients: writers with identities and grants (the owner, a grantee, the admin,
 * a grantee whose grant expires mid-run) and readers, each running its planned operations,
 * overlapping, on the production operation host (`@powerstore/client/host`) with links to
 * every server (`client-host.ts`). Here they start operations and send; writers crash
 * part-way through a round; connections close under them and frames over their limit
 * arrive; refusals make a client give up on an operation. How each operation ended is
 * judged in `outcomes.ts`.
 */
import {
  CertificateVerifier,
  decodeHeader,
  decodeMessage,
  MIN_STRIPE_SIZE,
  ProtocolError,
  WriterSession,
  type ClientOperation,
  type ClusterIdentity,
  type Grant,
  type ListPage,
  type ReadResult,
  type ReadTarget,
  type Reply,
  type Signer,
  type StripeLayout,
  type WriteResult,
  type WriteValue,
  type WriterSessionOptions,
} from '@powerstore/protocol';
import { OperationHost } from '@powerstore/client/host';
import type { Author, MutableOp } from './checkers.js';
import { SimLink } from './client-host.js';
import type { Cluster } from './cluster.js';
import type { InFlight } from './network.js';
import { batchWindowOf, SIM_MAX_FRAME, SIM_OP_TIMEOUT, SMALL_FRAME, STRIPED_SHARE, STRIPED_SHARE_MANY, WRITE_TIMEOUT } from './options.js';
import { allowedFailure, EPOCH_CODES } from './outcomes.js';
import type { Prng } from './prng.js';
import { concat, sourceOf, stripedValue } from './stripes.js';
import type { World } from './world.js';

export type Role = 'owner' | 'grantee' | 'admin' | 'expiring';

/** Each role's rank over the owner's keys (`window.ts`). */
export const RANKS: Record<Role, Author['rank']> = { owner: 2, admin: 3, grantee: 1, expiring: 1 };

type Planned = { key: string; readonly kind: 'write' | 'delete' | 'read' | 'list' };

/** A read of a striped value, stripe by stripe: the first read's result, then pinned reads of the others. */
export interface Assembly {
  readonly first: ReadResult & { layout: StripeLayout; candidate: NonNullable<ReadResult['candidate']> };
  readonly stripes: (Uint8Array | undefined)[];
  /** Stripes still to read, in order. */
  readonly queue: number[];
  /** The stripe the pinned read in flight asked for. */
  asked?: number;
}

/** An operation a client has running. */
export interface Running {
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

/** One honest client. */
export interface Client {
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
   * ends: it never crashes, and its end lets the attacker complete its plants late (`ended`).
   */
  readonly fence?: { readonly number: number; readonly reader: Client; readonly ended: () => void };
}

/** An operation that ended at its host: its result, or why it failed. */
export interface Outcome {
  readonly client: Client;
  readonly run: Running;
  readonly opId: number;
  readonly result?: unknown;
  readonly error?: unknown;
}

/** What the honest clients did and met, for the report. */
export interface ClientStats {
  crashedWriters: number;
  /** Writes of two operations of one session on one key overlapping in time. */
  overlappingWrites: number;
  stripedWrites: number;
  stripedWritesDone: number;
  /** Striped writes whose writer crashed in a STORE round of a stripe other than 0. */
  crashedMidStripe: number;
  linksClosed: number;
  /** Frames over a client's limit. */
  oversized: number;
  /** Reads that failed as too large for a reader with a small limit. */
  tooLarge: number;
  /** With `rotate`: operations that ended refused by servers of another key epoch. */
  staleOps: number;
  /** Certificates honest writers signed under a batch root shared with others. */
  batchedCertificates: number;
}

/** The honest clients of a run, and what happens at their hosts' links. */
export class HonestClients {
  readonly world: World;
  readonly #cluster: Cluster;
  /** In the order they were made: the order they are settled in, and the first of those due together starts first. */
  readonly all: Client[] = [];
  /** Clients by name (all of them exist before the first operation starts). */
  readonly #byName = new Map<string, Client>();
  /** Operations that ended, as their hosts report them: handled in order as each step settles. */
  readonly outcomes: Outcome[] = [];
  readonly stats: ClientStats = {
    crashedWriters: 0,
    overlappingWrites: 0,
    stripedWrites: 0,
    stripedWritesDone: 0,
    crashedMidStripe: 0,
    linksClosed: 0,
    oversized: 0,
    tooLarge: 0,
    staleOps: 0,
    batchedCertificates: 0,
  };
  /** Honest sessions' certificate batching, in the runs that batch (`batchWindowOf`). */
  get #certificateBatching(): Pick<WriterSessionOptions, 'certificateBatching'> {
    const window = batchWindowOf(this.world.options.seed);
    return window ? { certificateBatching: window } : {};
  }
  /** Counts the certificates of every batch an honest session signed. */
  readonly #countBatch = (n: number): void => {
    if (n > 1) this.stats.batchedCertificates += n;
  };
  /** Keys some striped write was made to (a reader with a small limit may find them too large). */
  readonly stripedKeys = new Set<string>();
  readonly #identities: Record<Role, { signer: Signer; grants: Grant[] }>;
  readonly #stripedShare: number;
  readonly #crashRng: Prng;
  readonly #writerRandom: Prng;

  /**
   * The writers and readers, each with its plan (from the main stream, in that order; the
   * readers' frame limits from the faults stream, which listings from the lists stream),
   * then the crash and writer streams forked from the main one.
   */
  constructor(world: World, cluster: Cluster) {
    this.world = world;
    this.#cluster = cluster;
    const { options, drawn, prng, streams, network, cast, crypto, keys, hostFaults } = world;
    this.#identities = {
      owner: { signer: cast.owner, grants: [] },
      grantee: { signer: cast.grantee, grants: [cast.granteeGrant] },
      admin: { signer: cast.admin, grants: [] },
      expiring: { signer: cast.expiring, grants: [cast.expiringGrant] },
    };
    const roles: Role[] = (['owner', ...prng.shuffle(['grantee', 'admin', 'expiring'] as const)] as Role[]).slice(
      0,
      drawn.workload.writers,
    );
    const planOf = (kind: 'read' | 'write') =>
      Array.from({ length: prng.range(...drawn.workload.opsPerClient) }, (): Planned => ({
        key: prng.pick(keys),
        kind: kind === 'read' ? 'read' : prng.chance(drawn.workload.deleteRate) ? 'delete' : 'write',
      }));
    for (const [w, role] of roles.entries()) {
      const { signer, grants } = this.#identities[role];
      const session = new WriterSession({
        crypto,
        cluster: cast.cluster,
        signer,
        instance: prng.bytes(16),
        grants,
        ...this.#certificateBatching,
        onCertificatesSigned: this.#countBatch,
      });
      this.#add({
        name: `w${w}`,
        role,
        session,
        verifier: session.verifier,
        plan: planOf('write'),
        running: new Map(),
        nextOpId: 1,
        nextStart: network.now + prng.range(0, 100),
        crashed: false,
        ...this.#hostOf(`w${w}`),
      });
    }
    for (let r = 0; r < drawn.workload.readers; r++) {
      const verifier = new CertificateVerifier(crypto, cast.cluster);
      this.#add({
        name: `r${r}`,
        role: 'reader',
        session: undefined,
        verifier,
        plan: planOf('read'),
        running: new Map(),
        nextOpId: 1,
        nextStart: network.now + prng.range(0, 100),
        crashed: false,
        ...this.#hostOf(`r${r}`, streams.faults.chance(hostFaults.smallReaders) ? SMALL_FRAME : SIM_MAX_FRAME),
      });
    }
    if (options.lists)
      for (const c of this.all)
        if (c.role === 'reader') for (const p of c.plan) if (streams.lists.chance(0.25)) (p as { kind: Planned['kind'] }).kind = 'list';
    this.#crashRng = prng.fork();
    this.#writerRandom = prng.fork();
    this.#stripedShare = options.stripes ? STRIPED_SHARE_MANY : STRIPED_SHARE;
  }

  /**
   * Fence attack `number` on `key`: the owner's or the admin's write of it, due once the
   * attacker's authority has ended everywhere (at `lost`), and a reader of it after that
   * write; `ended` is told when the write ends. Drawn from the fence stream.
   */
  addFence(number: number, key: string, lost: number, ended: () => void): void {
    const { streams, cast, crypto } = this.world;
    const rng = streams.fences;
    const role: Role = rng.chance(0.5) ? 'owner' : 'admin';
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
      ...this.#hostOf(`fr${number}`),
    };
    const { signer } = this.#identities[role];
    const session = new WriterSession({
      crypto,
      cluster: cast.cluster,
      signer,
      instance: rng.bytes(16),
      ...this.#certificateBatching,
      onCertificatesSigned: this.#countBatch,
    });
    this.#add({
      name: `fw${number}`,
      role,
      session,
      verifier: session.verifier,
      plan: [{ key, kind: rng.chance(0.2) ? 'delete' : 'write' }],
      running: new Map(),
      nextOpId: 1,
      nextStart: lost + rng.range(1, 300),
      crashed: false,
      ...this.#hostOf(`fw${number}`),
      fence: { number, reader, ended },
    });
    this.#add(reader);
  }

  /** `client` loads a new cluster file (`rotate`): operations already running keep their old one. */
  loadIdentity(client: Client, identity: ClusterIdentity): void {
    const { crypto, streams } = this.world;
    if (client.role === 'reader') client.verifier = new CertificateVerifier(crypto, identity);
    else {
      const { signer: who, grants } = this.#identities[client.role];
      client.session = new WriterSession({
        crypto,
        cluster: identity,
        signer: who,
        instance: streams.rotation.bytes(16),
        grants,
        ...this.#certificateBatching,
        onCertificatesSigned: this.#countBatch,
      });
      client.verifier = client.session.verifier;
    }
  }

  /** The client due to start an operation first (the first made among those due together), if any. */
  nextToStart(): Client | undefined {
    let starter: Client | undefined;
    for (const c of this.all) {
      if (c.crashed || c.nextStart === undefined || c.plan.length === 0) continue;
      if (!starter || c.nextStart < starter.nextStart!) starter = c;
    }
    return starter;
  }

  /** `client` starts the next operation of its plan. */
  async start(client: Client): Promise<void> {
    const { protocol, config, crypto, codec, cast, checker, keys, prng, streams, drawn, hostFaults, network } = this.world;
    const { t } = config;
    const planned = client.plan.shift()!;
    const opId = client.nextOpId++;
    const name = `${client.name}.${opId}`;
    client.nextStart = undefined;
    let valueBytes: Uint8Array | undefined;
    let stripes: number | undefined;
    let record: MutableOp;
    let op: Running['op'];
    if (planned.kind === 'list') {
      op = protocol.lister({ config, crypto, verifier: client.verifier }, cast.prefix, '', streams.listLimits.range(1, keys.length), opId);
      record = checker.listCall(client.name);
    } else if (client.role === 'reader') {
      // Some reads start at another stripe than 0: a striped value is then read from there.
      const target: ReadTarget = streams.stripes.chance(0.5) ? {} : { stripe: streams.stripes.range(1, 4) };
      op = protocol.reader({ config, crypto, codec, verifier: client.verifier }, planned.key, opId, target);
      record = checker.call(planned.key, client.name, 'read', null);
    } else {
      if (planned.kind === 'write') {
        const pad = prng.bytes(prng.range(0, 3 * (t + 1) + 2)).map((b) => 0x61 + (b % 26));
        valueBytes = new Uint8Array([...new TextEncoder().encode(`${name}:`), ...pad]);
      }
      // Some writes name an envelope, chosen from the value (no draw: schedules stay as they were).
      const envelope = valueBytes ? ([undefined, 'encrypted', 'public'] as const)[valueBytes.length % 3] : undefined;
      let value: WriteValue = valueBytes ? { kind: 'value', value: valueBytes, ...(envelope ? { envelope } : {}) } : { kind: 'tombstone' };
      if (valueBytes && !client.fence && streams.stripes.chance(this.#stripedShare)) {
        stripes = streams.stripes.range(2, 4);
        const parts = stripedValue(name, stripes, streams.stripes.range(1, MIN_STRIPE_SIZE));
        valueBytes = concat(parts);
        value = { kind: 'stripes', source: sourceOf(parts) };
        this.stats.stripedWrites++;
        this.stripedKeys.add(planned.key);
      }
      if (valueBytes) checker.registerValue(name, valueBytes);
      try {
        op = protocol.writer(
          { config, crypto, codec, session: client.session!, random: (len) => this.#writerRandom.bytes(len), now: this.world.time },
          planned.key,
          value,
          opId,
        );
      } catch (err) {
        // Refused before any traffic (an expired grant, by the client's clock): no effect.
        if (!(err instanceof ProtocolError)) throw err;
        checker.writeFailed(client.name, planned.key, err, allowedFailure(client, err.code, undefined));
        this.scheduleNext(client, false);
        this.writeEnded(client);
        return;
      }
      if ([...client.running.values()].some((r) => r.record.key === planned.key && r.record.kind === 'write'))
        this.stats.overlappingWrites++;
      const role = client.role;
      record = checker.call(planned.key, client.name, 'write', valueBytes ? name : null, { identity: role, rank: RANKS[role] });
    }
    const crashIn =
      client.role !== 'reader' && !client.fence && this.#crashRng.chance(drawn.adversary.writerCrashRate)
        ? this.#crashRng.chance(0.5)
          ? 'STORE'
          : 'COMPLETE'
        : undefined;
    // A striped write crashes in any of its STORE rounds: mid-upload, or at stripe 0.
    const crashAtStore = crashIn === 'STORE' && stripes ? this.#crashRng.range(1, stripes) : undefined;
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
      client.running.size < drawn.workload.maxOverlap &&
      prng.chance(drawn.workload.overlapRate)
    ) {
      if (client.plan[0] && prng.chance(0.7)) client.plan[0].key = planned.key;
      this.scheduleNext(client, true);
    } else if (
      client.role === 'reader' &&
      !client.name.startsWith('fr') &&
      !drawn.workload.contention &&
      client.plan[0] !== undefined &&
      client.running.size < 2 &&
      streams.faults.chance(hostFaults.readerOverlapRate)
    ) {
      // So does a reader, of another key (a key's concurrency is what the linearizability
      // check pays for): one server then owes two FILTERs to one host.
      const others = keys.filter((k) => k !== planned.key);
      if (others.length > 0) {
        client.plan[0].key = streams.faults.pick(others);
        client.nextStart = network.now + streams.faults.range(0, 30);
      }
    }
    await this.launch(client, run, opId);
  }

  /** Hands `run` (its operation carrying `opId`) to its client's host. */
  async launch(client: Client, run: Running, opId: number): Promise<void> {
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
        (result) => this.outcomes.push({ client, run, opId, result }),
        (error: unknown) => this.outcomes.push({ client, run, opId, error }),
      );
    await client.host.idle();
  }

  /** `client`'s next operation is due soon (one overlapping this), or a while after now. */
  scheduleNext(client: Client, soon: boolean): void {
    const { network, prng } = this.world;
    if (client.plan.length === 0) client.nextStart = undefined;
    else client.nextStart = network.now + (soon ? prng.range(0, 30) : prng.range(0, 200));
  }

  /** A writer's operation ended (done, failed or given up): a fence write lets its attacker complete late, and its reader go. */
  writeEnded(client: Client): void {
    if (!client.fence) return;
    client.fence.ended();
    client.fence.reader.nextStart = this.world.network.now + this.world.streams.fences.range(20, 300);
  }

  /** A crashed client's host is gone, and its operations with it. */
  closeCrashed(): void {
    for (const c of this.all) if (c.crashed && !c.host.closed) c.host.close();
  }

  /**
   * A frame from server `m.from` reaches client `m.to`: lost if its connection closed (or
   * closes now), over the client's limit, or handed to its host; a refusal may make the
   * client give up on the operation it answers.
   */
  deliver(m: InFlight): void {
    const { config, options, hostFaults, streams, byzantine } = this.world;
    const { n } = config;
    const client = this.#byName.get(m.to)!;
    const from = Number(m.from.slice(1));
    const link = client.links[from]!;
    // A reply sent on a connection that closed since never arrives.
    if (client.crashed || link.state !== 'open' || m.connection !== link.connection) return;
    if (streams.faults.chance(hostFaults.dropRate)) {
      // The connection closes as this reply comes: lost, with whatever else was on its way back.
      this.#linkDown(client, link, 'connection closed');
      return;
    }
    // A frame over the client's limit: from a correct server, an answer carrying a value too
    // large for this client; from a Byzantine one, that or garbage padded past the limit.
    const padded = byzantine.has(from) && streams.faults.chance(hostFaults.oversizeRate);
    if (padded || m.frame.length > client.maxFrame) {
      this.#oversizedArrives(client, link, from, m.frame);
      return;
    }
    if (decodeHeader(m.frame)?.type === 'ERROR') {
      const reply = decodeMessage(m.frame, { n }) as Reply;
      const run = this.#runOf(client, reply.opId);
      if (run && reply.type === 'ERROR') {
        if (options.rotate && EPOCH_CODES.has(reply.code)) {
          // A server of another key epoch: the operation may still get n − t answers of its
          // own epoch, or fail with t + 1 refusals; if neither (a silent Byzantine server),
          // its client gives up on it, as a real client's timeout would.
          run.epochRefusal ??= new ProtocolError(reply.code, reply.message);
          this.#giveUp(run, WRITE_TIMEOUT);
        } else if (allowedFailure(client, reply.code, run)) {
          // A refused write may neither reach n − t acks nor more than t refusals (a silent
          // Byzantine server); a real client ends it with its timeout, so its client gives
          // up on it: the write stays pending in the history (it may still take effect). One
          // straggler's refusal need not end a striped write, which fails at t + 1 refusals:
          // that one gets a while longer.
          run.refused ??= new ProtocolError(reply.code, reply.message);
          this.#giveUp(run, run.stripes ? WRITE_TIMEOUT : 0);
        }
      }
    }
    client.host.receive(from, m.frame);
  }

  #add(client: Client): void {
    this.all.push(client);
    this.#byName.set(client.name, client);
  }

  /** A host on links to every server, accepting frames up to `maxFrame`. */
  #hostOf(name: string, maxFrame = SIM_MAX_FRAME): { host: OperationHost; links: SimLink[]; maxFrame: number } {
    const { config, clock, protocol } = this.world;
    const links = Array.from(
      { length: config.n },
      (_, i) =>
        new SimLink(
          i,
          (frame, connection) => this.#sends(name, i, frame, connection),
          (reason) => this.#blamed(name, i, reason),
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
  }

  /**
   * A frame a client's host sends to server `to` on its link's `connection`: recorded (a
   * STORE), cut short where the writer crashes part-way through a round if planned, and
   * put on the network. Returns whether it went out.
   */
  #sends(name: string, to: number, frame: Uint8Array, connection: number): boolean {
    const { config, checker } = this.world;
    const client = this.#byName.get(name)!;
    const header = decodeHeader(frame)!;
    if (client.crashed) return header.opId === client.crashWire && this.#crashRng.chance(0.5) && this.#put(client, to, frame, connection);
    const run = this.#runOf(client, header.opId);
    if (!run) return this.#put(client, to, frame, connection);
    const m = header.type === 'STORE' ? decodeMessage(frame, { n: config.n }) : undefined;
    const store = m?.type === 'STORE' ? m : undefined;
    if (store && run.lastStoreWire !== header.opId) {
      run.lastStoreWire = header.opId;
      run.storeRounds++;
    }
    if (run.crashIn === header.type && (run.crashIn !== 'STORE' || run.storeRounds >= (run.crashAtStore ?? 1))) {
      client.crashed = true;
      client.crashWire = header.opId;
      this.stats.crashedWriters++;
      if (store && (store.stripe > 0 || (run.stripes && run.storeRounds < run.stripes))) this.stats.crashedMidStripe++;
      if (!this.#crashRng.chance(0.5)) return false;
    }
    if (store) checker.store(client.name, run.name, store.key, store.ts, run.record.value, run.valueBytes, RANKS[client.role as Role]);
    return this.#put(client, to, frame, connection);
  }

  /** The run whose round went out under wire id `wireId` from `client`'s host, if it is still running. */
  #runOf(client: Client, wireId: number): Running | undefined {
    const op = client.host.operationOf(wireId);
    return op && [...client.running.values()].find((r) => r.op === op);
  }

  #put(client: Client, to: number, frame: Uint8Array, connection: number): boolean {
    this.world.network.send(client.name, `s${to}`, frame, false, connection);
    return true;
  }

  /** A client's host blamed server `i`: never a correct server that kept its disk and its key. */
  #blamed(client: string, i: number, reason: string): void {
    if (this.world.byzantine.has(i) || this.#cluster.diskLost.has(i) || this.world.options.rotate) return;
    this.world.checker.violations.push(`${client} blamed correct s${i}: ${reason}`);
  }

  /**
   * A frame over `client`'s limit arrives from server `from`: the transport discards it and
   * closes the connection, showing the frame's header or not as the platform does.
   */
  #oversizedArrives(client: Client, link: SimLink, from: number, frame: Uint8Array): void {
    const { streams, hostFaults, checker } = this.world;
    this.stats.oversized++;
    const reason = `sent a frame over the limit of ${client.maxFrame} bytes`;
    const head = streams.faults.chance(hostFaults.headShown) ? frame.slice(0, 2048) : undefined;
    this.#linkDown(client, link, reason);
    const before = link.blames;
    client.host.oversized(from, reason, head);
    // No correct server's answer is that large unless it answers a FILTER: one a writer
    // gets (writers never read), or one whose header says it is not a FILTER_ACK, is
    // misbehaving, at once.
    const unexcused = client.role !== 'reader' || (head !== undefined && decodeHeader(head)?.type !== 'FILTER_ACK');
    if (unexcused && link.blames === before)
      checker.violations.push(`${client.name}'s host did not blame s${from} for a frame over its limit that no correct server sends`);
  }

  /** `client`'s link closes; it reopens a while later, and the host is told. */
  #linkDown(client: Client, link: SimLink, reason: string): void {
    const { clock, streams, hostFaults } = this.world;
    this.stats.linksClosed++;
    link.drop(reason);
    clock.setTimer(streams.faults.range(...hostFaults.reopenAfter), () => {
      if (client.crashed) return;
      link.reopen();
      client.host.opened(link.index);
    });
  }

  /** `run`'s client gives up on it in `ms`, unless it ends first. */
  #giveUp(run: Running, ms: number): void {
    if (run.cancelGiveUp) return;
    run.cancelGiveUp = this.world.clock.setTimer(ms, () => run.abort?.abort());
  }
}
