/**
 * lazyfs's model (lazyfs/main.go), through the kernel as any program sees it: what
 * survives a pulled plug and what does not, in strict POSIX mode and in ext4 mode. Root
 * only, with /dev/fuse and Go (skipped, with the reason logged, otherwise).
 */
import {
  closeSync,
  existsSync,
  fsyncSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statfsSync,
  unlinkSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildLazyfs, LazyFs, lazyfsUnavailable, mounted } from './lazyfs.js';

const unavailable = lazyfsUnavailable();
if (unavailable) console.log(`test/nemesis/lazyfs.test.ts: skipped: ${unavailable}`);

/** Writes `text` at the end of `path` (created if missing); fsyncs the file when `sync`. */
function append(path: string, text: string, sync = false): void {
  const fd = openSync(path, 'a');
  writeSync(fd, text);
  if (sync) fsyncSync(fd);
  closeSync(fd);
}

function fsyncDir(path: string): void {
  const fd = openSync(path, 'r');
  fsyncSync(fd);
  closeSync(fd);
}

const read = (path: string) => (existsSync(path) ? readFileSync(path, 'utf8') : undefined);

describe.skipIf(unavailable)('lazyfs', () => {
  let dir: string;
  let n = 0;
  /** Every mount made, stopped at the end even when a test failed. */
  const all: LazyFs[] = [];
  const mount = async (...args: Parameters<typeof LazyFs.mount>) => {
    const fs = await LazyFs.mount(...args);
    all.push(fs);
    return fs;
  };
  beforeAll(() => {
    buildLazyfs();
    dir = mkdtempSync(join(tmpdir(), 'powerstore-lazyfs-'));
  }, 120_000);
  afterAll(async () => {
    for (const fs of all) await fs.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** A fresh disk (already holding `a` = "old", durable) with lazyfs on it. */
  async function fresh(mode: 'strict' | 'ext4' = 'strict') {
    const id = ++n;
    const backing = join(dir, `disk-${id}`);
    const mnt = join(dir, `mnt-${id}`);
    let fs = await mount(backing, mnt, { mode });
    append(join(mnt, 'a'), 'old', true);
    fsyncDir(mnt);
    return {
      mnt,
      fs: () => fs,
      /** Pulls the plug and boots again; returns what was dropped. */
      async powerLoss() {
        const dropped = await fs.crash();
        expect(mounted(mnt)).toBe(false);
        fs = await mount(backing, mnt, { mode });
        return dropped;
      },
      stop: () => fs.stop(),
    };
  }

  it('keeps unsynced writes visible until the plug is pulled, and drops them then', async () => {
    const d = await fresh();
    append(join(d.mnt, 'a'), '+unsynced');
    expect(read(join(d.mnt, 'a'))).toBe('old+unsynced');
    const s = await d.fs().stats();
    expect(s.pendingBytes).toBe(9);
    expect(s.pendingFiles).toBe(1);
    const dropped = await d.powerLoss();
    expect(dropped.pendingBytes).toBe(9);
    expect(read(join(d.mnt, 'a'))).toBe('old');
    await d.stop();
  });

  it('when full, fails writes and new files with ENOSPC and reports no free space, and takes them again once it has room', async () => {
    const d = await fresh();
    expect((await d.fs().setFull(true)).full).toBe(true);
    expect(() => append(join(d.mnt, 'a'), '+more')).toThrow(expect.objectContaining({ code: 'ENOSPC' }));
    expect(() => writeFileSync(join(d.mnt, 'new'), 'x')).toThrow(expect.objectContaining({ code: 'ENOSPC' }));
    expect(() => mkdirSync(join(d.mnt, 'sub'))).toThrow(expect.objectContaining({ code: 'ENOSPC' }));
    expect(statfsSync(d.mnt).bavail).toBe(0);
    expect(read(join(d.mnt, 'a'))).toBe('old'); // reads go on
    expect((await d.fs().setFull(false)).full).toBe(false);
    append(join(d.mnt, 'a'), '+more', true);
    expect(read(join(d.mnt, 'a'))).toBe('old+more');
    expect(statfsSync(d.mnt).bavail).toBeGreaterThan(0);
    await d.stop();
  });

  it('keeps what was fsynced, data and size', async () => {
    const d = await fresh();
    append(join(d.mnt, 'a'), '+synced', true);
    append(join(d.mnt, 'a'), '+lost');
    await d.powerLoss();
    expect(read(join(d.mnt, 'a'))).toBe('old+synced');
    // A truncation is data too: lost unless synced.
    const fd = openSync(join(d.mnt, 'a'), 'r+');
    writeSync(fd, 'X', 0);
    closeSync(fd);
    await d.powerLoss();
    expect(read(join(d.mnt, 'a'))).toBe('old+synced');
    await d.stop();
  });

  it('loses a new file whose directory was not fsynced, even with the file fsynced', async () => {
    const d = await fresh();
    append(join(d.mnt, 'b'), 'new', true);
    expect(readdirSync(d.mnt).sort()).toEqual(['a', 'b']);
    expect((await d.fs().stats()).uncommittedNames).toBe(1);
    await d.powerLoss();
    expect(readdirSync(d.mnt)).toEqual(['a']);
    await d.stop();
  });

  it('keeps a new file once both it and its directory are fsynced', async () => {
    const d = await fresh();
    append(join(d.mnt, 'b'), 'new', true);
    fsyncDir(d.mnt);
    await d.powerLoss();
    expect(readdirSync(d.mnt).sort()).toEqual(['a', 'b']);
    expect(read(join(d.mnt, 'b'))).toBe('new');
    await d.stop();
  });

  it('keeps a file fsynced after its directory, with its data (the name was durable, then the data)', async () => {
    const d = await fresh();
    append(join(d.mnt, 'b'), 'new');
    fsyncDir(d.mnt);
    await d.powerLoss();
    // The name survived; the data never was synced.
    expect(read(join(d.mnt, 'b'))).toBe('');
    await d.stop();
  });

  it('reverts a rename, and an unlink, without a directory fsync', async () => {
    const d = await fresh();
    append(join(d.mnt, 'tmp'), 'new', true);
    fsyncDir(d.mnt);
    renameSync(join(d.mnt, 'tmp'), join(d.mnt, 'a')); // the CURRENT file's pattern
    expect(read(join(d.mnt, 'a'))).toBe('new');
    await d.powerLoss();
    expect(readdirSync(d.mnt).sort()).toEqual(['a', 'tmp']);
    expect(read(join(d.mnt, 'a'))).toBe('old');
    unlinkSync(join(d.mnt, 'tmp'));
    await d.powerLoss();
    expect(read(join(d.mnt, 'tmp'))).toBe('new');
    renameSync(join(d.mnt, 'tmp'), join(d.mnt, 'a'));
    fsyncDir(d.mnt);
    unlinkSync(join(d.mnt, 'a'));
    append(join(d.mnt, 'a'), 'newer', true);
    await d.powerLoss();
    expect(readdirSync(d.mnt)).toEqual(['a']);
    expect(read(join(d.mnt, 'a'))).toBe('new');
    await d.stop();
  });

  it('in ext4 mode, commits every directory entry with any fsync', async () => {
    const d = await fresh('ext4');
    append(join(d.mnt, 'c'), 'unsynced');
    append(join(d.mnt, 'b'), 'new', true);
    append(join(d.mnt, 'd'), 'after the last fsync');
    await d.powerLoss();
    expect(readdirSync(d.mnt).sort()).toEqual(['a', 'b', 'c']);
    expect(read(join(d.mnt, 'b'))).toBe('new');
    expect(read(join(d.mnt, 'c'))).toBe('');
    await d.stop();
  });

  it('makes everything durable on a clean unmount', async () => {
    const d = await fresh();
    append(join(d.mnt, 'b'), 'new');
    await d.stop();
    expect(mounted(d.mnt)).toBe(false);
    const fs = await mount(join(dir, `disk-${n}`), d.mnt);
    expect(read(join(d.mnt, 'b'))).toBe('new');
    await fs.stop();
  });
});
