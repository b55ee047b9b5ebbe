/**
 * `powerstore put` and `get` streaming, as a user runs them: the built bin against a real
 * cluster, values of a few MiB from a file or standard input, to a file or standard
 * output, whole or a byte range, and no partial file left by a get that fails.
 */
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { CliCluster, ensureBuiltProjects } from '../server/harness.js';
import { runCli, type CliRunOptions } from './run.js';

let cluster: CliCluster;
/** A value of a few MiB and an odd length, so stripes and chunks do not line up with it. */
const value = randomBytes(5 * 1024 * 1024 + 4321);
const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');
/** The cluster file and the admin identity (which may write any key). */
const files = () => ['--cluster', cluster.clusterFile, '--identity', join(cluster.dir, 'admin.json')];
const run = (args: readonly string[], options: Partial<CliRunOptions> = {}) =>
  runCli([...files(), ...args], { cwd: cluster.dir, ...options });
/** A directory of its own per test, to see every file a get leaves behind. */
const freshDir = (name: string) => {
  const dir = join(cluster.dir, name);
  mkdirSync(dir);
  return dir;
};

beforeAll(async () => {
  await ensureBuiltProjects(['packages/server', 'packages/cli']);
  cluster = await CliCluster.create(1);
  await cluster.startAll();
  writeFileSync(join(cluster.dir, 'value.bin'), value);
  const put = await run(['put', 'big', 'value.bin']);
  if (put.code !== 0) throw new Error(`put failed: ${put.stderr}`);
}, 240_000);

afterAll(async () => {
  await cluster?.stop();
});

it('puts a file with its size known (a progress bar to 100%) and gets it to standard output and to a file, SHA-256 identical', async () => {
  const put = await run(['put', 'from-file', 'value.bin']);
  expect(put.code, put.stderr).toBe(0);
  expect(put.stderr).toContain(`stored ${value.length} bytes under "from-file"`);
  expect(put.stderr).toMatch(/put from-file \[=+\] 100% \| 5\/5 MiB/);
  const toStdout = await run(['get', 'from-file']);
  expect(toStdout.code, toStdout.stderr).toBe(0);
  expect(sha256(toStdout.stdout)).toBe(sha256(value));
  const dir = freshDir('to-file');
  const toFile = await run(['get', 'from-file', join(dir, 'out.bin')]);
  expect(toFile.code, toFile.stderr).toBe(0);
  expect(toFile.stdout.length).toBe(0);
  expect(toFile.stderr).toMatch(/get from-file \[=+\] 100%/);
  expect(sha256(readFileSync(join(dir, 'out.bin')))).toBe(sha256(value));
  // The temporary file was renamed, not left beside it.
  expect(readdirSync(dir)).toEqual(['out.bin']);
  // '-' is standard output too.
  expect(sha256((await run(['get', 'from-file', '-'])).stdout)).toBe(sha256(value));
});

it('puts standard input, with no file argument or with -, streamed in small chunks, encrypted in a namespace', async () => {
  const identity = join(cluster.dir, 'stdin-writer.json');
  expect((await runCli(['--identity', identity, 'id'], { cwd: cluster.dir })).code).toBe(0);
  const as = ['--cluster', cluster.clusterFile, '--identity', identity];
  // 64 KiB chunks, as a pipe delivers them: the CLI must not wait for one big read.
  const chunks = () =>
    Readable.from(Array.from({ length: Math.ceil(value.length / 65536) }, (_, i) => value.subarray(i * 65536, (i + 1) * 65536)));
  for (const args of [
    ['put', '@/piped'],
    ['put', '@/piped-dash', '-'],
  ]) {
    const put = await runCli([...as, ...args], { cwd: cluster.dir, input: chunks() });
    expect(put.code, put.stderr).toBe(0);
    expect(put.stderr).toContain(`stored ${value.length} bytes under`);
    // Its size unknown, the bar counts MiB with no percentage.
    expect(put.stderr).toMatch(/put ~[^ ]+\/piped(-dash)? 5 MiB \| [\d.]+ MiB\/s/);
    expect(put.stderr).not.toContain('%');
    const got = await runCli([...as, 'get', args[1]!], { cwd: cluster.dir });
    expect(got.code, got.stderr).toBe(0);
    expect(sha256(got.stdout)).toBe(sha256(value));
  }
  // Encrypted: the admin, who has no key for that namespace, is refused (exit 6), with no bytes.
  const stat = await runCli([...as, 'stat', '@/piped', '--json'], { cwd: cluster.dir });
  expect(JSON.parse(stat.stdout.toString())).toMatchObject({ size: value.length, encrypted: true });
  const key = (JSON.parse(stat.stdout.toString()) as { key: string }).key;
  const denied = await run(['get', key]);
  expect({ code: denied.code, stdout: denied.stdout.length }).toEqual({ code: 6, stdout: 0 });
  // An empty standard input stores an empty value.
  expect((await run(['put', 'empty'], { input: new Uint8Array(0) })).code).toBe(0);
  const empty = await run(['get', 'empty']);
  expect({ code: empty.code, bytes: empty.stdout.length }).toEqual({ code: 0, bytes: 0 });
});

it('get --range START:END returns exactly those bytes (END exclusive, either side optional, clamped to the value)', async () => {
  const mid = Math.floor(value.length / 2);
  const cases: [string, Buffer][] = [
    [`${mid}:${mid + 1024 * 1024}`, value.subarray(mid, mid + 1024 * 1024)],
    ['0:1', value.subarray(0, 1)],
    [':100', value.subarray(0, 100)],
    [`${value.length - 7}:`, value.subarray(value.length - 7)],
    [`4194300:4194310`, value.subarray(4194300, 4194310)],
    [`${mid}:${mid}`, Buffer.alloc(0)],
    [`${value.length - 3}:${value.length + 1000}`, value.subarray(value.length - 3)],
  ];
  for (const [range, expected] of cases) {
    const got = await run(['get', 'big', '--range', range]);
    expect(got.code, `${range}: ${got.stderr}`).toBe(0);
    expect(got.stdout.length, range).toBe(expected.length);
    expect(sha256(got.stdout), range).toBe(sha256(expected));
  }
  const dir = freshDir('range');
  const toFile = await run(['get', 'big', join(dir, 'part.bin'), '--range', `${mid}:${mid + 3 * 1024 * 1024}`]);
  expect(toFile.code, toFile.stderr).toBe(0);
  expect(sha256(readFileSync(join(dir, 'part.bin')))).toBe(sha256(value.subarray(mid, mid + 3 * 1024 * 1024)));
  for (const bad of ['10:5', '5', 'a:b', '-5:', '1-2', '']) {
    const r = await run(['get', 'big', '--range', bad]);
    expect(r.code, bad).toBe(2);
    expect(r.stdout.length).toBe(0);
    expect(r.stderr).toContain('--range');
  }
});

it('a get that fails leaves no file under the target name, nor a temporary one, and an existing target as it was', async () => {
  const dir = freshDir('failures');
  // A key that does not exist: exit 3.
  const missing = await run(['get', 'no-such-key', join(dir, 'new.bin')]);
  expect(missing.code).toBe(3);
  expect(readdirSync(dir)).toEqual([]);
  writeFileSync(join(dir, 'kept.bin'), 'old contents');
  expect((await run(['get', 'no-such-key', join(dir, 'kept.bin')])).code).toBe(3);
  // A deleted key: exit 3 too.
  expect((await run(['put', 'doomed'], { input: Buffer.from('x') })).code).toBe(0);
  expect((await run(['rm', 'doomed'])).code).toBe(0);
  expect((await run(['get', 'doomed', join(dir, 'kept.bin')])).code).toBe(3);
  // No quorum: exit 4.
  await cluster.signal(3, 'SIGKILL');
  await cluster.signal(4, 'SIGKILL');
  try {
    const r = await run(['--timeout', '2000', 'get', 'big', join(dir, 'kept.bin')]);
    expect(r.code, r.stderr).toBe(4);
    const fresh = await run(['--timeout', '2000', 'get', 'big', join(dir, 'fresh.bin')]);
    expect(fresh.code, fresh.stderr).toBe(4);
  } finally {
    await Promise.all([cluster.start(3), cluster.start(4)]);
  }
  expect(readdirSync(dir)).toEqual(['kept.bin']);
  expect(readFileSync(join(dir, 'kept.bin'), 'utf8')).toBe('old contents');
  // Whereas a get that succeeds replaces it.
  expect((await run(['get', 'big', join(dir, 'kept.bin')])).code).toBe(0);
  expect(sha256(readFileSync(join(dir, 'kept.bin')))).toBe(sha256(value));
  expect(readdirSync(dir)).toEqual(['kept.bin']);
});

it('reports files it cannot read or write by name (exit 1), before or without touching the store', async () => {
  const missing = await run(['put', 'k', 'no-such-file.bin']);
  expect(missing.code).toBe(1);
  expect(missing.stderr).toContain('cannot read no-such-file.bin: ENOENT');
  const dir = freshDir('not-a-file');
  const isDir = await run(['put', 'k', dir]);
  expect(isDir.code).toBe(1);
  expect(isDir.stderr).toContain('EISDIR');
  const intoDir = await run(['get', 'big', dir]);
  expect(intoDir.code).toBe(1);
  expect(intoDir.stderr).toContain(`cannot write ${dir}: EISDIR`);
  const noParent = await run(['get', 'big', join(dir, 'missing', 'out.bin')]);
  expect(noParent.code).toBe(1);
  expect(noParent.stderr).toContain('ENOENT');
  expect(existsSync(join(dir, 'missing'))).toBe(false);
  // A device is written in place, not replaced: /dev/null stays a device.
  expect((await run(['get', 'big', '/dev/null'])).code).toBe(0);
  expect(existsSync('/dev/null')).toBe(true);
});

it('documents --range and exit code 9 (VALUE_CHANGED) in --help', async () => {
  const help = await runCli(['--help'], { cwd: cluster.dir });
  expect(help.stdout.toString()).toMatch(/9 value overwritten/);
  const getHelp = await runCli(['get', '--help'], { cwd: cluster.dir });
  expect(getHelp.stdout.toString()).toContain('--range <START:END>');
});
