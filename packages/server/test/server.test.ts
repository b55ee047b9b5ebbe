/**
 * The transport in-process (library API): graceful shutdown answers what it accepted and
 * everything it acknowledged is on disk; limits are validated.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { candidateMac, clusterConfig, decodeMessage, encodeMessage, makeTimestamp, nonceHash, type Reply } from '@powerstore/protocol';
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import { LevelStorage, startServer } from '../src/index.js';

const crypto = createCryptoProvider();
const root = mkdtempSync(join(tmpdir(), 'powerstore-server-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const config = clusterConfig(1);
const keys = Array.from({ length: config.n }, () => new Uint8Array(randomBytes(32)));
const silent = pino({ level: 'silent' });

describe('startServer', () => {
  it('on close, answers the requests it accepted, closes with 1001, and every acknowledged STORE is durable', async () => {
    const dataDir = join(root, 'graceful');
    const server = await startServer({ cluster: config, index: 0, key: keys[0]!, host: '127.0.0.1', port: 0, dataDir, logger: silent });
    const ws = new WebSocket(server.url, { perMessageDeflate: false });
    await new Promise<void>((resolve) => ws.once('open', () => resolve()));
    const replies: Reply[] = [];
    const closed = new Promise<number>((resolve) => ws.once('close', (code) => resolve(code)));
    let closing: Promise<void> | undefined;
    ws.on('message', (d: Buffer) => {
      replies.push(decodeMessage(new Uint8Array(d), { n: config.n }) as Reply);
      // Shut down while most requests are still queued or being synced.
      closing ??= server.close();
    });
    const writerKey = new Uint8Array(32).fill(9);
    const sent = 60;
    for (let i = 0; i < sent; i++) {
      const key = `k${i % 7}`;
      const ts = makeTimestamp(crypto, writerKey, key, i + 1, new Uint8Array(16).fill(1));
      const nbar = nonceHash(crypto, new Uint8Array(randomBytes(32)));
      const vec = keys.map((k, j) => candidateMac(crypto, k, j, key, ts, nbar));
      const fragment = new Uint8Array(randomBytes(50_000));
      ws.send(encodeMessage({ type: 'STORE', key, opId: i, ts, stripe: 0, fragment, cc: { tombstone: false, valueLength: 100_000, hashes: vec }, nonceHash: nbar, vec }));
    }
    expect(await closed).toBe(1001);
    await closing;
    expect(replies.length).toBeGreaterThan(0);
    // Nothing accepted was failed: every answer is an acknowledgement.
    expect(replies.filter((r) => r.type !== 'STORE_ACK')).toEqual([]);
    const storage = await LevelStorage.open({ path: dataDir, n: config.n });
    for (const r of replies) {
      if (r.type !== 'STORE_ACK') continue;
      expect(await storage.withKey(r.key, (rec) => rec.getEntry(r.ts)), `${r.key}@${r.ts.num}`).toBeDefined();
    }
    expect(storage.historyEntryCount).toBeGreaterThanOrEqual(replies.length);
    await storage.close();
  });

  it('rejects inconsistent limits with CONFIG_INVALID', async () => {
    const base = { cluster: config, index: 0, key: keys[0]!, host: '127.0.0.1', port: 0, dataDir: join(root, 'limits'), logger: silent };
    await expect(startServer({ ...base, limits: { maxFrameBytes: 1 << 20, maxInFlightBytes: 1 << 10 } })).rejects.toMatchObject({ code: 'CONFIG_INVALID' });
    await expect(startServer({ ...base, limits: { maxConnections: 0 } })).rejects.toMatchObject({ code: 'CONFIG_INVALID' });
  });
});
