/**
 * Runs every scenario transcript in `testdata/` (see `scenario.ts` for the commands) and
 * compares its trace exactly. After a deliberate change to the protocol's messages, run
 * `UPDATE_TESTDATA=1 pnpm exec vitest run packages/protocol/test/scenarios.test.ts` and
 * read the diff: it is the change as the wire sees it.
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { runTestdata } from './scenario.js';

const dir = fileURLToPath(new URL('testdata', import.meta.url));
const update = process.env.UPDATE_TESTDATA === '1';

describe('scenario transcripts', () => {
  const files = readdirSync(dir)
    .filter((f) => f.endsWith('.txt'))
    .sort();

  it('has some', () => expect(files.length).toBeGreaterThan(0));

  it.each(files)('%s', async (file) => {
    const path = join(dir, file);
    const text = readFileSync(path, 'utf8');
    const actual = await runTestdata(text);
    if (update && actual !== text) writeFileSync(path, actual);
    else expect(actual).toBe(text);
  });
});

describe('the interpreter', () => {
  it('rewrites outputs that differ and keeps comments; a file read back is unchanged', async () => {
    const stale = '# a comment\nread r1 k\n----\nwrong\n\ndeliver r1→* *→r1\n----\nwrong too\n';
    const fresh = await runTestdata(stale);
    expect(fresh).toMatch(/^# a comment\nread r1 k\n----\n\ndeliver r1→\* \*→r1\n----\nr1 → s1 COLLECT k\n/);
    expect(fresh).toContain('r1 ok absent ts=ts0 rounds=2\n');
    expect(await runTestdata(fresh)).toBe(fresh);
  });

  it('names the line of a command it cannot run', async () => {
    await expect(runTestdata('write w1 k v\n----\n\nfrobnicate\n----\n')).rejects.toThrow('line 4: frobnicate: unknown command');
    await expect(runTestdata('deliver s9\n----\n')).rejects.toThrow(/line 1: .*not a server/);
    await expect(runTestdata('read r1 k\nno separator\n')).rejects.toThrow('line 2: expected ----');
  });
});
