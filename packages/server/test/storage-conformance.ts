/**
 * The storage suite every {@link ServerStorage} backend runs, in the manner of
 * abstract-level's: the protocol's framework-free checks (`storageConformance`, which
 * any backend must pass) and, on top, what a host backend adds, switched by `supports`
 * (durability across reopen, rollback of a failed callback's writes, group commit).
 */
import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { storageConformance, type Candidate, type HistoryEntry, type KeyRecord, type ServerStorage, type Timestamp } from '@powerstore/protocol';

/** What a backend factory returns. */
export interface StorageHarness {
  readonly storage: ServerStorage;
  /** Closes the backend and opens it again on the same data (durable backends). */
  reopen?(): Promise<ServerStorage>;
  /** Releases the backend. */
  close?(): Promise<void>;
  /** Batches written so far (group-committing backends). */
  commits?(): number;
}

/** Optional guarantees. */
export interface StorageSupports {
  /** Data survives {@link StorageHarness.reopen}. */
  readonly durable: boolean;
  /** A callback that throws leaves nothing behind. */
  readonly rollback: boolean;
  /** Concurrent callbacks share batches. */
  readonly groupCommit: boolean;
  /** A record used after its callback settled rejects. */
  readonly staleRecordGuard: boolean;
}

/** Cluster size of the records the suite writes. */
export const N = 4;

const bytes = (n: number) => new Uint8Array(randomBytes(n));

/** A well-formed timestamp with `num`. */
export function ts(num: number, writer = 1): Timestamp {
  return { num, writerId: new Uint8Array(32).fill(writer) };
}

const cert = () => ({ nonceHash: bytes(32), ccDigest: bytes(32), signer: bytes(32), signature: bytes(64), grant: undefined });

/** A well-formed candidate for `t`. */
export function candidate(t: Timestamp): Candidate {
  return { ts: t, nonce: bytes(32), cert: cert(), proof: [0, 1, 2].map((server) => ({ server, signature: bytes(64) })) };
}

/** A well-formed history entry for `t` with a fragment of `size` bytes. */
export function entry(t: Timestamp, size = 100): HistoryEntry {
  return {
    ts: t,
    stripe: 0,
    fragment: bytes(size),
    cc: { tombstone: false, valueLength: size * 2, hashes: Array.from({ length: N }, () => bytes(32)) },
    cert: cert(),
  };
}

/** An unlimited charge to owner `o`. */
export const charge = (bytes = 100, owner = 'o'.repeat(32)) => ({ owner, bytes, quota: {} });

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Registers the suite for one backend. */
export function storageSuite(name: string, make: () => Promise<StorageHarness>, supports: StorageSupports): void {
  describe(`storage suite: ${name}`, () => {
    let harness: StorageHarness | undefined;
    const open = async () => (harness = await make());
    afterEach(async () => {
      await harness?.close?.();
      harness = undefined;
    });

    for (const check of storageConformance(async () => (await open()).storage)) it(check.name, check.run);

    it('an untouched key has no lc and no entries', async () => {
      const { storage } = await open();
      await storage.withKey('nothing', async (r) => {
        expect(await r.getLc()).toBeUndefined();
        expect(await r.getEntry(ts(1))).toBeUndefined();
      });
    });

    it('stores and returns lc and history entries field by field, per key', async () => {
      const { storage } = await open();
      const c = candidate(ts(3));
      const e1 = entry(ts(3));
      const e2 = entry(ts(3, 2), 0);
      await storage.withKey('k', async (r) => {
        await r.putEntry(e1, charge());
        await r.putEntry(e2, charge());
        await r.setLc(c);
      });
      await storage.withKey('k', async (r) => {
        expect(await r.getLc()).toEqual(c);
        expect(await r.getEntry(e1.ts)).toEqual(e1);
        expect(await r.getEntry(e2.ts)).toEqual(e2);
        expect(await r.getEntry(ts(4))).toBeUndefined();
      });
      await storage.withKey('k2', async (r) => {
        expect(await r.getLc()).toBeUndefined();
        expect(await r.getEntry(e1.ts)).toBeUndefined();
      });
    });

    it('keys that share prefixes or hold odd characters stay apart', async () => {
      const { storage } = await open();
      const keys = ['a', 'a:', 'a:1', '1:a', 'ü∂', 'a\u0000b', ''];
      await Promise.all(keys.map((k, i) => storage.withKey(k, (r) => r.putEntry(entry(ts(1), i + 1), charge()))));
      for (const [i, k] of keys.entries()) {
        const e = await storage.withKey(k, (r) => r.getEntry(ts(1)));
        expect(e?.fragment.length, k).toBe(i + 1);
      }
    });

    it('a callback reads its own writes', async () => {
      const { storage } = await open();
      await storage.withKey('k', async (r) => {
        const c = candidate(ts(1));
        await r.setLc(c);
        expect(await r.getLc()).toEqual(c);
        const e = entry(ts(1));
        await r.putEntry(e, charge());
        expect(await r.getEntry(ts(1))).toEqual(e);
      });
    });

    it('excludes callbacks on one key while other keys run in parallel', async () => {
      const { storage } = await open();
      const active = new Map<string, number>();
      let maxSameKey = 0;
      let maxOverall = 0;
      let overall = 0;
      const task = (key: string) =>
        storage.withKey(key, async (r) => {
          const now = (active.get(key) ?? 0) + 1;
          active.set(key, now);
          overall++;
          maxSameKey = Math.max(maxSameKey, now);
          maxOverall = Math.max(maxOverall, overall);
          // A read-modify-write with a pause in the middle: lost updates if not exclusive.
          const lc = await r.getLc();
          await sleep(1);
          await r.setLc(candidate(ts((lc?.ts.num ?? 0) + 1)));
          active.set(key, now - 1);
          overall--;
        });
      const keys = ['x', 'y', 'z'];
      await Promise.all(Array.from({ length: 60 }, (_, i) => task(keys[i % keys.length]!)));
      expect(maxSameKey).toBe(1);
      expect(maxOverall).toBeGreaterThan(1);
      for (const k of keys) expect((await storage.withKey(k, (r) => r.getLc()))?.ts.num).toBe(20);
    });

    it('a failing callback rejects with its error and does not block the key', async () => {
      const { storage } = await open();
      const boom = new Error('boom');
      await expect(
        storage.withKey('k', async (r) => {
          await r.setLc(candidate(ts(7)));
          throw boom;
        }),
      ).rejects.toBe(boom);
      const lc = await storage.withKey('k', (r) => r.getLc());
      if (supports.rollback) expect(lc).toBeUndefined();
      await storage.withKey('k', (r) => r.setLc(candidate(ts(8))));
      expect((await storage.withKey('k', (r) => r.getLc()))?.ts.num).toBe(8);
    });

    it('concurrent writers all land (and share synced batches where supported)', async () => {
      const h = await open();
      const before = h.commits?.() ?? 0;
      const count = 64;
      await Promise.all(
        Array.from({ length: count }, (_, i) =>
          h.storage.withKey(`key-${i}`, async (r) => {
            await r.putEntry(entry(ts(1), 1000), charge());
            await r.setLc(candidate(ts(1)));
          }),
        ),
      );
      if (supports.groupCommit) {
        const batches = (h.commits?.() ?? 0) - before;
        expect(batches).toBeGreaterThan(0);
        expect(batches).toBeLessThan(count / 2);
      }
      const storage = supports.durable ? await h.reopen!() : h.storage;
      for (let i = 0; i < count; i++) {
        await storage.withKey(`key-${i}`, async (r) => {
          expect((await r.getLc())?.ts.num).toBe(1);
          expect((await r.getEntry(ts(1)))?.fragment.length).toBe(1000);
        });
      }
    });

    // Optional guarantees are not registered at all for backends without them (as
    // abstract-level's suite does), rather than reported as skipped.
    if (supports.durable) it('what withKey acknowledged survives reopening, exactly', async () => {
      const h = await open();
      const written = new Map<string, { c: Candidate; e: HistoryEntry }>();
      await Promise.all(
        Array.from({ length: 20 }, async (_, i) => {
          const key = `durable-${i}`;
          const c = candidate(ts(i + 1));
          const e = entry(c.ts, 10 * i);
          await h.storage.withKey(key, async (r) => {
            await r.putEntry(e, charge());
            await r.setLc(c);
          });
          written.set(key, { c, e });
        }),
      );
      const storage = await h.reopen!();
      for (const [key, { c, e }] of written) {
        await storage.withKey(key, async (r) => {
          expect(await r.getLc()).toEqual(c);
          expect(await r.getEntry(c.ts)).toEqual(e);
        });
      }
    });

    if (supports.staleRecordGuard) it('a record used after its callback settled is refused', async () => {
      const { storage } = await open();
      let leaked: KeyRecord | undefined;
      await storage.withKey('k', async (r) => {
        leaked = r;
      });
      await expect(leaked!.setLc(candidate(ts(1)))).rejects.toMatchObject({ code: 'STORAGE_CLOSED' });
    });
  });
}
