/**
 * Self-healing, wired together for one running server (issue 24): connections to the
 * peers (`peers.ts`), the cluster's catalog (`catalog.ts`), catch-up and rebuild
 * (`heal.ts`), scrub (`scrub.ts`), their metrics (`heal-metrics.ts`) and the `/status`
 * report that `powerstore-server status` shows side by side for every server.
 */
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { createCodec } from '@powerstore/erasure';
import {
  Server,
  type AbstractStorage,
  type Candidate,
  type CertificateVerifier,
  type Cluster,
  type CryptoProvider,
  type Request,
  type ServerOptions,
} from '@powerstore/protocol';
import { Catalog, KnownVerifier } from './catalog.js';
import { ServerError } from './errors.js';
import { createHealMetrics } from './heal-metrics.js';
import { CatchUp, DEFAULT_CATCH_UP, Repairer, type CatchUpSettings, type CatchUpStatus } from './heal.js';
import { freeBytes, LevelStorage } from './level-storage.js';
import { PeerSet, type PeerStatus } from './peers.js';
import {
  DEFAULT_SCRUB,
  DEFAULT_START_CHECK,
  Scrubber,
  type ScrubSettings,
  type ScrubStatus,
  type StartCheckSettings,
  type StartCheckStatus,
} from './scrub.js';
import { packageVersion } from './version.js';

/** What `startServer({ heal })` takes: every field has a default. */
export interface HealingOptions {
  readonly catchUp?: Partial<CatchUpSettings>;
  readonly scrub?: Partial<ScrubSettings>;
  /** The start check's budget (`scrub.ts`); `maxBytes: 0` turns it off. */
  readonly startCheck?: Partial<StartCheckSettings>;
  /**
   * The URL this server reaches a peer at, by 1-based server id, instead of the one
   * `cluster.json` lists (servers that reach each other on a private network; tests that
   * put a proxy in between).
   */
  readonly peerUrls?: Readonly<Record<number, string>>;
  /** CA certificates (PEM) trusted for `wss://` peers, besides Node's own. */
  readonly peerCa?: string | Buffer;
}

/** Self-healing's part of `/status`. */
export interface HealingStatus {
  readonly catchUp: CatchUpStatus;
  readonly scrub: ScrubStatus | undefined;
  /** What the start check found in the storage (LevelDB only). */
  readonly startCheck?: StartCheckStatus;
  readonly peers: readonly PeerStatus[];
}

/** Self-healing of a running server. */
export interface Healing {
  status(): HealingStatus;
  /** Whether this server is rebuilding (it counts against t until it is not). */
  readonly rebuilding: boolean;
  /** Damage the start check found in the storage and not repaired yet (0: none). */
  readonly storageDamaged: number;
  /** A reloaded cluster file: the peers' URLs may have changed (`--peer-url` still wins). */
  setCluster(cluster: Cluster): void;
  /** `lc` of `key` moved to `candidate`, whose entry this server does not hold: repaired soon (`CatchUp.missed`). */
  missed(key: string, candidate: Candidate): void;
  /** One catch-up pass now (tests; the loop runs them on its own). */
  runPass(): ReturnType<CatchUp['runPass']>;
  /** Stops catch-up and scrub and closes the peer connections. */
  close(): Promise<void>;
}

/** What {@link startHealing} needs from the server. */
export interface HealingContext {
  readonly cluster: Cluster;
  readonly index: number;
  readonly protocol: Server;
  readonly storage: AbstractStorage;
  readonly crypto: CryptoProvider;
  readonly registry: Registry;
  readonly log: Logger;
  /** The cluster's frame limit: the largest answer taken from a peer. */
  readonly maxFrameBytes: number;
  /** The verifier `protocol` checks validity with ({@link protocolServer}): catch-up shares it. */
  readonly verifier: KnownVerifier;
  readonly options: HealingOptions;
}

/**
 * A protocol `Server` whose validity checks remember what they found in `shared`, the
 * verifier catch-up lists and repairs with: a candidate catch-up verified in the listing is
 * not verified again when the repair stores it (four Ed25519 verifications a key, which
 * for small values are most of a rebuild's work). The checks are the protocol's own;
 * only where their results are remembered changes. Without `shared`, the protocol's `Server`.
 */
export function protocolServer(shared: CertificateVerifier | undefined, options: ServerOptions): Server {
  return shared ? new SharedValidityServer(options, shared) : new Server(options);
}

class SharedValidityServer extends Server {
  readonly #shared: CertificateVerifier;

  constructor(options: ServerOptions, shared: CertificateVerifier) {
    super(options);
    this.#shared = shared;
  }

  protected override valid(key: string, c: Candidate): Promise<boolean> {
    return this.#shared.valid(key, c, {
      certificate: (ts, cert) => this.checkCertificate(key, ts, cert),
      proof: (ts, cert, proof) => this.checkProof(key, ts, cert, proof),
    });
  }
}

/** Refuses settings that cannot work (`CONFIG_INVALID`): a `--peer-url` of no other server of the cluster. */
export function checkHealingOptions(cluster: Cluster, index: number, options: HealingOptions): void {
  const n = cluster.config.n;
  for (const [id, url] of Object.entries(options.peerUrls ?? {})) {
    const i = Number(id);
    if (!Number.isInteger(i) || i < 1 || i > n || i === index + 1) {
      throw new ServerError('CONFIG_INVALID', `--peer-url ${id}=…: not another server of this cluster (ids 1..${n}, this is ${index + 1})`);
    }
    if (!/^wss?:\/\/\S+$/.test(url)) throw new ServerError('CONFIG_INVALID', `--peer-url ${id}=…: not a ws:// or wss:// URL`);
  }
}

/** Starts catch-up (a pass at once unless it is off) and scrub (on LevelDB storage). */
export async function startHealing(ctx: HealingContext): Promise<Healing> {
  const { cluster, index, protocol, storage, crypto, options } = ctx;
  const log = ctx.log.child({ component: 'heal' });
  const { config } = cluster;
  const settings: CatchUpSettings = { ...DEFAULT_CATCH_UP, ...options.catchUp };
  const scrubSettings: ScrubSettings = { ...DEFAULT_SCRUB, ...options.scrub };
  const metrics = createHealMetrics(ctx.registry);
  checkHealingOptions(cluster, index, options);
  const urlsOf = (c: Cluster) => c.servers.map((s) => options.peerUrls?.[s.id] ?? s.url);
  const urls = urlsOf(cluster);
  const handleSelf = (request: Request) => protocol.handle(request);
  const peers = new PeerSet({
    n: config.n,
    self: index,
    urls,
    handleSelf,
    maxFrameBytes: ctx.maxFrameBytes,
    ...(options.peerCa ? { ca: options.peerCa } : {}),
    log,
    onEvidence: (server, reason) => {
      metrics.peerMisbehaving.inc({ peer: String(server + 1) });
      log.warn({ peer: server + 1, reason }, 'a peer answered what no correct server would');
    },
  });
  let nextOpId = 1 + Math.floor(Math.random() * 2 ** 40);
  const opId = () => nextOpId++;
  const codec = await createCodec({ k: config.t + 1, n: config.n });
  const verifier = ctx.verifier;
  const catalog = new Catalog({
    config,
    crypto,
    verifier,
    peers,
    handleSelf,
    opId,
    timeoutMs: settings.operationTimeoutMs,
    onEvidence: (server, reason) => peers.evidence(server, reason),
  });
  const repairer = new Repairer({
    config,
    crypto,
    codec,
    verifier,
    index,
    protocol,
    peers,
    opId,
    settings,
    metrics,
    log,
  });
  const level = storage instanceof LevelStorage ? storage : undefined;
  const fresh = (await level?.getMarker('fresh')) as { createdAt?: unknown; cause?: unknown } | undefined;
  const rebuildingSince = fresh ? (typeof fresh.createdAt === 'number' ? fresh.createdAt : Date.now()) : undefined;
  const recovery = level?.recovery ?? { droppedBytes: 0, messages: [] };
  if (recovery.droppedBytes > 0) {
    log.error(
      { droppedBytes: recovery.droppedBytes, leveldb: recovery.messages },
      `LevelDB dropped ${recovery.droppedBytes} bytes of its write-ahead log as damaged when it opened: the writes in them are lost here, acknowledged ones too. ` +
        'This server rebuilds from its peers and counts against t until its first complete catch-up pass; if it recurs, check the disk (dmesg, SMART)',
    );
  } else if (rebuildingSince !== undefined) {
    // Not a warning yet: every server of a new cluster starts this way. The first pass
    // warns if the peers hold writes this one lacks (a lost disk), `CatchUp.#lacking`.
    log.info(
      { since: new Date(rebuildingSince).toISOString() },
      'this server started on an empty data directory: checking whether its peers hold data; until its first complete catch-up pass it counts against t',
    );
  }
  const catchUp = new CatchUp({
    config,
    index,
    protocol,
    peers,
    handleSelf,
    catalog,
    repairer,
    settings,
    metrics,
    log,
    rebuildingSince,
    rebuilt: async () => {
      await level?.setMarker('fresh', undefined);
    },
  });
  const scrubber = level
    ? new Scrubber({
        protocol,
        storage: level,
        repairer,
        settings: scrubSettings,
        metrics,
        log,
        storedBytes: () => [...storage.owners().values()].reduce((sum, u) => sum + u.bytes, 0),
      })
    : undefined;
  // Before the server listens: what is damaged in the storage is reported at start.
  await scrubber?.checkAtStart({ ...DEFAULT_START_CHECK, ...options.startCheck }, recovery.droppedBytes);
  catchUp.start();
  scrubber?.start();
  scrubber?.repairFound();
  return {
    status: () => ({
      catchUp: catchUp.status(),
      scrub: scrubber?.status(),
      ...(scrubber?.startCheck ? { startCheck: scrubber.startCheck } : {}),
      peers: peers.status(),
    }),
    get rebuilding() {
      return catchUp.rebuilding;
    },
    get storageDamaged() {
      return scrubber?.startCheck?.unrepaired ?? 0;
    },
    setCluster: (next) => peers.setUrls(urlsOf(next)),
    runPass: () => catchUp.runPass(),
    missed: (key, candidate) => catchUp.missed(key, candidate),
    async close() {
      await Promise.all([catchUp.stop(), scrubber?.stop()]);
      peers.close();
    },
  };
}

/** What `GET /status` answers: one server's data and self-healing, as `powerstore-server status` shows it. */
export interface StatusReport {
  /** 1-based server id. */
  readonly server: number;
  readonly status: 'ok' | 'shutting-down';
  /** The server's version (`@powerstore/server`'s). */
  readonly version: string;
  /**
   * Its storage's health: `full` (refusing writes until there is room), `failed` (about to
   * exit), or `damaged` (the start check found damage not repaired yet: `heal.startCheck`).
   */
  readonly disk: 'ok' | 'full' | 'failed' | 'damaged';
  /** Bytes free for it on its data directory's filesystem, when it can tell. */
  readonly freeBytes?: number;
  readonly connections: number;
  /** Keys holding entries, history entries (stripes) and their bytes on this server. */
  readonly keys: number;
  readonly entries: number;
  readonly bytes: number;
  /** The version of the write policy in force (0: cluster.json's, never signed; see `policy.ts`). */
  readonly policyVersion?: number;
  /** Absent when self-healing is not running (a library host that did not ask for it). */
  readonly heal?: HealingStatus;
}

/** The `/status` report of a server. */
export function statusReport(ctx: {
  readonly id: number;
  readonly storage: AbstractStorage;
  readonly healing: Healing | undefined;
  readonly connections: number;
  readonly shuttingDown: boolean;
  readonly disk: 'ok' | 'full' | 'failed';
  /** The data directory, for its free space. */
  readonly dataDir?: string;
  readonly policyVersion?: number;
}): StatusReport {
  const { storage, healing } = ctx;
  const free = ctx.dataDir === undefined ? undefined : freeBytes(ctx.dataDir);
  return {
    server: ctx.id,
    status: ctx.shuttingDown ? 'shutting-down' : 'ok',
    version: packageVersion(),
    disk: ctx.disk === 'ok' && (healing?.storageDamaged ?? 0) > 0 ? 'damaged' : ctx.disk,
    ...(free === undefined ? {} : { freeBytes: free }),
    connections: ctx.connections,
    keys: storage.keyCount,
    entries: storage.historyEntryCount,
    bytes: [...storage.owners().values()].reduce((sum, u) => sum + u.bytes, 0),
    ...(ctx.policyVersion === undefined ? {} : { policyVersion: ctx.policyVersion }),
    ...(healing ? { heal: healing.status() } : {}),
  };
}
