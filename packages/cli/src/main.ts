/**
 * `powerstore`: put, get, rm, stat, ls, id, grant and share against a PowerStore cluster from the shell.
 *
 *   powerstore put <key> [file|-] [--public]   powerstore get <key> [file|-] [--range START:END] [--cap <capability>]
 *   powerstore rm <key>                        powerstore stat <key> [--json]
 *   powerstore ls [prefix] [--json]            powerstore share <key|prefix/>
 *   powerstore id [--new]                      powerstore grant <publicKey> <prefix> --expires <when>
 *   powerstore put --recursive <key> <dir> [--concurrency N]
 *
 * Values in namespaces are encrypted at the client (put --public stores plaintext); reading
 * someone else's needs a capability (`share` prints one, `--cap` uses it). put and get stream:
 * a value of any size goes through with bounded memory (putStream and getStream), from a
 * file or standard input and to a file or standard output. put --recursive stores every file
 * under a directory through putMany, each key on its own, and lists the files that failed.
 *
 * The cluster file comes from --cluster, $POWERSTORE_CLUSTER or .powerstore/cluster.json
 * (what `powerstore-server dev` creates); the identity from --identity,
 * $POWERSTORE_IDENTITY or the user's identity ($XDG_CONFIG_HOME/powerstore/identity.json,
 * which `powerstore id` creates). A .powerstore/identity.json in the current directory is
 * used only by a user with no identity of their own, when the cluster file is that
 * directory's too, and with a warning (see identityPath).
 */
import { randomBytes } from 'node:crypto';
import { chmodSync, createWriteStream, existsSync, mkdirSync, openAsBlob, readFileSync, statSync, writeFileSync } from 'node:fs';
import { open, rename, rm, stat, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as NodeReadableStream } from 'node:stream/web';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { SingleBar } from 'cli-progress';
import { walkTree, type TreeEntryNote } from './tree.js';
import {
  connect,
  DEFAULT_BATCH_CONCURRENCY,
  Identity,
  jsonErrorPosition,
  MAX_LIST_LIMIT,
  PowerStoreError,
  type ByteRange,
  type KeyFailure,
  type Store,
  type TransferProgress,
} from '@powerstore/client';

/** Exit codes, documented in `--help`. */
export const EXIT = {
  OK: 0,
  FAILED: 1,
  USAGE: 2,
  NOT_FOUND: 3,
  UNREACHABLE: 4,
  CONFIG: 5,
  NOT_AUTHORIZED: 6,
  QUOTA: 7,
  TAMPERED: 8,
  CHANGED: 9,
  INTERRUPTED: 130,
} as const;

/** Exit code per client error code. */
const EXIT_BY_CODE: Record<string, number> = {
  QUORUM_UNREACHABLE: EXIT.UNREACHABLE,
  ABORTED: EXIT.INTERRUPTED,
  NO_IDENTITY: EXIT.CONFIG,
  CLUSTER_OUTDATED: EXIT.CONFIG,
  NOT_AUTHORIZED: EXIT.NOT_AUTHORIZED,
  GRANT_EXPIRED: EXIT.NOT_AUTHORIZED,
  REVOKED: EXIT.NOT_AUTHORIZED,
  QUOTA_EXCEEDED: EXIT.QUOTA,
  TAMPERED: EXIT.TAMPERED,
  VALUE_CHANGED: EXIT.CHANGED,
  INVALID_ARGUMENT: EXIT.USAGE,
};

const DEFAULT_DIR = '.powerstore';

/** This package's version, read at run time so `--version` cannot drift from package.json. */
function packageVersion(): string {
  // ../package.json from dist/main.js (installed) and from src/main.ts (tsx) alike.
  return (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;
}

class CliError extends Error {
  constructor(
    readonly exitCode: number,
    message: string,
  ) {
    super(message);
  }
}

interface GlobalOptions {
  cluster?: string;
  identity?: string;
  grant: string[];
  cap: string[];
  keyEpoch?: number;
  timeout: number;
  progress: boolean;
  allowInsecure?: boolean;
}

/** The user's own identity file: `$XDG_CONFIG_HOME/powerstore/identity.json`. */
export function userIdentityPath(): string {
  return join(process.env.XDG_CONFIG_HOME || join(homedir(), '.config'), 'powerstore', 'identity.json');
}

function loadJson(path: string, what: string): object {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new CliError(EXIT.CONFIG, `cannot read the ${what} ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  try {
    return JSON.parse(text) as object;
  } catch (e) {
    // JSON.parse may quote the text near the error, which may be a secret: only say where.
    const at = jsonErrorPosition(text, e);
    throw new CliError(EXIT.CONFIG, `the ${what} ${path} is not valid JSON${at ? ` (at ${at})` : ''}`);
  }
}

/**
 * One stderr line when a secret file (an identity) may be read or changed by other users,
 * with the `chmod` that fixes it. A warning, not a refusal: the key may already be in use.
 */
function warnIfShared(path: string): void {
  if (process.platform === 'win32') return;
  let bits: number;
  try {
    bits = statSync(path).mode & 0o777;
  } catch {
    return;
  }
  if ((bits & 0o077) === 0) return;
  const mode = `0${bits.toString(8).padStart(3, '0')}`;
  const quoted = /^[A-Za-z0-9_./:@%+=,-]+$/.test(path) ? path : `'${path.replaceAll("'", "'\\''")}'`;
  process.stderr.write(
    `powerstore: warning: ${path} holds a secret key but its mode ${mode} lets other users read or change it; run: chmod 600 ${quoted}\n`,
  );
}

/** Where the cluster file comes from: named (--cluster, $POWERSTORE_CLUSTER) or this directory's `.powerstore/cluster.json`. */
function clusterPath(opts: GlobalOptions): string {
  const path = opts.cluster ?? process.env.POWERSTORE_CLUSTER ?? `${DEFAULT_DIR}/cluster.json`;
  if (!opts.cluster && !process.env.POWERSTORE_CLUSTER && !existsSync(path)) {
    throw new CliError(
      EXIT.CONFIG,
      `no cluster file: pass --cluster <file>, set POWERSTORE_CLUSTER, or run 'powerstore-server dev' here to create ${path}`,
    );
  }
  return path;
}

/**
 * The identity to use: `--identity`, then `$POWERSTORE_IDENTITY`, then your own
 * (`userIdentityPath()`). An identity in the current directory's `.powerstore/` is
 * somebody's (whoever made the directory, and whoever can write to it), who holds its
 * secret and so reads what is written with it: it is taken only when you have no identity
 * of your own and the cluster file is that same directory's (a `powerstore-server dev`
 * cluster you work in), and then with a warning naming it. Passed over, it gets a note.
 */
function identityPath(opts: GlobalOptions, required: boolean, cluster: string): string | undefined {
  const path = opts.identity ?? process.env.POWERSTORE_IDENTITY;
  if (path) return path;
  const own = userIdentityPath();
  const local = resolve(DEFAULT_DIR, 'identity.json');
  const hasLocal = existsSync(local) && resolve(own) !== local;
  if (existsSync(own)) {
    if (hasLocal) process.stderr.write(`powerstore: note: not using ${local} (found in this directory); using your own identity ${own}\n`);
    return own;
  }
  if (hasLocal && resolve(cluster) === resolve(DEFAULT_DIR, 'cluster.json')) {
    process.stderr.write(
      `powerstore: warning: using the identity ${local} from this directory (beside its cluster file; you have no identity of your own): ` +
        `@/ is its namespace, and whoever made the file can read what you store with it; run 'powerstore id' to make your own, or pass --identity <file>\n`,
    );
    return local;
  }
  if (hasLocal)
    process.stderr.write(
      `powerstore: note: not using ${local} (found in this directory): the cluster file is not this directory's; pass --identity to use it\n`,
    );
  if (required)
    throw new CliError(
      EXIT.CONFIG,
      "writing needs an identity: run 'powerstore id' to create one, or pass --identity <file> (or set POWERSTORE_IDENTITY)",
    );
  return undefined;
}

async function loadIdentity(path: string): Promise<Identity> {
  warnIfShared(path);
  try {
    return await Identity.fromJSON(loadJson(path, 'identity file'));
  } catch (e) {
    if (e instanceof PowerStoreError) throw new CliError(EXIT.CONFIG, `${path}: ${e.message}`);
    throw e;
  }
}

/** `@/rest` is `rest` in the identity's own namespace. */
function expandKey(key: string, store: Store): string {
  if (!key.startsWith('@/')) return key;
  if (!store.namespace) throw new CliError(EXIT.USAGE, `${JSON.stringify(key)}: keys starting with @/ need an identity (--identity)`);
  return store.namespace + key.slice(2);
}

/** Runs `fn` with a connected store; Ctrl-C aborts the operation and exits 130. */
async function withStore<T>(opts: GlobalOptions, write: boolean, fn: (store: Store, signal: AbortSignal) => Promise<T>): Promise<T> {
  const clusterFile = clusterPath(opts);
  const cluster = loadJson(clusterFile, 'cluster file');
  const path = identityPath(opts, write, clusterFile);
  const identity = path ? await loadIdentity(path) : undefined;
  const grants = opts.grant.map((g) => loadJson(g, 'grant file'));
  const controller = new AbortController();
  const onSigint = () => controller.abort(new Error('interrupted'));
  process.once('SIGINT', onSigint);
  let store: Store | undefined;
  try {
    store = await connect({
      cluster,
      ...(identity ? { identity } : {}),
      grants,
      capabilities: opts.cap,
      ...(opts.keyEpoch === undefined ? {} : { keyEpoch: opts.keyEpoch }),
      timeoutMs: opts.timeout,
      signal: controller.signal,
      allowInsecure: opts.allowInsecure === true,
    });
    return await fn(store, controller.signal);
  } finally {
    process.off('SIGINT', onSigint);
    store?.close();
  }
}

/** A transfer's progress bar; every method is a no-op when there is none. */
interface Bar {
  /** Bytes done so far (and, on a bar of files, the files done). */
  update(progress: TransferProgress, filesDone?: number): void;
  /** The transfer completed with `bytes` in all: the bar shows it whole, whatever progress was reported. */
  done(bytes: number, filesDone?: number): void;
  stop(): void;
}

/** Transfers under this size get no bar: they are over before one would help. */
const BAR_MIN_BYTES = 1024 * 1024;
/** …unless they are of this many files or more (`put --recursive`), which take a while however small. */
const BAR_MIN_FILES = 100;

/**
 * A progress bar on stderr for a transfer of `total` bytes (`undefined`: not known, as for
 * standard input, then it counts MiB without a percentage), unless `--no-progress`. Off a
 * terminal it prints a line a second rather than redrawing. With `files` (`put --recursive`
 * of that many files) it counts files too, and is shown for {@link BAR_MIN_FILES} files or
 * more whatever their size; its percentage is of the bytes, or of the files when they hold
 * less than {@link BAR_MIN_BYTES} in all.
 */
function progressBar(opts: GlobalOptions, total: number | undefined, label: string, files?: number): Bar {
  const none: Bar = { update: () => {}, done: () => {}, stop: () => {} };
  if (!opts.progress || (total !== undefined && total < BAR_MIN_BYTES && (files ?? 0) < BAR_MIN_FILES)) return none;
  const mib = (b: number) => Math.round((b / 1024 / 1024) * 10) / 10;
  const byFiles = files !== undefined && (total ?? 0) < BAR_MIN_BYTES;
  const format =
    files !== undefined
      ? byFiles
        ? `${label} [{bar}] {percentage}% | {value}/{total} files | {mib} MiB | {speed} MiB/s`
        : `${label} [{bar}] {percentage}% | {value}/{total} MiB | {files}/${files} files | {speed} MiB/s`
      : total === undefined
        ? `${label} {value} MiB | {speed} MiB/s`
        : `${label} [{bar}] {percentage}% | {value}/{total} MiB | {speed} MiB/s`;
  const started = performance.now();
  let bar: SingleBar | undefined;
  let filesDone = 0;
  const show = (bytes: number, doneFiles: number | undefined) => {
    if (doneFiles !== undefined) filesDone = doneFiles;
    // A source of unknown size gets its bar once it turns out to be large.
    if (!bar && total === undefined && bytes < BAR_MIN_BYTES) return;
    const seconds = (performance.now() - started) / 1000;
    const payload = { speed: seconds > 0 ? mib(bytes / seconds).toFixed(1) : '0.0', files: filesDone, mib: mib(bytes) };
    const value = byFiles ? filesDone : mib(bytes);
    if (!bar) {
      bar = new SingleBar({
        format,
        stream: process.stderr,
        hideCursor: true,
        noTTYOutput: !process.stderr.isTTY,
        notTTYSchedule: 1000,
      });
      bar.start(byFiles ? files : total === undefined ? 0 : mib(total), value, payload);
    } else bar.update(value, payload);
  };
  if (total !== undefined) show(0, 0);
  return {
    update: (p, doneFiles) => show(p.bytesDone, doneFiles),
    done: (bytes, doneFiles) => show(bytes, doneFiles),
    stop: () => bar?.stop(),
  };
}

/** A file, or standard input for `-`, to stream from; `size` when it is known (a regular file). */
async function openInput(file: string): Promise<{ source: Readable; size: number | undefined }> {
  if (file === '-') {
    // `powerstore put key` typed alone would otherwise seem to hang.
    if (process.stdin.isTTY) process.stderr.write('powerstore: reading standard input (Ctrl-D ends it)\n');
    return { source: process.stdin, size: undefined };
  }
  const fail = (code: string) => new CliError(EXIT.FAILED, `cannot read ${file}: ${code}`);
  let handle;
  try {
    handle = await open(file, 'r');
  } catch (e) {
    throw fail((e as NodeJS.ErrnoException).code ?? (e as Error).message);
  }
  const info = await handle.stat();
  if (info.isDirectory()) {
    await handle.close();
    throw fail('EISDIR (a directory: put --recursive stores every file under it)');
  }
  // 1 MiB reads rather than 64 KiB: fewer chunks for the client to cut into stripes.
  return { source: handle.createReadStream({ highWaterMark: 1024 * 1024 }), size: info.isFile() ? info.size : undefined };
}

const FILE_SYSCALLS = new Set(['open', 'read', 'write', 'fstat', 'stat', 'rename', 'close', 'fsync', 'unlink']);

/** An error of the file system (not of the store), reported as `cannot <verb> <path>: <code>`. */
function fileError(e: unknown, verb: string, path: string): unknown {
  if (e instanceof PowerStoreError || e instanceof CliError) return e;
  const { code, syscall } = (e ?? {}) as NodeJS.ErrnoException;
  // By the system call, so a network error (which has a code too) is not blamed on the file.
  return typeof code === 'string' && FILE_SYSCALLS.has(syscall ?? '') ? new CliError(EXIT.FAILED, `cannot ${verb} ${path}: ${code}`) : e;
}

/**
 * Writes `source` to `file` through a temporary file beside it, renamed over `file` only
 * once every byte is written: a failed or interrupted get leaves no partial file under the
 * target's name (and an existing file as it was). Devices and pipes (`/dev/null`, a FIFO)
 * are written in place, since renaming over them would replace them.
 */
async function writeFileAtomically(file: string, source: Readable, signal: AbortSignal): Promise<void> {
  const existing = await stat(file).catch(() => undefined);
  if (existing?.isDirectory()) {
    source.destroy();
    throw new CliError(EXIT.FAILED, `cannot write ${file}: EISDIR`);
  }
  if (existing && !existing.isFile()) {
    await pipeline(source, createWriteStream(file), { signal });
    return;
  }
  const temp = join(dirname(file), `.${basename(file)}.${randomBytes(6).toString('hex')}.partial`);
  // Created before the pipeline starts: a stream opening it lazily could create it after a
  // failure had already removed it, leaving the temporary file behind.
  let handle;
  try {
    handle = await open(temp, 'wx');
  } catch (e) {
    source.destroy();
    throw e;
  }
  try {
    await pipeline(source, handle.createWriteStream(), { signal });
    await rename(temp, file);
  } catch (e) {
    await rm(temp, { force: true });
    throw e;
  }
}

/**
 * `put --recursive`: every file under `dir` (see {@link walkTree}) under `key` as a prefix,
 * through `putMany` (each file a `Blob` read as its turn comes, so memory stays bounded),
 * with a bar of bytes and files. Each file's key is written on its own; those that fail are
 * listed one by one, the command goes on with the others, and it exits with their failures'
 * code when they all have the same one, 1 when they differ (130 when interrupted).
 */
async function putTree(opts: GlobalOptions, key: string, dir: string, options: { public?: boolean; concurrency?: number }): Promise<void> {
  if (dir === '-')
    throw new CliError(EXIT.USAGE, 'put --recursive takes a directory, not standard input: powerstore put --recursive <key> <dir>');
  const info = await stat(dir).catch((e: NodeJS.ErrnoException) => {
    throw new CliError(EXIT.FAILED, `cannot read ${dir}: ${e.code ?? e.message}`);
  });
  if (!info.isDirectory())
    throw new CliError(EXIT.USAGE, `put --recursive takes a directory, and ${dir} is not one (leave out --recursive)`);
  // Walked before connecting, so what cannot be read is known before anything is stored.
  const tree = await walkTree(dir);
  for (const s of tree.skipped) process.stderr.write(`powerstore: note: skipped ${JSON.stringify(s.path)}: ${s.reason}\n`);
  const failed: TreeEntryNote[] = [...tree.failed];
  const blobs: { path: string; file: string; blob: Blob }[] = [];
  for (const { path, file } of tree.files) {
    try {
      blobs.push({ path, file, blob: await openAsBlob(file) });
    } catch (e) {
      failed.push({ path, reason: `cannot read ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}` });
    }
  }
  const codes = new Set<number>(failed.map(() => EXIT.FAILED));
  const { prefix, result, interrupted } = await withStore(opts, true, async (store, signal) => {
    const base = expandKey(key, store);
    const prefix = base === '' || base.endsWith('/') ? base : `${base}/`;
    const entries = blobs.map(({ path, blob }): [string, Blob] => [prefix + path, blob]);
    const bytesTotal = blobs.reduce((sum, { blob }) => sum + blob.size, 0);
    const bar = progressBar(opts, bytesTotal, `put ${prefix}`, entries.length);
    try {
      const result = await store.putMany(entries, {
        signal,
        public: options.public === true,
        ...(options.concurrency === undefined ? {} : { concurrency: options.concurrency }),
        onProgress: (p) => bar.update(p, p.done),
      });
      bar.done(bytesTotal, entries.length);
      return { prefix, result, interrupted: signal.aborted };
    } finally {
      bar.stop();
    }
  });
  let aborted = 0;
  result.results.forEach((r, i) => {
    if (r.ok) return;
    const { path, file } = blobs[i]!;
    const code = r.error instanceof PowerStoreError ? r.error.code : undefined;
    if (code === 'ABORTED') {
      aborted++;
      return;
    }
    codes.add(code === undefined ? EXIT.FAILED : (EXIT_BY_CODE[code] ?? EXIT.FAILED));
    failed.push({ path, reason: describeFailure(r, file) });
  });
  for (const f of failed) process.stderr.write(`powerstore: failed: ${JSON.stringify(f.path)}: ${f.reason}\n`);
  if (aborted > 0)
    process.stderr.write(
      `powerstore: interrupted: ${aborted} file${aborted === 1 ? '' : 's'} not stored (or, for those under way, perhaps stored)\n`,
    );
  const stored = result.results.filter((r) => r.ok).length;
  const bytes = result.results.reduce((sum, r, i) => sum + (r.ok ? blobs[i]!.blob.size : 0), 0);
  process.stderr.write(`stored ${stored} file${stored === 1 ? '' : 's'} (${bytes} bytes) under ${JSON.stringify(prefix)}\n`);
  if (interrupted) throw new CliError(EXIT.INTERRUPTED, `interrupted: ${stored} of ${tree.files.length} files stored`);
  if (failed.length > 0) throw new CliError(codes.size === 1 ? [...codes][0]! : EXIT.FAILED, `${failed.length} failed (listed above)`);
}

/** Why a file of `put --recursive` was not stored, in a line. */
function describeFailure(failure: KeyFailure, file: string): string {
  const { error } = failure;
  if (error instanceof PowerStoreError) return `${error.code}: ${error.message}`;
  // A file Blob refuses to be read once the file changed (or went) after it was listed.
  if (error.name === 'NotReadableError') return `cannot read ${file}: it changed or was removed while it was being stored`;
  return error.message;
}

/** `START:END` (bytes, END exclusive; either may be left out) as a range. */
export function parseRange(v: string): ByteRange {
  const m = /^(\d*):(\d*)$/.exec(v);
  const start = m?.[1] ? Number(m[1]) : 0;
  const end = m?.[2] ? Number(m[2]) : undefined;
  if (!m || !Number.isSafeInteger(start) || (end !== undefined && !Number.isSafeInteger(end)))
    throw new CommanderError(
      EXIT.USAGE,
      'powerstore.invalidArgument',
      `error: --range takes START:END in bytes, END exclusive (0:1024, 1048576:, :100), got ${JSON.stringify(v)}`,
    );
  if (end !== undefined && end < start)
    throw new CommanderError(EXIT.USAGE, 'powerstore.invalidArgument', `error: --range ${v} ends before it starts`);
  return end === undefined ? { start } : { start, end };
}

function describeTimestamp(ts: { num: number; writerId: string }): string {
  return ts.num === 0 ? 'none (never written)' : `${ts.num} by writer ${ts.writerId}`;
}

/** `2027-01-01`, `2027-01-01T12:00:00Z`, `30d`, `12h`, `90m`, or `never`. */
export function parseExpiry(v: string, now = Date.now()): number | 'never' {
  if (v === 'never') return 'never';
  const rel = /^(\d+)([dhm])$/.exec(v);
  if (rel) return now + Number(rel[1]) * { d: 86_400_000, h: 3_600_000, m: 60_000 }[rel[2] as 'd' | 'h' | 'm'];
  const at = Date.parse(v);
  if (!Number.isFinite(at))
    throw new CommanderError(
      EXIT.USAGE,
      'powerstore.invalidArgument',
      `error: --expires takes a date (2027-01-01), a duration (30d, 12h, 90m) or never, got ${JSON.stringify(v)}`,
    );
  if (at <= now) throw new CommanderError(EXIT.USAGE, 'powerstore.invalidArgument', `error: --expires ${v} is in the past`);
  return at;
}

function writeSecret(path: string, json: object): void {
  mkdirSync(dirname(path), { recursive: true });
  // Created 0600 and chmod-ed too (mode does not apply to an existing file): an identity is a secret.
  writeFileSync(path, `${JSON.stringify(json, null, 2)}\n`, { mode: 0o600 });
  chmodSync(path, 0o600);
}

export function program(): Command {
  const cli = new Command('powerstore')
    .description('Read and write a PowerStore cluster: Byzantine-fault-tolerant, linearizable, erasure-coded key-value storage.')
    .version(packageVersion())
    .option('--cluster <file>', `cluster file (default: $POWERSTORE_CLUSTER or ${DEFAULT_DIR}/cluster.json)`)
    .option(
      '--identity <file>',
      `identity to write with (default: $POWERSTORE_IDENTITY, then your own: ${userIdentityPath()}; ` +
        `${DEFAULT_DIR}/identity.json in the current directory only if you have none and the cluster file is ${DEFAULT_DIR}/cluster.json, with a warning)`,
    )
    .option(
      '--grant <file>',
      'a grant file letting this identity write outside its namespace (repeatable)',
      (v: string, prev: string[]) => [...prev, v],
      [] as string[],
    )
    .option(
      '--cap <capability>',
      'a read capability (what `powerstore share` prints) for keys of another namespace (repeatable)',
      (v: string, prev: string[]) => [...prev, v],
      [] as string[],
    )
    .addOption(
      new Option(
        '--key-epoch <n>',
        'key epoch of new encrypted values and capabilities (default 0; raise it to revoke capabilities)',
      ).argParser(nonNegativeInt),
    )
    .addOption(new Option('--timeout <ms>', 'time an operation may take').default(30_000).argParser(positiveInt))
    .option('--no-progress', 'no progress bar for large values or many files')
    .option(
      '--allow-insecure',
      'accept plaintext ws:// server URLs to hosts that are not loopback (anyone on the network can read and tamper with the traffic)',
    )
    .addHelpText(
      'after',
      `\nKeys starting with @/ are in your identity's namespace: @/notes is ~<your owner id>/notes.\n` +
        `Values there are encrypted before they leave this machine (put --public stores plaintext); key names are not.\n` +
        `Identity: --identity, else $POWERSTORE_IDENTITY, else your own (${userIdentityPath()}, made by 'powerstore id').\n` +
        `A ${DEFAULT_DIR}/identity.json in the current directory is someone's, who can read what is written with it: it is used\n` +
        `only if you have no identity of your own and the cluster file is ${DEFAULT_DIR}/cluster.json beside it, and then with a warning.\n` +
        `Exit codes: ${EXIT.OK} ok, ${EXIT.FAILED} failed, ${EXIT.USAGE} usage error, ${EXIT.NOT_FOUND} key not found (get, stat),\n` +
        `            ${EXIT.UNREACHABLE} quorum of servers unreachable, ${EXIT.CONFIG} cluster or identity file problem (or an outdated cluster file),\n` +
        `            ${EXIT.NOT_AUTHORIZED} not allowed to write the key (no grant, grant expired, revoked, owner not admitted) or no key to decrypt it (no --cap covering it),\n` +
        `            ${EXIT.QUOTA} quota exceeded, ${EXIT.TAMPERED} value failed authentication (tampered),\n` +
        `            ${EXIT.CHANGED} value overwritten again and again while get streamed it (run get again), ${EXIT.INTERRUPTED} interrupted.`,
    )
    .showHelpAfterError('(powerstore --help, or powerstore help <command>, for usage)')
    .exitOverride();

  cli
    .command('put')
    .description(
      'store a file (or standard input) under a key, streaming it: any size, in bounded memory; ' +
        'with --recursive, every file under a directory, each under <key>/<its path>',
    )
    .argument('<key>', 'the key (UTF-8, up to 1024 bytes); @/name is in your namespace; with --recursive, the prefix of the keys')
    .argument('[file]', "file to store; '-' or none for standard input; with --recursive, the directory", '-')
    .option('--public', 'store it as plaintext, readable by anyone who reaches a server (default: encrypted)')
    .option(
      '-r, --recursive',
      'store every file under the directory [file], at any depth, under <key>/<path of the file in it> ' +
        '(a / is added to <key> unless it ends with one); each key is written on its own: not all or nothing',
    )
    .addOption(
      new Option('--concurrency <n>', `with --recursive, files stored at once (default ${DEFAULT_BATCH_CONCURRENCY})`).argParser(
        positiveInt,
      ),
    )
    .action(async (key: string, file: string, options: { public?: boolean; recursive?: boolean; concurrency?: number }) => {
      const opts = cli.opts<GlobalOptions>();
      if (options.recursive) return putTree(opts, key, file, options);
      if (options.concurrency !== undefined) throw new CliError(EXIT.USAGE, '--concurrency goes with --recursive');
      // Opened before connecting, so a file that cannot be read fails fast (exit 1).
      const input = await openInput(file);
      try {
        const [stored, size] = await withStore(opts, true, async (store, signal) => {
          const full = expandKey(key, store);
          const bar = progressBar(opts, input.size, `put ${full}`);
          try {
            const { size } = await store.putStream(full, input.source, {
              signal,
              onProgress: (p) => bar.update(p),
              public: options.public === true,
              ...(input.size === undefined ? {} : { size: input.size }),
            });
            bar.done(size);
            return [full, size] as const;
          } finally {
            bar.stop();
          }
        });
        process.stderr.write(`stored ${size} bytes under ${JSON.stringify(stored)}\n`);
      } catch (e) {
        throw fileError(e, 'read', file === '-' ? 'standard input' : file);
      } finally {
        if (input.source !== process.stdin) input.source.destroy();
      }
    });

  cli
    .command('get')
    .description('write the value of a key (or a byte range of it) to a file or standard output, streaming it')
    .argument('<key>', 'the key')
    .argument('[file]', "where to write the value; '-' or none for standard output")
    .addOption(
      new Option(
        '--range <START:END>',
        'only bytes START to END (exclusive) of the value; either may be left out (1048576:, :100)',
      ).argParser(parseRange),
    )
    .action(async (key: string, file: string | undefined, options: { range?: ByteRange }) => {
      const opts = cli.opts<GlobalOptions>();
      const toStdout = file === undefined || file === '-';
      const target = toStdout ? 'standard output' : file;
      try {
        await withStore(opts, false, async (store, signal) => {
          const full = expandKey(key, store);
          // The bar needs the range's size, which getStream tells: progress before it has none to show.
          const shown: { bar?: Bar } = {};
          const value = await store.getStream(full, {
            signal,
            onProgress: (p) => shown.bar?.update(p),
            ...(options.range ? { range: options.range } : {}),
          });
          if (value === undefined) throw new CliError(EXIT.NOT_FOUND, `no value under ${JSON.stringify(key)}`);
          const bar = (shown.bar = progressBar(opts, value.end - value.start, `get ${full}`));
          try {
            // Node's stream, so pipeline() holds the reader back while the file or pipe is slow.
            const source = Readable.fromWeb(value.stream as NodeReadableStream<Uint8Array>);
            // end: false leaves standard output open (it is the process's, not this command's).
            try {
              // The signal too, so Ctrl-C stops a get held back by a stalled disk or reader.
              if (toStdout) await pipeline(source, process.stdout, { end: false, signal });
              else await writeFileAtomically(file, source, signal);
            } catch (e) {
              if (signal.aborted && !(e instanceof PowerStoreError)) throw new CliError(EXIT.INTERRUPTED, 'interrupted');
              throw e;
            }
            bar.done(value.end - value.start);
          } finally {
            bar.stop();
          }
        });
      } catch (e) {
        if (e instanceof PowerStoreError && e.code === 'VALUE_CHANGED')
          throw new CliError(
            EXIT.CHANGED,
            `VALUE_CHANGED: ${e.message}; ${toStdout ? 'what was written to standard output is incomplete' : `${file} was not written`}: run get again`,
          );
        throw fileError(e, 'write', target);
      }
    });

  cli
    .command('rm')
    .description('delete a key (a linearizable tombstone write)')
    .argument('<key>', 'the key')
    .action(async (key: string) => {
      const deleted = await withStore(cli.opts<GlobalOptions>(), true, async (store, signal) => {
        const full = expandKey(key, store);
        await store.delete(full, { signal });
        return full;
      });
      process.stderr.write(`deleted ${JSON.stringify(deleted)}\n`);
    });

  cli
    .command('stat')
    .description("show a key's timestamp, size and writer, which servers answered and which misbehaved")
    .argument('<key>', 'the key')
    .option('--json', 'print JSON')
    .action(async (key: string, options: { json?: boolean }) => {
      const stat = await withStore(cli.opts<GlobalOptions>(), false, (store, signal) => store.stat(expandKey(key, store), { signal }));
      if (options.json) {
        process.stdout.write(`${JSON.stringify(stat, null, 2)}\n`);
      } else {
        const lines = [
          `key:         ${stat.key}`,
          `state:       ${stat.exists ? 'stored' : stat.deleted ? 'deleted' : 'never written'}`,
          `size:        ${stat.size} bytes${stat.exists ? (stat.encrypted ? ' (encrypted)' : ' (plaintext)') : ''}`,
          `timestamp:   ${describeTimestamp(stat.timestamp)}`,
          `writer:      ${stat.writer ? `${stat.writer.publicKey} (owner ${stat.writer.ownerId}${stat.writer.grant ? `, under grant ${stat.writer.grant}` : ''})` : 'none'}`,
          `read rounds: ${stat.rounds}`,
          `answered:    ${stat.answered.map((id) => `s${id}`).join(' ')}`,
          `misbehaving: ${stat.misbehaving.length ? stat.misbehaving.map((m) => `s${m.id} (${m.reason})`).join('; ') : 'none seen'}`,
        ];
        process.stdout.write(`${lines.join('\n')}\n`);
      }
      if (!stat.exists) process.exitCode = EXIT.NOT_FOUND;
    });

  cli
    .command('ls')
    .description('list the keys starting with a prefix (all keys without one), with their sizes')
    .argument('[prefix]', 'the prefix (@/ for your own namespace)', '')
    .option('--json', 'print one JSON object per key: {"key","size","timestamp"}')
    .option('--limit <count>', 'list at most this many keys', positiveInt)
    .action(async (prefix: string, options: { json?: boolean; limit?: number }) => {
      const listed = await withStore(cli.opts<GlobalOptions>(), false, async (store, signal) => {
        const full = expandKey(prefix, store);
        let count = 0;
        let cursor: string | undefined;
        do {
          const limit = Math.min(MAX_LIST_LIMIT, (options.limit ?? Infinity) - count);
          const page = await store.list(full, { signal, limit, ...(cursor === undefined ? {} : { cursor }) });
          const lines = page.keys.map((k) =>
            options.json ? JSON.stringify(k) : `${(k.size === undefined ? '?' : String(k.size)).padStart(12)}  ${k.key}`,
          );
          if (lines.length > 0) process.stdout.write(`${lines.join('\n')}\n`);
          count += page.keys.length;
          cursor = page.cursor;
        } while (cursor !== undefined && count < (options.limit ?? Infinity));
        return count;
      });
      if (!options.json) process.stderr.write(`${listed} key${listed === 1 ? '' : 's'}\n`);
    });

  cli
    .command('id')
    .description(
      `print your identity (public key, owner id, namespace), creating it first if needed (default: ${userIdentityPath()}, mode 0600)`,
    )
    .option('--new', 'create a new identity even if the file exists (the old one is lost)')
    .option('--json', 'print JSON (public parts only)')
    .action(async (options: { new?: boolean; json?: boolean }) => {
      const opts = cli.opts<GlobalOptions>();
      const path = opts.identity ?? process.env.POWERSTORE_IDENTITY ?? userIdentityPath();
      let created = false;
      let identity: Identity;
      if (!existsSync(path) || options.new) {
        identity = await Identity.generate();
        writeSecret(path, identity.toJSON());
        created = true;
      } else {
        identity = await loadIdentity(path);
      }
      const info = { file: path, publicKey: identity.publicKey, ownerId: identity.ownerId, namespace: identity.namespace };
      if (options.json) process.stdout.write(`${JSON.stringify(info, null, 2)}\n`);
      else {
        process.stdout.write(
          `${created ? 'created' : 'identity'}: ${path}${created ? ' (secret, mode 0600)' : ''}\n` +
            `public key: ${identity.publicKey}\nowner id:   ${identity.ownerId}\nnamespace:  ${identity.namespace}   (write keys there, or @/name for short)\n`,
        );
      }
    });

  cli
    .command('grant')
    .description(
      "let another identity write keys starting with <prefix> (inside your namespace, or anywhere for the cluster's admin); prints the grant to give it",
    )
    .argument('<publicKey>', "the grantee's public key (`powerstore id` prints it)")
    .argument('<prefix>', 'key prefix, e.g. @/photos/ or ~<owner id>/photos/')
    .requiredOption('--expires <when>', 'a date (2027-01-01), a duration (30d, 12h, 90m) or never')
    .option('--out <file>', 'write the grant to a file instead of standard output')
    .action(async (grantee: string, prefix: string, options: { expires: string; out?: string }) => {
      const expires = parseExpiry(options.expires);
      const grant = await withStore(cli.opts<GlobalOptions>(), true, (store) => store.grant(grantee, expandKey(prefix, store), expires));
      const text = `${JSON.stringify(grant, null, 2)}\n`;
      if (options.out) {
        await writeFile(options.out, text);
        process.stderr.write(`grant ${grant.id} for ${grant.prefix} until ${grant.expiresAt} written to ${options.out}\n`);
      } else process.stdout.write(text);
    });

  cli
    .command('share')
    .description(
      'print a read capability for a key, or for every key under a prefix ending in / (yours, or below a --cap you hold); whoever has it can read those values',
    )
    .argument('<keyOrPrefix>', 'e.g. @/photos/ (every key under it, not @/photos2/…) or @/notes/today')
    .action(async (scope: string) => {
      const cap = await withStore(cli.opts<GlobalOptions>(), false, (store) => store.share(expandKey(scope, store)));
      process.stdout.write(`${cap}\n`);
    });

  return cli;
}

// Thrown as InvalidArgumentError, commander names the option: "error: option '--timeout
// <ms>' argument '0' is invalid. expected a positive integer".
function nonNegativeInt(v: string): number {
  const n = Number(v);
  if (!/^\d+$/.test(v) || n >= 2 ** 32) throw new InvalidArgumentError(`expected an integer from 0 to ${2 ** 32 - 1}`);
  return n;
}

function positiveInt(v: string): number {
  const n = Number(v);
  if (!/^\d+$/.test(v) || !Number.isSafeInteger(n) || n <= 0) throw new InvalidArgumentError('expected a positive integer');
  return n;
}

/** Runs the CLI; resolves with the exit code. */
export async function main(argv: readonly string[]): Promise<number> {
  try {
    await program().parseAsync(argv, { from: 'user' });
    return Number(process.exitCode ?? EXIT.OK);
  } catch (e) {
    if (e instanceof CommanderError) {
      if (e.code === 'powerstore.invalidArgument') process.stderr.write(`${e.message}\n`);
      // --help and --version are not errors.
      return e.exitCode === 0 ? EXIT.OK : EXIT.USAGE;
    }
    if (e instanceof CliError) {
      process.stderr.write(`powerstore: ${e.message}\n`);
      return e.exitCode;
    }
    if (e instanceof PowerStoreError) {
      process.stderr.write(`powerstore: ${e.code}: ${e.message}\n`);
      // A bad cluster, identity or grant file is a file problem (5), other bad arguments usage (2).
      return e.source !== undefined ? EXIT.CONFIG : (EXIT_BY_CODE[e.code] ?? EXIT.FAILED);
    }
    process.stderr.write(`powerstore: ${(e as Error).stack ?? String(e)}\n`);
    return EXIT.FAILED;
  }
}
