#!/usr/bin/env node
/**
 * `powerstore-server init | start | dev`. A thin layer over the library: parses flags,
 * turns configuration errors into one readable line (file and field) and exit code 2,
 * and maps SIGINT/SIGTERM to a graceful shutdown.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Command, InvalidArgumentError, Option } from 'commander';
import { pino } from 'pino';
import { loadServerConfig, initCluster } from './config.js';
import { runDev, type DevFlags } from './dev.js';
import { ServerError } from './errors.js';
import { DEFAULT_LIMITS, startServer, type ServerLimits } from './server.js';

function integer(min: number, max = Number.MAX_SAFE_INTEGER) {
  return (value: string): number => {
    const n = Number(value);
    if (!/^\d+$/.test(value) || !Number.isSafeInteger(n) || n < min || n > max) {
      throw new InvalidArgumentError(`expected an integer in ${min}..${max}`);
    }
    return n;
  };
}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

/** Builds the command tree. */
function buildCli(): Command {
  const program = new Command('powerstore-server')
    .description('PowerStore storage server: Byzantine-fault-tolerant, linearizable, erasure-coded key-value storage (M-PoWerStore).')
    .showHelpAfterError()
    .exitOverride();

  program
    .command('init')
    .description('Create a cluster of 3t + 1 servers: cluster.json (public), server-<id>.json and writer.json (secret, mode 0600).')
    .requiredOption('--t <t>', 'faulty servers tolerated; the cluster has 3t + 1 servers', integer(1, 84))
    .requiredOption('--dir <dir>', 'directory to write the files into (created if missing)')
    .option('--host <host>', 'address the servers listen on and URLs name', '127.0.0.1')
    .option('--base-port <port>', 'port of server 1; server i gets base + i - 1', integer(1, 65535), 7001)
    .option('--tls', 'write wss:// URLs (start the servers with --tls-cert/--tls-key)', false)
    .option('--force', 'overwrite an existing cluster (its servers keep their old keys and data)', false)
    .action((o: { t: number; dir: string; host: string; basePort: number; tls: boolean; force: boolean }) => {
      const r = initCluster({ t: o.t, dir: o.dir, host: o.host, basePort: o.basePort, tls: o.tls, force: o.force });
      process.stdout.write(
        `created a cluster of ${r.cluster.n} servers (t = ${r.cluster.t}) in ${o.dir}\n` +
          `  public:  ${r.clusterFile}\n` +
          `  secret:  ${r.writerFile} (writers)\n` +
          r.serverFiles.map((f, i) => `  secret:  ${f} → ${r.cluster.servers[i]!.url}\n`).join(''),
      );
    });

  program
    .command('start')
    .description('Run one server: WebSocket endpoint plus GET /healthz and GET /metrics on the same port.')
    .requiredOption('--config <file>', 'the server-<id>.json written by init')
    .requiredOption('--data <path>', 'LevelDB directory (created if missing)')
    .option('--tls-cert <file>', 'PEM certificate: serve wss:// and https://')
    .option('--tls-key <file>', 'PEM private key for --tls-cert')
    .option('--unsafe-no-fsync', 'FOR BENCHMARKS ONLY: acknowledge writes before they reach the disk; a power failure can lose acknowledged writes and break linearizability', false)
    .option('--max-frame-bytes <n>', 'largest WebSocket message (default fits a 64 MiB value at t = 1)', integer(1024), DEFAULT_LIMITS.maxFrameBytes)
    .option('--max-inflight-per-connection <n>', 'requests per connection handled at once before the socket is paused', integer(1), DEFAULT_LIMITS.maxInFlightPerConnection)
    .option('--max-inflight-bytes <n>', 'bytes of requests handled at once over all connections', integer(1), DEFAULT_LIMITS.maxInFlightBytes)
    .option('--max-connections <n>', 'open WebSocket connections; more get HTTP 503', integer(1), DEFAULT_LIMITS.maxConnections)
    .option('--shutdown-timeout-ms <ms>', 'how long SIGTERM/SIGINT waits for in-flight requests', integer(1), DEFAULT_LIMITS.shutdownTimeoutMs)
    .option('--heartbeat-ms <ms>', 'WebSocket ping interval; 0 disables', integer(0), DEFAULT_LIMITS.heartbeatMs)
    .addOption(new Option('--log-level <level>', 'pino log level').choices(LOG_LEVELS).default('info'))
    .action(async (o: StartFlags) => {
      await runStart(o);
    });

  program
    .command('dev')
    .description('Development cluster: create it in --dir if missing, start all 3t + 1 servers as child processes, stop them all on Ctrl-C.')
    .option('--t <t>', 'faulty servers tolerated when creating the cluster', integer(1, 84), 1)
    .option('--dir <dir>', 'cluster directory; data goes to <dir>/data-<id>', '.powerstore')
    .option('--host <host>', 'listen address when creating the cluster', '127.0.0.1')
    .option('--base-port <port>', 'port of server 1 when creating the cluster', integer(1, 65535), 7001)
    .option('--static <dir>', 'also serve this directory (and /cluster.json) over HTTP: the hook for the demo web app')
    .option('--static-port <port>', 'port of the --static server (default: base port - 1)', integer(1, 65535))
    .option('--unsafe-no-fsync', 'FOR BENCHMARKS ONLY: start the servers without fsync', false)
    .addOption(new Option('--log-level <level>', 'log level of the servers').choices(LOG_LEVELS).default('warn'))
    .action(async (o: DevFlags) => {
      await runDev({ ...o, cliPath: process.argv[1]! });
    });

  return program;
}

interface StartFlags {
  config: string;
  data: string;
  tlsCert?: string;
  tlsKey?: string;
  unsafeNoFsync: boolean;
  maxFrameBytes: number;
  maxInflightPerConnection: number;
  maxInflightBytes: number;
  maxConnections: number;
  shutdownTimeoutMs: number;
  heartbeatMs: number;
  logLevel: string;
}

async function runStart(o: StartFlags): Promise<void> {
  const config = loadServerConfig(o.config);
  if (!!o.tlsCert !== !!o.tlsKey) throw new ServerError('CONFIG_INVALID', '--tls-cert and --tls-key go together');
  const readPem = (file: string, flag: string) => {
    try {
      return readFileSync(file);
    } catch (err) {
      throw new ServerError('CONFIG_INVALID', `${flag} ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
  };
  const tls = o.tlsCert && o.tlsKey ? { cert: readPem(o.tlsCert, '--tls-cert'), key: readPem(o.tlsKey, '--tls-key') } : undefined;
  const logger = pino({ level: o.logLevel, base: { server: config.id, pid: process.pid } });
  if (o.unsafeNoFsync) logger.warn('--unsafe-no-fsync: acknowledged writes may be lost on power failure');
  const limits: Partial<ServerLimits> = {
    maxFrameBytes: o.maxFrameBytes,
    maxInFlightPerConnection: o.maxInflightPerConnection,
    // One frame must always fit, or a single large request could never be accepted.
    maxInFlightBytes: Math.max(o.maxInflightBytes, o.maxFrameBytes),
    maxConnections: o.maxConnections,
    shutdownTimeoutMs: o.shutdownTimeoutMs,
    heartbeatMs: o.heartbeatMs,
  };
  const server = await startServer({
    cluster: config.cluster,
    index: config.index,
    key: config.key,
    host: config.host,
    port: config.port,
    dataDir: o.data,
    sync: !o.unsafeNoFsync,
    tls,
    limits,
    logger,
    // Binds the database to this server and key: starting server 2 on server 1's data,
    // or on data of an older cluster, fails instead of serving the wrong state.
    identity: `server-${config.id}:${createHash('sha256').update(config.key).digest('hex').slice(0, 16)}`,
  });
  let stopping = false;
  const stop = (reason: string) => {
    if (stopping) {
      // A second Ctrl-C means "now"; anything else (the dev supervisor's SIGTERM after the
      // terminal's SIGINT reached the whole process group) joins the shutdown under way.
      if (reason === 'SIGINT') {
        logger.warn({ reason }, 'second SIGINT: exiting without waiting');
        process.exit(1);
      }
      return;
    }
    stopping = true;
    logger.info({ reason }, 'stopping');
    server.close().then(
      () => process.exit(0),
      (err: unknown) => {
        logger.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
  // Started by `dev` with an IPC channel: when the supervisor dies, even by SIGKILL, the
  // channel closes and the server stops instead of lingering on its port.
  if (process.channel) {
    process.on('disconnect', () => stop('supervisor exited'));
    process.channel.unref();
  }
}

/** Runs the CLI with `argv` (as `process.argv`). */
async function main(argv: readonly string[]): Promise<void> {
  const program = buildCli();
  try {
    await program.parseAsync(argv as string[]);
  } catch (err) {
    const e = err as { code?: string; exitCode?: number; message?: string };
    if (typeof e.code === 'string' && e.code.startsWith('commander.')) {
      // commander already printed help or the usage error.
      process.exitCode = e.exitCode ?? 1;
      return;
    }
    if (err instanceof ServerError) {
      process.stderr.write(`powerstore-server: ${err.code}: ${err.message}\n`);
      process.exitCode = err.code.startsWith('CONFIG') ? 2 : 1;
      return;
    }
    process.stderr.write(`powerstore-server: ${(err as Error).stack ?? String(err)}\n`);
    process.exitCode = 1;
  }
}

await main(process.argv);
