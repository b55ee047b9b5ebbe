/**
 * The plain HTTP side of a server's port: `GET /healthz` (liveness), `GET /readyz`
 * (readiness: fully in service, not counting against t), `GET /metrics` (Prometheus),
 * `GET /usage` (bytes and keys per owner), `GET /status` (data held, catch-up and scrub),
 * and `GET /policy` / `PUT /policy` (the write policy in force, and a new one signed by the
 * admin: `policy.ts`). Everything else is 404; WebSocket upgrades are handled by the server
 * itself.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import type { Server } from '@powerstore/protocol';
import type { ServerStorage } from '@powerstore/protocol';
import type { ServerMetrics } from './metrics.js';
import type { DiskHealth } from './level-storage.js';
import { MAX_POLICY_BYTES, PolicyRefusal, type PolicyOffer, type PolicyRefusalCode } from './policy.js';

/**
 * `PUT /policy` bodies read at once. Each may hold up to {@link MAX_POLICY_BYTES} while it
 * arrives: without a bound, anyone reaching the port could make the server buffer that much
 * per connection they open.
 */
export const MAX_POLICY_UPLOADS = 4;

/** How long a `PUT /policy` body may take to arrive whole. */
export const POLICY_BODY_TIMEOUT_MS = 10_000;

/** What `GET /usage` answers: every owner's bytes and keys on this server, with its quota. */
export interface UsageReport {
  readonly server: number;
  readonly owners: readonly {
    readonly owner: string;
    readonly bytes: number;
    readonly keys: number;
    readonly quota: { bytes?: number; keys?: number };
  }[];
}

/** What the routes read from the running server. */
export interface RouteContext {
  /** 1-based server id. */
  readonly id: number;
  /** The cluster's id (`cluster.json`'s), so a supervisor can tell whose server answers. */
  readonly cluster: string;
  readonly storage: ServerStorage;
  readonly protocol: Server;
  readonly metrics: ServerMetrics;
  readonly log: Logger;
  connections(): number;
  shuttingDown(): boolean;
  /** `GET /status`'s report (`healing.ts`). */
  status?(): object;
  /** Catch-up's state (`rebuilding`, `caught-up`, …), shown by `/healthz` too, when self-healing runs. */
  catchUp?(): string | undefined;
  /** Whether the server is rebuilding after an empty (or truncated) data directory: `/readyz` answers 503 meanwhile. */
  rebuilding?(): boolean;
  /** What the start check found (`clean`, `damaged`: not all repaired yet, `repaired`, `off`), shown by `/healthz`. */
  storageCheck?(): string | undefined;
  /** The storage's disk (`level-storage.ts`): `/healthz` answers 503 unless it is `ok`. */
  disk?(): DiskHealth;
  /** The write policy: `GET /policy` and `PUT /policy` (`policy.ts`), and its version in `/healthz`. */
  policy?: PolicyRoutes;
}

/** What the `/policy` routes read and offer. */
export interface PolicyRoutes {
  /** The version of the policy in force. */
  version(): number;
  /** `GET /policy`'s answer. */
  report(): object;
  /** Judges and applies a `PUT /policy` body; rejects with {@link PolicyRefusal}. */
  offer(body: Buffer, address: string): Promise<PolicyOffer>;
  /** Counts a `PUT /policy` by outcome (`applied`, `unchanged`, or a refusal code). */
  count(result: PolicyOffer['status'] | PolicyRefusalCode): void;
}

/** The request listener for the HTTP (or HTTPS) server. */
export function httpRoutes(ctx: RouteContext): (req: IncomingMessage, res: ServerResponse) => void {
  let uploads = 0;
  const putPolicy = (policy: PolicyRoutes, req: IncomingMessage, res: ServerResponse) => {
    const refuse = (refusal: PolicyRefusal) => {
      policy.count(refusal.code);
      sendJson(res, refusal.status, {
        error: refusal.code,
        message: refusal.message,
        ...(refusal.current !== undefined ? { current: refusal.current } : {}),
      });
    };
    if (ctx.shuttingDown()) return refuse(new PolicyRefusal(503, 'SHUTTING_DOWN', 'the server is shutting down'));
    const declared = Number(req.headers['content-length'] ?? 0);
    if (declared > MAX_POLICY_BYTES) {
      refuseUnread(res);
      return refuse(new PolicyRefusal(413, 'TOO_LARGE', `a policy document is at most ${MAX_POLICY_BYTES} bytes`));
    }
    if (uploads >= MAX_POLICY_UPLOADS) {
      refuseUnread(res);
      return refuse(new PolicyRefusal(503, 'BUSY', 'too many policy uploads at once; retry'));
    }
    uploads++;
    readBody(req, MAX_POLICY_BYTES, POLICY_BODY_TIMEOUT_MS)
      .then(
        async (body) => {
          if (body === 'too-large') {
            refuseUnread(res);
            return refuse(new PolicyRefusal(413, 'TOO_LARGE', `a policy document is at most ${MAX_POLICY_BYTES} bytes`));
          }
          if (body === 'timeout') {
            refuseUnread(res);
            return refuse(new PolicyRefusal(408, 'TIMEOUT', `the body did not arrive within ${POLICY_BODY_TIMEOUT_MS / 1000} s`));
          }
          try {
            const r = await policy.offer(body, req.socket.remoteAddress ?? 'unknown');
            policy.count(r.status);
            sendJson(res, 200, { ...r, server: ctx.id });
          } catch (err) {
            if (err instanceof PolicyRefusal) return refuse(err);
            throw err;
          }
        },
        (err: unknown) => {
          // The client went away mid-body: nobody to answer.
          ctx.log.debug({ err }, 'policy upload aborted');
        },
      )
      .catch((err: unknown) => {
        ctx.log.error({ err }, 'policy upload failed');
        if (!res.headersSent) sendJson(res, 500, { error: 'INTERNAL', message: 'internal error' });
      })
      .finally(() => uploads--);
  };
  return (req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path === '/policy' && ctx.policy && req.method === 'PUT') {
      putPolicy(ctx.policy, req, res);
    } else if (path === '/policy' && ctx.policy && req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD, PUT' }).end();
    } else if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
    } else if (path === '/healthz') {
      const disk = ctx.disk?.();
      const diskOk = !disk || disk.state === 'ok';
      const ok = !ctx.shuttingDown() && diskOk;
      res.writeHead(ok ? 200 : 503, { 'content-type': 'application/json' });
      const catchUp = ctx.catchUp?.();
      const storageCheck = ctx.storageCheck?.();
      res.end(
        JSON.stringify({
          status: ctx.shuttingDown() ? 'shutting-down' : diskOk ? 'ok' : `storage-${disk.state}`,
          ...(diskOk ? {} : { storage: { state: disk.state, reason: disk.reason, since: new Date(disk.since).toISOString() } }),
          id: ctx.id,
          cluster: ctx.cluster,
          epoch: ctx.protocol.epoch,
          ...(ctx.policy ? { policyVersion: ctx.policy.version() } : {}),
          connections: ctx.connections(),
          ...(catchUp ? { catchUp } : {}),
          ...(storageCheck ? { storageCheck } : {}),
        }),
      );
    } else if (path === '/readyz') {
      const { ready, body } = readiness(ctx);
      sendJson(res, ready ? 200 : 503, body);
    } else if (path === '/status' && ctx.status) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(ctx.status()));
    } else if (path === '/policy' && ctx.policy) {
      sendJson(res, 200, ctx.policy.report());
    } else if (path === '/usage') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(usageReport(ctx)));
    } else if (path === '/metrics') {
      ctx.metrics.registry.metrics().then(
        (text) => res.writeHead(200, { 'content-type': ctx.metrics.registry.contentType }).end(text),
        (err: unknown) => {
          ctx.log.error({ err }, 'metrics collection failed');
          res.writeHead(500).end();
        },
      );
    } else {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
    }
  };
}

/**
 * Why a server is not fully in service, for `GET /readyz`. Liveness (`/healthz`) asks
 * "should this process be restarted?"; readiness asks "does this server count as one of
 * the `n − t` correct ones right now?". A server answers not ready while it is
 * shutting down, while its disk is full or has failed, while it is rebuilding (it has
 * forgotten writes it acknowledged: it counts against t until its first complete catch-up
 * pass), and while the start check's damage is not all repaired. A server behind on
 * catch-up with its own intact directory forgot nothing, so it stays ready (`catchUp` in
 * the body says how far it is).
 */
export type NotReadyReason = 'shutting-down' | 'storage-full' | 'storage-failed' | 'rebuilding' | 'storage-damaged';

/** `/readyz`'s verdict and body: `{ ready, reasons, id, cluster, catchUp?, storageCheck? }`. */
export function readiness(ctx: RouteContext): { ready: boolean; body: object } {
  const reasons: NotReadyReason[] = [];
  if (ctx.shuttingDown()) reasons.push('shutting-down');
  const disk = ctx.disk?.();
  if (disk && disk.state !== 'ok') reasons.push(disk.state === 'full' ? 'storage-full' : 'storage-failed');
  if (ctx.rebuilding?.()) reasons.push('rebuilding');
  const storageCheck = ctx.storageCheck?.();
  if (storageCheck === 'damaged') reasons.push('storage-damaged');
  const catchUp = ctx.catchUp?.();
  const ready = reasons.length === 0;
  return {
    ready,
    body: {
      status: ready ? 'ready' : 'not-ready',
      reasons,
      id: ctx.id,
      cluster: ctx.cluster,
      ...(catchUp ? { catchUp } : {}),
      ...(storageCheck ? { storageCheck } : {}),
    },
  };
}

function usageReport(ctx: RouteContext): UsageReport {
  const owners = [...ctx.storage.owners()]
    .map(([owner, u]) => ({ owner, bytes: u.bytes, keys: u.keys, quota: ctx.protocol.quotaFor(owner) }))
    .sort((a, b) => b.bytes - a.bytes || a.owner.localeCompare(b.owner));
  return { server: ctx.id, owners };
}

function sendJson(res: ServerResponse, status: number, body: object): void {
  if (res.headersSent) return;
  res.writeHead(status, { 'content-type': 'application/json' }).end(`${JSON.stringify(body)}\n`);
}

/**
 * Answers without reading the rest of the body: the connection closes once the answer is
 * out, instead of the server taking in (and discarding) whatever the client keeps sending.
 */
function refuseUnread(res: ServerResponse): void {
  res.shouldKeepAlive = false;
  res.once('finish', () => res.req.destroy());
}

/**
 * The request's body, or `too-large` once it passes `max` bytes (what came is dropped), or
 * `timeout` when it is not whole within `timeoutMs`; rejects when the client aborts.
 */
function readBody(req: IncomingMessage, max: number, timeoutMs: number): Promise<Buffer | 'too-large' | 'timeout'> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let length = 0;
    const done = (result: Buffer | 'too-large' | 'timeout') => {
      clearTimeout(timer);
      req.removeAllListeners('data');
      resolve(result);
    };
    const timer = setTimeout(() => done('timeout'), timeoutMs);
    req.on('data', (chunk: Buffer) => {
      length += chunk.length;
      if (length > max) {
        chunks.length = 0;
        req.pause();
        done('too-large');
      } else chunks.push(chunk);
    });
    req.once('end', () => done(Buffer.concat(chunks)));
    req.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    req.once('close', () => {
      if (!req.complete) {
        clearTimeout(timer);
        reject(new Error('the client closed the connection mid-body'));
      }
    });
  });
}
