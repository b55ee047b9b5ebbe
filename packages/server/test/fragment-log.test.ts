/**
 * LevelStorage with its value log (`fragment-log.ts`, `value-log.ts`): which fragments go
 * there, what a maintenance pass reclaims and erases, what an open cleans up after a crash,
 * damage and its repair, and the upgrade from format 4. (The conformance and erasure suites
 * run with every fragment in the log; these check what only the log has.)
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { open as openFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { ClassicLevel } from 'classic-level';
import { LevelStorage, type LevelStorageOptions } from '../src/index.js';
import { decodePointer, recordBytes, ValueLog } from '../src/value-log.js';
import { entry, N, ts } from './entries.js';

const root = mkdtempSync(join(tmpdir(), 'powerstore-flog-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let dirs = 0;
const newPath = () => join(root, `db-${dirs++}`);

/** `size` random bytes with a random 24-byte marker at byte 100 (found again by searching files). */
function fragment(size: number): { bytes: Uint8Array; marker: Buffer } {
  const marker = randomBytes(24);
  const bytes = new Uint8Array(randomBytes(size));
  bytes.set(marker, 100);
  return { bytes, marker };
}

/** No automatic pass during a test (one every quarter of the erase bound): the tests run them. */
function open(path: string, options: Partial<LevelStorageOptions> = {}): Promise<LevelStorage> {
  return LevelStorage.open({ path, n: N, eraseWithinMs: 3_600_000, valueLog: {}, ...options });
}

const put = (s: LevelStorage, key: string, num: number, bytes: Uint8Array) =>
  s.withKey(key, (r) => r.putEntry(entry(num, bytes), { owner: 'o', bytes: bytes.length, quota: {} }));
const del = (s: LevelStorage, key: string, num: number) => s.withKey(key, (r) => r.deleteEntry(ts(num)));
const get = (s: LevelStorage, key: string, num: number) => s.withKey(key, (r) => r.getEntry(ts(num)));

/** Every entry of `expected` (`<key>@<num>` → fragment) reads back exactly. */
async function expectReads(s: LevelStorage, expected: Map<string, Uint8Array> | Record<string, Uint8Array>): Promise<void> {
  for (const [id, bytes] of expected instanceof Map ? expected : Object.entries(expected)) {
    const [key, num] = id.split('@') as [string, string];
    const e = await get(s, key, Number(num));
    expect(e && Buffer.from(e.fragment).equals(Buffer.from(bytes)), `${id} reads back`).toBe(true);
  }
}

/** The records of a closed storage's LevelDB under `prefix` (`v`, `f`, `s`, `z`, `m`). */
async function records(path: string, prefix: string): Promise<[string, Uint8Array][]> {
  const db = new ClassicLevel<string, Uint8Array>(path, { valueEncoding: 'view', createIfMissing: false });
  try {
    return await db.iterator({ gte: `${prefix}:`, lt: `${prefix};` }).all();
  } finally {
    await db.close();
  }
}

/** Segment number → bytes, of the files in `<path>/vlog`. */
function segments(path: string): Map<number, number> {
  const dir = join(path, 'vlog');
  if (!existsSync(dir)) return new Map();
  return new Map(readdirSync(dir).map((f) => [Number(f.slice(0, 8)), statSync(join(dir, f)).size]));
}

/** Files of `path` (LevelDB's and the log's) holding `marker`. */
function filesWith(path: string, marker: Buffer): string[] {
  return readdirSync(path, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile() && readFileSync(join(e.parentPath, e.name)).includes(marker))
    .map((e) => join(e.parentPath, e.name).slice(path.length + 1));
}

/** Live bytes per segment summed from the `v:` pointers, and as the `s:` records say. */
async function liveBytes(path: string): Promise<{ pointers: Map<number, number>; recorded: Map<number, number> }> {
  const pointers = new Map<number, number>();
  for (const [, raw] of await records(path, 'v')) {
    const p = decodePointer(raw)!;
    pointers.set(p.segment, (pointers.get(p.segment) ?? 0) + recordBytes(p));
  }
  const recorded = new Map(
    (await records(path, 's')).map(([k, v]) => [Number(k.slice(2)), JSON.parse(new TextDecoder().decode(v)) as number] as const),
  );
  return { pointers, recorded };
}

describe('LevelStorage with a value log', () => {
  it('fragments of at least minBytes go to the log, smaller ones to LevelDB; all read back, across a reopen', async () => {
    const path = newPath();
    // The default minBytes: 16 KiB.
    const sizes: Record<string, number> = { small: 1000, under: 16 * 1024 - 1, at: 16 * 1024, large: 100_000 };
    const expected = new Map<string, Uint8Array>();
    const markers = new Map<string, Buffer>();
    let s = await open(path);
    for (const [key, size] of Object.entries(sizes)) {
      for (const num of [1, 2]) {
        const f = fragment(size);
        await put(s, key, num, f.bytes);
        expected.set(`${key}@${num}`, f.bytes);
        markers.set(`${key}@${num}`, f.marker);
      }
    }
    await expectReads(s, expected);
    await s.close();

    const keysOf = (rs: [string, Uint8Array][]) => [...new Set(rs.map(([k]) => k.split(':')[2]))].sort();
    expect(keysOf(await records(path, 'v'))).toEqual(['at', 'large']);
    expect(keysOf(await records(path, 'f'))).toEqual(['small', 'under']);
    expect((await records(path, 'v')).every(([, raw]) => decodePointer(raw) !== undefined)).toBe(true);
    expect(segments(path).size).toBeGreaterThan(0);
    // The large fragments' bytes are in the log's files only, the small ones' never there.
    for (const [id, marker] of markers) {
      const files = filesWith(path, marker);
      const large = ['at', 'large'].includes(id.split('@')[0]!);
      expect(files.length, id).toBeGreaterThan(0);
      expect([files.some((f) => f.startsWith('vlog/')), files.every((f) => f.startsWith('vlog/'))], id).toEqual([large, large]);
    }

    s = await open(path);
    await expectReads(s, expected);
    await s.close();
  });

  it('a pass collects mostly dead segments: the log shrinks, kept entries read back, live bytes match the pointers', async () => {
    const path = newPath();
    const segmentBytes = 64 * 1024;
    const options = { valueLog: { minBytes: 1024, segmentBytes } };
    const keys = ['a', 'b', 'c', 'd'];
    const versions = 40;
    const expected = new Map<string, Uint8Array>();
    let s = await open(path, options);
    for (let i = 1; i <= versions; i++) {
      // Keys interleaved, so each segment holds versions of all of them (collected as the
      // server does, 3 kept), and now and then a key written once, which stays live there.
      for (const key of i % 4 === 0 ? [...keys, `cold${i}`] : keys) {
        const f = fragment(8 * 1024);
        const num = key.startsWith('cold') ? 1 : i;
        await s.withKey(key, async (r) => {
          await r.putEntry(entry(num, f.bytes), { owner: 'o', bytes: f.bytes.length, quota: {} });
          if (num > 3) await r.deleteEntry(ts(num - 3));
        });
        expected.set(`${key}@${num}`, f.bytes);
        expected.delete(`${key}@${num - 3}`);
      }
    }
    const total = () => [...segments(path).values()].reduce((a, b) => a + b, 0);
    const before = total();
    const first = await s.valueLogPass();
    const second = await s.valueLogPass();
    expect(first?.error).toBeUndefined();
    expect(second?.error).toBeUndefined();
    expect(first!.moved).toBeGreaterThan(0);
    expect(first!.removed).toBeGreaterThan(0);
    expect(first!.erased).toBeGreaterThan(0);
    await expectReads(s, expected);
    await s.close();

    const { pointers, recorded } = await liveBytes(path);
    expect(recorded).toEqual(pointers);
    const live = [...pointers.values()].reduce((a, b) => a + b, 0);
    expect(live).toBeGreaterThanOrEqual(expected.size * 8 * 1024);
    expect(before).toBeGreaterThan(versions * keys.length * 8 * 1024);
    expect(total()).toBeLessThan(2 * live + segmentBytes);
    expect(total()).toBeLessThan(before / 4);
    // Every segment a pointer names exists, and every file is named by a live-bytes record.
    expect([...segments(path).keys()].sort()).toEqual([...recorded.keys()].sort());
    expect(await records(path, 'z')).toEqual([]);

    s = await open(path, options);
    await expectReads(s, expected);
    await s.close();
  });

  it('at open, removes a segment no live-bytes record names (appended before a crash, its pointers never written)', async () => {
    const path = newPath();
    const kept = fragment(20_000);
    let s = await open(path);
    await put(s, 'k', 1, kept.bytes);
    await s.close();
    const existing = [...segments(path).keys()];
    expect(existing).toHaveLength(1);

    const garbage = fragment(20_000);
    const log = await ValueLog.open({ dir: join(path, 'vlog') });
    const p = await log.append(`1:k:2:${'01'.repeat(32)}`, garbage.bytes);
    await log.close();
    expect(p.segment).toBeGreaterThan(existing[0]!);
    expect(filesWith(path, garbage.marker)).toEqual([`vlog/${String(p.segment).padStart(8, '0')}.vlog`]);

    s = await open(path);
    expect([...segments(path).keys()]).toEqual(existing);
    expect(filesWith(path, garbage.marker)).toEqual([]);
    await expectReads(s, { 'k@1': kept.bytes });
    // New appends still work, and land in a segment past both.
    const next = fragment(20_000);
    await put(s, 'k', 2, next.bytes);
    await s.close();
    expect(Math.max(...segments(path).keys())).toBeGreaterThan(p.segment);
    s = await open(path);
    await expectReads(s, { 'k@1': kept.bytes, 'k@2': next.bytes });
    await s.close();
  });

  it('a damaged record (its name) reads as STORAGE_CORRUPT; restoreEntry repairs it and the next pass erases the damaged copy', async () => {
    const path = newPath();
    const damaged = fragment(20_000);
    // A larger neighbour keeps the segment over half live: the damaged copy is zeroed in place.
    const neighbour = fragment(40_000);
    let s = await open(path);
    await put(s, 'd', 1, damaged.bytes);
    await put(s, 'n', 1, neighbour.bytes);
    await s.close();

    const [file] = filesWith(path, damaged.marker);
    expect(file).toMatch(/^vlog\//);
    const bytes = readFileSync(join(path, file!));
    const at = bytes.indexOf(damaged.marker);
    // Data bytes damaged are served as stored (scrub and readers hash them); a damaged
    // header or name is the storage's own finding. Both here: the record's name, and data.
    const name = Buffer.from(`1:d:`);
    const nameAt = bytes.lastIndexOf(name, at);
    expect(nameAt).toBeGreaterThan(0);
    bytes[nameAt + 2]! ^= 0x01;
    bytes[at + 5]! ^= 0xff;
    writeFileSync(join(path, file!), bytes);
    const flipped = Buffer.from(bytes.subarray(at, at + damaged.marker.length));

    s = await open(path);
    await expect(get(s, 'd', 1)).rejects.toMatchObject({ code: 'STORAGE_CORRUPT' });
    await s.withKey('d', (r) => r.restoreEntry(entry(1, damaged.bytes)));
    await expectReads(s, { 'd@1': damaged.bytes, 'n@1': neighbour.bytes });
    expect(filesWith(path, flipped)).toEqual([file]);
    const pass = await s.valueLogPass();
    expect(pass?.error).toBeUndefined();
    expect(pass!.erased).toBeGreaterThan(0);
    expect(filesWith(path, flipped)).toEqual([]);
    expect(filesWith(path, damaged.marker).length).toBeGreaterThan(0);
    await s.close();

    const { pointers, recorded } = await liveBytes(path);
    expect(recorded).toEqual(pointers);
    s = await open(path);
    await expectReads(s, { 'd@1': damaged.bytes, 'n@1': neighbour.bytes });
    await s.close();
  });

  it('opens a format-4 directory (every fragment in LevelDB), reads it, and marks it format 5', async () => {
    const path = newPath();
    const small = fragment(1000);
    const large = fragment(50_000);
    let s = await open(path, { valueLog: false });
    await put(s, 'a', 1, small.bytes);
    await put(s, 'b', 1, large.bytes);
    await s.close();
    expect(existsSync(join(path, 'vlog'))).toBe(false);
    const meta = async (format?: number) => {
      const db = new ClassicLevel<string, string>(path, { createIfMissing: false });
      const m = JSON.parse((await db.get('m:meta'))!) as { format: number };
      if (format !== undefined) await db.put('m:meta', JSON.stringify({ ...m, format }));
      await db.close();
      return m.format;
    };
    await meta(4);
    expect(await meta()).toBe(4);

    s = await open(path);
    const later = fragment(50_000);
    await put(s, 'c', 1, later.bytes);
    const expected = { 'a@1': small.bytes, 'b@1': large.bytes, 'c@1': later.bytes };
    await expectReads(s, expected);
    await s.close();
    expect(await meta()).toBe(5);
    expect((await records(path, 'v')).map(([k]) => k.split(':')[2])).toEqual(['c']);
    s = await open(path);
    await expectReads(s, expected);
    await s.close();
  });

  it('valueLog: false still reads, deletes and erases fragments in the log; new large fragments go to LevelDB', async () => {
    const path = newPath();
    const inLog = fragment(50_000);
    const gone = fragment(50_000);
    let s = await open(path);
    await put(s, 'a', 1, inLog.bytes);
    await put(s, 'g', 1, gone.bytes);
    await s.close();

    const later = fragment(50_000);
    const expected = { 'a@1': inLog.bytes, 'b@1': later.bytes };
    s = await open(path, { valueLog: false });
    await put(s, 'b', 1, later.bytes);
    await del(s, 'g', 1);
    await expectReads(s, expected);
    expect(filesWith(path, gone.marker)).toHaveLength(1);
    expect((await s.valueLogPass())?.error).toBeUndefined();
    expect(filesWith(path, gone.marker)).toEqual([]);
    await s.close();
    expect((await records(path, 'v')).map(([k]) => k.split(':')[2])).toEqual(['a']);
    expect((await records(path, 'f')).map(([k]) => k.split(':')[2])).toEqual(['b']);
    expect(filesWith(path, later.marker).some((f) => f.startsWith('vlog/'))).toBe(false);

    for (const valueLog of [false, undefined] as const) {
      s = await open(path, { valueLog });
      await expectReads(s, expected);
      await s.close();
    }
  });

  it('deleted fragments leave every file within one pass, with their erasure markers and the live bytes of removed segments', async () => {
    const path = newPath();
    const options = { valueLog: { segmentBytes: 64 * 1024 } };
    const fragments = Array.from({ length: 9 }, () => fragment(20_000));
    let s = await open(path, options);
    for (const [i, f] of fragments.entries()) {
      await put(s, `k${i}`, 1, f.bytes);
      // A reopen midway: earlier segments are sealed, later ones active.
      if (i === 4) {
        await s.close();
        s = await open(path, options);
      }
    }
    // k5, k6, k7 share a segment: with two of them kept it stays, and k5 is zeroed in it.
    const keep = new Set([6, 7]);
    await s.close();
    const before = segments(path);
    expect(before.size).toBeGreaterThan(2);
    expect((await records(path, 's')).length).toBe(before.size);

    s = await open(path, options);
    for (let i = 0; i < fragments.length; i++) if (!keep.has(i)) await del(s, `k${i}`, 1);
    for (const f of fragments) expect(filesWith(path, f.marker)).toHaveLength(1);
    const pass = await s.valueLogPass();
    expect(pass?.error).toBeUndefined();
    expect(pass!.removed).toBeGreaterThan(0);
    expect(pass!.erased).toBeGreaterThan(0);
    for (const [i, f] of fragments.entries()) expect(filesWith(path, f.marker), `k${i}`).toHaveLength(keep.has(i) ? 1 : 0);
    const kept = new Map([...keep].map((i) => [`k${i}@1`, fragments[i]!.bytes]));
    await expectReads(s, kept);
    await s.close();

    expect(await records(path, 'z')).toEqual([]);
    const { pointers, recorded } = await liveBytes(path);
    expect(recorded).toEqual(pointers);
    expect([...recorded.keys()]).toHaveLength(1);
    expect([...segments(path).keys()]).toEqual([...recorded.keys()]);
    s = await open(path, options);
    await expectReads(s, kept);
    await s.close();
  });

  it('a segment number is never used again while erasure markers may still name it', async () => {
    const path = newPath();
    // A delete, then a restart before any pass: its marker stays; the open removes segment 1.
    let s = await open(path);
    await put(s, 'k', 1, fragment(20_000).bytes);
    await del(s, 'k', 1);
    await s.close();
    expect((await records(path, 'z')).length).toBe(1);
    await (await open(path)).close();
    expect(segments(path).size).toBe(0);
    // The next open appends again: not into a new segment 1, which the old marker would zero.
    const f = fragment(20_000);
    s = await open(path);
    await put(s, 'k', 2, f.bytes);
    expect((await s.valueLogPass())?.error).toBeUndefined();
    await expectReads(s, { 'k@2': f.bytes });
    await s.close();
    expect(await records(path, 'z')).toEqual([]);
  });

  it('a pass does not remove the segment an append is starting', async () => {
    const path = newPath();
    const s = await open(path);
    // Holds the append's directory sync (the segment file exists, no record in it yet).
    const probe = await openFile(path, 'r');
    const proto = Object.getPrototypeOf(probe) as { sync: (this: unknown) => Promise<void> };
    await probe.close();
    const sync = proto.sync;
    let entered!: () => void;
    const inSync = new Promise<void>((r) => (entered = r));
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const spy = vi.spyOn(proto, 'sync').mockImplementationOnce(async function (this: unknown) {
      entered();
      await gate;
      return sync.call(this);
    });
    try {
      const f = fragment(20_000);
      const writing = put(s, 'k', 1, f.bytes);
      await inSync;
      expect((await s.valueLogPass())?.removed).toBe(0);
      release();
      await writing;
      await expectReads(s, { 'k@1': f.bytes });
    } finally {
      release();
      spy.mockRestore();
      await s.close();
    }
  });
});

describe('collecting writes too small for the log (no pointer is looked up below the lowest threshold ever used)', () => {
  it('a threshold raised after fragments went to the log still finds and frees them', async () => {
    const path = newPath();
    let s = await open(path, { valueLog: { minBytes: 1024 } });
    const f = fragment(8000);
    await put(s, 'k', 1, f.bytes);
    await s.close();
    // Raised above the fragment: the write is now "small", but its fragment is in the log.
    s = await open(path, { valueLog: { minBytes: 64 * 1024 } });
    await expectReads(s, { 'k@1': f.bytes });
    await del(s, 'k', 1);
    const pass = await s.valueLogPass();
    expect(pass?.error).toBeUndefined();
    await s.close();
    expect(await records(path, 'v')).toEqual([]);
    expect(await records(path, 's')).toEqual([]);
    const files = readdirSync(join(path, 'vlog')).map((n) => readFileSync(join(path, 'vlog', n)));
    expect(files.some((b) => b.includes(f.marker))).toBe(false);
  });
});
