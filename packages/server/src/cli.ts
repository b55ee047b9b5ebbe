#!/usr/bin/env node
/**
 * `powerstore-server init | start | rotate-key | policy | dev | usage | status`. A thin
 * layer over the library: parses flags, turns configuration errors into one readable line
 * (file and field) and exit code 2, maps SIGINT/SIGTERM to a graceful shutdown and SIGHUP
 * to a reload of the cluster file (policy, and new key epochs).
 */
import { readFileSync } from 'node:fs';
import { Argument, Command, Help, InvalidArgumentError, Option } from 'commander';
import { pino } from 'pino';
import { DEFAULT_HISTORY } from '@powerstore/protocol';
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import {
  DEFAULT_QUOTA,
  initCluster,
  loadClusterFile,
  loadServerConfig,
  openWritersWarning,
  reloadClusterFile,
  rotateServerKey,
} from './config.js';
import { runDev, type DevFlags } from './dev.js';
import { ServerError } from './errors.js';
import { DEFAULT_CATCH_UP } from './heal.js';
import { DEFAULT_LIMITS, type ServerLimits } from './limits.js';
import { DEFAULT_VALUE_LOG_MIN_BYTES } from './fragment-log.js';
import { DEFAULT_ERASE_WITHIN_MS } from './level-storage.js';
import { DEFAULT_SCRUB, DEFAULT_START_CHECK } from './scrub.js';
import {
  ownerArgument,
  ownerEdit,
  parseCount,
  parseSize,
  revocationEdit,
  runPolicyChange,
  runPolicyShow,
  setQuotaEdit,
  writersEdit,
  type PolicyCommandOptions,
  type PolicyEdit,
} from './policy-admin.js';
import { startServer } from './server.js';
import { runStatus } from './status.js';
import { packageVersion } from './version.js';

function integer(min: number, max = Number.MAX_SAFE_INTEGER) {
  return (value: string): number => {
    const n = Number(value);
    if (!/^\d+$/.test(value) || !Number.isSafeInteger(n) || n < min || n > max) {
      throw new InvalidArgumentError(`expected an integer in ${min}..${max}`);
    }
    return n;
  };
}

/** `--value-log-min-bytes`: a byte count, or `off`. */
function minBytesOrOff(value: string): number | false {
  if (value === 'off') return false;
  const n = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(n)) throw new InvalidArgumentError('expected a number of bytes, or off');
  return n;
}

/** `--hosts a,b,c,d`: the hosts in order, none empty. */
function hostList(value: string): string[] {
  const hosts = value.split(',').map((h) => h.trim());
  if (hosts.some((h) => h === '')) throw new InvalidArgumentError('expected host names or addresses separated by commas, none empty');
  return hosts;
}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

/** Builds the command tree. */
function buildCli(): Command {
  const program = new Command('powerstore-server')
    .description('PowerStore storage server: Byzantine-fault-tolerant, linearizable, erasure-coded key-value storage (M-PoWerStore).')
    .version(packageVersion())
    // commander enforces requiredOption() but its help does not say which options are
    // required; set before the subcommands, which inherit it.
    .configureHelp({
      optionDescription: (option) => {
        const text = new Help().optionDescription(option);
        return option.mandatory ? `${text} (required)` : text;
      },
    })
    .showHelpAfterError()
    .exitOverride();

  program
    .command('init')
    .description(
      "Create a cluster of 3t + 1 servers: cluster.json (public), server-<id>.json (each server's receipt key) and admin.json (the admin identity), secrets with mode 0600.",
    )
    .requiredOption('--t <t>', 'faulty servers tolerated; the cluster has 3t + 1 servers', integer(1, 84))
    .requiredOption('--dir <dir>', 'directory to write the files into (created if missing)')
    .option('--host <host>', 'address the servers listen on and URLs name (default 127.0.0.1)')
    .option(
      '--hosts <list>',
      'one host per server, comma-separated (servers on machines of their own): server i is wss://<host i>:<base port>, listening on all interfaces',
      hostList,
    )
    .option(
      '--base-port <port>',
      "port of server 1; server i gets base + i - 1 (with --hosts: every server's port)",
      integer(1, 65535),
      7001,
    )
    // No defaults: left out, init picks ws:// for a loopback --host and wss:// for any other.
    .option('--tls', 'write wss:// URLs (start the servers with --tls-cert/--tls-key); the default for a --host that is not loopback')
    .addOption(
      new Option('--insecure', 'write plaintext ws:// URLs even for a --host that is not loopback (clients must then allow it)').conflicts(
        'tls',
      ),
    )
    .addOption(
      new Option(
        '--writers <who>',
        'owners: only the owners listed in cluster.json (policy.owners) and the admin may write; ' +
          'open: any identity may write its own namespace, so quotas per owner do not bound what one person with many identities stores (a warning says so)',
      )
        .choices(['open', 'owners'])
        .default('owners'),
    )
    .option('--quota-bytes <n>', 'default quota per owner and server, in bytes', integer(0), DEFAULT_QUOTA.bytes)
    .option('--quota-keys <n>', 'default quota per owner and server, in keys', integer(0), DEFAULT_QUOTA.keys)
    .option('--force', 'overwrite an existing cluster (its servers keep their old identity and data)', false)
    .action(
      async (o: {
        t: number;
        dir: string;
        host?: string;
        hosts?: string[];
        basePort: number;
        tls?: boolean;
        insecure?: boolean;
        force: boolean;
        writers: 'open' | 'owners';
        quotaBytes: number;
        quotaKeys: number;
      }) => {
        const tls = o.tls ? true : o.insecure ? false : undefined;
        const r = await initCluster({ ...o, tls, quota: { bytes: o.quotaBytes, keys: o.quotaKeys } });
        process.stdout.write(
          `created a cluster of ${r.cluster.n} servers (t = ${r.cluster.t}, id ${r.cluster.id}) in ${o.dir}\n` +
            `  public:  ${r.clusterFile} (servers, their receipt keys, the admin key, write policy: ${o.writers})\n` +
            `  secret:  ${r.adminFile} (the admin identity: may write any key and grant any prefix; keep it off the servers)\n` +
            r.serverFiles.map((f, i) => `  secret:  ${f} → ${r.cluster.servers[i]!.url}\n`).join('') +
            r.notes.map((line) => `${line}\n`).join(''),
        );
        const warnings = [...r.warnings, ...(o.writers === 'open' ? [openWritersWarning({ bytes: o.quotaBytes, keys: o.quotaKeys })] : [])];
        for (const w of warnings) process.stderr.write(`powerstore-server: warning: ${w}\n`);
      },
    );

  program
    .command('start')
    .description(
      'Run one server: WebSocket endpoint plus GET /healthz, /readyz, /metrics, /usage, /status and GET/PUT /policy on the same port. SIGHUP reloads the cluster file: the write policy (unless a signed policy of a higher version is in force), and a new key epoch (rotate-key).',
    )
    .requiredOption('--config <file>', 'the server-<id>.json written by init')
    .option('--cluster <file>', 'the cluster file (default: the one the server file names, normally cluster.json beside it)')
    .requiredOption('--data <path>', 'LevelDB directory (created if missing)')
    .option('--tls-cert <file>', 'PEM certificate: serve wss:// and https://')
    .option('--tls-key <file>', 'PEM private key for --tls-cert')
    .option(
      '--unsafe-no-fsync',
      'FOR BENCHMARKS ONLY: acknowledge writes before they reach the disk; a power failure can lose acknowledged writes and break linearizability',
      false,
    )
    .option(
      '--max-frame-bytes <n>',
      'largest WebSocket message (default fits a 64 MiB value at t = 1)',
      integer(1024),
      DEFAULT_LIMITS.maxFrameBytes,
    )
    .option(
      '--max-buffered-bytes <n>',
      'memory budget: bytes of partial frames, requests being handled (with room for their replies) and unsent replies, over all connections',
      integer(1),
      DEFAULT_LIMITS.maxBufferedBytes,
    )
    .option(
      '--max-buffered-bytes-per-address <n>',
      'share of the budget the requests and replies of one client address may hold',
      integer(1),
      DEFAULT_LIMITS.maxBufferedBytesPerAddress,
    )
    .option(
      '--max-send-buffer-bytes <n>',
      'unsent reply bytes of one connection before it is no longer read',
      integer(1),
      DEFAULT_LIMITS.maxSendBufferBytes,
    )
    .option(
      '--send-timeout-ms <ms>',
      'close a connection whose replies make no progress for this long',
      integer(1),
      DEFAULT_LIMITS.sendTimeoutMs,
    )
    .option(
      '--max-inflight-per-connection <n>',
      'requests of one connection handled at once before it is no longer read',
      integer(1),
      DEFAULT_LIMITS.maxInFlightPerConnection,
    )
    .option(
      '--max-lists <n>',
      'LISTs handled at once, at most one per client address; others wait their turn, address by address',
      integer(1),
      DEFAULT_LIMITS.maxLists,
    )
    .option('--max-connections <n>', 'open WebSocket connections; more get HTTP 503', integer(1), DEFAULT_LIMITS.maxConnections)
    .option(
      '--max-connections-per-address <n>',
      'open WebSocket connections from one address; more get HTTP 429',
      integer(1),
      DEFAULT_LIMITS.maxConnectionsPerAddress,
    )
    .option(
      '--idle-timeout-ms <ms>',
      'close a connection that sends nothing for this long; 0 disables',
      integer(0),
      DEFAULT_LIMITS.idleTimeoutMs,
    )
    .option(
      '--frame-timeout-ms <ms>',
      'close a connection whose frame takes longer than this to arrive whole',
      integer(1),
      DEFAULT_LIMITS.frameTimeoutMs,
    )
    .option(
      '--history-keep <n>',
      'entries kept per key below the last completed write (δ): reads overlapping at most this many writes finish in 2 rounds',
      integer(0, 1000),
      DEFAULT_HISTORY.keep,
    )
    .option(
      '--max-pending-per-key <n>',
      'writes of one key started and not completed held at once; more get PENDING_LIMIT',
      integer(1),
      DEFAULT_HISTORY.maxPendingPerKey,
    )
    .option('--max-pending-per-writer <n>', 'the same, per key and writer identity', integer(1), DEFAULT_HISTORY.maxPendingPerWriter)
    .option(
      '--upload-idle-ms <ms>',
      'delete an upload without its stripe 0 once no stripe of it arrived for this long (a tenth of it once a newer write completed)',
      integer(1),
      DEFAULT_HISTORY.uploadIdleMs,
    )
    .option(
      '--shutdown-timeout-ms <ms>',
      'how long SIGTERM/SIGINT waits for in-flight requests',
      integer(1),
      DEFAULT_LIMITS.shutdownTimeoutMs,
    )
    .option('--heartbeat-ms <ms>', 'WebSocket ping interval; 0 disables', integer(0), DEFAULT_LIMITS.heartbeatMs)
    .option(
      '--erase-within <seconds>',
      'erase what garbage collection deletes (overwritten and deleted values) from the data directory within this long, by compacting its key ranges; 0 leaves it to LevelDB',
      integer(0, 86_400),
      DEFAULT_ERASE_WITHIN_MS / 1000,
    )
    .addOption(
      new Option(
        '--value-log-min-bytes <bytes|off>',
        `fragments of at least this many bytes (${DEFAULT_VALUE_LOG_MIN_BYTES} is a good start) are written once to a log of segment files beside LevelDB instead of into LevelDB, whose compactions rewrite them again and again: about a quarter of the disk writes, reads somewhat slower; off keeps them in LevelDB (fragments already in the log stay readable)`,
      )
        .argParser(minBytesOrOff)
        .default(false, 'off'),
    )
    .option(
      '--disk-probe-ms <ms>',
      'while the disk is full (ENOSPC), check this often whether it has room again, then reopen the storage and accept writes',
      integer(100),
      5000,
    )
    .option(
      '--heal-interval-ms <ms>',
      "catch-up: compare every key with the cluster's and repair what this server misses, at start-up and then this often; 0 disables",
      integer(0),
      DEFAULT_CATCH_UP.intervalMs,
    )
    .option('--heal-concurrency <n>', 'catch-up and scrub repairs in flight at once', integer(1, 1024), DEFAULT_CATCH_UP.concurrency)
    .option(
      '--heal-bytes-per-sec <n>',
      'bytes per second repairs read from the other servers (about t + 1 times what they store here); 0 = no limit',
      integer(0),
      DEFAULT_CATCH_UP.bytesPerSec,
    )
    .option(
      '--scrub-period-ms <ms>',
      're-hash every stored fragment once this often (30 days); 0 disables scrub',
      integer(0),
      DEFAULT_SCRUB.periodMs,
    )
    .option(
      '--scrub-bytes-per-sec <n>',
      'bytes per second scrub reads; 0 = the bytes stored over the period, at least 64 KiB/s',
      integer(0),
      DEFAULT_SCRUB.bytesPerSec,
    )
    .option(
      '--start-check-bytes <n>',
      "at start-up, before listening, re-hash up to this many bytes of stored fragments against their checksums (continuing where the last start's check stopped) and report damage in the data directory's files (LevelDB's and the value log's); 0 disables",
      integer(0),
      DEFAULT_START_CHECK.maxBytes,
    )
    .option(
      '--start-check-ms <ms>',
      'the most time the start check takes (it logs its progress every 5 s)',
      integer(0),
      DEFAULT_START_CHECK.maxMs,
    )
    .addOption(
      new Option(
        '--peer-url <id=url>',
        'reach server <id> at <url> instead of the URL cluster.json lists (servers on a private network; repeat per server)',
      )
        .argParser(peerUrl)
        .default({}, 'the URLs in cluster.json'),
    )
    .option('--peer-ca <pem>', 'CA certificates to trust for wss:// peers, besides the system ones')
    .addOption(new Option('--log-level <level>', 'pino log level').choices(LOG_LEVELS).default('info'))
    .action(async (o: StartFlags) => {
      await runStart(o);
    });

  program
    .command('rotate-key')
    .description(
      "Replace a server's receipt key (its machine was lost with its server file, or the key leaked): a new key epoch in cluster.json with a new key for that server, and a new server-<id>.json. Then copy cluster.json to every host, send every server SIGHUP, and start the server with the new file.",
    )
    .requiredOption('--dir <dir>', 'the cluster directory (cluster.json; the new server-<id>.json is written there)')
    .requiredOption('--server <id>', 'the server whose key is replaced (1-based)', integer(1, 255))
    .option('--url <url>', "the server's new ws:// or wss:// URL, if its replacement listens elsewhere")
    .action(async (o: { dir: string; server: number; url?: string }) => {
      const r = await rotateServerKey({ dir: o.dir, id: o.server, ...(o.url ? { url: o.url } : {}) });
      const url = r.cluster.servers[o.server - 1]!.url;
      process.stdout.write(
        `server ${o.server} has a new receipt key in key epoch ${r.epoch}; its key of earlier epochs is retired (writes made under it stay valid)\n` +
          `  public:  ${r.clusterFile} (epoch ${r.epoch})\n` +
          `  secret:  ${r.serverFile} → ${url} (listens on ${r.host}:${r.port})\n` +
          'next:\n' +
          `  1. copy ${r.clusterFile} to every server's host and to where clients load it\n` +
          '  2. send every running server SIGHUP (kill -HUP <pid>): from then on each answers only clients of the new epoch\n' +
          `  3. start server ${o.server} with ${r.serverFile} (a new machine: on an empty data directory); delete the old server file wherever a copy is left\n` +
          (url.startsWith('wss:') ? `  the URL is wss://: give the new server --tls-cert/--tls-key for its host\n` : ''),
      );
    });

  addPolicyCommands(program);

  program
    .command('usage')
    .description("Bytes and keys each owner stores on each server (from the running servers' GET /usage), with quotas.")
    .requiredOption('--cluster <file>', 'the cluster file')
    .option('--owner <id>', 'only this owner')
    .option('--json', 'print JSON', false)
    .action(async (o: { cluster: string; owner?: string; json: boolean }) => {
      await runUsage(o);
    });

  program
    .command('status')
    .description(
      'Every server side by side (from their GET /status): up or not, disk health, free space, version, catch-up state (rebuilding, caught up, last pass), keys and bytes held, scrub. ' +
        'Exits 0 when every server is healthy, 1 when some are not but n - t are, 2 when fewer are (no quorum).',
    )
    .requiredOption('--cluster <file>', 'the cluster file')
    .option('--json', 'print JSON', false)
    .action(async (o: { cluster: string; json: boolean }) => {
      await runStatus(loadClusterFile(o.cluster), o.json);
    });

  program
    .command('dev')
    .description(
      'Development cluster: create it in --dir if missing (writers: open, so a page can write with the identity it makes), start all 3t + 1 servers as child processes, stop them all on Ctrl-C.',
    )
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

/** Flags every changing `policy` command takes. */
interface PolicyFlags {
  cluster: string;
  identity?: string;
  json: boolean;
  force: boolean;
  policyVersion?: number;
}

/**
 * `policy show | set-quota | revoke | unrevoke | admit | remove | writers | sync`: the write
 * policy of the running servers, changed by documents the admin signs and pushes to each
 * (`PUT /policy`, `policy.ts`), instead of editing cluster.json on every host.
 */
function addPolicyCommands(program: Command): void {
  const crypto = createCryptoProvider();
  const policy = program
    .command('policy')
    .description(
      'Show or change the write policy (admitted owners, revocations, quotas) of the running servers: each change is signed with the admin identity, ' +
        'pushed to every server (PUT /policy) and written into the cluster file. Changing commands exit 0 when all n servers hold the new policy, ' +
        '1 when at least n - t do (the cluster enforces it), 2 when fewer do.',
    );
  policy
    .command('show')
    .description(
      "The policy each server enforces (GET /policy: version, where it came from, whether its signature is the admin's) and whether they agree. " +
        'Exits 0 when all n agree, 1 when n - t do, 2 otherwise.',
    )
    .requiredOption('--cluster <file>', 'the cluster file')
    .option('--json', 'print JSON', false)
    .action(async (o: { cluster: string; json: boolean }) => {
      await runPolicyShow(o, crypto);
    });
  const changing = (name: string, description: string) =>
    policy
      .command(name)
      .description(description)
      .requiredOption('--cluster <file>', 'the cluster file (its policy is updated too)')
      .option('--identity <file>', 'the admin identity (default: admin.json beside the cluster file)')
      .option('--json', 'print JSON', false)
      .option(
        '--force',
        'go on when fewer than n - t servers say which policy they hold (the change may then undo a newer one where it applies)',
        false,
      )
      .option('--policy-version <n>', 'the new version (default: one above the latest signed or local version)', integer(1));
  const run = (o: PolicyFlags, edit: PolicyEdit | 'sync') => {
    const options: PolicyCommandOptions = {
      cluster: o.cluster,
      json: o.json,
      force: o.force,
      ...(o.identity !== undefined ? { identity: o.identity } : {}),
      ...(o.policyVersion !== undefined ? { version: o.policyVersion } : {}),
    };
    return runPolicyChange(options, edit, crypto);
  };
  changing(
    'set-quota',
    "Set the default quota per owner and server, or one owner's (merged over the default field by field: a field left out keeps its value).",
  )
    .argument('<owner>', 'an owner id or public key, or "default"', unshieldKey)
    .option('--keys <n>', 'keys the owner may hold on each server, or "unlimited"')
    .option('--bytes <size>', 'bytes the owner may store on each server (1073741824, 500MB, 1GiB), or "unlimited"')
    .option('--reset', "drop the owner's own quota: the default applies", false)
    .action(async (owner: string, o: PolicyFlags & { keys?: string; bytes?: string; reset: boolean }) => {
      if (o.keys === undefined && o.bytes === undefined && !o.reset)
        throw new ServerError('CONFIG_INVALID', 'set-quota needs --keys, --bytes or --reset');
      const target = owner === 'default' ? 'default' : ownerArgument(crypto, owner);
      const fields = {
        ...(o.keys !== undefined ? { keys: parseCount(o.keys) } : {}),
        ...(o.bytes !== undefined ? { bytes: parseSize(o.bytes) } : {}),
      };
      await run(o, setQuotaEdit(target, fields, o.reset));
    });
  changing(
    'revoke',
    'Revoke a public key (its new writes are refused, and grants it issued are no longer honoured) or, with --grant, a grant id. Writes it completed stay readable.',
  )
    .argument('<key>', 'a public key (43 base64url characters), or a grant id with --grant', unshieldKey)
    .option('--grant', 'the argument is a grant id', false)
    .option('--reason <text>', 'why, recorded in the signed document and logged by every server')
    .action(async (key: string, o: PolicyFlags & { grant: boolean; reason?: string }) => {
      await run(o, revocationEdit(key, { grant: o.grant, revoke: true, ...(o.reason ? { reason: o.reason } : {}) }));
    });
  changing('unrevoke', 'Take a public key or (--grant) a grant id off the revocation lists.')
    .argument('<key>', 'a public key, or a grant id with --grant', unshieldKey)
    .option('--grant', 'the argument is a grant id', false)
    .option('--reason <text>', 'why, recorded in the signed document')
    .action(async (key: string, o: PolicyFlags & { grant: boolean; reason?: string }) => {
      await run(o, revocationEdit(key, { grant: o.grant, revoke: false, ...(o.reason ? { reason: o.reason } : {}) }));
    });
  changing('admit', 'Admit an owner: with writers "owners", it may then write its namespace.')
    .argument('<owner>', 'an owner id or public key', unshieldKey)
    .option('--reason <text>', 'why, recorded in the signed document')
    .action(async (owner: string, o: PolicyFlags & { reason?: string }) => {
      await run(o, ownerEdit(ownerArgument(crypto, owner), true, o.reason));
    });
  changing('remove', 'Remove an owner from the admitted ones: with writers "owners", its new writes are refused.')
    .argument('<owner>', 'an owner id or public key', unshieldKey)
    .option('--reason <text>', 'why, recorded in the signed document')
    .action(async (owner: string, o: PolicyFlags & { reason?: string }) => {
      await run(o, ownerEdit(ownerArgument(crypto, owner), false, o.reason));
    });
  changing('writers', 'Who may write: "owners" (the admitted owners and the admin) or "open" (any identity, its own namespace).')
    .addArgument(new Argument('<who>', 'owners or open').choices(['owners', 'open']))
    .action(async (who: 'open' | 'owners', o: PolicyFlags) => {
      if (who === 'open') process.stderr.write(`powerstore-server: warning: ${openWritersWarning()}\n`);
      await run(o, writersEdit(who));
    });
  changing(
    'sync',
    "Push the latest policy again to every server (those that were down or missed it): the latest signed document as it is, or the cluster file's policy, signed, when it is newer.",
  ).action(async (o: PolicyFlags) => {
    await run(o, 'sync');
  });
}

interface StartFlags {
  config: string;
  cluster?: string;
  data: string;
  tlsCert?: string;
  tlsKey?: string;
  unsafeNoFsync: boolean;
  maxFrameBytes: number;
  maxBufferedBytes: number;
  maxBufferedBytesPerAddress: number;
  maxSendBufferBytes: number;
  sendTimeoutMs: number;
  maxInflightPerConnection: number;
  maxLists: number;
  maxConnections: number;
  maxConnectionsPerAddress: number;
  idleTimeoutMs: number;
  frameTimeoutMs: number;
  shutdownTimeoutMs: number;
  heartbeatMs: number;
  historyKeep: number;
  maxPendingPerKey: number;
  maxPendingPerWriter: number;
  uploadIdleMs: number;
  eraseWithin: number;
  valueLogMinBytes: number | false;
  diskProbeMs: number;
  healIntervalMs: number;
  healConcurrency: number;
  healBytesPerSec: number;
  scrubPeriodMs: number;
  scrubBytesPerSec: number;
  startCheckBytes: number;
  startCheckMs: number;
  peerUrl: Record<number, string>;
  peerCa?: string;
  logLevel: string;
}

/** `--peer-url <id>=<url>`, collected per id. */
function peerUrl(value: string, previous: Record<number, string>): Record<number, string> {
  const m = /^(\d+)=(wss?:\/\/\S+)$/.exec(value);
  if (!m) throw new InvalidArgumentError('expected <server id>=<ws:// or wss:// URL>');
  return { ...previous, [Number(m[1])]: m[2]! };
}

async function runStart(o: StartFlags): Promise<void> {
  const config = await loadServerConfig(o.config, o.cluster);
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
  for (const w of config.warnings) logger.warn({ file: w.file, mode: w.mode }, w.message);
  if (o.unsafeNoFsync) logger.warn('--unsafe-no-fsync: acknowledged writes may be lost on power failure');
  const limits: Partial<ServerLimits> = {
    maxFrameBytes: o.maxFrameBytes,
    maxBufferedBytes: o.maxBufferedBytes,
    maxBufferedBytesPerAddress: o.maxBufferedBytesPerAddress,
    maxSendBufferBytes: o.maxSendBufferBytes,
    sendTimeoutMs: o.sendTimeoutMs,
    maxInFlightPerConnection: o.maxInflightPerConnection,
    maxLists: o.maxLists,
    maxConnections: o.maxConnections,
    maxConnectionsPerAddress: o.maxConnectionsPerAddress,
    idleTimeoutMs: o.idleTimeoutMs,
    frameTimeoutMs: o.frameTimeoutMs,
    shutdownTimeoutMs: o.shutdownTimeoutMs,
    heartbeatMs: o.heartbeatMs,
  };
  const server = await startServer({
    cluster: config.cluster,
    index: config.index,
    seed: config.seed,
    host: config.host,
    port: config.port,
    dataDir: o.data,
    sync: !o.unsafeNoFsync,
    tls,
    limits,
    history: {
      keep: o.historyKeep,
      maxPendingPerKey: o.maxPendingPerKey,
      maxPendingPerWriter: o.maxPendingPerWriter,
      uploadIdleMs: o.uploadIdleMs,
    },
    eraseWithinMs: o.eraseWithin * 1000,
    valueLogMinBytes: o.valueLogMinBytes,
    diskProbeMs: o.diskProbeMs,
    logger,
    // A failed disk (EIO…): nothing more is acknowledged (the storage refuses writes at
    // once); exiting lets a restart recover from what is on disk (the README, "Failing disks").
    onStorageFailed: () => {
      logger.flush?.();
      process.exit(74);
    },
    heal: {
      catchUp: { intervalMs: o.healIntervalMs, concurrency: o.healConcurrency, bytesPerSec: o.healBytesPerSec },
      scrub: { periodMs: o.scrubPeriodMs, bytesPerSec: o.scrubBytesPerSec },
      startCheck: { maxBytes: o.startCheckBytes, maxMs: o.startCheckMs },
      peerUrls: o.peerUrl,
      ...(o.peerCa ? { peerCa: readPem(o.peerCa, '--peer-ca') } : {}),
    },
    // Binds the database to this server: starting server 2 on server 1's data, or on data
    // of another cluster, fails instead of serving the wrong state. The server's first key
    // names it, so a server whose key was replaced (rotate-key) still opens its own data.
    identity: `server-${config.id}:${firstKey(config.cluster.file.servers[config.index]!)}`,
  });
  let cluster = config.cluster;
  let reloading = Promise.resolve();
  process.on('SIGHUP', () => {
    // One reload at a time, in the order the signals came.
    reloading = reloading.then(async () => {
      try {
        const next = reloadClusterFile(config.clusterFile, cluster);
        await server.setCluster(next);
        cluster = next;
      } catch (err) {
        logger.error({ err: (err as Error).message }, 'cluster file not reloaded; the previous one stays');
      }
    });
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

/** The first receipt key a server had (of epoch 0): what names its data directory. */
function firstKey(server: { readonly publicKey: string; readonly keys?: readonly { readonly publicKey: string }[] }): string {
  return server.keys?.[0]?.publicKey ?? server.publicKey;
}

async function runUsage(o: { cluster: string; owner?: string; json: boolean }): Promise<void> {
  const cluster = loadClusterFile(o.cluster);
  const reports = await Promise.all(
    cluster.servers.map(async (s) => {
      const url = `${s.url.replace(/^ws/, 'http')}/usage`;
      try {
        const res = await fetch(url, { signal: AbortSignal.timeout(5000) });
        if (!res.ok) return { server: s.id, error: `HTTP ${res.status}` };
        return (await res.json()) as {
          server: number;
          owners: { owner: string; bytes: number; keys: number; quota: { bytes?: number; keys?: number } }[];
        };
      } catch (err) {
        return { server: s.id, error: (err as Error).message };
      }
    }),
  );
  const filtered = reports.map((r) => ('owners' in r && o.owner ? { ...r, owners: r.owners.filter((x) => x.owner === o.owner) } : r));
  if (o.json) {
    process.stdout.write(`${JSON.stringify(filtered, null, 2)}\n`);
    return;
  }
  const lines = ['server  owner                             bytes         keys  quota'];
  for (const r of filtered) {
    if (!('owners' in r)) {
      lines.push(`s${r.server}      unreachable: ${r.error}`);
      continue;
    }
    if (r.owners.length === 0) lines.push(`s${r.server}      (nothing stored)`);
    for (const x of r.owners) {
      const quota =
        [x.quota.bytes !== undefined ? `${x.quota.bytes} bytes` : '', x.quota.keys !== undefined ? `${x.quota.keys} keys` : '']
          .filter(Boolean)
          .join(', ') || 'unlimited';
      lines.push(`s${r.server}      ${x.owner}  ${String(x.bytes).padStart(12)}  ${String(x.keys).padStart(6)}  ${quota}`);
    }
  }
  process.stdout.write(`${lines.join('\n')}\n`);
  if (filtered.some((r) => !('owners' in r))) process.exitCode = 1;
}

/**
 * One public key in 64 begins with '-' (43 base64url characters), and commander would take
 * it for an unknown option (`policy revoke -z5u…`): such tokens before a `--` reach the
 * parser behind a prefix the key arguments remove ({@link unshieldKey}).
 */
const DASHED_KEY = /^-[A-Za-z0-9_-]{42}$/;
const KEY_SHIELD = 'ed25519:';
function shieldDashedKeys(argv: readonly string[]): string[] {
  const end = argv.indexOf('--');
  return argv.map((a, i) => ((end === -1 || i < end) && DASHED_KEY.test(a) ? KEY_SHIELD + a : a));
}
function unshieldKey(value: string): string {
  return value.startsWith(KEY_SHIELD) ? value.slice(KEY_SHIELD.length) : value;
}

/** Runs the CLI with `argv` (as `process.argv`). */
async function main(argv: readonly string[]): Promise<void> {
  const program = buildCli();
  try {
    await program.parseAsync(shieldDashedKeys(argv));
  } catch (err) {
    const e = err as { code?: string; exitCode?: number; message?: string };
    if (typeof e.code === 'string' && e.code.startsWith('commander.')) {
      // commander already printed help, the version or the usage error. Its usage errors
      // (missing required option, unknown option, bad value) exit 1; ours are 2, like
      // configuration errors, so scripts can tell them from a server that failed.
      process.exitCode = e.exitCode === 0 ? 0 : 2;
      return;
    }
    if (err instanceof ServerError) {
      process.stderr.write(`powerstore-server: ${err.code}: ${err.message}\n`);
      // 65 (EX_DATAERR): the data directory is damaged, and restarting on it will not help.
      process.exitCode = err.code.startsWith('CONFIG') ? 2 : err.code === 'STORAGE_CORRUPT' ? 65 : 1;
      return;
    }
    process.stderr.write(`powerstore-server: ${(err as Error).stack ?? String(err)}\n`);
    process.exitCode = 1;
  }
}

await main(process.argv);
