/**
 * The deployment files in `deploy/` against the real server, so they cannot drift from it:
 * the systemd unit passes `systemd-analyze verify` (where systemd is installed) with no
 * warning; every `--flag` the unit, the Containerfile and the walk-through in
 * `deploy/README.md` pass to `powerstore-server` is one its parser knows (from each
 * command's `--help`); the unit's own command line, with its paths pointed at a temporary
 * cluster, starts a `wss://` server that answers `/healthz` (and the container's health
 * check) and `/readyz`, reloads on SIGHUP and exits 0 on SIGTERM; and
 * `init --hosts` gives each server of the walk-through its own host.
 *
 * The container image itself is not built here (no container engine in the test
 * environment is assumed); `deploy/README.md` says how.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { get as httpsGet } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadServerConfig } from '../../packages/server/src/index.js';
import { CLI, cli, ensureBuilt, freeBasePort, ROOT } from '../server/harness.js';

const UNIT = join(ROOT, 'deploy/systemd/powerstore-server@.service');
const CONTAINERFILE = join(ROOT, 'deploy/container/Containerfile');
const HEALTHCHECK = join(ROOT, 'deploy/container/healthcheck.mjs');
const DEPLOY_README = join(ROOT, 'deploy/README.md');
const SYSTEMD_ANALYZE = '/usr/bin/systemd-analyze';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let work: string;
beforeAll(async () => {
  await ensureBuilt();
  work = mkdtempSync(join(tmpdir(), 'powerstore-deploy-'));
}, 240_000);
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** The unit's `ExecStart=` as words: the binary, then its arguments. */
function execStart(): string[] {
  const line = readFileSync(UNIT, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('ExecStart='));
  if (!line) throw new Error('no ExecStart= in the unit');
  return line.slice('ExecStart='.length).trim().split(/\s+/);
}

/** The Containerfile's `ENTRYPOINT` and `CMD`, joined: what the container runs. */
function containerCommand(): string[] {
  const text = readFileSync(CONTAINERFILE, 'utf8');
  const json = (instruction: string) => {
    const m = new RegExp(`^${instruction} (\\[.*\\])$`, 'm').exec(text);
    if (!m) throw new Error(`no ${instruction} [...] in the Containerfile`);
    return JSON.parse(m[1]!) as string[];
  };
  return [...json('ENTRYPOINT'), ...json('CMD')];
}

/**
 * Every `powerstore-server …` command line in the README's shell blocks, as words from the
 * command on (`$(…)`, quotes and trailing comments removed; `\` continuations joined).
 */
function readmeCommands(): string[][] {
  const text = readFileSync(DEPLOY_README, 'utf8');
  const blocks = [...text.matchAll(/```(?:sh|bash|console)\n([\s\S]*?)```/g)].map((m) => m[1]!);
  const out: string[][] = [];
  for (const block of blocks) {
    for (const line of block.replace(/\\\n\s*/g, ' ').split('\n')) {
      const code = line.replace(/\s#\s.*$/, '');
      // Where a command starts: a line's start, after ; & | ( or a shell keyword.
      const at = /(?:^\s*|[;&|(]\s*|\b(?:do|then|until|while|sudo)\s+)powerstore-server((?:\s+[^\s;&|)]+)*)/g;
      for (const m of code.matchAll(at)) out.push(m[1]!.trim().split(/\s+/));
    }
  }
  return out;
}

/** The `--flags` a command's `--help` lists (`powerstore-server <command…> --help`). */
function helpFlags(command: readonly string[]): Set<string> {
  const r = cli([...command, '--help']);
  expect(r.status, `powerstore-server ${command.join(' ')} --help: ${r.stderr}`).toBe(0);
  return new Set([...r.stdout.matchAll(/(?:^|\s)(--[a-z][a-z0-9-]*)/g)].map((m) => m[1]!));
}

/** The subcommand words (`start`, `policy admit`) and the `--flags` of a command line. */
function splitCommand(words: readonly string[]): { command: string[]; flags: string[] } {
  const command: string[] = [];
  for (const w of words) {
    if (!/^[a-z][a-z-]*$/.test(w) || command.length === 2) break;
    command.push(w);
  }
  // `policy` has subcommands; the others take positional arguments after their name.
  if (command[0] !== 'policy') command.splice(1);
  const flags = words.filter((w) => w.startsWith('--')).map((w) => w.replace(/=.*$/, ''));
  return { command, flags };
}

describe('deploy/', () => {
  it('the systemd unit passes systemd-analyze verify without a warning', (ctx) => {
    if (!existsSync(SYSTEMD_ANALYZE)) {
      ctx.skip(`${SYSTEMD_ANALYZE} is not installed: the unit was not verified`);
      return;
    }
    // verify insists that ExecStart's binary exists: point it at a stub, as an instance.
    const dir = join(work, 'systemd');
    mkdirSync(dir, { recursive: true });
    const stub = join(dir, 'powerstore-server');
    writeFileSync(stub, '#!/bin/sh\nexit 0\n');
    chmodSync(stub, 0o755);
    const [binary] = execStart();
    const unit = readFileSync(UNIT, 'utf8').replace(`ExecStart=${binary} `, `ExecStart=${stub} `);
    expect(unit).toContain(`ExecStart=${stub} start `);
    for (const name of ['powerstore-server@.service', 'powerstore-server@1.service']) {
      const file = join(dir, name);
      writeFileSync(file, unit);
      const r = spawnSync(SYSTEMD_ANALYZE, ['verify', file], { encoding: 'utf8' });
      expect({ status: r.status, stderr: r.stderr }, name).toEqual({ status: 0, stderr: '' });
    }
    // The hardening, as systemd scores it (0 = locked down … 10 = exposed).
    const security = spawnSync(SYSTEMD_ANALYZE, ['security', '--offline=true', join(dir, 'powerstore-server@1.service')], {
      encoding: 'utf8',
    });
    const exposure = /Overall exposure level for [^:]+: ([\d.]+)/.exec(security.stdout + security.stderr);
    if (exposure) expect(Number(exposure[1])).toBeLessThan(3);
  });

  it('every flag the unit, the Containerfile and deploy/README.md pass to powerstore-server is one its parser knows', () => {
    const lines = [execStart().slice(1), containerCommand().slice(1), ...readmeCommands()];
    expect(lines.length).toBeGreaterThan(5);
    const helps = new Map<string, Set<string>>();
    const unknown: string[] = [];
    for (const words of lines) {
      const { command, flags } = splitCommand(words);
      expect(command.length, `a command in: powerstore-server ${words.join(' ')}`).toBeGreaterThan(0);
      const name = command.join(' ');
      if (!helps.has(name)) helps.set(name, helpFlags(command));
      for (const f of flags) if (!helps.get(name)!.has(f)) unknown.push(`powerstore-server ${name} ${f}`);
    }
    expect(unknown).toEqual([]);
    // What the unit and the container must pass, at least.
    for (const words of [execStart(), containerCommand()])
      for (const f of ['start', '--config', '--cluster', '--data', '--tls-cert', '--tls-key']) expect(words).toContain(f);
  }, 60_000);

  it('the unit’s command line starts a wss:// server: /healthz and the container’s health check, /readyz, SIGHUP, SIGTERM', async () => {
    const base = await freeBasePort(4);
    const cluster = join(work, 'cluster');
    expect(cli(['init', '--t', '1', '--dir', cluster, '--base-port', String(base), '--tls']).status).toBe(0);
    // The unit's credentials directory (%d), its files as LoadCredential= names them.
    const creds = join(work, 'credentials');
    mkdirSync(creds);
    copyFileSync(join(cluster, 'server-1.json'), join(creds, 'server.json'));
    chmodSync(join(creds, 'server.json'), 0o600);
    const ssl = spawnSync(
      'openssl',
      ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '1', '-subj', '/CN=127.0.0.1'].concat([
        '-addext',
        'subjectAltName=IP:127.0.0.1',
        '-keyout',
        join(creds, 'tls-key.pem'),
        '-out',
        join(creds, 'tls-cert.pem'),
      ]),
      { encoding: 'utf8' },
    );
    expect(ssl.status, ssl.stderr).toBe(0);
    const data = join(work, 'data-1');
    const args = execStart()
      .slice(1)
      .map((w) =>
        w
          .replaceAll('%d', creds)
          .replaceAll('%i', '1')
          .replace('/etc/powerstore/cluster.json', join(cluster, 'cluster.json'))
          .replace('/var/lib/powerstore/1', data),
      );
    expect(args.join(' ')).not.toMatch(/%|\/etc\/|\/var\//);
    const server: ChildProcess = spawn(process.execPath, [CLI, ...args, '--log-level', 'warn'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    server.stdout!.on('data', (d: Buffer) => (output += d.toString()));
    server.stderr!.on('data', (d: Buffer) => (output += d.toString()));
    const exited = new Promise<number | null>((r) => server.once('exit', (code) => r(code)));
    try {
      const get = (path: string) =>
        new Promise<{ status: number; body: string }>((resolve, reject) => {
          httpsGet(`https://127.0.0.1:${base}${path}`, { rejectUnauthorized: false }, (res) => {
            let body = '';
            res.on('data', (d: Buffer) => (body += d.toString()));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
          }).on('error', reject);
        });
      const deadline = Date.now() + 20_000;
      for (;;) {
        try {
          if ((await get('/healthz')).status === 200) break;
        } catch {
          // not listening yet
        }
        if (Date.now() > deadline) throw new Error(`no /healthz within 20 s:\n${output}`);
        await sleep(100);
      }
      const healthcheck = (url: string) =>
        spawnSync(process.execPath, [HEALTHCHECK], { env: { ...process.env, POWERSTORE_HEALTH_URL: url }, encoding: 'utf8' }).status;
      expect(healthcheck(`https://127.0.0.1:${base}/healthz`)).toBe(0);
      expect(healthcheck(`https://127.0.0.1:${base}/nothing-here`)).toBe(1);
      // Alone, on an empty directory, it is rebuilding: alive but not ready.
      const readyz = await get('/readyz');
      expect(readyz.status).toBe(503);
      expect(JSON.parse(readyz.body)).toMatchObject({ reasons: ['rebuilding'] });
      // ExecReload=: SIGHUP reloads the cluster file; the server stays up.
      server.kill('SIGHUP');
      await sleep(300);
      expect((await get('/healthz')).status).toBe(200);
      // systemd's stop and the container's STOPSIGNAL: a graceful exit 0.
      server.kill('SIGTERM');
      expect(await exited, output).toBe(0);
      expect(healthcheck(`https://127.0.0.1:${base}/healthz`)).toBe(1);
    } finally {
      if (server.exitCode === null && server.signalCode === null) server.kill('SIGKILL');
    }
  }, 60_000);

  it('init --hosts gives each server of the walk-through its own host, and start accepts the files', async () => {
    const dir = join(work, 'hosts');
    const hosts = ['ps1.example.com', 'ps2.example.com', '192.0.2.3', '2001:db8::4'];
    const r = cli(['init', '--t', '1', '--dir', dir, '--hosts', hosts.join(',')]);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).not.toMatch(/secretKey/);
    for (let id = 1; id <= 4; id++) {
      const config = await loadServerConfig(join(dir, `server-${id}.json`));
      expect(config.warnings).toEqual([]);
      expect({ host: config.host, port: config.port }).toEqual({ host: '0.0.0.0', port: 7001 });
      expect(config.cluster.file.servers.map((s) => s.url)).toEqual([
        'wss://ps1.example.com:7001',
        'wss://ps2.example.com:7001',
        'wss://192.0.2.3:7001',
        'wss://[2001:db8::4]:7001',
      ]);
    }
    const wrong = cli(['init', '--t', '1', '--dir', join(work, 'hosts-wrong'), '--hosts', 'only-one']);
    expect(wrong.status).not.toBe(0);
    expect(wrong.stderr).toMatch(/give 4 hosts, one per server, not 1/);
  });
});
