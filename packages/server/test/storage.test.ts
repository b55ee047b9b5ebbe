import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MemoryStorage } from '@powerstore/protocol';
import { ClassicLevel } from 'classic-level';
import { LevelStorage } from '../src/index.js';
import { candidate, charge, entry, N, storageSuite, ts } from './storage-conformance.js';

const root = mkdtempSync(join(tmpdir(), 'powerstore-storage-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let dirs = 0;

storageSuite('MemoryStorage', async () => ({ storage: new MemoryStorage() }), {
  durable: false,
  rollback: false,
  groupCommit: false,
  staleRecordGuard: false,
});

// With its cache of decoded key records, and without (every read goes to LevelDB).
for (const stateCacheKeys of [10_000, 0]) {
  storageSuite(
    stateCacheKeys ? 'LevelStorage' : 'LevelStorage without the key-record cache',
    async () => {
      const path = join(root, `db-${dirs++}`);
      let commits = 0;
      const open = () => LevelStorage.open({ path, n: N, onCommit: () => commits++, stateCacheKeys });
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
    },
    { durable: true, rollback: true, groupCommit: true, staleRecordGuard: true },
  );
}

describe('LevelStorage specifics', () => {
  it('refuses a database of another cluster, cluster size or identity', async () => {
    const path = join(root, `db-${dirs++}`);
    await (await LevelStorage.open({ path, n: N, cluster: 'c1', identity: 'server-1:abc' })).close();
    await expect(LevelStorage.open({ path, n: 7, cluster: 'c1', identity: 'server-1:abc' })).rejects.toMatchObject({ code: 'STORAGE_MISMATCH' });
    await expect(LevelStorage.open({ path, n: N, cluster: 'c1', identity: 'server-2:abc' })).rejects.toMatchObject({ code: 'STORAGE_MISMATCH' });
    await expect(LevelStorage.open({ path, n: N, cluster: 'c2', identity: 'server-1:abc' })).rejects.toMatchObject({ code: 'STORAGE_MISMATCH', message: /cluster c1/ });
    await (await LevelStorage.open({ path, n: N, cluster: 'c1', identity: 'server-1:abc' })).close();
  });

  it('refuses a data directory of PowerStore 0.1 (storage format 1) with a message saying what to do', async () => {
    const path = join(root, `db-${dirs++}`);
    const db = new ClassicLevel<string, string>(path);
    await db.put('m:meta', JSON.stringify({ format: 1, n: N, identity: '' }));
    await db.close();
    await expect(LevelStorage.open({ path, n: N })).rejects.toMatchObject({ code: 'STORAGE_MISMATCH', message: /format 1.*empty data directory/s });
  });

  it('a second open of a directory in use says another process holds it', async () => {
    const path = join(root, `db-${dirs++}`);
    const s = await LevelStorage.open({ path, n: N });
    await expect(LevelStorage.open({ path, n: N })).rejects.toMatchObject({ code: 'STORAGE_FAILED', message: /another process/ });
    await s.close();
  });

  it('keeps per-owner usage across reopening, summed from the key records', async () => {
    const path = join(root, `db-${dirs++}`);
    let s = await LevelStorage.open({ path, n: N });
    await s.withKey('a', (r) => r.putEntry(entry(ts(1)), charge(100, 'alice'.padEnd(32, 'a'))));
    await s.withKey('a', (r) => r.putEntry(entry(ts(2)), charge(50, 'alice'.padEnd(32, 'a'))));
    await s.withKey('b', (r) => r.putEntry(entry(ts(1)), charge(7, 'bob'.padEnd(32, 'b'))));
    await s.close();
    s = await LevelStorage.open({ path, n: N });
    expect(s.usage('alice'.padEnd(32, 'a'))).toEqual({ bytes: 150, keys: 1 });
    expect(s.usage('bob'.padEnd(32, 'b'))).toEqual({ bytes: 7, keys: 1 });
    await s.close();
  });

  it('counts keys and history entries, also after reopening', async () => {
    const path = join(root, `db-${dirs++}`);
    let s = await LevelStorage.open({ path, n: N });
    await s.withKey('a', async (r) => {
      await r.putEntry(entry(ts(1)), charge());
      await r.putEntry(entry(ts(2)), charge());
      await r.setLc(candidate(ts(1)));
    });
    await s.withKey('a', (r) => r.setLc(candidate(ts(2))));
    await s.withKey('b', (r) => r.putEntry(entry(ts(1)), charge()));
    await s.withKey('c', (r) => r.setLc(candidate(ts(1))));
    expect([s.keyCount, s.historyEntryCount]).toEqual([2, 3]);
    await s.close();
    s = await LevelStorage.open({ path, n: N });
    expect([s.keyCount, s.historyEntryCount]).toEqual([2, 3]);
    await s.close();
  });

  it('rejects new callbacks once closing, after finishing the running ones', async () => {
    const s = await LevelStorage.open({ path: join(root, `db-${dirs++}`), n: N });
    let finished = false;
    const running = s.withKey('k', async (r) => {
      await new Promise((res) => setTimeout(res, 20));
      await r.setLc(candidate(ts(1)));
      finished = true;
    });
    const closed = s.close();
    await expect(s.withKey('k', async () => 1)).rejects.toMatchObject({ code: 'STORAGE_CLOSED' });
    await running;
    await closed;
    expect(finished).toBe(true);
  });

  it('a callback on a key waits until the previous one on that key is durable', async () => {
    const path = join(root, `db-${dirs++}`);
    const s = await LevelStorage.open({ path, n: N });
    const order: string[] = [];
    const first = s.withKey('k', async (r) => {
      await r.setLc(candidate(ts(1)));
      order.push('first returned');
    }).then(() => order.push('first durable'));
    const second = s.withKey('k', async (r) => {
      order.push('second started');
      expect((await r.getLc())?.ts.num).toBe(1);
    });
    await Promise.all([first, second]);
    expect(order.indexOf('second started')).toBeGreaterThan(order.indexOf('first returned'));
    await s.close();
  });
});
