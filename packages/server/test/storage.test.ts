import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MemoryStorage, storageConformance, type StorageHarness, type StorageSupports } from '@powerstore/protocol/testing';
import { ClassicLevel } from 'classic-level';
import { LevelStorage, type LevelStorageOptions } from '../src/index.js';
import { entry, N, ts } from './entries.js';

const root = mkdtempSync(join(tmpdir(), 'powerstore-storage-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let dirs = 0;

// One suite for every backend (the protocol's), registered per backend as abstract-level's is.
function suite(name: string, make: () => StorageHarness | Promise<StorageHarness>, supports: StorageSupports) {
  describe(`storage suite: ${name}`, () => {
    for (const check of storageConformance(make, supports)) it(check.name, check.run);
  });
}

suite('MemoryStorage', () => ({ storage: new MemoryStorage() }), { durable: false, groupCommit: false });

/** A LevelStorage harness for the suite: a fresh directory, reopened with the same options. */
async function levelHarness(options: Partial<LevelStorageOptions>): Promise<StorageHarness> {
  const path = join(root, `db-${dirs++}`);
  let commits = 0;
  const open = () => LevelStorage.open({ path, n: N, onCommit: () => commits++, ...options });
  let current = await open();
  return {
    get storage() {
      return current;
    },
    async reopen() {
      await current.close();
      current = await open();
      return current;
    },
    close: () => current.close(),
    commits: () => commits,
  };
}

// With its cache of decoded key records, and without (every read goes to LevelDB).
for (const stateCacheKeys of [10_000, 0]) {
  suite(stateCacheKeys ? 'LevelStorage' : 'LevelStorage without the key-record cache', () => levelHarness({ stateCacheKeys }), {
    durable: true,
    groupCommit: true,
  });
}

// Every fragment in the value log, in segments of 4 KiB so that appends roll them often.
suite('LevelStorage with every fragment in the value log', () => levelHarness({ valueLog: { minBytes: 0, segmentBytes: 4096 } }), {
  durable: true,
  groupCommit: true,
});

describe('LevelStorage specifics', () => {
  it('refuses a database of another cluster, cluster size or identity', async () => {
    const path = join(root, `db-${dirs++}`);
    await (await LevelStorage.open({ path, n: N, cluster: 'c1', identity: 'server-1:abc' })).close();
    await expect(LevelStorage.open({ path, n: 7, cluster: 'c1', identity: 'server-1:abc' })).rejects.toMatchObject({
      code: 'STORAGE_MISMATCH',
    });
    await expect(LevelStorage.open({ path, n: N, cluster: 'c1', identity: 'server-2:abc' })).rejects.toMatchObject({
      code: 'STORAGE_MISMATCH',
    });
    await expect(LevelStorage.open({ path, n: N, cluster: 'c2', identity: 'server-1:abc' })).rejects.toMatchObject({
      code: 'STORAGE_MISMATCH',
      message: /cluster c1/,
    });
    await (await LevelStorage.open({ path, n: N, cluster: 'c1', identity: 'server-1:abc' })).close();
  });

  it('refuses a data directory of PowerStore 0.1 (storage format 1) with a message saying what to do', async () => {
    const path = join(root, `db-${dirs++}`);
    const db = new ClassicLevel<string, string>(path);
    await db.put('m:meta', JSON.stringify({ format: 1, n: N, identity: '' }));
    await db.close();
    await expect(LevelStorage.open({ path, n: N })).rejects.toMatchObject({
      code: 'STORAGE_MISMATCH',
      message: /format 1.*empty data directory/s,
    });
  });

  it('a second open of a directory in use says another process holds it', async () => {
    const path = join(root, `db-${dirs++}`);
    const s = await LevelStorage.open({ path, n: N });
    await expect(LevelStorage.open({ path, n: N })).rejects.toMatchObject({ code: 'STORAGE_FAILED', message: /another process/ });
    await s.close();
  });

  it('refuses a format-3 directory (fragments inside history records) with a message saying what to do', async () => {
    const path = join(root, `db-${dirs++}`);
    const db = new ClassicLevel<string, string>(path);
    await db.put('m:meta', JSON.stringify({ format: 3, n: N, identity: '' }));
    await db.close();
    await expect(LevelStorage.open({ path, n: N })).rejects.toMatchObject({
      code: 'STORAGE_MISMATCH',
      message: /format 3.*empty data directory/s,
    });
  });

  it('opens without reading any key record: totals come from their own records', async () => {
    const path = join(root, `db-${dirs++}`);
    let s = await LevelStorage.open({ path, n: N });
    await Promise.all(
      ['a', 'b', 'c'].map((k) =>
        s.withKey(k, (r) => r.putEntry(entry(1, new Uint8Array(10).fill(7)), { owner: 'o', bytes: 10, quota: {} })),
      ),
    );
    await s.close();
    // A key record a scan at open would choke on.
    const db = new ClassicLevel<string, string>(path);
    await db.put('k:b', 'garbage');
    await db.close();
    s = await LevelStorage.open({ path, n: N });
    expect([s.keyCount, s.historyEntryCount, s.usage('o')]).toEqual([3, 3, { bytes: 30, keys: 3 }]);
    await expect(s.withKey('b', (r) => r.getLc())).rejects.toMatchObject({ code: 'STORAGE_CORRUPT' });
    expect((await s.withKey('a', (r) => r.getEntry(ts(1))))?.fragment.length).toBe(10);
    await s.close();
  });

  it("sizes LevelDB for fragments kept in it: 6 MiB of them stay in the memtable, where LevelDB's default sizes would have written tables", async () => {
    const tables = (path: string) => readdirSync(path).filter((f) => f.endsWith('.ldb')).length;
    const fragment = new Uint8Array(128 * 1024).fill(3);
    const fill = async (s: LevelStorage) => {
      for (let k = 0; k < 48; k++)
        await s.withKey(`k${k}`, (r) => r.putEntry(entry(1, fragment), { owner: 'o', bytes: fragment.length, quota: {} }));
    };
    const tuned = join(root, `db-${dirs++}`);
    const s = await LevelStorage.open({ path: tuned, n: N, valueLog: false });
    await fill(s);
    expect(tables(tuned)).toBe(0);
    await s.close();
    // LevelDB's own defaults (4 MiB memtable) flush the same writes to table files.
    const small = join(root, `db-${dirs++}`);
    const d = await LevelStorage.open({
      path: small,
      n: N,
      valueLog: false,
      leveldb: { writeBufferSize: 4 * 1024 * 1024, maxFileSize: 2 * 1024 * 1024 },
    });
    await fill(d);
    for (let i = 0; i < 50 && tables(small) === 0; i++) await new Promise((r) => setTimeout(r, 50));
    expect(tables(small)).toBeGreaterThan(0);
    await d.close();
  });
});
