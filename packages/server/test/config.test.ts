import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { writerCredentials } from '@powerstore/protocol';
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import { ConfigError, initCluster, loadClusterFile, loadServerConfig, loadWriterFile } from '../src/index.js';

const root = mkdtempSync(join(tmpdir(), 'powerstore-config-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let dirs = 0;
const fresh = () => join(root, `c${dirs++}`);

describe('cluster files', () => {
  it('init writes a public cluster file and 0600 secret files that load back', () => {
    const dir = fresh();
    const r = initCluster({ t: 2, dir, basePort: 9100 });
    expect(r.serverFiles).toHaveLength(7);
    const cluster = loadClusterFile(r.clusterFile);
    expect(cluster).toMatchObject({ t: 2, n: 7 });
    expect(cluster.servers[6]).toEqual({ id: 7, url: 'ws://127.0.0.1:9106' });
    expect(readFileSync(r.clusterFile, 'utf8')).not.toMatch(/key/i);
    expect(statSync(r.clusterFile).mode & 0o777).toBe(0o644);
    for (const f of [...r.serverFiles, r.writerFile]) expect(statSync(f).mode & 0o777, f).toBe(0o600);
    const s3 = loadServerConfig(r.serverFiles[2]!);
    expect(s3).toMatchObject({ id: 3, index: 2, port: 9102, host: '127.0.0.1', cluster: { t: 2, n: 7 } });
    const w = loadWriterFile(r.writerFile);
    expect(w.serverKeys[2]).toEqual(s3.key);
    // The writer file is exactly what the protocol's credentials need.
    expect(writerCredentials(createCryptoProvider(), w.serverKeys, w.writerId).writerKey).toHaveLength(32);
  });

  it('writes no shared writer id: every loaded writer draws its own, unless the file pins one', () => {
    const r = initCluster({ t: 1, dir: fresh() });
    expect(JSON.parse(readFileSync(r.writerFile, 'utf8'))).not.toHaveProperty('writerId');
    const a = loadWriterFile(r.writerFile).writerId;
    const b = loadWriterFile(r.writerFile).writerId;
    expect(a).toHaveLength(16);
    expect(Buffer.compare(a, b)).not.toBe(0);
    const pinned = { ...JSON.parse(readFileSync(r.writerFile, 'utf8')), writerId: '11'.repeat(16) };
    writeFileSync(r.writerFile, JSON.stringify(pinned));
    expect(Buffer.from(loadWriterFile(r.writerFile).writerId).toString('hex')).toBe('11'.repeat(16));
  });

  it('refuses to overwrite a cluster unless forced', () => {
    const dir = fresh();
    const first = initCluster({ t: 1, dir });
    const key = loadServerConfig(first.serverFiles[0]!).key;
    expect(() => initCluster({ t: 1, dir })).toThrow(expect.objectContaining({ code: 'CONFIG_EXISTS' }));
    initCluster({ t: 1, dir, force: true });
    expect(loadServerConfig(first.serverFiles[0]!).key).not.toEqual(key);
  });

  it('names the file and the field it rejects', () => {
    const dir = fresh();
    const r = initCluster({ t: 1, dir });
    const file = r.serverFiles[0]!;
    const good = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
    const cases: [Record<string, unknown> | string, string | undefined, string][] = [
      [{ ...good, key: 'abc' }, 'key', 'CONFIG_INVALID'],
      [{ ...good, key: undefined }, 'key', 'CONFIG_INVALID'],
      [{ ...good, port: 70000 }, 'port', 'CONFIG_INVALID'],
      [{ ...good, n: 5 }, 'n', 'CONFIG_INVALID'],
      [{ ...good, id: 5 }, 'id', 'CONFIG_INVALID'],
      [{ ...good, version: 2 }, 'version', 'CONFIG_INVALID'],
      [{ ...good, host: 'a b' }, 'host', 'CONFIG_INVALID'],
      ['{ not json', undefined, 'CONFIG_INVALID'],
    ];
    for (const [content, field, code] of cases) {
      writeFileSync(file, typeof content === 'string' ? content : JSON.stringify(content));
      let err: unknown;
      try {
        loadServerConfig(file);
      } catch (e) {
        err = e;
      }
      expect(err, JSON.stringify(content)).toBeInstanceOf(ConfigError);
      expect(err).toMatchObject({ code, file, field });
      expect((err as Error).message).toContain(file);
      if (field) expect((err as Error).message).toContain(`"${field}"`);
    }
    expect(() => loadServerConfig(join(dir, 'missing.json'))).toThrow(expect.objectContaining({ code: 'CONFIG_MISSING' }));
    writeFileSync(r.clusterFile, JSON.stringify({ version: 1, t: 1, n: 4, servers: [{ id: 1, url: 'http://x' }] }));
    expect(() => loadClusterFile(r.clusterFile)).toThrow(expect.objectContaining({ field: 'servers' }));
  });
});
