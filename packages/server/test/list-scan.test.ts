/**
 * LevelStorage's LIST reads key records in chunks and metadata in batches: many keys under a
 * prefix, keys without `lc` between them, and keys just past the prefix, listed whole and
 * page by page, must come out exactly as they are.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { putCompleted, putPending, sampleWrite } from '../../../test/fixtures/pending-keys.js';
import { LevelStorage } from '../src/index.js';

const root = mkdtempSync(join(tmpdir(), 'powerstore-list-scan-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('LevelStorage.list over many records', () => {
  it('lists every completed key of the prefix, with its cross-checksum, whole and page by page', async () => {
    const storage = await LevelStorage.open({ path: join(root, 'db'), n: 4, sync: false });
    try {
      const sample = await sampleWrite();
      const name = (p: string, i: number) => `${p}${String(i).padStart(4, '0')}`;
      const completed = Array.from({ length: 700 }, (_, i) => name('a/', 2 * i));
      await putCompleted(storage, completed, sample);
      await putPending(
        storage,
        Array.from({ length: 300 }, (_, i) => name('a/', 2 * i + 1)),
        sample,
      );
      // Just past the prefix (and before it), which must never be listed under it.
      await putCompleted(storage, ['a0', 'a.', ...Array.from({ length: 50 }, (_, i) => name('b/', i))], sample);

      const whole = await storage.list('a/', '', 1000);
      expect(whole.keys.map((k) => k.key)).toEqual(completed);
      expect(whole.more).toBe(false);
      expect(whole.keys.every((k) => k.cc?.valueLength === sample.entry.cc.valueLength)).toBe(true);

      const paged: string[] = [];
      let after = '';
      for (;;) {
        const page = await storage.list('a/', after, 37);
        paged.push(...page.keys.map((k) => k.key));
        if (!page.more) break;
        after = page.resumeAfter ?? page.keys.at(-1)!.key;
      }
      expect(paged).toEqual(completed);

      // Bounded by records read: 600 records hold the 450 completed keys among them.
      const bounded = await storage.list('a/', '', 1000, 600);
      expect(bounded.keys.map((k) => k.key)).toEqual(completed.slice(0, bounded.keys.length));
      expect(bounded.more).toBe(true);
      expect(bounded.resumeAfter).toBe(name('a/', 599));
      expect((await storage.list('b/', '', 1000)).keys).toHaveLength(50);
    } finally {
      await storage.close();
    }
  });
});
