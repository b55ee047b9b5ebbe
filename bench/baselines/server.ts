/**
 * Baseline storage server (bench only): one replica of the M-ABD register, or the
 * unreplicated "single" store — the same process serves both, since a single server is
 * ABD's replica answering GET (QUERY) and PUT. ws with powerstore-server's settings
 * (binary frames, no compression, same frame limit), LevelDB through {@link BaselineStore}
 * (synced group commit unless --unsafe-no-fsync).
 *
 * Per key, `t:<key>` holds the timestamp and `v:<key>` the value, written in one batch,
 * so a write round reads 12 bytes, not the value.
 *
 *   node --import tsx bench/baselines/server.ts --port P --data DIR [--host ADDRESS] [--unsafe-no-fsync]
 *
 * --host defaults to 127.0.0.1; on an emulated network (run.ts --net) it is the
 * address of the server's own namespace.
 */
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import { DEFAULT_MAX_FRAME_BYTES } from 'powerstore-server';
import { BaselineStore } from './level-store.js';
import { T, TS_BYTES, TS0, compareTs, decodeFrame, decodeTs, encodeFrame, encodeTs, type Frame } from './wire.js';

const { values: args } = parseArgs({
  options: {
    host: { type: 'string', default: '127.0.0.1' },
    port: { type: 'string' },
    data: { type: 'string' },
    'unsafe-no-fsync': { type: 'boolean', default: false },
  },
});
const port = Number(args.port);
if (!args.data || !Number.isInteger(port)) throw new Error('usage: server.ts --port P --data DIR [--host ADDRESS] [--unsafe-no-fsync]');

const store = await BaselineStore.open(args.data, !args['unsafe-no-fsync']);

const cpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};

/** Milliseconds spent per stage, summed over requests; read by STATS. */
const timings = { requests: 0, decode: 0, lockWait: 0, storageRead: 0, storageCommit: 0, encode: 0, handle: 0 };

async function handle(f: Frame): Promise<Uint8Array> {
  switch (f.type) {
    case T.QUERY_TS: {
      const t0 = performance.now();
      const raw = await store.get(`t:${f.key}`);
      timings.storageRead += performance.now() - t0;
      return encodeFrame(T.TS_ACK, f.opId, f.key, raw ? raw.subarray(0, TS_BYTES) : encodeTs(TS0));
    }
    case T.QUERY: {
      const t0 = performance.now();
      const [ts, value] = await store.getMany([`t:${f.key}`, `v:${f.key}`]);
      timings.storageRead += performance.now() - t0;
      const t1 = performance.now();
      const fixed = new Uint8Array(TS_BYTES + 1);
      if (ts) fixed.set(ts.subarray(0, TS_BYTES));
      fixed[TS_BYTES] = value ? 1 : 0;
      const out = encodeFrame(T.VALUE_ACK, f.opId, f.key, fixed, value);
      timings.encode += performance.now() - t1;
      return out;
    }
    case T.STORE: {
      const ts = decodeTs(f.body);
      const value = f.body.subarray(TS_BYTES);
      // Store only a newer timestamp, atomically per key (ABD's replica rule).
      const queued = performance.now();
      await store.withKey(f.key, async () => {
        const t0 = performance.now();
        timings.lockWait += t0 - queued;
        const raw = await store.get(`t:${f.key}`);
        const t1 = performance.now();
        timings.storageRead += t1 - t0;
        if (compareTs(ts, raw ? decodeTs(raw) : TS0) <= 0) return;
        await store.commit([
          { key: `t:${f.key}`, value: f.body.subarray(0, TS_BYTES) },
          { key: `v:${f.key}`, value },
        ]);
        timings.storageCommit += performance.now() - t1;
      });
      return encodeFrame(T.STORE_ACK, f.opId, f.key, undefined);
    }
    case T.PUT: {
      const t0 = performance.now();
      await store.commit([{ key: `v:${f.key}`, value: f.body }]);
      timings.storageCommit += performance.now() - t0;
      return encodeFrame(T.STORE_ACK, f.opId, f.key, undefined);
    }
    case T.STATS:
      // cpuMs: the process's CPU time (user + system, every thread: LevelDB's too) since it started.
      return encodeFrame(T.STATS_ACK, f.opId, f.key, undefined, new TextEncoder().encode(JSON.stringify({ ...timings, cpuMs: cpuMs() })));
    default:
      return encodeFrame(T.ERROR, f.opId, f.key, undefined);
  }
}

async function onMessage(ws: WebSocket, data: RawData): Promise<void> {
  const started = performance.now();
  const bytes = Array.isArray(data) ? Buffer.concat(data) : data instanceof ArrayBuffer ? new Uint8Array(data) : data;
  let reply: Uint8Array;
  let frame: Frame | undefined;
  try {
    const t0 = performance.now();
    frame = decodeFrame(new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength));
    timings.decode += performance.now() - t0;
    reply = await handle(frame);
  } catch {
    // An ERROR under the request's opId fails the client's round at once.
    reply = encodeFrame(T.ERROR, frame?.opId ?? 0, frame?.key ?? '', undefined);
  }
  timings.requests++;
  timings.handle += performance.now() - started;
  if (ws.readyState === ws.OPEN) ws.send(reply, { binary: true });
}

const http = createServer((_req, res) => res.writeHead(200).end('ok\n'));
const wss = new WebSocketServer({ noServer: true, maxPayload: DEFAULT_MAX_FRAME_BYTES, perMessageDeflate: false, clientTracking: false });
http.on('upgrade', (req, socket, head) => {
  wss.handleUpgrade(req, socket, head, (ws) => {
    ws.on('message', (data: RawData) => void onMessage(ws, data));
    ws.on('error', () => ws.terminate());
  });
});
http.listen(port, args.host);

const stop = () => {
  http.close();
  http.closeAllConnections();
  void store.close().finally(() => process.exit(0));
  setTimeout(() => process.exit(0), 3000).unref();
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
