/**
 * The `powerstore` command for scripts and shells: `--json` on every command and errors as
 * JSON, option-value errors that name the option, shell completion generated from the
 * program, and the progress bar's ETA. The built bin against one real cluster, shared by
 * every test; the completion scripts and the bar's format also straight from the source.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_BATCH_CONCURRENCY, Identity } from '@powerstore/client';
import { CliCluster, ensureBuiltProjects, OPEN_WRITERS } from '../server/harness.js';
import { runCli, type CliRun } from './run.js';

const { barFormat, formatEta, program, shieldDashedKeys } = await import('../../packages/cli/src/main.js');
const { completionScript } = await import('../../packages/cli/src/completion.js');

let cluster: CliCluster;
/** The cluster file and the admin identity, which may write any key. */
const admin = () => ['--cluster', cluster.clusterFile, '--identity', join(cluster.dir, 'admin.json')];
const run = (args: readonly string[], input?: Uint8Array) => runCli(args, { cwd: cluster.dir, ...(input ? { input } : {}) });

/** What `--json` prints on a failure. */
interface JsonError {
  readonly error: { readonly code: string; readonly message: string; readonly exitCode: number; readonly [field: string]: unknown };
}

/** Standard output as the one JSON object it must be. */
function json<T = Record<string, unknown>>(r: CliRun): T {
  return JSON.parse(r.stdout.toString()) as T;
}

/** A failure under --json: its exit code, one line of JSON on standard output and no error line on standard error. */
function jsonFailure(r: CliRun, exitCode: number): JsonError['error'] {
  expect(r.code, r.stderr).toBe(exitCode);
  const lines = r.stdout.toString().split('\n');
  expect(lines, 'one line, then the newline').toHaveLength(2);
  expect(r.stderr).not.toMatch(/^(powerstore: |error: )/m);
  const { error } = JSON.parse(lines[0]!) as JsonError;
  expect(error.exitCode).toBe(exitCode);
  return error;
}

beforeAll(async () => {
  await ensureBuiltProjects(['packages/server', 'packages/cli']);
  cluster = await CliCluster.create(1, [], OPEN_WRITERS);
  await cluster.startAll();
}, 240_000);

afterAll(async () => {
  await cluster?.stop();
});

describe('--json', () => {
  it('a grantee whose public key begins with "-" (one in 64 do) is the argument, not an unknown option (CI found it)', async () => {
    let key = '';
    while (!key.startsWith('-')) key = (await Identity.generate()).publicKey;
    const grant = await run([...admin(), 'grant', key, '@/dashed/', '--expires', '1h', '--json']);
    expect(grant.code, grant.stderr).toBe(0);
    expect(json(grant)).toMatchObject({ kind: 'powerstore-grant', grantee: key });
    // Only that shape, and only before a `--`.
    expect(shieldDashedKeys(['grant', key, '--expires', '1h', '--', key])).toEqual([
      'grant',
      `ed25519:${key}`,
      '--expires',
      '1h',
      '--',
      key,
    ]);
    expect(shieldDashedKeys(['-z', '--json', `-${key}`])).toEqual(['-z', '--json', `-${key}`]);
  });

  it('put, get to a file, rm, share and grant print one JSON object of what they did; large values show an ETA', async () => {
    const value = randomBytes(2 * 1024 * 1024 + 5);
    writeFileSync(join(cluster.dir, 'big.bin'), value);
    const put = await run([...admin(), 'put', 'j/big', 'big.bin', '--json']);
    expect(put.code, put.stderr).toBe(0);
    expect(json(put)).toEqual({ key: 'j/big', size: value.length, public: false });
    // The bar (off a terminal: its last line at the end) ends with the ETA.
    expect(put.stderr).toMatch(/put j\/big \[=+\] 100% \| 2\/2 MiB \| [\d.]+ MiB\/s \| ETA 0s/);
    const fromStdin = await run([...admin(), 'put', 'j/small', '--json'], Buffer.from('hello'));
    expect(json(fromStdin)).toEqual({ key: 'j/small', size: 5, public: false });

    const get = await run([...admin(), 'get', 'j/big', 'out.bin', '--json']);
    expect(get.code, get.stderr).toBe(0);
    expect(json(get)).toEqual({ key: 'j/big', file: 'out.bin', size: value.length, start: 0, end: value.length });
    expect(Buffer.compare(readFileSync(join(cluster.dir, 'out.bin')), value)).toBe(0);
    expect(get.stderr).toMatch(/get j\/big \[=+\] 100% .* \| ETA 0s/);
    const range = await run([...admin(), 'get', 'j/big', 'part.bin', '--range', '10:20', '--json']);
    expect(json(range)).toMatchObject({ size: value.length, start: 10, end: 20 });

    const rm = await run([...admin(), 'rm', 'j/small', '--json']);
    expect(rm.code, rm.stderr).toBe(0);
    expect(json(rm)).toEqual({ key: 'j/small', deleted: true });
    expect(rm.stderr).toBe('');

    const me = await Identity.fromJSON(JSON.parse(readFileSync(join(cluster.dir, 'admin.json'), 'utf8')) as object);
    const share = await run([...admin(), 'share', '@/docs/', '--json']);
    expect(share.code, share.stderr).toBe(0);
    expect(json(share)).toEqual({ scope: `${me.namespace}docs/`, capability: expect.stringMatching(/^psr1\.[A-Za-z0-9_-]+$/) as string });

    const bob = await Identity.generate();
    const grant = await run([...admin(), 'grant', bob.publicKey, '@/shared/', '--expires', '1h', '--out', 'grant.json', '--json']);
    expect(grant.code, grant.stderr).toBe(0);
    // The grant itself, on standard output even with --out, and in the file.
    expect(json(grant)).toMatchObject({ kind: 'powerstore-grant', grantee: bob.publicKey, prefix: `${me.namespace}shared/` });
    expect(JSON.parse(readFileSync(join(cluster.dir, 'grant.json'), 'utf8'))).toEqual(json(grant));
  });

  it('get --json writing the value to standard output is a usage error, as JSON', async () => {
    for (const target of [[], ['-']]) {
      const r = await run([...admin(), 'get', 'j/big', ...target, '--json']);
      const error = jsonFailure(r, 2);
      expect(error.code).toBe('USAGE');
      expect(error.message).toContain('get --json needs a file');
    }
  });

  it('put --recursive --json: what was stored, what failed (key, file, code, message) and what was skipped', async () => {
    const root = join(cluster.dir, 'tree');
    mkdirSync(join(root, 'sub'), { recursive: true });
    writeFileSync(join(root, 'a.txt'), 'alpha');
    writeFileSync(join(root, 'sub', 'b.txt'), 'beta');
    symlinkSync(join(root, 'sub'), join(root, 'link-to-sub'));
    const ok = await run([...admin(), 'put', '-r', 'tree', root, '--json']);
    expect(ok.code, ok.stderr).toBe(0);
    expect(json(ok)).toEqual({
      prefix: 'tree/',
      stored: 2,
      bytes: 9,
      files: [
        { key: 'tree/a.txt', file: join(root, 'a.txt'), size: 5 },
        { key: 'tree/sub/b.txt', file: join(root, 'sub', 'b.txt'), size: 4 },
      ],
      failed: [],
      skipped: [{ path: 'link-to-sub/', reason: 'a symbolic link to a directory (not followed)' }],
      aborted: 0,
    });
    // The notes and the summary line are for people: --json leaves them out.
    expect(ok.stderr).toBe('');

    // A file that cannot be read and a key over 1024 bytes: failures of two kinds, exit 1.
    symlinkSync(join(root, 'nowhere'), join(root, 'dangling'));
    const long = `${'k'.repeat(1020)}/`;
    const mixed = await run([...admin(), 'put', '-r', long, root, '--json']);
    expect(mixed.code, mixed.stderr).toBe(1);
    const result = json<{ stored: number; failed: { key: string; file: string; code: string; message: string }[] } & JsonError>(mixed);
    expect(result.stored).toBe(0);
    expect(result.failed).toEqual([
      {
        key: `${long}dangling`,
        file: 'dangling',
        code: 'FILE_ERROR',
        message: expect.stringContaining('ENOENT (a symbolic link)') as string,
      },
      {
        key: `${long}a.txt`,
        file: join(root, 'a.txt'),
        code: 'INVALID_ARGUMENT',
        message: expect.stringContaining('the maximum is 1024') as string,
      },
      expect.objectContaining({ key: `${long}sub/b.txt`, code: 'INVALID_ARGUMENT' }) as object,
    ]);
    expect(result.error).toEqual({ code: 'FAILED', message: '3 failed', exitCode: 1 });
  });

  it('errors are one line of JSON on standard output, {"error":{"code","message","exitCode",…}}, with the exit codes of old', async () => {
    const missing = jsonFailure(await run([...admin(), 'get', 'j/none', 'x.bin', '--json']), 3);
    expect(missing).toEqual({ code: 'NOT_FOUND', message: 'no value under "j/none"', exitCode: 3, key: 'j/none' });

    const noFile = jsonFailure(await run([...admin(), 'put', 'k', 'no-such-file', '--json']), 1);
    expect(noFile).toEqual({
      code: 'FILE_ERROR',
      message: 'cannot read no-such-file: ENOENT',
      exitCode: 1,
      path: 'no-such-file',
      errno: 'ENOENT',
    });

    const noCluster = jsonFailure(await run(['--cluster', 'nope.json', 'stat', 'k', '--json']), 5);
    expect(noCluster).toMatchObject({ code: 'CONFIG', path: 'nope.json', errno: 'ENOENT' });

    writeFileSync(join(cluster.dir, 'not-a-grant.json'), '{}');
    const badGrant = jsonFailure(await run([...admin(), '--grant', join(cluster.dir, 'not-a-grant.json'), 'rm', 'k', '--json']), 5);
    expect(badGrant).toMatchObject({ code: 'INVALID_ARGUMENT', source: 'grants' });

    // A client error keeps its code: not in a namespace, share refuses the key.
    const share = jsonFailure(await run([...admin(), 'share', 'j/big', '--json']), 2);
    expect(share.code).toBe('INVALID_ARGUMENT');

    // commander's usage errors too, without its advice line.
    const unknown = jsonFailure(await run([...admin(), 'rm', 'k', '--frobnicate', '--json']), 2);
    expect(unknown).toEqual({ code: 'USAGE', message: "unknown option '--frobnicate'", exitCode: 2 });

    // ls --json prints a line per key, and an error as one more line.
    const ls = await run(['--cluster', cluster.clusterFile, 'ls', '--json', '--limit', '0']);
    expect(jsonFailure(ls, 2)).toMatchObject({ code: 'USAGE', option: '--limit' });
  });

  it('without --json, errors stay lines on standard error and nothing goes to standard output', async () => {
    const r = await run([...admin(), 'get', 'j/none', 'x.bin']);
    expect(r.code).toBe(3);
    expect(r.stdout.length).toBe(0);
    expect(r.stderr).toBe('powerstore: no value under "j/none"\n');
  });
});

describe('option values', () => {
  const cases: [args: string[], option: string, why: string][] = [
    [['--timeout', '0', 'stat', 'k'], "'--timeout <ms>'", 'expected a positive integer'],
    [['--key-epoch', '-1', 'stat', 'k'], "'--key-epoch <n>'", 'expected an integer from 0 to 4294967295'],
    [['put', '-r', '--concurrency', '0', 'k', '.'], "'--concurrency <n>'", 'expected a positive integer'],
    [['ls', '--limit', 'ten'], "'--limit <count>'", 'expected a positive integer'],
    [['get', 'k', '--range', '5-10'], "'--range <START:END>'", 'expected START:END in bytes'],
    [['get', 'k', '--range', '10:5'], "'--range <START:END>'", 'the range ends before it starts'],
    [['grant', 'pk', '@/p/', '--expires', 'soon'], "'--expires <when>'", 'expected a date (2027-01-01), a duration'],
    [['grant', 'pk', '@/p/', '--expires', '2001-01-01'], "'--expires <when>'", 'it is in the past'],
  ];

  it('an invalid value is refused (exit 2) naming the option, the value and what it takes, without connecting', async () => {
    for (const [args, option, why] of cases) {
      const value = args[args.indexOf(option.slice(1, option.indexOf(' '))) + 1]!;
      const r = await run(['--cluster', 'nope.json', ...args]);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toContain(`error: option ${option} argument '${value}' is invalid. ${why}`);
      expect(r.stderr).toContain('(powerstore --help, or powerstore help <command>, for usage)');
      const j = jsonFailure(await run(['--cluster', 'nope.json', ...args, '--json']), 2);
      expect(j).toMatchObject({ code: 'USAGE', option: option.slice(1, option.indexOf(' ')) });
    }
  });
});

describe('completion', () => {
  const cli = program();
  const commands = cli.commands.map((c) => c.name());
  const hasShell = (shell: string) => spawnSync('sh', ['-c', `command -v ${shell}`]).status === 0;

  it('covers every command and option of the program', () => {
    expect(commands).toEqual(expect.arrayContaining(['put', 'get', 'rm', 'stat', 'ls', 'id', 'grant', 'share', 'completion']));
    for (const shell of ['bash', 'zsh', 'fish'] as const) {
      const script = completionScript(cli, shell);
      for (const c of cli.commands) {
        expect(script, `${shell}: ${c.name()}`).toMatch(new RegExp(`\\b${c.name()}\\b`));
        for (const o of c.options)
          expect(script, `${shell}: ${c.name()} ${o.long}`).toContain(shell === 'fish' ? `-l ${o.long!.slice(2)}` : o.long);
      }
      for (const o of cli.options) expect(script, `${shell}: ${o.long}`).toContain(shell === 'fish' ? `-l ${o.long!.slice(2)}` : o.long);
    }
  });

  it('the bin prints each script; bash -n (and zsh -n, fish -n where installed) accepts it', async () => {
    for (const shell of ['bash', 'zsh', 'fish'] as const) {
      const r = await run(['completion', shell]);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout.toString()).toBe(completionScript(cli, shell));
      if (shell !== 'bash' && !hasShell(shell)) continue;
      const check = spawnSync(shell, ['-n'], { input: r.stdout, encoding: 'utf8' });
      expect(check.status, `${shell} -n: ${check.stderr}`).toBe(0);
    }
    const bad = await run(['completion', 'tcsh']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("argument 'shell'. Allowed choices are bash, zsh, fish");
  });

  it('bash completes commands, options, option values that are files and file arguments', () => {
    writeFileSync(join(cluster.dir, 'photo.jpg'), 'x');
    writeFileSync(join(cluster.dir, 'completion.bash'), completionScript(cli, 'bash'));
    // What bash does on Tab: the words so far in COMP_WORDS, then the function completion -F names.
    const complete = (...words: string[]) => {
      const r = spawnSync(
        'bash',
        [
          '-c',
          `source ./completion.bash; COMP_WORDS=(${words.map((w) => `'${w}'`).join(' ')}); COMP_CWORD=$((\${#COMP_WORDS[@]} - 1)); _powerstore; printf '%s\\n' "\${COMPREPLY[@]}"`,
        ],
        { cwd: cluster.dir, encoding: 'utf8' },
      );
      expect({ status: r.status, stderr: r.stderr }).toEqual({ status: 0, stderr: '' });
      return r.stdout.split('\n').filter(Boolean);
    };
    expect(complete('powerstore', 'st')).toEqual(['stat']);
    expect(complete('powerstore', '--cluster', 'cluster.json', 'g')).toEqual(['get', 'grant']);
    expect(complete('powerstore', 'put', '--con')).toEqual(['--concurrency']);
    expect(complete('powerstore', '--cluster', 'clus')).toEqual(['cluster.json']);
    // put <key> [file]: the key completes nothing, the file a file name.
    expect(complete('powerstore', 'put', 'pho')).toEqual([]);
    expect(complete('powerstore', '--timeout', '5', 'put', '--public', 'k', 'pho')).toEqual(['photo.jpg']);
    expect(complete('powerstore', 'completion', '')).toEqual(['bash', 'zsh', 'fish']);
  });
});

describe('help and the progress bar', () => {
  it("put --help shows the client's default concurrency, which help states without loading the client", async () => {
    const help = await run(['put', '--help']);
    expect(help.stdout.toString().replaceAll(/\s+/g, ' ')).toContain(`files stored at once (default ${DEFAULT_BATCH_CONCURRENCY})`);
  });

  it('the bar shows an ETA where the total is known, not for standard input', () => {
    expect(barFormat('put k', 5 << 20).format).toMatch(/\| ETA \{eta_formatted\}$/);
    expect(barFormat('put k/', 5 << 20, 3).format).toMatch(/\{files\}\/3 files .*\| ETA \{eta_formatted\}$/);
    expect(barFormat('put k/', 1000, 300)).toEqual({
      format: expect.stringMatching(/\{value\}\/\{total\} files .*ETA/) as string,
      byFiles: true,
    });
    expect(barFormat('put k', undefined).format).not.toContain('ETA');
    expect([0, 7.4, 59, 60, 187, 3599, 3600, 7500].map(formatEta)).toEqual([
      '0s',
      '7s',
      '59s',
      '1m00s',
      '3m07s',
      '59m59s',
      '1h00m',
      '2h05m',
    ]);
    // cli-progress's "not known yet" (no rate so far, or none at all).
    expect(['NULL', 'INF', Infinity, Number.NaN].map(formatEta)).toEqual(['--', '--', '--', '--']);
  });
});
