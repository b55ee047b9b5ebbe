/**
 * `powerstore put --recursive`: every file under a directory stored under a key prefix
 * (through the client's putMany), as a user runs it: the built bin against a real cluster.
 * What is stored, the progress bar, the per-file failure list, and the exit codes.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { connect, Identity, type Store } from '@powerstore/client';
import { CliCluster, ensureBuiltProjects } from '../server/harness.js';
import { runCli } from './run.js';

/** Keys per owner and server (init --quota-keys). */
const QUOTA_KEYS = 8;
let cluster: CliCluster;
const stores: Store[] = [];

/** A fresh identity, as a file for the CLI and a store that reads with it. */
async function identity(name: string): Promise<{ args: string[]; store: Store }> {
  const id = await Identity.generate();
  const file = join(cluster.dir, `${name}.json`);
  writeFileSync(file, JSON.stringify(id.toJSON()), { mode: 0o600 });
  const store = await connect({ cluster: cluster.clusterJson(), identity: id });
  stores.push(store);
  return { args: ['--cluster', cluster.clusterFile, '--identity', file], store };
}

/** Writes `files` (relative path → content) under a new directory `name`. */
function tree(name: string, files: Record<string, string | Uint8Array>): string {
  const root = join(cluster.dir, name);
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(join(root, path, '..'), { recursive: true });
    writeFileSync(join(root, path), content);
  }
  mkdirSync(root, { recursive: true });
  return root;
}

const run = (args: readonly string[]) => runCli(args, { cwd: cluster.dir });
const text = (b: Uint8Array | undefined) => (b === undefined ? undefined : new TextDecoder().decode(b));

beforeAll(async () => {
  await ensureBuiltProjects(['packages/server', 'packages/cli']);
  cluster = await CliCluster.create(1, [], ['--writers', 'open', '--quota-keys', String(QUOTA_KEYS)]);
  await cluster.startAll();
}, 240_000);

afterAll(async () => {
  for (const s of stores) s.close();
  await cluster?.stop();
});

it('stores every file under a directory under <key>/<path>, with a progress bar, and leaves symbolic links to directories out', async () => {
  const { args, store } = await identity('tree');
  const big = randomBytes(2 * 1024 * 1024 + 11);
  const root = tree('photos', {
    'a.txt': 'alpha',
    '.hidden': 'dot',
    empty: '',
    'sub/big.bin': big,
    'sub/deeper/c.txt': 'gamma ✓',
  });
  symlinkSync(join(root, 'a.txt'), join(root, 'link-to-a'));
  symlinkSync(join(root, 'sub'), join(root, 'link-to-sub'));
  // No trailing slash on the key: one is added.
  const put = await run([...args, 'put', '--recursive', '@/photos', root]);
  expect(put.code, put.stderr).toBe(0);
  const prefix = `${store.namespace}photos/`;
  // a.txt, .hidden, empty, big.bin, c.txt ("✓" is 3 bytes) and the link to a.txt.
  expect(put.stderr).toContain(`stored 6 files (${5 + 3 + 0 + big.length + 9 + 5} bytes) under ${JSON.stringify(prefix)}`);
  expect(put.stderr).toMatch(/put ~[^ ]+\/photos\/ \[=+\] 100% \| 2\/2 MiB \| 6\/6 files/);
  expect(put.stderr).toContain('note: skipped "link-to-sub/": a symbolic link to a directory (not followed)');
  const names = ['.hidden', 'a.txt', 'empty', 'link-to-a', 'sub/big.bin', 'sub/deeper/c.txt'];
  const read = await store.getMany(names.map((n) => prefix + n));
  expect(read.failed).toEqual([]);
  const values = read.results.map((r) => (r.ok ? r.value : undefined));
  expect(values.map((v, i) => (names[i] === 'sub/big.bin' ? v?.length : text(v)))).toEqual([
    'dot',
    'alpha',
    '',
    'alpha',
    big.length,
    'gamma ✓',
  ]);
  expect(Buffer.compare(values[4]!, big)).toBe(0);
  // Encrypted like any put, and listed like any key.
  expect((await store.stat(`${prefix}a.txt`)).encrypted).toBe(true);
  expect((await store.list(prefix)).keys.map((k) => k.key)).toEqual(names.map((n) => prefix + n));
});

it(`lists each file that failed with its reason, stores the others, and exits with their code (7: over the quota of ${QUOTA_KEYS} keys)`, async () => {
  const { args, store } = await identity('quota');
  const files = Object.fromEntries(Array.from({ length: QUOTA_KEYS + 2 }, (_, i) => [`f${String(i).padStart(2, '0')}`, `file ${i}`]));
  const root = tree('many', files);
  // One at a time, so which files are past the quota is certain.
  const put = await run([...args, 'put', '-r', '--concurrency', '1', '@/many/', root]);
  expect(put.code, put.stderr).toBe(7);
  expect(put.stderr).toMatch(/powerstore: failed: "f08": QUOTA_EXCEEDED: .*\n.*powerstore: failed: "f09": QUOTA_EXCEEDED: /);
  expect(put.stderr).toContain(`stored ${QUOTA_KEYS} files`);
  expect(put.stderr).toMatch(/powerstore: 2 failed \(listed above\)\n$/);
  const read = await store.getMany(Object.keys(files).map((n) => `${store.namespace}many/${n}`));
  expect(read.results.map((r) => r.ok && text(r.value))).toEqual(Object.values(files).map((v, i) => (i < QUOTA_KEYS ? v : undefined)));
});

it('failures of different kinds (a dangling link, a key over 1024 bytes) exit 1, the other files stored', async () => {
  const { args, store } = await identity('mixed');
  const long = 'd'.repeat(250);
  const root = tree('mixed', { 'ok.txt': 'fine', [`${long}/${long}/${long}/${long}/${long}/x`]: 'too deep' });
  symlinkSync(join(root, 'nowhere'), join(root, 'dangling'));
  const put = await run([...args, 'put', '--recursive', '@/mixed', root]);
  expect(put.code, put.stderr).toBe(1);
  expect(put.stderr).toMatch(/failed: "dangling": cannot read .*dangling: ENOENT \(a symbolic link\)/);
  expect(put.stderr).toMatch(/failed: "d{250}\/.*\/x": INVALID_ARGUMENT: key is \d+ bytes of UTF-8, the maximum is 1024/);
  expect(put.stderr).toContain('stored 1 file (4 bytes)');
  expect(text(await store.get(`${store.namespace}mixed/ok.txt`))).toBe('fine');
});

it('usage: --recursive takes a directory (exit 2); a directory without it is refused with a hint (exit 1)', async () => {
  const { args } = await identity('usage');
  writeFileSync(join(cluster.dir, 'plain.txt'), 'x');
  const onFile = await run([...args, 'put', '-r', '@/x', 'plain.txt']);
  expect(onFile.code).toBe(2);
  expect(onFile.stderr).toContain('put --recursive takes a directory, and plain.txt is not one');
  const onStdin = await run([...args, 'put', '-r', '@/x']);
  expect(onStdin.code).toBe(2);
  expect(onStdin.stderr).toContain('not standard input');
  const dir = tree('plain-dir', { a: 'a' });
  const noFlag = await run([...args, 'put', '@/x', dir]);
  expect(noFlag.code).toBe(1);
  expect(noFlag.stderr).toContain('EISDIR (a directory: put --recursive stores every file under it)');
  const stray = await run([...args, 'put', '--concurrency', '4', '@/x', 'plain.txt']);
  expect(stray.code).toBe(2);
  expect(stray.stderr).toContain('--concurrency goes with --recursive');
  const help = await run(['put', '--help']);
  expect(help.stdout.toString()).toMatch(/-r, --recursive/);
});
