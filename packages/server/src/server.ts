/**
 * The network host of one M-PoWerStore server: a WebSocket endpoint (ws or wss) that
 * decodes frames, hands requests to the protocol's {@link Server} over {@link LevelStorage},
 * and sends each reply once the storage has made its effects durable. The same port
 * answers `GET /healthz`, `/metrics` and `/usage` (`routes.ts`).
 *
 * What clients can make the server hold is bounded before it is buffered: frames by
 * `maxFrameBytes` (enforced by `ws` while reading the frame header, so an oversized frame
 * is never allocated); connections, per server and per address, and the bytes of partial
 * frames, requests and unsent replies by {@link MemoryBudget}; each connection's reading,
 * queueing and time limits by {@link ClientConnection}. This module wires them together
 * and owns startup and shutdown.
 */
import { createServer as createHttpServer, type IncomingMessage, type Server as HttpServer } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { join } from 'node:path';
import type { Duplex } from 'node:stream';
import { pino, type Logger } from 'pino';
import { Counter, Gauge } from 'prom-client';
import { WebSocketServer, type WebSocket } from 'ws';
import {
  bytesEqual,
  currentEpoch,
  DEFAULT_HISTORY,
  encodeMessage,
  extensionProblem,
  encodePublicKey,
  frameType,
  MAX_KEY_LENGTH,
  MAX_LIST_REPLY_BYTES,
  ProtocolError,
  type AbstractStorage,
  type Cluster,
  type HistoryLimits,
  type WritePolicy,
} from '@powerstore/protocol';
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import { ListSlots, MemoryBudget } from './budgets.js';
import { ClientConnection, type ConnectionHost } from './connection.js';
import { FramePool } from './frame-pool.js';
import { ServerError } from './errors.js';
import { DEFAULT_ERASE_WITHIN_MS, LevelStorage, type DiskHealth } from './level-storage.js';
import { packageVersion } from './version.js';
import { KnownVerifier } from './catalog.js';
import { checkHealingOptions, protocolServer, startHealing, statusReport, type Healing, type HealingOptions } from './healing.js';
import { FRAME_OVERHEAD_BYTES, resolveLimits, type ServerLimits } from './limits.js';
import { createMetrics, type ServerMetrics } from './metrics.js';
import { POLICY_FILE, PolicyKeeper, type PolicyInForce } from './policy.js';
import { httpRoutes } from './routes.js';

/** The longest LIST frame that can decode: header, prefix and `after` of the longest keys, and the limit. */
const MAX_LIST_FRAME_BYTES = 1 + 1 + (2 + MAX_KEY_LENGTH) + 8 + (2 + MAX_KEY_LENGTH) + 2;

/** What {@link startServer} needs. */
export interface StartServerOptions {
  /** The parsed `cluster.json`: shape, identity (id, admin, server keys) and write policy. */
  readonly cluster: Cluster;
  /** Protocol index (`id − 1`). */
  readonly index: number;
  /** The seed of this server's receipt key; its public key must be `cluster.servers[index].publicKey`. */
  readonly seed: Uint8Array;
  /** The clock grant expiry is judged by (ms since the epoch). Default `Date.now`. */
  readonly now?: () => number;
  readonly host: string;
  /** 0 picks a free port. */
  readonly port: number;
  /** LevelDB directory; required unless `storage` is given. */
  readonly dataDir?: string;
  /**
   * Any storage backend, already open, instead of LevelDB at `dataDir` (tests, or a
   * backend of your own that passes the protocol's `storageConformance`). The server
   * closes it on shutdown.
   */
  readonly storage?: AbstractStorage;
  /** `false` = `--unsafe-no-fsync`. */
  readonly sync?: boolean;
  /** PEM certificate and key: serve wss:// and https://. */
  readonly tls?: { readonly cert: string | Buffer; readonly key: string | Buffer };
  readonly limits?: Partial<ServerLimits>;
  /** How much history to keep per key (garbage collection). Default `DEFAULT_HISTORY`. */
  readonly history?: Partial<HistoryLimits>;
  readonly logger?: Logger;
  /** Stored in the database and checked on every open; see {@link LevelStorageOptions.identity}. */
  readonly identity?: string;
  /**
   * Records garbage collection deletes leave the files of `dataDir` within this many ms
   * (`--erase-within`); see {@link LevelStorageOptions.eraseWithinMs}. Default 60 000; 0 = off.
   */
  readonly eraseWithinMs?: number;
  /**
   * Fragments of at least this many bytes go to the value log (`--value-log-min-bytes`);
   * `false` keeps them all in LevelDB. See {@link LevelStorageOptions.valueLog}.
   */
  readonly valueLogMinBytes?: number | false;
  /** Self-healing (catch-up, rebuild, scrub; `healing.ts`); off when left out. The CLI's `start` turns it on. */
  readonly heal?: HealingOptions;
  /**
   * Called once when the disk failed for good (a LevelDB write, fsync or file creation
   * failed with anything but ENOSPC/EDQUOT), after the fatal log line: the CLI exits
   * (status 74) so a restart recovers from what is on disk. Without it the server stays up,
   * refusing writes (`UNAVAILABLE`) and answering `/healthz` with 503.
   */
  readonly onStorageFailed?: (health: DiskHealth) => void;
  /** How often a full disk is probed for room again (ms); see {@link LevelStorageOptions.diskProbeMs}. */
  readonly diskProbeMs?: number;
  /** See {@link LevelStorageOptions.diskProbeFreeBytes}. */
  readonly diskProbeFreeBytes?: number;
  /**
   * Where the last signed policy accepted by `PUT /policy` is kept (`policy.ts`). Default
   * `<dataDir>/powerstore-policy.json`; without either, `PUT /policy` is refused, since an
   * accepted policy must outlive a restart.
   */
  readonly policyFile?: string;
}

/** A listening server. */
export interface RunningServer {
  /** `ws://host:port` (or `wss://`). */
  readonly url: string;
  readonly port: number;
  readonly metrics: ServerMetrics;
  readonly storage: AbstractStorage;
  readonly limits: ServerLimits;
  /** Self-healing, when started with `heal`. */
  readonly healing: Healing | undefined;
  /**
   * Replaces the write policy, leaving its version as it is (tests, embedders); affects new
   * STOREs only. The CLI changes it by `PUT /policy` (signed) or SIGHUP ({@link setCluster}).
   */
  setPolicy(policy: WritePolicy): void;
  /** The policy in force: its version, source and digest (`GET /policy`). */
  readonly policy: PolicyInForce;
  /**
   * Applies a reloaded cluster file (see `reloadClusterFile`): its policy and, when it adds
   * key epochs (a server was replaced), the new current epoch, whose requests alone the
   * server then answers (recorded in its data directory first, so it never starts at an
   * older one again). Rejects with `INVALID_ARGUMENT` when this server's own key is not its
   * key in the new epoch (it was replaced: stop it); nothing changes then. The file's policy
   * takes effect unless a signed policy of a higher version is in force (`policy.ts`).
   */
  setCluster(cluster: Cluster): Promise<void>;
  /**
   * Graceful shutdown: refuses new connections and stops reading requests, finishes the
   * ones in flight (up to `shutdownTimeoutMs`), closes the connections and the database.
   */
  close(): Promise<void>;
}

/** Opens the storage and listens; resolves once the port accepts connections. */
export async function startServer(options: StartServerOptions): Promise<RunningServer> {
  const limits = resolveLimits(options.limits);
  const log = options.logger ?? pino({ level: 'info' });
  const connections = new Set<ClientConnection>();
  const budget = new MemoryBudget(limits);
  const lists = new ListSlots(limits.maxLists);
  // Metrics exist before the storage opens (its commits feed them), so they read it late.
  const opened: { storage?: AbstractStorage } = {};
  const metrics = createMetrics({
    storage: () => opened.storage,
    disk: () => (opened.storage instanceof LevelStorage ? opened.storage.disk.state : 'ok'),
    version: packageVersion(),
    ...(options.dataDir !== undefined ? { dataDir: options.dataDir } : {}),
    budget: () => budget.stats(),
    lists: () => lists.stats(),
    inFlight: () => [...connections].reduce((sum, c) => sum + c.inFlight, 0),
    paused: () => {
      const counts = new Map<string, number>();
      for (const c of connections) {
        const reason = c.pausedFor;
        if (reason) counts.set(reason, (counts.get(reason) ?? 0) + 1);
      }
      return counts;
    },
  });
  const { config } = options.cluster;
  const crypto = createCryptoProvider();
  const signer = await crypto.signerFromSeed(options.seed);
  if (encodePublicKey(signer.publicKey) !== options.cluster.file.servers[options.index]?.publicKey) {
    throw new ServerError('CONFIG_INVALID', `the receipt key is not the one cluster.json lists for server ${options.index + 1}`);
  }
  if (!options.storage && options.dataDir === undefined)
    throw new ServerError('CONFIG_INVALID', 'startServer needs a dataDir or a storage');
  // Before the storage opens: a kept policy that does not verify stops the start with nothing to close.
  const policyFile = options.policyFile ?? (options.dataDir !== undefined ? join(options.dataDir, POLICY_FILE) : undefined);
  const policies = await PolicyKeeper.open({ cluster: options.cluster, crypto, ...(policyFile !== undefined ? { file: policyFile } : {}) });
  new Gauge({
    name: 'powerstore_policy_version',
    help: "Version of the write policy in force (cluster.json's policy.version, or the last signed policy accepted)",
    registers: [metrics.registry],
    collect() {
      this.set(policies.current.version);
    },
  });
  const policyUpdates = new Counter({
    name: 'powerstore_policy_updates_total',
    help: 'PUT /policy requests, by result: applied, unchanged, or the refusal (bad_signature, stale_version, wrong_cluster, malformed, too_large, …)',
    labelNames: ['result'],
    registers: [metrics.registry],
  });
  if (options.heal) checkHealingOptions(options.cluster, options.index, options.heal);
  const store =
    options.storage ??
    (await LevelStorage.open({
      path: options.dataDir!,
      n: config.n,
      cluster: options.cluster.file.id,
      sync: options.sync ?? true,
      identity: options.identity,
      onCommit(info) {
        metrics.commitSeconds.observe(info.seconds);
        metrics.commitGroup.observe(info.callbacks);
      },
      eraseWithinMs: options.eraseWithinMs ?? DEFAULT_ERASE_WITHIN_MS,
      onErase(pass) {
        const scope = pass.all ? 'all' : 'keys';
        metrics.compactions.inc({ scope, result: pass.error ? 'failed' : 'ok' });
        metrics.compactionSeconds.observe(pass.seconds);
        const withinMs = options.eraseWithinMs ?? DEFAULT_ERASE_WITHIN_MS;
        if (pass.error) log.error({ err: pass.error, keys: pass.keys, scope }, 'erase pass failed; the next pass retries it');
        else if (pass.seconds * 1000 > withinMs / 4) {
          log.warn(
            { seconds: pass.seconds, keys: pass.keys, scope, eraseWithinMs: withinMs },
            'erase pass took more than a quarter of --erase-within: collected records may outlive the bound',
          );
        } else log.debug({ seconds: pass.seconds, keys: pass.keys, scope }, 'erase pass');
      },
      valueLog:
        options.valueLogMinBytes === undefined || options.valueLogMinBytes === false ? false : { minBytes: options.valueLogMinBytes },
      onValueLogPass(pass) {
        if (pass.erased > 0) metrics.valueLog.inc({ event: 'erased' }, pass.erased);
        if (pass.removed > 0) metrics.valueLog.inc({ event: 'removed' }, pass.removed);
        if (pass.moved > 0) metrics.valueLog.inc({ event: 'moved' }, pass.moved);
        if (pass.error) {
          metrics.valueLog.inc({ event: 'failed_passes' });
          log.error({ err: pass.error }, 'value-log pass failed; the next pass retries it');
        } else if (pass.erased + pass.removed + pass.moved > 0) {
          log.debug({ seconds: pass.seconds, erased: pass.erased, removed: pass.removed, moved: pass.moved }, 'value-log pass');
        }
      },
      ...(options.diskProbeMs !== undefined ? { diskProbeMs: options.diskProbeMs } : {}),
      ...(options.diskProbeFreeBytes !== undefined ? { diskProbeFreeBytes: options.diskProbeFreeBytes } : {}),
      onDisk(health, error) {
        // Logged once per change of state: requests refused meanwhile are counted, not logged.
        metrics.diskFailures.inc({ state: health.state });
        const dataDir = options.dataDir;
        if (health.state === 'full') {
          log.error(
            { reason: health.reason, dataDir },
            `disk full: refusing writes (UNAVAILABLE) and still serving reads; free space on the filesystem of ${dataDir}: the server reopens its storage by itself once there is room (checked every ${(options.diskProbeMs ?? 5000) / 1000} s)`,
          );
        } else if (health.state === 'failed') {
          log.fatal(
            { reason: health.reason, dataDir, err: error },
            `storage failed: a LevelDB write, fsync or file creation on ${dataDir} failed. Nothing more is acknowledged; retrying a failed fsync can report lost data as durable, so ${options.onStorageFailed ? 'the server exits (status 74) and a restart recovers from what is on disk' : 'the server refuses writes until restarted'}. If it happens again, check the disk (dmesg, SMART) and replace it: the cluster rebuilds this server's data on an empty directory.`,
          );
          options.onStorageFailed?.(health);
        } else log.warn({ reason: health.reason, dataDir }, 'disk has room again: storage reopened, writes accepted');
      },
    }));
  opened.storage = store;
  const diskHealth = (): DiskHealth => (store instanceof LevelStorage ? store.disk : { state: 'ok', since: 0 });
  // A server never goes back to an older key epoch: it would answer clients of a retired one.
  const epoch = currentEpoch(options.cluster.identity);
  if (store instanceof LevelStorage) {
    const seen = await store.keyEpoch().catch(async (err: unknown) => {
      await store.close();
      throw err;
    });
    if (seen > epoch) {
      await store.close();
      throw new ServerError(
        'CONFIG_INVALID',
        `this server was at key epoch ${seen} on ${options.dataDir ?? 'its data directory'}, and the cluster file is at epoch ${epoch}: start it with the current cluster.json`,
      );
    }
    await store.recordKeyEpoch(epoch);
  }
  // With self-healing, validity checks share their memory with catch-up's (`healing.ts`).
  const validity = options.heal ? new KnownVerifier(crypto, options.cluster.identity) : undefined;
  const protocol = protocolServer(validity, {
    config,
    index: options.index,
    crypto,
    storage: store,
    cluster: options.cluster.identity,
    signer,
    policy: policies.current.policy,
    now: options.now ?? Date.now,
    onInvalidCandidate: () => metrics.invalidCandidates.inc(),
    onConflict: () => metrics.conflicts.inc(),
    ...(options.history ? { history: options.history } : {}),
    onCollected: (_key, count) => metrics.collected.inc(count),
    // A write this server missed completes here: catch-up repairs it soon, not at its next pass.
    onMissedEntry: (key, candidate) => healing?.missed(key, candidate),
    // The STOREs one group commit made durable sign one root (their continuations run in
    // this turn), so a busy server signs once per commit instead of once per write.
    receiptBatching: (flush) => void setImmediate(flush),
    onReceiptsSigned: (n) => {
      metrics.receiptsSigned.inc(n);
      metrics.receiptSignatures.inc();
    },
  });
  // Large replies (FILTER answers with a fragment) are encoded into recycled memory, given
  // back once sent (ConnectionHost.replySent).
  const frames = new FramePool();
  const frameOptions = { maxFragmentLength: limits.maxFrameBytes, alloc: frames.take };
  let closing: Promise<void> | undefined;
  let settled: (() => void) | undefined;

  const host: ConnectionHost = {
    limits,
    budget,
    lists,
    replyRoom(frame) {
      // A FILTER's reply carries one fragment, at most the longest stored; a LIST's (and a
      // PENDING's) is kept under MAX_LIST_REPLY_BYTES; every other reply is a header, a
      // candidate or an error.
      const type = frameType(frame);
      if (type === 'LIST' || type === 'PENDING') return MAX_LIST_REPLY_BYTES + FRAME_OVERHEAD_BYTES;
      if (type !== 'FILTER') return FRAME_OVERHEAD_BYTES;
      return Math.min(limits.maxFrameBytes, store.largestFragmentBytes + FRAME_OVERHEAD_BYTES);
    },
    isList(frame) {
      // A frame longer than any LIST fails to decode, cheaply: it needs no slot. A PENDING
      // scans like a LIST and takes a slot like one.
      if (frame.length > MAX_LIST_FRAME_BYTES) return false;
      const type = frameType(frame);
      return type === 'LIST' || type === 'PENDING';
    },
    handle: (frame, isBinary) =>
      // handle answers every failure itself; this catch is the last line against a bug
      // turning into an unhandled rejection that would take the process down.
      handle(frame, isBinary).catch((err: unknown) => {
        metrics.errors.inc({ kind: 'internal' });
        log.error({ err }, 'unexpected failure handling a message');
        return encodeMessage({ type: 'ERROR', key: '', opId: 0, code: 'INTERNAL', message: 'internal error' });
      }),
    replySent(reply) {
      frames.give(reply);
    },
    onBundle(direction, count) {
      metrics.bundles.inc({ direction });
      metrics.bundledFrames.inc({ direction }, count);
    },
    onEnforced(reason) {
      metrics.connectionsClosed.inc({ reason });
    },
    onSettled() {
      if (settled && ![...connections].some((c) => c.busy)) settled();
    },
    onClose(conn) {
      connections.delete(conn);
      budget.closeConnection(conn.address);
      metrics.connections.set(connections.size);
      log.debug({ address: conn.address }, 'connection closed');
    },
  };

  async function handle(frame: Uint8Array, isBinary: boolean): Promise<Uint8Array> {
    metrics.bytesIn.inc(frame.length);
    const started = performance.now();
    let out: Uint8Array;
    let label = 'invalid';
    if (!isBinary) {
      metrics.errors.inc({ kind: 'text_frame' });
      out = encodeMessage({
        type: 'ERROR',
        key: '',
        opId: 0,
        code: 'INVALID_FRAME',
        message: 'text frames are not accepted; send binary frames',
      });
    } else {
      // One frame handler for this server and the simulator: decoding, typed errors and
      // the protocol live in @powerstore/protocol.
      const r = await protocol.handleFrame(frame, frameOptions);
      out = r.reply;
      if (r.type) {
        label = r.type;
        metrics.requests.inc({ type: label });
      }
      if (r.error) {
        metrics.errors.inc({ kind: r.error.toLowerCase() });
        if (r.type && (r.error === 'UNAUTHENTICATED' || r.error === 'NOT_AUTHORIZED')) metrics.authRejected.inc({ type: r.type });
      }
      if (r.failure && r.error === 'UNAVAILABLE') {
        // A failed disk: logged once by the storage (onDisk), counted per request; reads
        // failing on a disk that still takes writes are logged at most every 10 s.
        const now = performance.now();
        if (diskHealth().state === 'ok' && now - lastUnavailableLog > 10_000) {
          lastUnavailableLog = now;
          log.error({ err: r.failure, type: r.type }, 'request failed: storage unavailable (further ones for 10 s are only counted)');
        }
      } else if (r.failure) log.error({ err: r.failure, type: r.type }, 'request failed');
    }
    metrics.latency.observe({ type: label }, (performance.now() - started) / 1000);
    metrics.bytesOut.inc(out.length);
    return out;
  }

  let http: HttpServer;
  let healing: Healing | undefined;
  let lastUnavailableLog = -Infinity;
  const routes = httpRoutes({
    id: options.index + 1,
    cluster: options.cluster.file.id,
    storage: store,
    protocol,
    metrics,
    log,
    connections: () => connections.size,
    shuttingDown: () => closing !== undefined,
    status: () =>
      statusReport({
        id: options.index + 1,
        storage: store,
        healing,
        connections: connections.size,
        shuttingDown: closing !== undefined,
        disk: diskHealth().state,
        ...(options.dataDir !== undefined ? { dataDir: options.dataDir } : {}),
        policyVersion: policies.current.version,
      }),
    catchUp: () => healing?.status().catchUp.state,
    rebuilding: () => healing?.rebuilding ?? false,
    storageCheck: () => {
      const found = healing?.status().startCheck;
      if (!found) return undefined;
      if (!found.enabled) return 'off';
      if (found.unrepaired > 0) return 'damaged';
      const { lc, pending, dropped, unreadable } = found.damaged;
      return lc + pending + dropped + unreadable > 0 ? 'repaired' : 'clean';
    },
    disk: diskHealth,
    policy: {
      version: () => policies.current.version,
      report: () => policies.report(options.index + 1),
      offer: (body, address) =>
        policies.offer(body, (current, previous) => {
          protocol.setPolicy(current.policy);
          // The one line an audit needs: who changed what, from which version to which.
          log.info(
            {
              version: current.version,
              previous: previous.version,
              digest: current.digest,
              change: current.signed?.change,
              issuedAt: current.signed?.issuedAt,
              from: address,
              writers: current.policy.writers,
              owners: current.policy.owners.length,
              revoked: current.policy.revokedKeys.length + current.policy.revokedGrants.length,
            },
            'signed write policy applied',
          );
        }),
      count: (result) => policyUpdates.inc({ result: result.toLowerCase() }),
    },
  });
  try {
    http = options.tls ? createHttpsServer({ cert: options.tls.cert, key: options.tls.key }, routes) : createHttpServer(routes);
  } catch (err) {
    await store.close();
    throw new ServerError('CONFIG_INVALID', `TLS certificate or key unusable: ${(err as Error).message}`, { cause: err });
  }
  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: limits.maxFrameBytes,
    // Compression would let a small frame inflate past every limit; clients gain little
    // on fragments, which are incompressible by design.
    perMessageDeflate: false,
    clientTracking: false,
  });

  http.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const address = clientAddress(req.socket);
    const refusal = closing ? 'shutting_down' : budget.openConnection(address);
    if (refusal) {
      metrics.connectionsRejected.inc({ reason: refusal });
      metrics.errors.inc({ kind: refusal === 'server_full' ? 'connection_limit' : refusal });
      const status = refusal === 'address_full' ? '429 Too Many Requests' : '503 Service Unavailable';
      socket.end(`HTTP/1.1 ${status}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
      socket.destroy();
      return;
    }
    let opened = false;
    // A socket that dies before the handshake completes must give its slot back.
    socket.once('close', () => {
      if (!opened) budget.closeConnection(address);
    });
    wss.handleUpgrade(req, socket, head, (ws: WebSocket) => {
      opened = true;
      const conn = new ClientConnection(ws, req.socket, address, host);
      connections.add(conn);
      metrics.connections.set(connections.size);
      ws.on('error', (err: Error & { code?: string }) => {
        // ws closes the connection itself (1009 for an oversized frame, 1002 for a protocol
        // violation); we count and log it.
        metrics.errors.inc({ kind: err.code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH' ? 'frame_too_large' : 'websocket' });
        log.info({ address, err: err.message, code: err.code }, 'connection error');
      });
      log.debug({ address }, 'connection opened');
    });
  });
  http.on('clientError', (err, socket) => {
    metrics.errors.inc({ kind: 'http' });
    if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n');
    socket.destroy();
    log.debug({ err }, 'HTTP client error');
  });

  // One sweep applies every connection's time limits; its period is a fraction of the
  // shortest, so a limit is enforced at most a quarter late.
  const timeouts = [limits.sendTimeoutMs, limits.frameTimeoutMs, limits.idleTimeoutMs].filter((t) => t > 0);
  const sweeper = setInterval(
    () => {
      const now = Date.now();
      for (const conn of connections) conn.sweep(now);
    },
    Math.max(50, Math.min(...timeouts) / 4),
  );
  sweeper.unref();
  const heartbeat =
    limits.heartbeatMs > 0
      ? setInterval(() => {
          for (const conn of connections) {
            if (!conn.alive) {
              conn.enforce('heartbeat_timeout');
              continue;
            }
            conn.alive = false;
            conn.ws.ping();
          }
        }, limits.heartbeatMs)
      : undefined;
  heartbeat?.unref();
  // Uploads abandoned without their stripe 0 on keys nobody writes again: the protocol
  // deletes them once idle, on the next write of the key or on this sweep.
  const uploadIdleMs = options.history?.uploadIdleMs ?? DEFAULT_HISTORY.uploadIdleMs;
  let sweeping = false;
  const uploadSweeper = setInterval(
    () => {
      if (sweeping || closing) return;
      sweeping = true;
      void (async () => {
        for await (const key of store.unfinishedKeys()) {
          if (closing) break;
          await protocol.sweep(key);
        }
      })()
        .catch((err: unknown) => {
          if (!closing) log.warn({ err }, 'sweeping abandoned uploads failed');
        })
        .finally(() => (sweeping = false));
    },
    Math.max(1000, Math.min(60_000, uploadIdleMs / 20)),
  );
  uploadSweeper.unref();
  const stopTimers = () => {
    clearInterval(sweeper);
    clearInterval(uploadSweeper);
    if (heartbeat) clearInterval(heartbeat);
  };

  // Self-healing starts before the server listens, so `/status` and `/healthz` show its
  // state (`rebuilding` on an empty directory) from the first request on.
  if (options.heal) {
    try {
      healing = await startHealing({
        cluster: options.cluster,
        index: options.index,
        protocol,
        storage: store,
        crypto,
        registry: metrics.registry,
        log,
        maxFrameBytes: limits.maxFrameBytes,
        verifier: validity!,
        options: options.heal,
      });
    } catch (err) {
      stopTimers();
      await store.close();
      throw err;
    }
  }

  try {
    await new Promise<void>((resolve, reject) => {
      http.once('error', reject);
      http.listen(options.port, options.host, () => {
        http.off('error', reject);
        resolve();
      });
    });
  } catch (err) {
    stopTimers();
    await healing?.close();
    await store.close();
    const code = (err as NodeJS.ErrnoException).code ?? 'unknown';
    throw new ServerError(
      'LISTEN_FAILED',
      `cannot listen on ${options.host}:${options.port} (${code}${code === 'EADDRINUSE' ? ': another process has the port' : ''})`,
      { cause: err },
    );
  }
  const port = (http.address() as AddressInfo).port;
  const urlHost = options.host.includes(':') ? `[${options.host}]` : options.host;
  const url = `${options.tls ? 'wss' : 'ws'}://${urlHost}:${port}`;
  log.info(
    {
      url,
      id: options.index + 1,
      t: config.t,
      n: config.n,
      cluster: options.cluster.file.id,
      sync: options.sync ?? true,
      limits,
      policy: { version: policies.current.version, source: policies.current.source },
    },
    'listening',
  );
  async function shutdown(): Promise<void> {
    log.info({ connections: connections.size }, 'shutting down');
    stopTimers();
    await healing?.close();
    const httpClosed = new Promise<void>((resolve) => http.close(() => resolve()));
    for (const conn of connections) conn.stopReading();
    if ([...connections].some((c) => c.busy)) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          log.warn('shutdown timeout: closing with requests in flight');
          resolve();
        }, limits.shutdownTimeoutMs);
        settled = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    await Promise.all([...connections].map((conn) => closeGracefully(conn.ws)));
    http.closeAllConnections?.();
    await httpClosed;
    await store.close();
    log.info('stopped');
  }

  const setPolicy = (policy: WritePolicy) => {
    protocol.setPolicy(policy);
    log.info(
      { version: policies.current.version, writers: policy.writers, revoked: policy.revokedKeys.length + policy.revokedGrants.length },
      'write policy reloaded',
    );
  };
  return {
    url,
    port,
    metrics,
    storage: store,
    limits,
    get healing() {
      return healing;
    },
    setPolicy,
    get policy() {
      return policies.current;
    },
    async setCluster(cluster) {
      const before = protocol.epoch;
      const next = currentEpoch(cluster.identity);
      // Checked before anything is recorded: an identity the server would refuse changes nothing.
      const problem = extensionProblem(protocol.cluster, cluster.identity);
      if (problem) throw new ProtocolError('INVALID_ARGUMENT', `not a newer identity of this cluster: ${problem}`);
      if (next !== before && store instanceof LevelStorage && bytesEqual(cluster.identity.servers[options.index]!, signer.publicKey))
        await store.recordKeyEpoch(next);
      protocol.setCluster(cluster.identity);
      // Catch-up's verifier judges by the same epochs, and its requests name the new one.
      validity?.update(cluster.identity);
      healing?.setCluster(cluster);
      if (next !== before) log.info({ epoch: next, previous: before }, 'key epoch changed: answering requests of the new epoch only');
      const reloaded = policies.reload(cluster);
      if (reloaded.ignored !== undefined) {
        log.warn(
          { version: reloaded.current.version, clusterFileVersion: reloaded.ignored },
          `cluster.json's policy (version ${reloaded.ignored}) is older than the signed policy in force (version ${reloaded.current.version}) and was not applied; ` +
            `to change the policy by hand, give cluster.json's policy a "version" of at least ${reloaded.current.version}, or use powerstore-server policy`,
        );
      } else setPolicy(reloaded.current.policy);
    },
    close() {
      closing ??= shutdown();
      return closing;
    },
  };
}

/** Closes with 1001 and waits for the handshake, at most a second. */
function closeGracefully(ws: WebSocket): Promise<void> {
  return new Promise<void>((resolve) => {
    if (ws.readyState === ws.CLOSED) return resolve();
    const timer = setTimeout(() => {
      ws.terminate();
      resolve();
    }, 1000);
    ws.once('close', () => {
      clearTimeout(timer);
      resolve();
    });
    // Reading again lets the closing handshake complete; late requests are dropped.
    ws.resume();
    ws.close(1001, 'server shutting down');
  });
}

/** The client's address, IPv4-mapped IPv6 folded to IPv4 so one host counts once. */
function clientAddress(socket: Socket): string {
  const a = socket.remoteAddress ?? 'unknown';
  return a.startsWith('::ffff:') && a.includes('.') ? a.slice(7) : a;
}
