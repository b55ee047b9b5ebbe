import { describe, expect, it } from 'vitest';
import { KeyedMutex, type Candidate, type KeyRecord, type ServerStorage } from '../src/index.js';
import { MemoryStorage } from '../src/testing/memory-storage.js';
import { storageConformance } from '../src/testing/storage-conformance.js';
import { UsageLedger } from '../src/storage/abstract-storage.js';

describe('KeyedMutex', () => {
  it('runs one key’s callbacks one at a time in call order, other keys meanwhile, and goes on after a failure', async () => {
    const mutex = new KeyedMutex();
    const log: string[] = [];
    const step =
      (name: string, ms: number, fail = false) =>
      async () => {
        log.push(`${name}+`);
        await new Promise((r) => setTimeout(r, ms));
        log.push(`${name}-`);
        if (fail) throw new Error(name);
        return name;
      };
    const a1 = mutex.run('a', step('a1', 20, true));
    const a2 = mutex.run('a', step('a2', 1));
    const b1 = mutex.run('b', step('b1', 5));
    await expect(a1).rejects.toThrow('a1');
    expect(await a2).toBe('a2');
    expect(await b1).toBe('b1');
    expect(log.indexOf('a2+')).toBeGreaterThan(log.indexOf('a1-'));
    expect(log.indexOf('b1+')).toBeLessThan(log.indexOf('a1-'));
    await mutex.idle();
  });
});

describe('MemoryStorage conformance', () => {
  for (const check of storageConformance(() => ({ storage: new MemoryStorage() }))) it(check.name, check.run);
});

describe('the conformance suite', () => {
  it('fails a backend without per-key serialization', async () => {
    // Records of lc only, and callbacks run as soon as they are called.
    const unlocked = (): ServerStorage => {
      const lcs = new Map<string, Candidate>();
      const record = (key: string) =>
        ({ getLc: async () => lcs.get(key), setLc: async (c: Candidate) => void lcs.set(key, c) }) as unknown as KeyRecord;
      const ledger = new UsageLedger();
      return {
        withKey: async (key, fn) => fn(record(key)),
        usage: (o) => ledger.usage(o),
        owners: () => ledger.owners(),
        list: async () => ({ keys: [], more: false }),
        listPending: async () => ({ keys: [], more: false }),
        unfinishedKeys: () => new MemoryStorage().unfinishedKeys(),
      };
    };
    const check = storageConformance(() => ({ storage: unlocked() })).find((c) => c.name.startsWith('callbacks on one key'))!;
    await expect(check.run()).rejects.toThrow(/storage conformance/);
  });

  it('fails a backend that checks quotas without reserving', async () => {
    // Checks usage, then charges only after an await: concurrent puts all pass the check.
    const racy = (): ServerStorage => {
      const ledger = new UsageLedger();
      const inner = new MemoryStorage();
      return {
        withKey: (key, fn) =>
          inner.withKey(key, (r) =>
            fn({
              ...r,
              putEntry: async (e, charge) => {
                const u = ledger.usage(charge.owner);
                if (charge.quota.bytes !== undefined && u.bytes + charge.bytes > charge.quota.bytes) return false;
                await new Promise((resolve) => setTimeout(resolve, 1));
                ledger.add(charge.owner, charge.bytes, 1);
                return r.putEntry(e, { ...charge, quota: {} });
              },
            }),
          ),
        usage: (o) => ledger.usage(o),
        owners: () => ledger.owners(),
        list: (prefix, after, limit) => inner.list(prefix, after, limit),
        listPending: (prefix, after, limit) => inner.listPending(prefix, after, limit),
        unfinishedKeys: () => inner.unfinishedKeys(),
      };
    };
    const check = storageConformance(() => ({ storage: racy() })).find((c) => c.name.startsWith('concurrent puts'))!;
    await expect(check.run()).rejects.toThrow(/storage conformance/);
  });
});
