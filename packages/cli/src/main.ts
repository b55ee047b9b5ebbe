/**
 * `powerstore`: put, get, rm, stat, ls, id, grant and share against a PowerStore cluster from the shell.
 *
 *   powerstore put <key> [file|-] [--public]   powerstore get <key> [file|-] [--range START:END] [--cap <capability>]
 *   powerstore rm <key>                        powerstore stat <key>
 *   powerstore ls [prefix] [--limit N]         powerstore share <key|prefix/>
 *   powerstore id [--new]                      powerstore grant <publicKey> <prefix> --expires <when> [--out <file>]
 *   powerstore put --recursive <key> <dir> [--concurrency N]
 *   powerstore completion bash|zsh|fish
 *
 * Values in namespaces are encrypted at the client (put --public stores plaintext); reading
 * someone else's needs a capability (`share` prints one, `--cap` uses it). put and get stream:
 * a value of any size goes through with bounded memory (putStream and getStream), from a
 * file or standard input and to a file or standard output, with a progress bar (and ETA)
 * on standard error for large ones. put --recursive stores every file under a directory
 * through putMany, each key on its own, and lists the files that failed.
 *
 * Every command but completion takes --json: standard output then gets one JSON object of
 * what the command did (ls: one per key and line), and a failure is one line of JSON there
 * instead of a line on standard error, {"error":{"code","message","exitCode",…}}, with the
 * same exit code (see {@link main}). get --json needs a file: standard output is the value's.
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
import { Argument, Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import type { SingleBar } from 'cli-progress';
import { completionScript, SHELLS, type Shell } from './completion.js';
import { walkTree, type TreeEntryNote } from './tree.js';
import type * as Client from '@powerstore/client';
import type { ByteRange, Identity, KeyFailure, PowerStoreError, Store, TransferProgress } from '@powerstore/client';

let client: typeof Client | undefined;

/**
 * The client, imported on first use: its modules (the protocol, the WebSocket library,
 * the codecs) take most of the start-up time, which `--version`, `--help`, `completion`
 * and usage errors need not spend.
 */
async function loadClient(): Promise<typeof Client> {
  return (client ??= await import('@powerstore/client'));
}

/** Whether `e` is the client's error; none can exist before the client is loaded. */
function isPowerStoreError(e: unknown): e is PowerStoreError {
  return client !== undefined && e instanceof client.PowerStoreError;
}

/**
 * `put --recursive`'s default concurrency, as shown in `put --help`: the client's
 * `DEFAULT_BATCH_CONCURRENCY`, written out so that help needs no client (test/cli checks
 * they agree).
 */
const DEFAULT_CONCURRENCY = 16;

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

/**
 * The `code` of a failure the CLI itself reports, by exit code, in `--json`'s error
 * object; failures of the client keep its `PowerStoreError` code.
 */
const CODE_BY_EXIT: Record<number, string> = {
  [EXIT.FAILED]: 'FAILED',
  [EXIT.USAGE]: 'USAGE',
  [EXIT.NOT_FOUND]: 'NOT_FOUND',
  [EXIT.CONFIG]: 'CONFIG',
  [EXIT.CHANGED]: 'VALUE_CHANGED',
  [EXIT.INTERRUPTED]: 'ABORTED',
};

class CliError extends Error {
  /**
   * @param code the `code` of `--json`'s error object (default: by exit code).
   * @param details more members of `--json`'s error object (`path` and `errno` of a file
   *   error), or with `result`, the command's result printed beside the error.
   */
  constructor(
    readonly exitCode: number,
    message: string,
    readonly code = CODE_BY_EXIT[exitCode] ?? 'FAILED',
    readonly details: { readonly result?: object; readonly [field: string]: unknown } = {},
  ) {
    super(message);
  }
}

/** A file that could not be read or written (`cannot read <path>: <errno>`): exit 1, `FILE_ERROR`. */
function fileFailure(verb: string, path: string, errno: string, why = ''): CliError {
  return new CliError(EXIT.FAILED, `cannot ${verb} ${path}: ${errno}${why}`, 'FILE_ERROR', { path, errno });
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

async function loadJson(path: string, what: string): Promise<object> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    const errno = (e as NodeJS.ErrnoException).code ?? (e as Error).message;
    throw new CliError(EXIT.CONFIG, `cannot read the ${what} ${path}: ${errno}`, 'CONFIG', { path, errno });
  }
  try {
    return JSON.parse(text) as object;
  } catch (e) {
    // JSON.parse may quote the text near the error, which may be a secret: only say where.
    const at = (await loadClient()).jsonErrorPosition(text, e);
    throw new CliError(EXIT.CONFIG, `the ${what} ${path} is not valid JSON${at ? ` (at ${at})` : ''}`, 'CONFIG', { path });
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
  const { Identity } = await loadClient();
  try {
    return await Identity.fromJSON(await loadJson(path, 'identity file'));
  } catch (e) {
    if (isPowerStoreError(e)) throw new CliError(EXIT.CONFIG, `${path}: ${e.message}`, 'CONFIG', { path });
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
  const { connect } = await loadClient();
  const cluster = await loadJson(clusterFile, 'cluster file');
  const path = identityPath(opts, write, clusterFile);
  const identity = path ? await loadIdentity(path) : undefined;
  const grants: object[] = [];
  for (const g of opts.grant) grants.push(await loadJson(g, 'grant file'));
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
 * Progress updates the ETA's rate is taken over: updates come a stripe or a file at a
 * time, and cli-progress's default of 10 makes the ETA jump with every burst.
 */
const ETA_UPDATES = 100;

/**
 * The bar's line for a transfer of `total` bytes (`undefined`: not known, then no
 * percentage and no ETA) or, with `files`, of that many files: `{value}`/`{total}` are MiB,
 * or files when the files hold less than {@link BAR_MIN_BYTES} in all (`byFiles`).
 */
export function barFormat(label: string, total: number | undefined, files?: number): { format: string; byFiles: boolean } {
  const byFiles = files !== undefined && (total ?? 0) < BAR_MIN_BYTES;
  const format =
    files !== undefined
      ? byFiles
        ? `${label} [{bar}] {percentage}% | {value}/{total} files | {mib} MiB | {speed} MiB/s | ETA {eta_formatted}`
        : `${label} [{bar}] {percentage}% | {value}/{total} MiB | {files}/${files} files | {speed} MiB/s | ETA {eta_formatted}`
      : total === undefined
        ? `${label} {value} MiB | {speed} MiB/s`
        : `${label} [{bar}] {percentage}% | {value}/{total} MiB | {speed} MiB/s | ETA {eta_formatted}`;
  return { format, byFiles };
}

/**
 * The bar's ETA, `{eta_formatted}`: `42s`, `3m07s`, `2h05m`. cli-progress's own would show
 * its placeholders for "not known yet" (`NULL`, `INF`) cut to two letters; this shows `--`.
 */
export function formatEta(seconds: unknown): string {
  if (typeof seconds !== 'number' || !Number.isFinite(seconds) || seconds < 0) return '--';
  const s = Math.round(seconds);
  const two = (n: number) => String(n).padStart(2, '0');
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${two(s % 60)}s`;
  return `${Math.floor(s / 3600)}h${two(Math.round((s % 3600) / 60) % 60)}m`;
}

/**
 * A progress bar on stderr for a transfer of `total` bytes (`undefined`: not known, as for
 * standard input, then it counts MiB without a percentage), unless `--no-progress`. Off a
 * terminal it prints a line a second rather than redrawing. With `files` (`put --recursive`
 * of that many files) it counts files too, and is shown for {@link BAR_MIN_FILES} files or
 * more whatever their size; its percentage is of the bytes, or of the files when they hold
 * less than {@link BAR_MIN_BYTES} in all. The ETA is cli-progress's: from the rate over the
 * last {@link ETA_UPDATES} updates.
 */
async function progressBar(opts: GlobalOptions, total: number | undefined, label: string, files?: number): Promise<Bar> {
  const none: Bar = { update: () => {}, done: () => {}, stop: () => {} };
  if (!opts.progress || (total !== undefined && total < BAR_MIN_BYTES && (files ?? 0) < BAR_MIN_FILES)) return none;
  // Loaded only for a transfer that may show a bar: most commands never draw one.
  const { SingleBar } = await import('cli-progress');
  const mib = (b: number) => Math.round((b / 1024 / 1024) * 10) / 10;
  const { format, byFiles } = barFormat(label, total, files);
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
        formatTime: formatEta,
        etaBuffer: ETA_UPDATES,
        stream: process.stderr,
        hideCursor: true,
        noTTYOutput: !process.stderr.isTTY,
        notTTYSchedule: 1000,
      });
      bar.start(byFiles ? (files ?? 0) : total === undefined ? 0 : mib(total), value, payload);
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
  let handle;
  try {
    handle = await open(file, 'r');
  } catch (e) {
    throw fileFailure('read', file, (e as NodeJS.ErrnoException).code ?? (e as Error).message);
  }
  const info = await handle.stat();
  if (info.isDirectory()) {
    await handle.close();
    throw fileFailure('read', file, 'EISDIR', ' (a directory: put --recursive stores every file under it)');
  }
  // 1 MiB reads rather than 64 KiB: fewer chunks for the client to cut into stripes.
  return { source: handle.createReadStream({ highWaterMark: 1024 * 1024 }), size: info.isFile() ? info.size : undefined };
}

const FILE_SYSCALLS = new Set(['open', 'read', 'write', 'fstat', 'stat', 'rename', 'close', 'fsync', 'unlink']);

/** An error of the file system (not of the store), reported as `cannot <verb> <path>: <code>`. */
function fileError(e: unknown, verb: string, path: string): unknown {
  if (isPowerStoreError(e) || e instanceof CliError) return e;
  const { code, syscall } = (e ?? {}) as NodeJS.ErrnoException;
  // By the system call, so a network error (which has a code too) is not blamed on the file.
  return typeof code === 'string' && FILE_SYSCALLS.has(syscall ?? '') ? fileFailure(verb, path, code) : e;
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
    throw fileFailure('write', file, 'EISDIR');
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

/** A file `put --recursive` did not store, in its `--json` result. */
interface TreeFailure {
  /** The key it was (or would have been) stored under. */
  readonly key: string;
  /** Its path on disk, or its path in the directory when it could not be listed. */
  readonly file: string;
  /** The client's `PowerStoreError` code, `FILE_ERROR` for a file that could not be read, else `FAILED`. */
  readonly code: string;
  readonly message: string;
}

/**
 * `put --recursive`: every file under `dir` (see {@link walkTree}) under `key` as a prefix,
 * through `putMany` (each file a `Blob` read as its turn comes, so memory stays bounded),
 * with a bar of bytes and files. Each file's key is written on its own; those that fail are
 * listed one by one, the command goes on with the others, and it exits with their failures'
 * code when they all have the same one, 1 when they differ (130 when interrupted). With
 * `json`, standard output gets `{prefix, stored, bytes, failed, skipped}` (and `error` when
 * it fails) instead of the lines on standard error.
 */
async function putTree(
  opts: GlobalOptions,
  key: string,
  dir: string,
  options: { public?: boolean; concurrency?: number; json?: boolean },
): Promise<void> {
  if (dir === '-')
    throw new CliError(EXIT.USAGE, 'put --recursive takes a directory, not standard input: powerstore put --recursive <key> <dir>');
  const info = await stat(dir).catch((e: NodeJS.ErrnoException) => {
    throw fileFailure('read', dir, e.code ?? e.message);
  });
  if (!info.isDirectory())
    throw new CliError(EXIT.USAGE, `put --recursive takes a directory, and ${dir} is not one (leave out --recursive)`);
  // Walked before connecting, so what cannot be read is known before anything is stored.
  const tree = await walkTree(dir);
  if (!options.json)
    for (const s of tree.skipped) process.stderr.write(`powerstore: note: skipped ${JSON.stringify(s.path)}: ${s.reason}\n`);
  // Files that could not be read, by their path in the directory; the key is known once connected.
  const unread: TreeEntryNote[] = [...tree.failed];
  const blobs: { path: string; file: string; blob: Blob }[] = [];
  for (const { path, file } of tree.files) {
    try {
      blobs.push({ path, file, blob: await openAsBlob(file) });
    } catch (e) {
      unread.push({ path, reason: `cannot read ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}` });
    }
  }
  const { prefix, result, interrupted } = await withStore(opts, true, async (store, signal) => {
    const base = expandKey(key, store);
    const prefix = base === '' || base.endsWith('/') ? base : `${base}/`;
    const entries = blobs.map(({ path, blob }): [string, Blob] => [prefix + path, blob]);
    const bytesTotal = blobs.reduce((sum, { blob }) => sum + blob.size, 0);
    const bar = await progressBar(opts, bytesTotal, `put ${prefix}`, entries.length);
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
  const failed: TreeFailure[] = unread.map(({ path, reason }) => ({ key: prefix + path, file: path, code: 'FILE_ERROR', message: reason }));
  let aborted = 0;
  result.results.forEach((r, i) => {
    if (r.ok) return;
    const { file } = blobs[i]!;
    const code = isPowerStoreError(r.error) ? r.error.code : undefined;
    if (code === 'ABORTED') {
      aborted++;
      return;
    }
    // A file Blob refuses to be read once the file changed (or went) after it was listed.
    const unreadable = code === undefined && r.error.name === 'NotReadableError';
    failed.push({ key: r.key, file, code: code ?? (unreadable ? 'FILE_ERROR' : 'FAILED'), message: describeFailure(r, file) });
  });
  const stored = result.results.flatMap((r, i) => (r.ok ? [{ key: r.key, file: blobs[i]!.file, size: blobs[i]!.blob.size }] : []));
  const bytes = stored.reduce((sum, s) => sum + s.size, 0);
  if (!options.json) {
    for (const f of failed) process.stderr.write(`powerstore: failed: ${JSON.stringify(f.key.slice(prefix.length))}: ${f.message}\n`);
    if (aborted > 0)
      process.stderr.write(
        `powerstore: interrupted: ${aborted} file${aborted === 1 ? '' : 's'} not stored (or, for those under way, perhaps stored)\n`,
      );
    process.stderr.write(
      `stored ${stored.length} file${stored.length === 1 ? '' : 's'} (${bytes} bytes) under ${JSON.stringify(prefix)}\n`,
    );
  }
  const summary = { prefix, stored: stored.length, bytes, files: stored, failed, skipped: tree.skipped, aborted };
  if (interrupted)
    throw new CliError(EXIT.INTERRUPTED, `interrupted: ${stored.length} of ${tree.files.length} files stored`, 'ABORTED', {
      result: summary,
    });
  if (failed.length > 0) {
    // The failures' own exit code and code when they share one, else 1 (FAILED).
    const exits = new Set(failed.map((f) => (f.code === 'FILE_ERROR' ? EXIT.FAILED : (EXIT_BY_CODE[f.code] ?? EXIT.FAILED))));
    const codes = new Set(failed.map((f) => f.code));
    const exit = exits.size === 1 ? [...exits][0]! : EXIT.FAILED;
    throw new CliError(
      exit,
      `${failed.length} failed${options.json ? '' : ' (listed above)'}`,
      codes.size === 1 ? [...codes][0] : 'FAILED',
      {
        result: summary,
      },
    );
  }
  if (options.json) printJson(summary);
}

/** Why a file of `put --recursive` was not stored, in a line. */
function describeFailure(failure: KeyFailure, file: string): string {
  const { error } = failure;
  if (isPowerStoreError(error)) return `${error.code}: ${error.message}`;
  if (error.name === 'NotReadableError') return `cannot read ${file}: it changed or was removed while it was being stored`;
  return error.message;
}

/** A command's `--json` result on standard output, indented as `stat --json` and `id --json` print theirs. */
function printJson(value: object): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

/** `START:END` (bytes, END exclusive; either may be left out) as a range. */
export function parseRange(v: string): ByteRange {
  const m = /^(\d*):(\d*)$/.exec(v);
  const start = m?.[1] ? Number(m[1]) : 0;
  const end = m?.[2] ? Number(m[2]) : undefined;
  if (!m || !Number.isSafeInteger(start) || (end !== undefined && !Number.isSafeInteger(end)))
    throw new InvalidArgumentError('expected START:END in bytes, END exclusive (0:1024, 1048576:, :100)');
  if (end !== undefined && end < start) throw new InvalidArgumentError('the range ends before it starts');
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
  if (!Number.isFinite(at)) throw new InvalidArgumentError('expected a date (2027-01-01), a duration (30d, 12h, 90m) or never');
  if (at <= now) throw new InvalidArgumentError('it is in the past');
  return at;
}

function writeSecret(path: string, json: object): void {
  mkdirSync(dirname(path), { recursive: true });
  // Created 0600 and chmod-ed too (mode does not apply to an existing file): an identity is a secret.
  writeFileSync(path, `${JSON.stringify(json, null, 2)}\n`, { mode: 0o600 });
  chmodSync(path, 0o600);
}

/**
 * The command line. With `json` (the command line has `--json`: see {@link main}),
 * commander's own errors are not printed: main() prints them as JSON.
 */
export function program({ json = false }: { json?: boolean } = {}): Command {
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
        `--json (every command but completion): standard output gets one JSON object of what was done, and a failure\n` +
        `is one line there, {"error":{"code","message","exitCode",...}}, with the same exit code.\n` +
        `Exit codes: ${EXIT.OK} ok, ${EXIT.FAILED} failed, ${EXIT.USAGE} usage error, ${EXIT.NOT_FOUND} key not found (get, stat),\n` +
        `            ${EXIT.UNREACHABLE} quorum of servers unreachable, ${EXIT.CONFIG} cluster or identity file problem (or an outdated cluster file),\n` +
        `            ${EXIT.NOT_AUTHORIZED} not allowed to write the key (no grant, grant expired, revoked, owner not admitted) or no key to decrypt it (no --cap covering it),\n` +
        `            ${EXIT.QUOTA} quota exceeded, ${EXIT.TAMPERED} value failed authentication (tampered),\n` +
        `            ${EXIT.CHANGED} value overwritten again and again while get streamed it (run get again), ${EXIT.INTERRUPTED} interrupted.`,
    )
    .showHelpAfterError('(powerstore --help, or powerstore help <command>, for usage)')
    // Under --json, main() reports commander's errors as JSON: it must not print them too.
    .configureOutput({ writeErr: (text) => void (json ? undefined : process.stderr.write(text)) })
    .exitOverride();
  const jsonOption = (what: string) => new Option('--json', `print JSON: ${what}; errors too, as {"error":{"code","message",…}}`);

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
      new Option('--concurrency <n>', `with --recursive, files stored at once (default ${DEFAULT_CONCURRENCY})`).argParser(positiveInt),
    )
    .addOption(jsonOption('{"key","size","public"}; with --recursive {"prefix","stored","bytes","files","failed","skipped"}'))
    .action(async (key: string, file: string, options: { public?: boolean; recursive?: boolean; concurrency?: number; json?: boolean }) => {
      const opts = cli.opts<GlobalOptions>();
      if (options.recursive) return putTree(opts, key, file, options);
      if (options.concurrency !== undefined) throw new CliError(EXIT.USAGE, '--concurrency goes with --recursive');
      // Opened before connecting, so a file that cannot be read fails fast (exit 1).
      const input = await openInput(file);
      try {
        const [stored, size] = await withStore(opts, true, async (store, signal) => {
          const full = expandKey(key, store);
          const bar = await progressBar(opts, input.size, `put ${full}`);
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
        if (options.json) printJson({ key: stored, size, public: options.public === true });
        else process.stderr.write(`stored ${size} bytes under ${JSON.stringify(stored)}\n`);
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
    .addOption(
      jsonOption('{"key","file","size","start","end"} (size: the whole value); only with a file, as the value takes standard output'),
    )
    .action(async (key: string, file: string | undefined, options: { range?: ByteRange; json?: boolean }) => {
      const opts = cli.opts<GlobalOptions>();
      const toStdout = file === undefined || file === '-';
      if (toStdout && options.json)
        throw new CliError(
          EXIT.USAGE,
          'get --json needs a file to write the value to (powerstore get <key> <file> --json): standard output is for the value',
        );
      const target = toStdout ? 'standard output' : file;
      try {
        const got = await withStore(opts, false, async (store, signal) => {
          const full = expandKey(key, store);
          // The bar needs the range's size, which getStream tells: progress before it has none to show.
          const shown: { bar?: Bar } = {};
          const value = await store.getStream(full, {
            signal,
            onProgress: (p) => shown.bar?.update(p),
            ...(options.range ? { range: options.range } : {}),
          });
          if (value === undefined) throw new CliError(EXIT.NOT_FOUND, `no value under ${JSON.stringify(key)}`, 'NOT_FOUND', { key: full });
          const bar = (shown.bar = await progressBar(opts, value.end - value.start, `get ${full}`));
          try {
            // Node's stream, so pipeline() holds the reader back while the file or pipe is slow.
            const source = Readable.fromWeb(value.stream as NodeReadableStream<Uint8Array>);
            // end: false leaves standard output open (it is the process's, not this command's).
            try {
              // The signal too, so Ctrl-C stops a get held back by a stalled disk or reader.
              if (toStdout) await pipeline(source, process.stdout, { end: false, signal });
              else await writeFileAtomically(file, source, signal);
            } catch (e) {
              if (signal.aborted && !isPowerStoreError(e)) throw new CliError(EXIT.INTERRUPTED, 'interrupted');
              throw e;
            }
            bar.done(value.end - value.start);
          } finally {
            bar.stop();
          }
          return { key: full, file: target, size: value.size, start: value.start, end: value.end };
        });
        if (options.json) printJson(got);
      } catch (e) {
        if (isPowerStoreError(e) && e.code === 'VALUE_CHANGED')
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
    .addOption(jsonOption('{"key","deleted":true}'))
    .action(async (key: string, options: { json?: boolean }) => {
      const deleted = await withStore(cli.opts<GlobalOptions>(), true, async (store, signal) => {
        const full = expandKey(key, store);
        await store.delete(full, { signal });
        return full;
      });
      if (options.json) printJson({ key: deleted, deleted: true });
      else process.stderr.write(`deleted ${JSON.stringify(deleted)}\n`);
    });

  cli
    .command('stat')
    .description("show a key's timestamp, size and writer, which servers answered and which misbehaved")
    .argument('<key>', 'the key')
    .addOption(jsonOption("the key's state, as the client's stat() returns it"))
    .action(async (key: string, options: { json?: boolean }) => {
      const stat = await withStore(cli.opts<GlobalOptions>(), false, (store, signal) => store.stat(expandKey(key, store), { signal }));
      if (options.json) {
        printJson(stat);
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
      // Not an error: stat printed the key's state (exists: false) all the same.
      if (!stat.exists) process.exitCode = EXIT.NOT_FOUND;
    });

  cli
    .command('ls')
    .description('list the keys starting with a prefix (all keys without one), with their sizes')
    .argument('[prefix]', 'the prefix (@/ for your own namespace)', '')
    .addOption(jsonOption('one object per key and line, {"key","size","timestamp"}'))
    .addOption(new Option('--limit <count>', 'list at most this many keys').argParser(positiveInt))
    .action(async (prefix: string, options: { json?: boolean; limit?: number }) => {
      const { MAX_LIST_LIMIT } = await loadClient();
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
    .addOption(jsonOption('{"file","publicKey","ownerId","namespace"} (public parts only)'))
    .action(async (options: { new?: boolean; json?: boolean }) => {
      const opts = cli.opts<GlobalOptions>();
      const path = opts.identity ?? process.env.POWERSTORE_IDENTITY ?? userIdentityPath();
      let created = false;
      let identity: Identity;
      if (!existsSync(path) || options.new) {
        identity = await (await loadClient()).Identity.generate();
        writeSecret(path, identity.toJSON());
        created = true;
      } else {
        identity = await loadIdentity(path);
      }
      const info = { file: path, publicKey: identity.publicKey, ownerId: identity.ownerId, namespace: identity.namespace };
      if (options.json) printJson(info);
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
    .argument('<publicKey>', "the grantee's public key (`powerstore id` prints it)", unshieldKey)
    .argument('<prefix>', 'key prefix, e.g. @/photos/ or ~<owner id>/photos/')
    .addOption(
      new Option('--expires <when>', 'a date (2027-01-01), a duration (30d, 12h, 90m) or never')
        .makeOptionMandatory()
        .argParser((v) => parseExpiry(v)),
    )
    .option('--out <file>', 'write the grant to a file instead of standard output')
    .addOption(jsonOption('the grant, on standard output even with --out'))
    .action(async (grantee: string, prefix: string, options: { expires: number | 'never'; out?: string; json?: boolean }) => {
      const grant = await withStore(cli.opts<GlobalOptions>(), true, (store) =>
        store.grant(grantee, expandKey(prefix, store), options.expires),
      );
      const text = `${JSON.stringify(grant, null, 2)}\n`;
      if (options.out) {
        try {
          await writeFile(options.out, text);
        } catch (e) {
          throw fileError(e, 'write', options.out);
        }
        if (!options.json)
          process.stderr.write(`grant ${grant.id} for ${grant.prefix} until ${grant.expiresAt} written to ${options.out}\n`);
      }
      if (options.json || !options.out) process.stdout.write(text);
    });

  cli
    .command('share')
    .description(
      'print a read capability for a key, or for every key under a prefix ending in / (yours, or below a --cap you hold); whoever has it can read those values',
    )
    .argument('<keyOrPrefix>', 'e.g. @/photos/ (every key under it, not @/photos2/…) or @/notes/today')
    .addOption(jsonOption('{"scope","capability"} (scope: the key, or the prefix ending in /)'))
    .action(async (scope: string, options: { json?: boolean }) => {
      const shared = await withStore(cli.opts<GlobalOptions>(), false, async (store) => {
        const full = expandKey(scope, store);
        return { scope: full, capability: await store.share(full) };
      });
      if (options.json) printJson(shared);
      else process.stdout.write(`${shared.capability}\n`);
    });

  cli
    .command('completion')
    .description('print a script completing commands, options and file names for your shell (see --help)')
    .addArgument(new Argument('<shell>', 'the shell').choices(SHELLS))
    .addHelpText(
      'after',
      '\nInstall it (then open a new shell):\n' +
        '  bash  powerstore completion bash > ~/.local/share/bash-completion/completions/powerstore\n' +
        "        (without the bash-completion package: echo 'source <(powerstore completion bash)' >> ~/.bashrc)\n" +
        "  zsh   echo 'source <(powerstore completion zsh)' >> ~/.zshrc   (after compinit)\n" +
        '  fish  powerstore completion fish > ~/.config/fish/completions/powerstore.fish',
    )
    .action((shell: Shell) => {
      process.stdout.write(completionScript(cli, shell));
    });

  return cli;
}

// Thrown as InvalidArgumentError, commander names the option and the value: "error: option
// '--timeout <ms>' argument '0' is invalid. expected a positive integer".
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

/**
 * A public key is 43 base64url characters, and one in 64 begins with '-', which commander
 * would take for an unknown option (`grant -z5u… @/shared/` failed with "unknown option").
 * Such tokens (that exact shape: no option looks like it) reach the parser behind
 * {@link SHIELD}, which the arguments that take public keys remove ({@link unshieldKey}).
 */
const DASHED_KEY = /^-[A-Za-z0-9_-]{42}$/;
const SHIELD = 'ed25519:';

/** `argv` with every dashed public key before a `--` shielded. */
export function shieldDashedKeys(argv: readonly string[]): string[] {
  const end = argv.indexOf('--');
  return argv.map((a, i) => ((end === -1 || i < end) && DASHED_KEY.test(a) ? `${SHIELD}${a}` : a));
}

/** A public-key argument as given: without the shield `main` put on a dashed one. */
function unshieldKey(value: string): string {
  return value.startsWith(SHIELD) ? value.slice(SHIELD.length) : value;
}

/** Whether the command line asks for JSON: `--json` anywhere before a `--` (which ends the options). */
function wantsJson(argv: readonly string[]): boolean {
  const end = argv.indexOf('--');
  return (end === -1 ? argv : argv.slice(0, end)).includes('--json');
}

/** A failure as `--json` reports it: `{"error":{"code","message","exitCode",…}}`, beside a partial result if any. */
interface Failure {
  readonly exitCode: number;
  /** What stderr gets without --json (`undefined`: commander has printed it already). */
  readonly line: string | undefined;
  readonly error: { readonly code: string; readonly message: string; readonly [field: string]: unknown };
  readonly result?: object;
}

/** How `e` is reported: its exit code, its line on stderr, its JSON. */
function failure(e: unknown): Failure {
  if (e instanceof CommanderError) {
    const message = e.message.replace(/^error: /, '');
    // commander's "option '--limit <count>' argument '0' is invalid. …": the option, for scripts.
    const option = /^option '(-[^ ',]+)/.exec(message)?.[1];
    return {
      // --help and --version are not errors.
      exitCode: e.exitCode === 0 ? EXIT.OK : EXIT.USAGE,
      line: undefined,
      error: { code: 'USAGE', message, exitCode: EXIT.USAGE, ...(option ? { option } : {}) },
    };
  }
  if (e instanceof CliError) {
    const { result, ...details } = e.details;
    return {
      exitCode: e.exitCode,
      line: `powerstore: ${e.message}`,
      error: { code: e.code, message: e.message, exitCode: e.exitCode, ...details },
      ...(result ? { result } : {}),
    };
  }
  if (isPowerStoreError(e)) {
    // A bad cluster, identity or grant file is a file problem (5), other bad arguments usage (2).
    const exitCode = e.source !== undefined ? EXIT.CONFIG : (EXIT_BY_CODE[e.code] ?? EXIT.FAILED);
    return {
      exitCode,
      line: `powerstore: ${e.code}: ${e.message}`,
      error: { code: e.code, message: e.message, exitCode, ...(e.source === undefined ? {} : { source: e.source }) },
    };
  }
  return {
    exitCode: EXIT.FAILED,
    line: `powerstore: ${(e as Error).stack ?? String(e)}`,
    error: { code: 'FAILED', message: (e as Error).message ?? String(e), exitCode: EXIT.FAILED },
  };
}

/**
 * Runs the CLI; resolves with the exit code. With `--json` a failure is one line of JSON on
 * standard output, `{"error":{"code","message","exitCode",…}}` (after the command's partial
 * result's members, for `put --recursive`), instead of a line on standard error.
 */
export async function main(argv: readonly string[]): Promise<number> {
  const json = wantsJson(argv);
  try {
    await program({ json }).parseAsync(shieldDashedKeys(argv), { from: 'user' });
    return Number(process.exitCode ?? EXIT.OK);
  } catch (e) {
    const f = failure(e);
    if (f.exitCode === EXIT.OK) return EXIT.OK;
    if (json) process.stdout.write(`${JSON.stringify({ ...f.result, error: f.error })}\n`);
    else if (f.line !== undefined) process.stderr.write(`${f.line}\n`);
    return f.exitCode;
  }
}
