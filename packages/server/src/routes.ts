/**
 * The plain HTTP side of a server's port: `GET /healthz`, `GET /metrics` (Prometheus),
 * `GET /usage` (bytes and keys per owner) and `GET /status` (data held, catch-up and scrub). Everything else is 404; WebSocket upgrades are
 * handled by the server itself.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import type { Server } from '@powerstore/protocol';
import type { ServerStorage } from '@powerstore/protocol';
import type { ServerMetrics } from './metrics.js';
import type { DiskHealth } from './level-storage.js';

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
  /** The storage's disk (`level-storage.ts`): `/healthz` answers 503 unless it is `ok`. */
  disk?(): DiskHealth;
}

/** The request listener for the HTTP (or HTTPS) server. */
export function httpRoutes(ctx: RouteContext): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
    } else if (path === '/healthz') {
      const disk = ctx.disk?.();
      const diskOk = !disk || disk.state === 'ok';
      const ok = !ctx.shuttingDown() && diskOk;
      res.writeHead(ok ? 200 : 503, { 'content-type': 'application/json' });
      const catchUp = ctx.catchUp?.();
      res.end(
        JSON.stringify({
          status: ctx.shuttingDown() ? 'shutting-down' : diskOk ? 'ok' : `storage-${disk.state}`,
          ...(diskOk ? {} : { storage: { state: disk.state, reason: disk.reason, since: new Date(disk.since).toISOString() } }),
          id: ctx.id,
          cluster: ctx.cluster,
          epoch: ctx.protocol.epoch,
          connections: ctx.connections(),
          ...(catchUp ? { catchUp } : {}),
        }),
      );
    } else if (path === '/status' && ctx.status) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(ctx.status()));
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

function usageReport(ctx: RouteContext): UsageReport {
  const owners = [...ctx.storage.owners()]
    .map(([owner, u]) => ({ owner, bytes: u.bytes, keys: u.keys, quota: ctx.protocol.quotaFor(owner) }))
    .sort((a, b) => b.bytes - a.bytes || a.owner.localeCompare(b.owner));
  return { server: ctx.id, owners };
}
