/**
 * `powerstore`: put, get, rm and stat against a PowerStore cluster from the shell.
 *
 *   powerstore put <key> <file|->     powerstore get <key> [file]
 *   powerstore rm <key>               powerstore stat <key> [--json]
 *
 * The cluster file comes from --cluster, $POWERSTORE_CLUSTER or
 * .powerstore/cluster.json (what `powerstore-server dev` creates); writer credentials
 * from --credentials, $POWERSTORE_CREDENTIALS or .powerstore/writer.json.
 */
import { existsSync, readFileSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { Command, CommanderError, Option } from 'commander';
import { SingleBar } from 'cli-progress';
import { connect, PowerStoreError, type Progress, type Store } from '@powerstore/client';

/** Exit codes, documented in `--help`. */
export const EXIT = {
  OK: 0,
  FAILED: 1,
  USAGE: 2,
  NOT_FOUND: 3,
  UNREACHABLE: 4,
  CONFIG: 5,
  INTERRUPTED: 130,
} as const;

const DEFAULT_DIR = '.powerstore';

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
  credentials?: string;
  timeout: number;
  progress: boolean;
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
    throw new CliError(EXIT.CONFIG, `the ${what} ${path} is not valid JSON: ${(e as Error).message}`);
  }
}

function clusterPath(opts: GlobalOptions): string {
  const path = opts.cluster ?? process.env.POWERSTORE_CLUSTER ?? `${DEFAULT_DIR}/cluster.json`;
  if (!opts.cluster && !process.env.POWERSTORE_CLUSTER && !existsSync(path)) {
    throw new CliError(EXIT.CONFIG, `no cluster file: pass --cluster <file>, set POWERSTORE_CLUSTER, or run 'powerstore-server dev' here to create ${path}`);
  }
  return path;
}

function credentialsPath(opts: GlobalOptions, required: boolean): string | undefined {
  const path = opts.credentials ?? process.env.POWERSTORE_CREDENTIALS;
  if (path) return path;
  if (existsSync(`${DEFAULT_DIR}/writer.json`)) return `${DEFAULT_DIR}/writer.json`;
  if (required) throw new CliError(EXIT.CONFIG, 'writing needs writer credentials: pass --credentials <writer.json> or set POWERSTORE_CREDENTIALS');
  return undefined;
}

/** Runs `fn` with a connected store; Ctrl-C aborts the operation and exits 130. */
async function withStore<T>(opts: GlobalOptions, write: boolean, fn: (store: Store, signal: AbortSignal) => Promise<T>): Promise<T> {
  const cluster = loadJson(clusterPath(opts), 'cluster file');
  const credPath = credentialsPath(opts, write);
  const credentials = credPath ? loadJson(credPath, 'credentials file') : undefined;
  const controller = new AbortController();
  const onSigint = () => controller.abort(new Error('interrupted'));
  process.once('SIGINT', onSigint);
  let store: Store | undefined;
  try {
    store = await connect({ cluster, ...(credentials ? { credentials } : {}), timeoutMs: opts.timeout, signal: controller.signal });
    return await fn(store, controller.signal);
  } finally {
    process.off('SIGINT', onSigint);
    store?.close();
  }
}

/** A progress bar on stderr for large transfers, when stderr is a terminal (or forced). */
function progressBar(opts: GlobalOptions, bytes: number, label: string): { update: (p: Progress) => void; stop: () => void } {
  if (!opts.progress || bytes < 1024 * 1024) return { update: () => {}, stop: () => {} };
  const bar = new SingleBar({
    format: `${label} [{bar}] {percentage}% | {phase} | {value}/{total} MiB`,
    stream: process.stderr,
    hideCursor: true,
    noTTYOutput: !process.stderr.isTTY,
    notTTYSchedule: 1000,
  });
  const mib = (b: number) => Math.round((b / 1024 / 1024) * 10) / 10;
  bar.start(mib(bytes), 0, { phase: 'connecting' });
  return {
    update(p) {
      // Value bytes through the store round, scaled from the round's frame bytes.
      const fraction = p.phase === 'store' ? (p.bytesTotal ? p.bytesSent / p.bytesTotal : 0) : p.phase === 'complete' ? 1 : 0;
      bar.update(mib(bytes * fraction), { phase: p.phase });
    },
    stop: () => bar.stop(),
  };
}

async function readInput(source: string): Promise<Uint8Array> {
  if (source === '-') {
    const chunks: Buffer[] = [];
    for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks);
  }
  try {
    return await readFile(source);
  } catch (e) {
    throw new CliError(EXIT.FAILED, `cannot read ${source}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
}

function describeTimestamp(ts: { num: number; writerId: string }): string {
  return ts.num === 0 ? 'none (never written)' : `${ts.num} by writer ${ts.writerId}`;
}

export function program(): Command {
  const cli = new Command('powerstore')
    .description('Read and write a PowerStore cluster: Byzantine-fault-tolerant, linearizable, erasure-coded key-value storage.')
    .option('--cluster <file>', `cluster file (default: $POWERSTORE_CLUSTER or ${DEFAULT_DIR}/cluster.json)`)
    .option('--credentials <file>', `writer credentials, needed by put and rm (default: $POWERSTORE_CREDENTIALS or ${DEFAULT_DIR}/writer.json)`)
    .addOption(new Option('--timeout <ms>', 'time an operation may take').default(30_000).argParser(positiveInt))
    .option('--no-progress', 'no progress bar for large values')
    .addHelpText(
      'after',
      `\nExit codes: ${EXIT.OK} ok, ${EXIT.FAILED} failed, ${EXIT.USAGE} usage error, ${EXIT.NOT_FOUND} key not found (get, stat),\n` +
        `            ${EXIT.UNREACHABLE} quorum of servers unreachable, ${EXIT.CONFIG} cluster or credentials file problem, ${EXIT.INTERRUPTED} interrupted.`,
    )
    .showHelpAfterError()
    .exitOverride();

  cli
    .command('put')
    .description('store a file (or standard input, with -) under a key')
    .argument('<key>', 'the key (UTF-8, up to 1024 bytes)')
    .argument('<file>', "file to store, or '-' for standard input")
    .action(async (key: string, file: string) => {
      const opts = cli.opts<GlobalOptions>();
      const value = await readInput(file);
      await withStore(opts, true, async (store, signal) => {
        const bar = progressBar(opts, value.length, `put ${key}`);
        try {
          await store.put(key, value, { signal, onProgress: bar.update });
        } finally {
          bar.stop();
        }
      });
      process.stderr.write(`stored ${value.length} bytes under ${JSON.stringify(key)}\n`);
    });

  cli
    .command('get')
    .description('write the value of a key to a file, or to standard output')
    .argument('<key>', 'the key')
    .argument('[file]', 'where to write the value (default: standard output)')
    .action(async (key: string, file: string | undefined) => {
      const opts = cli.opts<GlobalOptions>();
      const value = await withStore(opts, false, (store, signal) => store.get(key, { signal }));
      if (value === undefined) throw new CliError(EXIT.NOT_FOUND, `no value under ${JSON.stringify(key)}`);
      if (file) await writeFile(file, value);
      else await writeStdout(value);
    });

  cli
    .command('rm')
    .description('delete a key (a linearizable tombstone write)')
    .argument('<key>', 'the key')
    .action(async (key: string) => {
      await withStore(cli.opts<GlobalOptions>(), true, (store, signal) => store.delete(key, { signal }));
      process.stderr.write(`deleted ${JSON.stringify(key)}\n`);
    });

  cli
    .command('stat')
    .description("show a key's timestamp and size, which servers answered and which misbehaved")
    .argument('<key>', 'the key')
    .option('--json', 'print JSON')
    .action(async (key: string, options: { json?: boolean }) => {
      const stat = await withStore(cli.opts<GlobalOptions>(), false, (store, signal) => store.stat(key, { signal }));
      if (options.json) {
        process.stdout.write(`${JSON.stringify(stat, null, 2)}\n`);
      } else {
        const lines = [
          `key:         ${stat.key}`,
          `state:       ${stat.exists ? 'stored' : stat.deleted ? 'deleted' : 'never written'}`,
          `size:        ${stat.size} bytes`,
          `timestamp:   ${describeTimestamp(stat.timestamp)}`,
          `read rounds: ${stat.rounds}`,
          `answered:    ${stat.answered.map((id) => `s${id}`).join(' ')}`,
          `misbehaving: ${stat.misbehaving.length ? stat.misbehaving.map((m) => `s${m.id} (${m.reason})`).join('; ') : 'none seen'}`,
        ];
        process.stdout.write(`${lines.join('\n')}\n`);
      }
      if (!stat.exists) process.exitCode = EXIT.NOT_FOUND;
    });

  return cli;
}

function positiveInt(v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n <= 0) throw new CommanderError(EXIT.USAGE, 'powerstore.invalidArgument', `error: expected a positive integer, got ${JSON.stringify(v)}`);
  return n;
}

function writeStdout(bytes: Uint8Array): Promise<void> {
  return new Promise((resolve, reject) => process.stdout.write(bytes, (e) => (e ? reject(e) : resolve())));
}

/** Runs the CLI; resolves with the exit code. */
export async function main(argv: readonly string[]): Promise<number> {
  try {
    await program().parseAsync(argv, { from: 'user' });
    return Number(process.exitCode ?? EXIT.OK);
  } catch (e) {
    if (e instanceof CommanderError) {
      // --help and --version are not errors.
      return e.exitCode === 0 ? EXIT.OK : EXIT.USAGE;
    }
    if (e instanceof CliError) {
      process.stderr.write(`powerstore: ${e.message}\n`);
      return e.exitCode;
    }
    if (e instanceof PowerStoreError) {
      process.stderr.write(`powerstore: ${e.message}\n`);
      switch (e.code) {
        case 'QUORUM_UNREACHABLE':
          return EXIT.UNREACHABLE;
        case 'ABORTED':
          return EXIT.INTERRUPTED;
        case 'NO_CREDENTIALS':
        case 'INVALID_ARGUMENT':
          return e.message.startsWith('cluster') || e.message.startsWith('credentials') ? EXIT.CONFIG : EXIT.USAGE;
        default:
          return EXIT.FAILED;
      }
    }
    process.stderr.write(`powerstore: ${(e as Error).stack ?? String(e)}\n`);
    return EXIT.FAILED;
  }
}
