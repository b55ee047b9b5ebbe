/**
 * Deletes erase within a stated time: records garbage collection deleted leave every file
 * of the data directory (tables, write-ahead log, MANIFEST) within `eraseWithinMs`, with
 * no manual compaction, across restarts; what is kept stays. Each scan that must find
 * nothing has a control: the same scan finds the markers before they are deleted.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { KeyChanges } from '@powerstore/protocol';
import { ClassicLevel } from 'classic-level';
import { Eraser, LevelStorage, mergeRanges, type ErasePass, type LevelStorageOptions } from '../src/index.js';
import { entry, N, ts } from './entries.js';

const root = mkdtempSync(join(tmpdir(), 'powerstore-erase-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let dirs = 0;
/** The bound the tests configure. */
const WITHIN_MS = 1000;
const VERSIONS = 300;

/**
 * Markers of versions: random bytes, so that neither Snappy (which stores random bytes as
 * they are, but would encode a repeated string as a back-reference) nor chance hides one.
 */
const newMarkers = (count: number): Buffer[] => Array.from({ length: count }, () => randomBytes(24));

/** 1000 random bytes with `marker` at byte 100. */
function fragmentWith(marker: Uint8Array): Uint8Array {
  const f = new Uint8Array(randomBytes(1000));
  f.set(marker, 100);
  return f;
}

/** For every file of `dir` holding some of `markers`, their indices. */
function scan(dir: string, markers: readonly Buffer[]): Map<string, number[]> {
  for (;;) {
    try {
      const found = new Map<string, number[]>();
      // LevelDB's files, and the value log's segments in vlog/.
      const files = readdirSync(dir, { recursive: true, withFileTypes: true }).filter((e) => e.isFile());
      for (const e of files) {
        const f = join(e.parentPath ?? e.path, e.name).slice(dir.length + 1);
        const bytes = readFileSync(join(dir, f));
        const hits = markers.flatMap((m, i) => (bytes.includes(m) ? [i] : []));
        if (hits.length > 0) found.set(f, hits);
      }
      return found;
    } catch (err) {
      // LevelDB deleted a file between the listing and the read: scan again.
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }
}

/** Indices of the markers found anywhere in `dir`. */
const foundIn = (dir: string, markers: readonly Buffer[]) => new Set([...scan(dir, markers).values()].flat());

/** Polls until no file of `dir` holds any of `markers`; resolves with the ms it took, or rejects after `limitMs` naming what is left. */
async function goneWithin(dir: string, markers: readonly Buffer[], limitMs: number): Promise<number> {
  const t0 = Date.now();
  for (;;) {
    const found = scan(dir, markers);
    if (found.size === 0) return Date.now() - t0;
    if (Date.now() - t0 > limitMs) {
      const where = [...found].map(([f, v]) => `${f}: ${v.length} versions`).join(', ');
      throw new Error(`after ${Date.now() - t0} ms still in ${where}`);
    }
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Polls `done` (bounded): the bytes are gone before a pass ends, which still checks the files and reports. */
async function until(done: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !done(); i++) await new Promise((r) => setTimeout(r, 10));
}

/** Options of the suite running now: fragments in LevelDB, or in the value log. */
let base: Partial<LevelStorageOptions> = {};

function open(path: string, options: Partial<LevelStorageOptions> = {}): Promise<LevelStorage> {
  return LevelStorage.open({ path, n: N, eraseWithinMs: WITHIN_MS, ...base, ...options });
}

/**
 * Writes version i of `key` (1 … `markers.length`) with marker i − 1, collecting as the
 * server does (δ = 2 entries kept below the newest), then deletes what is left if `deleteAll`.
 */
async function overwrite(s: LevelStorage, key: string, markers: readonly Buffer[], deleteAll: boolean): Promise<void> {
  const versions = markers.length;
  for (let i = 1; i <= versions; i++) {
    await s.withKey(key, async (r) => {
      await r.putEntry(entry(i, fragmentWith(markers[i - 1]!)), { owner: 'o', bytes: 1000, quota: {} });
      if (i > 3) await r.deleteEntry(ts(i - 3));
    });
  }
  if (deleteAll) {
    await s.withKey(key, async (r) => {
      for (let i = versions - 2; i <= versions; i++) await r.deleteEntry(ts(i));
    });
  }
}

const SUITES: [string, Partial<LevelStorageOptions>][] = [
  ['LevelStorage, fragments in LevelDB', { valueLog: false }],
  // Segments of 64 KiB: versions fill several, which are zeroed, collected and removed.
  ['LevelStorage, fragments in the value log', { valueLog: { minBytes: 0, segmentBytes: 64 * 1024 } }],
];

for (const [suiteName, suiteOptions] of SUITES)
  describe(`deletes erase within a stated time (${suiteName})`, () => {
    beforeAll(() => {
      base = suiteOptions;
    });
    it(`${VERSIONS} versions of a key, then a delete: no version is left in any file within ${WITHIN_MS} ms, without a manual compaction`, async () => {
      const path = join(root, `db-${dirs++}`);
      const passes: ErasePass[] = [];
      // Control, with erasure off: LevelDB alone keeps every version, deleted or not (here in
      // its log), and across a restart (which replays the log into a table).
      const control = newMarkers(VERSIONS);
      let s = await open(path, { eraseWithinMs: 0 });
      await overwrite(s, 'control', control, true);
      expect(s.historyEntryCount).toBe(0);
      expect(foundIn(path, control).size).toBe(VERSIONS);
      await s.close();
      s = await open(path, { eraseWithinMs: 0 });
      // (The value log removes segments no pointer names when it opens.)
      if (suiteOptions.valueLog === false) expect(foundIn(path, control).size).toBe(VERSIONS);
      await s.close();

      // The same writes under another key, with erasure on.
      const markers = newMarkers(VERSIONS);
      s = await open(path, { onErase: (p) => passes.push(p) });
      await overwrite(s, 'secret', markers, true);
      expect(await goneWithin(path, markers, WITHIN_MS)).toBeLessThanOrEqual(WITHIN_MS);
      await until(() => passes.length > 0);
      expect(passes.length).toBeGreaterThan(0);
      expect(passes.filter((p) => p.error)).toEqual([]);
      await s.close();
      // Nothing comes back after a restart.
      s = await open(path);
      expect(scan(path, markers)).toEqual(new Map());
      await s.close();
    }, 60_000);

    it('erases what garbage collection deleted and keeps, readable, what it kept', async () => {
      const path = join(root, `db-${dirs++}`);
      const markers = newMarkers(VERSIONS);
      const s = await open(path);
      await overwrite(s, 'hot', markers, false);
      // Versions below the 3 newest were collected; those 3 are kept.
      const kept = [VERSIONS - 3, VERSIONS - 2, VERSIONS - 1];
      const deadline = Date.now() + WITHIN_MS;
      let found = foundIn(path, markers);
      while ([...found].some((i) => !kept.includes(i)) && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 25));
        found = foundIn(path, markers);
      }
      expect([...found].sort((a, b) => a - b)).toEqual(kept);
      for (const i of kept) {
        const e = await s.withKey('hot', (r) => r.getEntry(ts(i + 1)));
        expect(Buffer.from(e!.fragment).includes(markers[i]!)).toBe(true);
      }
      expect(await s.withKey('hot', (r) => r.getEntry(ts(1)))).toBeUndefined();
      await s.close();
    }, 60_000);

    it('a restart before the pass loses nothing: what was pending is erased within the bound after opening', async () => {
      const path = join(root, `db-${dirs++}`);
      const markers = newMarkers(VERSIONS);
      // A long bound, so that the close comes before any pass.
      let s = await open(path, { eraseWithinMs: 3_600_000 });
      await overwrite(s, 'secret', markers, true);
      await s.close();
      expect(foundIn(path, markers).size).toBe(VERSIONS);
      const passes: ErasePass[] = [];
      s = await open(path, { onErase: (p) => passes.push(p) });
      expect(await goneWithin(path, markers, WITHIN_MS)).toBeLessThanOrEqual(WITHIN_MS);
      // The pass's markers are deleted: a further restart has nothing to erase.
      await until(() => passes.length > 0);
      await new Promise((r) => setTimeout(r, 100));
      await s.close();
      const db = new ClassicLevel<string, Uint8Array>(path, { valueEncoding: 'view' });
      expect(await db.keys({ gte: 'e:', lt: 'e;' }).all()).toEqual([]);
      await db.close();
    }, 60_000);

    it('more keys than eraseMaxKeys: one pass over every history record erases them all', async () => {
      const path = join(root, `db-${dirs++}`);
      const markers = newMarkers(10);
      const passes: ErasePass[] = [];
      const s = await open(path, { eraseMaxKeys: 4, onErase: (p) => passes.push(p) });
      for (const [k, m] of markers.entries()) {
        await s.withKey(`key-${k}`, (r) => r.putEntry(entry(1, fragmentWith(m)), { owner: 'o', bytes: 1000, quota: {} }));
      }
      expect(foundIn(path, markers).size).toBe(10);
      await Promise.all(markers.map((_, k) => s.withKey(`key-${k}`, (r) => r.deleteEntry(ts(1)))));
      expect(await goneWithin(path, markers, WITHIN_MS)).toBeLessThanOrEqual(WITHIN_MS);
      await until(() => passes.some((p) => p.all));
      expect(passes.map((p) => p.all)).toContain(true);
      await new Promise((r) => setTimeout(r, 100));
      await s.close();
      const db = new ClassicLevel<string, Uint8Array>(path, { valueEncoding: 'view' });
      expect(await db.keys({ gte: 'e:', lt: 'e;' }).all()).toEqual([]);
      await db.close();
    }, 60_000);

    // (LevelDB's compactions: with fragments in the value log, its passes erase them.)
    if (suiteOptions.valueLog === false)
      it('a failed compaction is reported and retried; close() waits for a pass under way', async () => {
        const path = join(root, `db-${dirs++}`);
        const markers = newMarkers(2);
        const passes: ErasePass[] = [];
        const s = await open(path, { onErase: (p) => passes.push(p) });
        const spy = vi.spyOn(ClassicLevel.prototype, 'compactRange').mockRejectedValueOnce(new Error('disk on fire'));
        try {
          await s.withKey('k', (r) => r.putEntry(entry(1, fragmentWith(markers[0]!)), { owner: 'o', bytes: 1000, quota: {} }));
          await s.withKey('k', (r) => r.deleteEntry(ts(1)));
          // The first pass fails; the retry comes half a bound later.
          await goneWithin(path, markers.slice(0, 1), 3 * WITHIN_MS);
          await until(() => passes.length === 2);
          expect(passes.map((p) => p.error?.message)).toEqual(['disk on fire', undefined]);
        } finally {
          spy.mockRestore();
        }
        // A pass under way when close() is called: close waits for its LevelDB call, then the pass stops.
        let release!: () => void;
        const gate = new Promise<void>((r) => (release = r));
        let started!: () => void;
        const called = new Promise<void>((r) => (started = r));
        // (The gated call, the pass's first, then does nothing; later calls are LevelDB's.)
        vi.spyOn(ClassicLevel.prototype, 'compactRange').mockImplementationOnce(async () => {
          started();
          await gate;
        });
        try {
          await s.withKey('k', (r) => r.putEntry(entry(2, fragmentWith(markers[1]!)), { owner: 'o', bytes: 1000, quota: {} }));
          await s.withKey('k', (r) => r.deleteEntry(ts(2)));
          await called;
          let closed = false;
          const closing = s.close().then(() => (closed = true));
          await new Promise((r) => setTimeout(r, 50));
          expect(closed).toBe(false);
          release();
          await closing;
        } finally {
          vi.restoreAllMocks();
        }
        expect(passes).toHaveLength(2);
        // The marker stayed: the next run erases the version.
        expect(foundIn(path, markers)).toEqual(new Set([1]));
        const again = await open(path);
        expect(await goneWithin(path, markers, WITHIN_MS)).toBeLessThanOrEqual(WITHIN_MS);
        await again.close();
      }, 60_000);

    it('a read begun before the deletes holds the pass off (its snapshot would keep them through compaction); it runs once the read ends', async () => {
      const path = join(root, `db-${dirs++}`);
      const db = new ClassicLevel<string, Uint8Array>(path, { valueEncoding: 'view' });
      await db.open();
      const passes: ErasePass[] = [];
      const eraser: Eraser = new Eraser({
        db,
        path,
        withinMs: WITHIN_MS,
        maxKeys: 8,
        ranges: (k) => [[`x:${k}:`, `x:${k};`]],
        all: [['x:', 'x;']],
        marker: 'e:',
        async commit(ops) {
          const extra = eraser.prepare([]);
          await db.batch([...ops, ...extra.ops]);
          extra.done();
        },
        onPass: (p) => passes.push(p),
      });
      const markers = newMarkers(1);
      await db.put('x:k:1', fragmentWith(markers[0]!));
      const reader = db.iterator();
      await reader.next();
      const changes: KeyChanges = {
        key: 'k',
        state: undefined,
        puts: [],
        deletes: [{ ts: ts(1), stripes: false }],
        usage: [],
        keys: 0,
        entries: 0,
      };
      const extra = eraser.prepare([changes]);
      await db.batch([{ type: 'del', key: 'x:k:1' }, ...extra.ops]);
      extra.done();
      await until(() => passes.length > 0);
      expect(passes[0]?.error?.message).toMatch(/holds a snapshot from before the deletes/);
      expect(foundIn(path, markers).size).toBe(1);
      await reader.close();
      // The retry comes half a bound after the failure.
      expect(await goneWithin(path, markers, WITHIN_MS)).toBeLessThanOrEqual(WITHIN_MS);
      await until(() => passes.length > 1);
      expect(passes[1]?.error).toBeUndefined();
      await eraser.close();
      await db.close();
    }, 60_000);

    it('merges ranges that overlap or touch', () => {
      expect(
        mergeRanges([
          ['c', 'd'],
          ['a', 'b'],
          ['b', 'bb'],
          ['x', 'z'],
          ['y', 'y'],
        ]),
      ).toEqual([
        ['a', 'bb'],
        ['c', 'd'],
        ['x', 'z'],
      ]);
    });
  });
