/**
 * An instrumented host of the PowerStore server, for the profile only: the same pieces as
 * powerstore-server's startServer — ws with the same settings, the protocol's Server over
 * LevelStorage (synced group commit) with node:crypto — but with a stopwatch around each
 * stage. A text frame `stats` answers the sums as JSON; `reset` zeroes them.
 *
 *   node --import tsx --conditions=@powerstore/source bench/profile/ps-server.ts --config server-1.json --data DIR
 *
 * Stages: decode (wire decode), hash / sign / verify (crypto provider), storageRead (LevelDB gets
 * inside the key's callback), commit (from the callback's return to durability: group
 * commit + fsync, plus waiting for the key's lock), encode (reply), other (the protocol's
 * own logic: the rest of `handle`).
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import { Server, decodeMessage, encodeMessage, framesOf, type KeyRecord, type Request, type ServerStorage } from '@powerstore/protocol';
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import { DEFAULT_MAX_FRAME_BYTES, LevelStorage, loadServerConfig } from 'powerstore-server';
import { add, timedCrypto, type Clock } from './timed.js';

const { values: args } = parseArgs({ options: { config: { type: 'string' }, data: { type: 'string' } } });
const cfg = await loadServerConfig(args.config!);
const level = await LevelStorage.open({ path: args.data!, n: cfg.cluster.config.n, sync: true });

const clock: Clock = {};
let requests = 0;
/**
 * Each request's own stopwatch: a slow server is still handling one round when the next
 * round's request arrives, so global sums cannot be split per request.
 */
const perRequest = new AsyncLocalStorage<Clock>();
const here = (): Clock => perRequest.getStore() ?? clock;

const storage: ServerStorage = {
  withKey<T>(key: string, fn: (record: KeyRecord) => Promise<T>): Promise<T> {
    const t0 = performance.now();
    let inside = 0;
    return level
      .withKey(key, async (record) => {
        const t1 = performance.now();
        const timed: KeyRecord = {
          getLc: async () => {
            const s = performance.now();
            const r = await record.getLc();
            add(here(), 'storageRead', performance.now() - s);
            return r;
          },
          getEntry: async (ts, stripe) => {
            const s = performance.now();
            const r = await record.getEntry(ts, stripe);
            add(here(), 'storageRead', performance.now() - s);
            return r;
          },
          getEntryMeta: async (ts, stripe) => {
            const s = performance.now();
            const r = await record.getEntryMeta(ts, stripe);
            add(here(), 'storageRead', performance.now() - s);
            return r;
          },
          setLc: (c) => record.setLc(c),
          putEntry: (e, charge) => record.putEntry(e, charge),
          index: () => record.index(),
          restoreEntry: (e) => record.restoreEntry(e),
          deleteEntry: (ts, options) => record.deleteEntry(ts, options),
          getCollected: () => record.getCollected(),
        };
        try {
          return await fn(timed);
        } finally {
          inside = performance.now() - t1;
        }
      })
      .finally(() => add(here(), 'storageLockAndCommit', performance.now() - t0 - inside));
  },
  usage: (owner) => level.usage(owner),
  owners: () => level.owners(),
  list: (prefix, after, limit) => level.list(prefix, after, limit),
  listPending: (prefix, after, limit) => level.listPending(prefix, after, limit),
  unfinishedKeys: () => level.unfinishedKeys(),
};

const crypto = timedCrypto(createCryptoProvider(), clock, here);
const server = new Server({
  config: cfg.cluster.config,
  index: cfg.index,
  crypto,
  storage,
  cluster: cfg.cluster.identity,
  signer: await crypto.signerFromSeed(cfg.seed),
  policy: cfg.cluster.policy,
  now: Date.now,
  receiptBatching: (flush) => void setImmediate(flush),
});
/** Process CPU time (user + system, every thread: LevelDB's too) since the last reset. */
let cpuSince = process.cpuUsage();
const reset = () => {
  for (const k of Object.keys(clock)) delete clock[k];
  requests = 0;
  cpuSince = process.cpuUsage();
};
const cpuMs = () => {
  const u = process.cpuUsage(cpuSince);
  return (u.user + u.system) / 1000;
};

const http = createServer((_req, res) => res.writeHead(200).end('ok\n'));
const wss = new WebSocketServer({ noServer: true, maxPayload: DEFAULT_MAX_FRAME_BYTES, perMessageDeflate: false, clientTracking: false });
http.on('upgrade', (req, socket, head) =>
  wss.handleUpgrade(req, socket, head, (ws) => {
    ws.on('message', (data: RawData, isBinary: boolean) => void onMessage(ws, data, isBinary));
  }),
);

async function onMessage(ws: WebSocket, data: RawData, isBinary: boolean): Promise<void> {
  const buf = data as Buffer;
  if (!isBinary) {
    const cmd = buf.toString();
    if (cmd === 'reset') reset();
    ws.send(JSON.stringify({ requests, cpuMs: cpuMs(), ...clock }));
    return;
  }
  // A real client's bundle: each frame answered on its own, as a server may.
  for (const frame of framesOf(new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength))) void onFrame(ws, frame);
}

async function onFrame(ws: WebSocket, frame: Uint8Array): Promise<void> {
  const t0 = performance.now();
  const m = decodeMessage(frame, {
    n: cfg.cluster.config.n,
    maxFragmentLength: DEFAULT_MAX_FRAME_BYTES,
  });
  const t1 = performance.now();
  add(clock, 'decode', t1 - t0);
  const mine: Clock = {};
  const reply = await perRequest.run(mine, () => server.handle(m as Request));
  const t2 = performance.now();
  add(mine, 'other', t2 - t1 - Object.values(mine).reduce((a, v) => a + v, 0));
  for (const [k, v] of Object.entries(mine)) add(clock, k, v);
  const out = encodeMessage(reply);
  add(clock, 'encode', performance.now() - t2);
  requests++;
  ws.send(out, { binary: true });
}

http.listen(cfg.port, cfg.host);
const stop = () => {
  http.close();
  http.closeAllConnections();
  void level.close().finally(() => process.exit(0));
  setTimeout(() => process.exit(0), 3000).unref();
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
