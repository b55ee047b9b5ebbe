/**
 * The network host of one M-PoWerStore server: a WebSocket endpoint (ws or wss) that
 * decodes frames, hands requests to the protocol's {@link Server} over {@link LevelStorage},
 * and sends each reply once the storage has made its effects durable. The same port
 * answers `GET /healthz` and `GET /metrics`.
 *
 * Every input is bounded before it is buffered: frames by `maxFrameBytes` (enforced by
 * `ws` while reading the frame header, so an oversized frame is never allocated),
 * requests per connection by `maxInFlightPerConnection`, bytes of all requests being
 * handled by `maxInFlightBytes`, and connections by `maxConnections`. Reaching an
 * in-flight bound pauses the socket (TCP backpressure to the client) instead of queueing.
 */
import { createServer as createHttpServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { pino, type Logger } from 'pino';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import { encodeMessage, Server, type Cluster, type WritePolicy } from '@powerstore/protocol';
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import { encodePublicKey } from '@powerstore/protocol';
import { ServerError } from './errors.js';
import { LevelStorage } from './level-storage.js';
import { createMetrics, type ServerMetrics } from './metrics.js';

/** Bytes a frame may carry besides its fragment: key, timestamps, `cc` and `vec` for n ≤ 255. */
export const FRAME_OVERHEAD_BYTES = 64 * 1024;

/**
 * Default frame limit: the largest single fragment at t = 1 for a 64 MiB value (32 MiB)
 * plus {@link FRAME_OVERHEAD_BYTES}.
 */
export const DEFAULT_MAX_FRAME_BYTES = 32 * 1024 * 1024 + FRAME_OVERHEAD_BYTES;

/** Hardening limits; see the module comment. */
export interface ServerLimits {
  /** Largest WebSocket message accepted; larger ones close the connection with 1009. */
  readonly maxFrameBytes: number;
  /** Requests of one connection handled at once before its socket is paused. */
  readonly maxInFlightPerConnection: number;
  /** Bytes of requests handled at once over all connections before sockets are paused. */
  readonly maxInFlightBytes: number;
  /** Open WebSocket connections; further upgrades get HTTP 503. */
  readonly maxConnections: number;
  /** How long shutdown waits for in-flight requests before closing anyway. */
  readonly shutdownTimeoutMs: number;
  /** Ping interval; a connection that missed a whole interval's pong is dropped. 0 disables. */
  readonly heartbeatMs: number;
}

/** The defaults of {@link ServerLimits}. */
export const DEFAULT_LIMITS: ServerLimits = Object.freeze({
  maxFrameBytes: DEFAULT_MAX_FRAME_BYTES,
  maxInFlightPerConnection: 32,
  maxInFlightBytes: 256 * 1024 * 1024,
  maxConnections: 1024,
  shutdownTimeoutMs: 10_000,
  heartbeatMs: 30_000,
});

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
  /** LevelDB directory. */
  readonly dataDir: string;
  /** `false` = `--unsafe-no-fsync`. */
  readonly sync?: boolean;
  /** PEM certificate and key: serve wss:// and https://. */
  readonly tls?: { readonly cert: string | Buffer; readonly key: string | Buffer };
  readonly limits?: Partial<ServerLimits>;
  readonly logger?: Logger;
  /** Stored in the database and checked on every open; see {@link LevelStorageOptions.identity}. */
  readonly identity?: string;
}

/** A listening server. */
export interface RunningServer {
  /** `ws://host:port` (or `wss://`). */
  readonly url: string;
  readonly port: number;
  readonly metrics: ServerMetrics;
  readonly storage: LevelStorage;
  readonly limits: ServerLimits;
  /** Replaces the write policy (after the operator edited the cluster file); affects new STOREs only. */
  setPolicy(policy: WritePolicy): void;
  /**
   * Graceful shutdown: refuses new connections and stops reading requests, finishes the
   * ones in flight (up to `shutdownTimeoutMs`), closes the connections and the database.
   */
  close(): Promise<void>;
}

interface Connection {
  readonly ws: WebSocket;
  inFlight: number;
  paused: boolean;
  alive: boolean;
}

/** Opens the storage and listens; resolves once the port accepts connections. */
export async function startServer(options: StartServerOptions): Promise<RunningServer> {
  const limits: ServerLimits = { ...DEFAULT_LIMITS, ...options.limits };
  checkLimits(limits);
  const log = options.logger ?? pino({ level: 'info' });
  let storage: LevelStorage | undefined;
  const metrics = createMetrics(() => storage);
  const { config } = options.cluster;
  const crypto = createCryptoProvider();
  const signer = await crypto.signerFromSeed(options.seed);
  if (encodePublicKey(signer.publicKey) !== options.cluster.file.servers[options.index]?.publicKey) {
    throw new ServerError('CONFIG_INVALID', `the receipt key is not the one cluster.json lists for server ${options.index + 1}`);
  }
  storage = await LevelStorage.open({
    path: options.dataDir,
    n: config.n,
    cluster: options.cluster.file.id,
    sync: options.sync ?? true,
    identity: options.identity,
    onCommit(info) {
      metrics.commitSeconds.observe(info.seconds);
      metrics.commitGroup.observe(info.callbacks);
    },
  });
  const store = storage;
  const protocol = new Server({
    config,
    index: options.index,
    crypto,
    storage: store,
    cluster: options.cluster.identity,
    signer,
    policy: options.cluster.policy,
    now: options.now ?? Date.now,
    onInvalidCandidate: () => metrics.invalidCandidates.inc(),
    onConflict: () => metrics.conflicts.inc(),
  });
  const frameOptions = { maxFragmentLength: limits.maxFrameBytes };

  const connections = new Set<Connection>();
  const paused = new Set<Connection>();
  let inFlightBytes = 0;
  let closing: Promise<void> | undefined;
  let drained: (() => void) | undefined;

  let http: HttpServer;
  try {
    http = options.tls ? createHttpsServer({ cert: options.tls.cert, key: options.tls.key }, onHttp) : createHttpServer(onHttp);
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

  function onHttp(req: IncomingMessage, res: ServerResponse): void {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
    } else if (path === '/healthz') {
      const ok = !closing;
      res.writeHead(ok ? 200 : 503, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ status: ok ? 'ok' : 'shutting-down', id: options.index + 1, connections: connections.size }));
    } else if (path === '/usage') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(usageReport(options.index + 1, store, protocol)));
    } else if (path === '/metrics') {
      metrics.registry.metrics().then(
        (text) => res.writeHead(200, { 'content-type': metrics.registry.contentType }).end(text),
        (err: unknown) => {
          log.error({ err }, 'metrics collection failed');
          res.writeHead(500).end();
        },
      );
    } else {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
    }
  }

  http.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    if (closing || connections.size >= limits.maxConnections) {
      metrics.connectionsRejected.inc();
      metrics.errors.inc({ kind: closing ? 'shutting_down' : 'connection_limit' });
      socket.end('HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
      socket.destroy();
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => onConnection(ws, req));
  });
  http.on('clientError', (err, socket) => {
    metrics.errors.inc({ kind: 'http' });
    if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n');
    socket.destroy();
    log.debug({ err }, 'HTTP client error');
  });

  function onConnection(ws: WebSocket, req: IncomingMessage): void {
    const conn: Connection = { ws, inFlight: 0, paused: false, alive: true };
    connections.add(conn);
    metrics.connections.set(connections.size);
    const remote = `${(req.socket as Socket).remoteAddress}:${(req.socket as Socket).remotePort}`;
    log.debug({ remote }, 'connection opened');
    ws.on('message', (data: RawData, isBinary: boolean) => {
      // onMessage answers every failure itself; this catch is the last line against a bug
      // turning into an unhandled rejection that would take the process down.
      onMessage(conn, data, isBinary).catch((err: unknown) => {
        metrics.errors.inc({ kind: 'internal' });
        log.error({ err }, 'unexpected failure handling a message');
      });
    });
    ws.on('pong', () => (conn.alive = true));
    ws.on('error', (err: Error & { code?: string }) => {
      // ws closes the connection itself (1009 for an oversized frame, 1002 for a protocol
      // violation); we count and log it.
      metrics.errors.inc({ kind: err.code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH' ? 'frame_too_large' : 'websocket' });
      log.info({ remote, err: err.message, code: err.code }, 'connection error');
    });
    ws.on('close', () => {
      connections.delete(conn);
      paused.delete(conn);
      metrics.connections.set(connections.size);
      log.debug({ remote }, 'connection closed');
    });
  }

  async function onMessage(conn: Connection, data: RawData, isBinary: boolean): Promise<void> {
    const frame = toBytes(data);
    const bytes = frame.length;
    metrics.bytesIn.inc(bytes);
    conn.inFlight++;
    inFlightBytes += bytes;
    metrics.inFlight.inc();
    applyBackpressure(conn);
    const started = performance.now();
    let out: Uint8Array;
    let label = 'invalid';
    if (!isBinary) {
      metrics.errors.inc({ kind: 'text_frame' });
      out = encodeMessage({ type: 'ERROR', key: '', opId: 0, code: 'INVALID_FRAME', message: 'text frames are not accepted; send binary frames' });
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
      if (r.failure) log.error({ err: r.failure, type: r.type }, 'request failed');
    }
    metrics.latency.observe({ type: label }, (performance.now() - started) / 1000);
    const done = () => {
      conn.inFlight--;
      inFlightBytes -= bytes;
      metrics.inFlight.dec();
      releaseBackpressure();
    };
    if (conn.ws.readyState !== conn.ws.OPEN) {
      done();
      return;
    }
    metrics.bytesOut.inc(out.length);
    // The request counts as in flight until its reply has left, so a client that does not
    // read its replies stalls only itself.
    conn.ws.send(out, { binary: true }, done);
  }

  function applyBackpressure(conn: Connection): void {
    if (!conn.paused && (conn.inFlight >= limits.maxInFlightPerConnection || inFlightBytes >= limits.maxInFlightBytes)) {
      conn.paused = true;
      paused.add(conn);
      conn.ws.pause();
    }
  }

  function releaseBackpressure(): void {
    if (inFlightBytes < limits.maxInFlightBytes && !closing) {
      for (const conn of paused) {
        if (conn.inFlight < limits.maxInFlightPerConnection) {
          conn.paused = false;
          paused.delete(conn);
          conn.ws.resume();
        }
      }
    }
    if (drained && [...connections].every((c) => c.inFlight === 0)) drained();
  }

  const heartbeat =
    limits.heartbeatMs > 0
      ? setInterval(() => {
          for (const conn of connections) {
            if (!conn.alive) {
              metrics.errors.inc({ kind: 'heartbeat_timeout' });
              conn.ws.terminate();
              continue;
            }
            conn.alive = false;
            conn.ws.ping();
          }
        }, limits.heartbeatMs)
      : undefined;
  heartbeat?.unref();

  try {
    await new Promise<void>((resolve, reject) => {
      http.once('error', reject);
      http.listen(options.port, options.host, () => {
        http.off('error', reject);
        resolve();
      });
    });
  } catch (err) {
    if (heartbeat) clearInterval(heartbeat);
    await store.close();
    const code = (err as NodeJS.ErrnoException).code ?? 'unknown';
    throw new ServerError('LISTEN_FAILED', `cannot listen on ${options.host}:${options.port} (${code}${code === 'EADDRINUSE' ? ': another process has the port' : ''})`, { cause: err });
  }
  const port = (http.address() as AddressInfo).port;
  const host = options.host.includes(':') ? `[${options.host}]` : options.host;
  const url = `${options.tls ? 'wss' : 'ws'}://${host}:${port}`;
  log.info({ url, id: options.index + 1, t: config.t, n: config.n, cluster: options.cluster.file.id, sync: options.sync ?? true, limits }, 'listening');

  async function shutdown(): Promise<void> {
    log.info({ connections: connections.size }, 'shutting down');
    if (heartbeat) clearInterval(heartbeat);
    const httpClosed = new Promise<void>((resolve) => http.close(() => resolve()));
    for (const conn of connections) conn.ws.pause();
    const busy = () => [...connections].some((c) => c.inFlight > 0);
    if (busy()) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          log.warn('shutdown timeout: closing with requests in flight');
          resolve();
        }, limits.shutdownTimeoutMs);
        drained = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    await Promise.all(
      [...connections].map(
        (conn) =>
          new Promise<void>((resolve) => {
            if (conn.ws.readyState === conn.ws.CLOSED) return resolve();
            const timer = setTimeout(() => {
              conn.ws.terminate();
              resolve();
            }, 1000);
            conn.ws.once('close', () => {
              clearTimeout(timer);
              resolve();
            });
            // Reading again lets the closing handshake complete; late requests are still
            // answered while the storage is open, or dropped once the socket is closing.
            conn.ws.resume();
            conn.ws.close(1001, 'server shutting down');
          }),
      ),
    );
    http.closeAllConnections?.();
    await httpClosed;
    await store.close();
    log.info('stopped');
  }

  return {
    url,
    port,
    metrics,
    storage: store,
    limits,
    setPolicy(policy) {
      protocol.setPolicy(policy);
      log.info({ writers: policy.writers, revoked: policy.revokedKeys.length + policy.revokedGrants.length }, 'write policy reloaded');
    },
    close() {
      closing ??= shutdown();
      return closing;
    },
  };
}

function toBytes(data: RawData): Uint8Array {
  if (Array.isArray(data)) return Buffer.concat(data);
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  return data;
}

/** What `GET /usage` answers: every owner's bytes and keys on this server, with its quota. */
export interface UsageReport {
  readonly server: number;
  readonly owners: readonly { readonly owner: string; readonly bytes: number; readonly keys: number; readonly quota: { bytes?: number; keys?: number } }[];
}

function usageReport(id: number, storage: LevelStorage, protocol: Server): UsageReport {
  const owners = [...storage.owners()]
    .map(([owner, u]) => ({ owner, bytes: u.bytes, keys: u.keys, quota: protocol.quotaFor(owner) }))
    .sort((a, b) => b.bytes - a.bytes || a.owner.localeCompare(b.owner));
  return { server: id, owners };
}

function checkLimits(l: ServerLimits): void {
  const positive = (v: number, name: string) => {
    if (!Number.isSafeInteger(v) || v < 1) throw new ServerError('CONFIG_INVALID', `${name} must be a positive integer, got ${v}`);
  };
  positive(l.maxFrameBytes, 'maxFrameBytes');
  positive(l.maxInFlightPerConnection, 'maxInFlightPerConnection');
  positive(l.maxInFlightBytes, 'maxInFlightBytes');
  positive(l.maxConnections, 'maxConnections');
  positive(l.shutdownTimeoutMs, 'shutdownTimeoutMs');
  if (!Number.isSafeInteger(l.heartbeatMs) || l.heartbeatMs < 0) throw new ServerError('CONFIG_INVALID', `heartbeatMs must be ≥ 0, got ${l.heartbeatMs}`);
  if (l.maxInFlightBytes < l.maxFrameBytes) throw new ServerError('CONFIG_INVALID', 'maxInFlightBytes must be at least maxFrameBytes');
}
