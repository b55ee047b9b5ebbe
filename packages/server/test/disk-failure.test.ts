/**
 * How the storage reads LevelDB's I/O errors, and that a group committer writes nothing
 * after a failed batch (README, "Failing disks"). The failures themselves, on real
 * processes, are in test/server/disk.test.ts.
 */
import type { ClassicLevel } from 'classic-level';
import { describe, expect, it } from 'vitest';
import { StorageError } from '@powerstore/protocol';
import { diskFailureOf, GroupCommitter, type Put } from '../src/level-storage.js';

const ioError = (message: string) => Object.assign(new Error(message), { code: 'LEVEL_IO_ERROR' });

describe('diskFailureOf', () => {
  it('tells a full disk from a failed one, and both from other errors', () => {
    expect(diskFailureOf(ioError('IO error: /d/000003.log: No space left on device'))).toBe('full');
    expect(diskFailureOf(ioError('IO error: /d/000007.ldb: Disk quota exceeded'))).toBe('full');
    expect(diskFailureOf(ioError('IO error: /d/000003.log: Input/output error'))).toBe('failed');
    expect(diskFailureOf(ioError('IO error: /d/MANIFEST-000002: Read-only file system'))).toBe('failed');
    expect(diskFailureOf(new Error('wrapped', { cause: ioError('IO error: x: No space left on device') }))).toBe('full');
    expect(diskFailureOf(Object.assign(new Error('Database is not open'), { code: 'LEVEL_DATABASE_NOT_OPEN' }))).toBeUndefined();
    expect(diskFailureOf(Object.assign(new Error('Corruption: checksum mismatch'), { code: 'LEVEL_CORRUPTION' }))).toBeUndefined();
    expect(diskFailureOf(undefined)).toBeUndefined();
  });
});

describe('GroupCommitter with a guard', () => {
  it('fails the batch that failed and writes none after it', async () => {
    const written: Put[][] = [];
    let fail = true;
    const db = {
      batch: (ops: Put[]) => {
        written.push(ops);
        return fail ? Promise.reject(ioError('IO error: /d/000003.log: Input/output error')) : Promise.resolve();
      },
    } as unknown as ClassicLevel<string, Uint8Array>;
    let failures = 0;
    let refused = false;
    const committer = new GroupCommitter(db, true, undefined, undefined, {
      refuse: () => (refused ? new StorageError('STORAGE_FAILED', 'storage unavailable') : undefined),
      failed: (err) => {
        failures++;
        refused = diskFailureOf(err) !== undefined;
        return new StorageError('STORAGE_FAILED', 'storage unavailable', { cause: err });
      },
    });
    const put = (key: string): Put => ({ type: 'put', key, value: new Uint8Array([1]) });
    await expect(committer.commit([put('a')])).rejects.toMatchObject({ code: 'STORAGE_FAILED' });
    fail = false; // the disk "works" again: a retry could report lost data as durable
    await expect(committer.commit([put('b')])).rejects.toMatchObject({ code: 'STORAGE_FAILED' });
    expect(written.map((ops) => ops.map((o) => o.key))).toEqual([['a']]);
    expect(failures).toBe(1);
    await committer.idle();
  });
});
