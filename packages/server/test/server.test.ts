/**
 * The transport in-process (library API): graceful shutdown answers what it accepted and
 * everything it acknowledged is on disk; limits and keys are validated.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { createReferenceCodec } from '@powerstore/erasure/reference';
import {
  computeCrossChecksum,
  crossChecksumDigest,
  decodeMessage,
  encodeMessage,
  identityFromJson,
  makeWriterId,
  nonceHash,
  signCertificate,
  writerTagOf,
  type Reply,
} from '@powerstore/protocol';
import { MemoryStorage } from '@powerstore/protocol/testing';
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import { initCluster, LevelStorage, loadServerConfig, startServer } from '../src/index.js';

const crypto = createCryptoProvider();
const root = mkdtempSync(join(tmpdir(), 'powerstore-server-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const silent = pino({ level: 'silent' });

async function setup() {
  const init = await initCluster({ t: 1, dir: join(root, `cluster-${Math.random().toString(36).slice(2)}`), basePort: 40000 });
  const config = await loadServerConfig(init.serverFiles[0]!);
  const adminJson = identityFromJson(JSON.parse(readFileSync(init.adminFile, 'utf8')));
  const admin = await crypto.signerFromSeed(adminJson.seed);
  return { init, config, admin };
}

describe('startServer', () => {
  it('on close, answers the requests it accepted, closes with 1001, and every acknowledged STORE is durable', async () => {
    const { config, admin } = await setup();
    const dataDir = join(root, 'graceful');
    const server = await startServer({
      cluster: config.cluster,
      index: 0,
      seed: config.seed,
      host: '127.0.0.1',
      port: 0,
      dataDir,
      logger: silent,
    });
    const ws = new WebSocket(server.url, { perMessageDeflate: false });
    await new Promise<void>((resolve) => ws.once('open', () => resolve()));
    const replies: Reply[] = [];
    const closed = new Promise<number>((resolve) => ws.once('close', (code) => resolve(code)));
    let closing: Promise<void> | undefined;
    ws.on('message', (d: Buffer) => {
      replies.push(decodeMessage(new Uint8Array(d), { n: 4 }) as Reply);
      // Shut down while most requests are still queued or being synced.
      closing ??= server.close();
    });
    const codec = createReferenceCodec({ k: 2, n: 4 });
    const writerId = makeWriterId(writerTagOf(crypto, admin.publicKey), new Uint8Array(16).fill(1));
    const sent = 60;
    for (let i = 0; i < sent; i++) {
      const key = `k${i % 7}`;
      const ts = { num: i + 1, writerId };
      const value = new Uint8Array(randomBytes(100_000));
      const fragments = codec.encode(value);
      const cc = await computeCrossChecksum(crypto, fragments, value.length, false);
      const cert = await signCertificate(crypto, config.cluster.identity.id, admin, {
        key,
        ts,
        nonceHash: nonceHash(crypto, new Uint8Array(randomBytes(32))),
        ccDigest: crossChecksumDigest(crypto, cc),
        tombstone: cc.tombstone,
        grant: undefined,
      });
      ws.send(encodeMessage({ type: 'STORE', key, opId: i, ts, stripe: 0, fragment: fragments[0]!, cc, cert }));
    }
    expect(await closed).toBe(1001);
    await closing;
    expect(replies.length).toBeGreaterThan(0);
    // Nothing accepted was failed: every answer is an acknowledgement.
    expect(replies.filter((r) => r.type !== 'STORE_ACK')).toEqual([]);
    const storage = await LevelStorage.open({ path: dataDir, n: 4 });
    for (const r of replies) {
      if (r.type !== 'STORE_ACK') continue;
      expect(await storage.withKey(r.key, (rec) => rec.getEntry(r.ts)), `${r.key}@${r.ts.num}`).toBeDefined();
    }
    expect(storage.historyEntryCount).toBeGreaterThanOrEqual(replies.length);
    await storage.close();
  });

  it('runs on any storage backend handed to it, and closes it on shutdown', async () => {
    const { config, admin } = await setup();
    const memory = new MemoryStorage();
    const server = await startServer({
      cluster: config.cluster,
      index: 0,
      seed: config.seed,
      host: '127.0.0.1',
      port: 0,
      storage: memory,
      logger: silent,
    });
    expect(server.storage).toBe(memory);
    const ws = new WebSocket(server.url, { perMessageDeflate: false });
    await new Promise<void>((resolve) => ws.once('open', () => resolve()));
    const codec = createReferenceCodec({ k: 2, n: 4 });
    const ts = { num: 1, writerId: makeWriterId(writerTagOf(crypto, admin.publicKey), new Uint8Array(16).fill(2)) };
    const value = new Uint8Array(randomBytes(1000));
    const fragments = codec.encode(value);
    const cc = await computeCrossChecksum(crypto, fragments, value.length, false);
    const cert = await signCertificate(crypto, config.cluster.identity.id, admin, {
      key: 'm',
      ts,
      nonceHash: nonceHash(crypto, new Uint8Array(randomBytes(32))),
      ccDigest: crossChecksumDigest(crypto, cc),
      tombstone: cc.tombstone,
      grant: undefined,
    });
    const reply = new Promise<Reply>((resolve) =>
      ws.once('message', (d: Buffer) => resolve(decodeMessage(new Uint8Array(d), { n: 4 }) as Reply)),
    );
    ws.send(encodeMessage({ type: 'STORE', key: 'm', opId: 1, ts, stripe: 0, fragment: fragments[0]!, cc, cert }));
    expect((await reply).type).toBe('STORE_ACK');
    expect(memory.entries('m').map((e) => e.ts.num)).toEqual([1]);
    expect(memory.historyEntryCount).toBe(1);
    ws.close();
    await server.close();
    await expect(memory.withKey('m', (r) => r.getLc())).rejects.toMatchObject({ code: 'STORAGE_CLOSED' });
    await expect(
      startServer({ cluster: config.cluster, index: 0, seed: config.seed, host: '127.0.0.1', port: 0, logger: silent }),
    ).rejects.toMatchObject({ code: 'CONFIG_INVALID', message: /dataDir/ });
  });

  it('rejects inconsistent limits, and a receipt key that is not the cluster file’s, with CONFIG_INVALID', async () => {
    const { config } = await setup();
    const base = {
      cluster: config.cluster,
      index: 0,
      seed: config.seed,
      host: '127.0.0.1',
      port: 0,
      dataDir: join(root, 'limits'),
      logger: silent,
    };
    await expect(startServer({ ...base, limits: { maxFrameBytes: 1 << 20, maxBufferedBytes: 1 << 10 } })).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
    });
    await expect(startServer({ ...base, limits: { maxConnections: 0 } })).rejects.toMatchObject({ code: 'CONFIG_INVALID' });
    await expect(startServer({ ...base, index: 1 })).rejects.toMatchObject({ code: 'CONFIG_INVALID', message: /receipt key/ });
  });
});
