/**
 * The CLI as an operator meets it: help, init's files and refusals, configuration errors
 * that name file and field, a server refusing another server's data, wss:// with a
 * certificate, and `dev` starting and stopping a whole cluster.
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { get as httpsGet } from 'node:https';
import { createServer as createNetServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { decodeMessage, encodeMessage, namespacePrefix, ownerIdOf } from '@powerstore/protocol';
import { crypto, TestClient } from './driver.js';
import { CLI, cli, CliCluster, ensureBuilt, freeBasePort, ROOT } from './harness.js';

/** The fields of cluster.json these tests read. */
interface ClusterJson {
  readonly servers: readonly { readonly url: string }[];
}

const root = mkdtempSync(join(tmpdir(), 'powerstore-cli-'));
beforeAll(ensureBuilt, 240_000);
afterAll(() => rmSync(root, { recursive: true, force: true }));
let dirs = 0;
const fresh = () => join(root, `d${dirs++}`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('powerstore-server CLI', () => {
  it('has --help on every command', () => {
    const top = cli(['--help']);
    expect(top.status).toBe(0);
    expect(top.stdout).toMatch(/init[\s\S]*start[\s\S]*usage[\s\S]*dev/);
    const init = cli(['init', '--help']);
    for (const flag of ['--base-port', '--force', '--writers', '--quota-bytes', '--quota-keys']) expect(init.stdout).toContain(flag);
    expect(cli(['usage', '--help']).stdout).toContain('--owner');
    const start = cli(['start', '--help']);
    for (const flag of [
      '--config',
      '--cluster',
      '--data',
      '--tls-cert',
      '--tls-key',
      '--max-frame-bytes',
      '--max-connections',
      '--max-inflight-per-connection',
    ]) {
      expect(start.stdout).toContain(flag);
    }
    expect(start.stdout).toMatch(/--unsafe-no-fsync\s+FOR BENCHMARKS ONLY/);
    const dev = cli(['dev', '--help']);
    expect(dev.stdout).toContain('--static');
    expect(cli(['start']).status).not.toBe(0);
    // Usage errors exit 2, and the help says which options are required.
    const noT = cli(['init', '--dir', fresh()]);
    expect(noT.status).toBe(2);
    expect(noT.stderr).toContain("required option '--t <t>' not specified");
    expect(init.stdout.slice(init.stdout.indexOf('--t <t>'), init.stdout.indexOf('--dir <dir>'))).toContain('(required)');
    expect(cli(['start', '--no-such-option']).status).toBe(2);
    const version = cli(['--version']);
    expect(version.status).toBe(0);
    expect(version.stdout.trim()).toBe(
      (JSON.parse(readFileSync(join(ROOT, 'packages/server/package.json'), 'utf8')) as { version: string }).version,
    );
  });

  it('init writes the files with secret modes and refuses to overwrite without --force', () => {
    const dir = fresh();
    const r = cli(['init', '--t', '1', '--dir', dir, '--base-port', '9301']);
    expect(r.status).toBe(0);
    expect(statSync(join(dir, 'server-2.json')).mode & 0o777).toBe(0o600);
    expect(statSync(join(dir, 'admin.json')).mode & 0o777).toBe(0o600);
    expect(r.stdout).toContain('admin.json');
    const cluster = JSON.parse(readFileSync(join(dir, 'cluster.json'), 'utf8')) as ClusterJson;
    expect(cluster).toMatchObject({ version: 2, policy: { writers: 'owners', owners: [] } });
    expect(r.stderr).toBe('');
    expect(cluster.servers.map((s: { url: string }) => s.url)).toEqual([
      'ws://127.0.0.1:9301',
      'ws://127.0.0.1:9302',
      'ws://127.0.0.1:9303',
      'ws://127.0.0.1:9304',
    ]);
    const again = cli(['init', '--t', '1', '--dir', dir]);
    expect(again.status).toBe(2);
    expect(again.stderr).toContain('CONFIG_EXISTS');
    expect(again.stderr).toContain('--force');
    expect(cli(['init', '--t', '1', '--dir', dir, '--force']).status).toBe(0);
    expect(cli(['init', '--t', '0', '--dir', fresh()]).status).not.toBe(0);
  });

  it('init admits only the owners cluster.json lists and the admin; --writers open is asked for, with a warning about Sybil writers', async () => {
    // --writers open: what it means, said on stderr (with the quotas it does not make a bound).
    const open = cli(['init', '--t', '1', '--dir', fresh(), '--writers', 'open', '--quota-bytes', '1000']);
    expect(open.status, open.stderr).toBe(0);
    expect(open.stdout).toContain('write policy: open');
    const warning = open.stderr.split('\n').filter(Boolean);
    expect(warning).toHaveLength(1);
    expect(warning[0]).toMatch(/^powerstore-server: warning: writers: open lets any identity write/);
    expect(warning[0]).toContain('1000 bytes and 100000 keys');
    expect(warning[0]).toContain('not what one person with many identities stores');
    expect(warning[0]).toContain('--writers owners (the default)');
    expect(cli(['init', '--help']).stdout.replace(/\s+/g, ' ')).toContain('(choices: "open", "owners", default: "owners")');

    // init's defaults, running: a new identity cannot write even its own namespace, as the
    // servers judge it (a client that ignores the cluster file's policy gets the same).
    const cluster = await CliCluster.create(1, [], []);
    const clients: TestClient[] = [];
    try {
      expect(cluster.clusterJson()).toMatchObject({ policy: { writers: 'owners', owners: [] } });
      await cluster.startAll();
      const alice = await crypto.signerFromSeed(new Uint8Array(randomBytes(32)));
      const aliceId = ownerIdOf(crypto, alice.publicKey);
      const key = `${namespacePrefix(aliceId)}note`;
      const asAlice = await TestClient.open(cluster, alice);
      const asAdmin = await TestClient.open(cluster, cluster.admin);
      clients.push(asAlice, asAdmin);
      await expect(asAlice.write(key, { kind: 'value', value: new TextEncoder().encode('hi') })).rejects.toMatchObject({
        code: 'NOT_AUTHORIZED',
      });
      // The admin writes anywhere, her namespace included.
      await asAdmin.write(key, { kind: 'value', value: new TextEncoder().encode('from the admin') });
      // Listed in policy.owners (and SIGHUP), she writes her own namespace.
      const json = cluster.clusterJson() as { policy: object };
      writeFileSync(cluster.clusterFile, JSON.stringify({ ...json, policy: { ...json.policy, owners: [aliceId] } }));
      for (let id = 1; id <= cluster.config.n; id++) cluster.process(id)!.kill('SIGHUP');
      const deadline = Date.now() + 10_000;
      let outcome: string | undefined;
      while (Date.now() < deadline) {
        outcome = await asAlice.write(key, { kind: 'value', value: new TextEncoder().encode('mine') }).then(
          () => 'written',
          (e: { code?: string }) => e.code,
        );
        if (outcome === 'written') break;
        await sleep(200);
      }
      expect(outcome).toBe('written');
      expect(new TextDecoder().decode((await asAdmin.read(key)).value)).toBe('mine');
      // Bob, not listed, still cannot.
      const bob = await crypto.signerFromSeed(new Uint8Array(randomBytes(32)));
      const asBob = await TestClient.open(cluster, bob);
      clients.push(asBob);
      await expect(
        asBob.write(`${namespacePrefix(ownerIdOf(crypto, bob.publicKey))}x`, { kind: 'value', value: new TextEncoder().encode('x') }),
      ).rejects.toMatchObject({ code: 'NOT_AUTHORIZED' });
    } finally {
      for (const c of clients) c.close();
      await cluster.stop();
    }
  }, 60_000);

  it('init --host with an address that is not loopback writes wss:// and says how to serve it; --insecure keeps ws:// with a warning', () => {
    const dir = fresh();
    const r = cli(['init', '--t', '1', '--dir', dir, '--host', '10.1.2.3']);
    expect(r.status, r.stderr).toBe(0);
    expect((JSON.parse(readFileSync(join(dir, 'cluster.json'), 'utf8')) as ClusterJson).servers.map((s: { url: string }) => s.url)).toEqual(
      ['wss://10.1.2.3:7001', 'wss://10.1.2.3:7002', 'wss://10.1.2.3:7003', 'wss://10.1.2.3:7004'],
    );
    expect(r.stdout).toContain('because 10.1.2.3 is not a loopback address');
    expect(r.stdout).toContain('--tls-cert <cert.pem> --tls-key <key.pem>');
    expect(r.stdout).toContain('openssl req -x509');
    expect(r.stdout).toContain('--insecure');
    expect(r.stderr).toBe('');
    const plain = cli(['init', '--t', '1', '--dir', dir, '--host', '10.1.2.3', '--insecure', '--force']);
    expect(plain.status, plain.stderr).toBe(0);
    expect((JSON.parse(readFileSync(join(dir, 'cluster.json'), 'utf8')) as ClusterJson).servers[0]!.url).toBe('ws://10.1.2.3:7001');
    expect(plain.stderr).toMatch(/^powerstore-server: warning: ws:\/\/ URLs to 10\.1\.2\.3 are plaintext.*--allow-insecure/);
    expect(plain.stdout).not.toContain('--tls-cert');
    // Loopback: ws:// and nothing more to say.
    const local = cli(['init', '--t', '1', '--dir', fresh(), '--host', 'localhost']);
    expect(local.status).toBe(0);
    expect(local.stdout).toContain('ws://localhost:7001');
    expect(local.stdout).not.toContain('--tls-cert');
    expect(local.stderr).toBe('');
    expect(cli(['init', '--t', '1', '--dir', fresh(), '--tls', '--insecure']).status).not.toBe(0);
    expect(cli(['init', '--help']).stdout).toContain('--insecure');
  });

  it('start at trace level, and its configuration errors, print no piece of the receipt key; a readable key file is warned about', async () => {
    const dir = fresh();
    const base = await freeBasePort(4);
    expect(cli(['init', '--t', '1', '--dir', dir, '--base-port', String(base)]).status).toBe(0);
    const file = join(dir, 'server-1.json');
    const text = readFileSync(file, 'utf8');
    const secret = (JSON.parse(text) as { secretKey: string }).secretKey;
    const bytes = Buffer.from(secret, 'base64url');
    const pieces = [secret, bytes.toString('base64'), bytes.toString('hex')].flatMap((t) =>
      Array.from({ length: t.length - 9 }, (_, i) => t.slice(i, i + 10)),
    );
    const leaks = (out: string) => pieces.filter((p) => out.includes(p));
    for (const content of [
      text.slice(0, text.indexOf(secret) + 20),
      text.replace(`"${secret}"`, `"${secret}",`),
      JSON.stringify({ ...JSON.parse(text), port: secret }),
    ]) {
      writeFileSync(file, content);
      const bad = cli(['start', '--config', file, '--data', join(dir, 'data-1'), '--log-level', 'trace']);
      expect(bad.status).toBe(2);
      expect(bad.stderr).toContain(file);
      expect(leaks(bad.stdout + bad.stderr), bad.stderr).toEqual([]);
    }
    writeFileSync(file, text);
    // Readable by everyone: the server starts, and says so.
    chmodSync(file, 0o644);
    const child = spawn(process.execPath, [CLI, 'start', '--config', file, '--data', join(dir, 'data-1'), '--log-level', 'trace'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    try {
      await waitFor(`http://127.0.0.1:${base}/healthz`);
      await (await fetch(`http://127.0.0.1:${base}/metrics`)).text();
      const ws = new WebSocket(`ws://127.0.0.1:${base}`);
      await new Promise<void>((resolve, reject) => {
        ws.once('open', () => ws.send(new Uint8Array([9, 9, 9])));
        ws.once('message', () => resolve());
        ws.once('error', reject);
      });
      ws.close();
    } finally {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
    }
    expect(out).toContain('"level":');
    expect(out).toContain(`chmod 600 ${file}`);
    expect(leaks(out), out).toEqual([]);
  });

  it('start names the file and field of a configuration error, and refuses another server’s data', async () => {
    const dir = fresh();
    const base = await freeBasePort(4);
    expect(cli(['init', '--t', '1', '--dir', dir, '--base-port', String(base)]).status).toBe(0);
    const file = join(dir, 'server-1.json');
    const good = readFileSync(file, 'utf8');
    writeFileSync(file, JSON.stringify({ ...JSON.parse(good), secretKey: 'zz' }));
    const bad = cli(['start', '--config', file, '--data', join(dir, 'data')]);
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain(`${file}: field "secretKey"`);
    // Server 2's key in server 1's file: not the key cluster.json lists for server 1.
    writeFileSync(
      file,
      JSON.stringify({
        ...(JSON.parse(good) as object),
        secretKey: (JSON.parse(readFileSync(join(dir, 'server-2.json'), 'utf8')) as { secretKey: string }).secretKey,
      }),
    );
    expect(cli(['start', '--config', file, '--data', join(dir, 'data')]).stderr).toContain('is not the key');
    writeFileSync(file, good);
    // Server 2's files on server 1's data directory.
    const s1 = spawn(process.execPath, [CLI, 'start', '--config', file, '--data', join(dir, 'data-1')], { stdio: 'ignore' });
    await waitFor(`http://127.0.0.1:${base}/healthz`);
    // While it runs: its port and its database are taken, and both refusals say so.
    const portTaken = cli(['start', '--config', file, '--data', join(dir, 'data-other')]);
    expect(portTaken.status).toBe(1);
    expect(portTaken.stderr).toContain('LISTEN_FAILED');
    expect(portTaken.stderr).toContain('EADDRINUSE');
    const dbTaken = cli(['start', '--config', file, '--data', join(dir, 'data-1')]);
    expect(dbTaken.status).toBe(1);
    expect(dbTaken.stderr).toContain('STORAGE_FAILED');
    expect(dbTaken.stderr).toContain('another process');
    s1.kill('SIGTERM');
    expect(await new Promise((r) => s1.once('exit', r))).toBe(0);
    const wrong = cli(['start', '--config', join(dir, 'server-2.json'), '--data', join(dir, 'data-1')]);
    expect(wrong.status).toBe(1);
    expect(wrong.stderr).toContain('STORAGE_MISMATCH');
  });

  it('serves wss:// and https:// with --tls-cert/--tls-key', async () => {
    const dir = fresh();
    mkdirSync(dir);
    const cert = join(dir, 'cert.pem');
    const key = join(dir, 'key.pem');
    const ssl = spawnSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:P-256',
        '-nodes',
        '-keyout',
        key,
        '-out',
        cert,
        '-days',
        '1',
        '-subj',
        '/CN=127.0.0.1',
      ],
      { encoding: 'utf8' },
    );
    if (ssl.status !== 0) throw new Error(`openssl failed: ${ssl.stderr}`);
    const base = await freeBasePort(4);
    expect(cli(['init', '--t', '1', '--dir', dir, '--base-port', String(base), '--tls']).status).toBe(0);
    expect((JSON.parse(readFileSync(join(dir, 'cluster.json'), 'utf8')) as ClusterJson).servers[0]!.url).toBe(`wss://127.0.0.1:${base}`);
    const child = spawn(
      process.execPath,
      [CLI, 'start', '--config', join(dir, 'server-1.json'), '--data', join(dir, 'data-1'), '--tls-cert', cert, '--tls-key', key],
      { stdio: 'ignore' },
    );
    try {
      let status = 0;
      for (let i = 0; i < 200 && status !== 200; i++) {
        status = await new Promise<number>((resolve) => {
          httpsGet(`https://127.0.0.1:${base}/healthz`, { rejectUnauthorized: false }, (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          }).on('error', () => resolve(0));
        });
        if (status !== 200) await sleep(50);
      }
      expect(status).toBe(200);
      const ws = new WebSocket(`wss://127.0.0.1:${base}`, { rejectUnauthorized: false });
      const reply = await new Promise<Uint8Array>((resolve, reject) => {
        ws.once('open', () => ws.send(encodeMessage({ type: 'CLOCK', key: 'tls', opId: 4 })));
        ws.once('message', (d: Buffer) => resolve(new Uint8Array(d)));
        ws.once('error', reject);
      });
      expect(decodeMessage(reply, { n: 4 })).toMatchObject({ type: 'CLOCK_ACK', key: 'tls', opId: 4 });
      ws.close();
    } finally {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
    }
  });

  it('dev creates and starts the whole cluster, serves --static, and stops everything on SIGINT', async () => {
    const dir = fresh();
    const site = join(root, 'site');
    mkdirSync(site, { recursive: true });
    writeFileSync(join(site, 'index.html'), '<h1>demo</h1>');
    const base = await freeBasePort(5);
    const dev = spawn(process.execPath, [CLI, 'dev', '--dir', dir, '--base-port', String(base + 1), '--static', site], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    dev.stdout.on('data', (d: Buffer) => (out += d.toString()));
    dev.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const deadline = Date.now() + 30_000;
    while (!out.includes('Ctrl-C stops everything') && Date.now() < deadline && dev.exitCode === null) await sleep(50);
    expect(out).toContain('Ctrl-C stops everything');
    for (let id = 1; id <= 4; id++) {
      expect(out).toContain(`server ${id}: ws://127.0.0.1:${base + id}`);
      expect((await fetch(`http://127.0.0.1:${base + id}/healthz`)).status).toBe(200);
    }
    expect(await (await fetch(`http://127.0.0.1:${base}/`)).text()).toBe('<h1>demo</h1>');
    expect(((await (await fetch(`http://127.0.0.1:${base}/cluster.json`)).json()) as { n: number }).n).toBe(4);
    // The page gets no secret: no admin identity, no server key, under any name.
    for (const name of ['admin.json', 'server-1.json', 'writer.json', '..%2fadmin.json', '..%2f..%2fadmin.json']) {
      expect((await fetch(`http://127.0.0.1:${base}/${name}`)).status, name).not.toBe(200);
    }
    expect(out).not.toContain('writer.json');
    // DNS rebinding: a page of another site re-pointed at 127.0.0.1 sends its own name as Host.
    for (const host of [`evil.example:${base}`, 'evil.example']) {
      for (const path of ['/', '/cluster.json']) {
        const status = await new Promise<number>((resolve, reject) => {
          httpRequest({ host: '127.0.0.1', port: base, path, headers: { host }, setHost: false }, (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          })
            .on('error', reject)
            .end();
        });
        expect(status, `${host} ${path}`).toBe(421);
      }
    }
    // What answers is this cluster's server 1.
    expect(await (await fetch(`http://127.0.0.1:${base + 1}/healthz`)).json()).toMatchObject({
      id: 1,
      cluster: (JSON.parse(readFileSync(join(dir, 'cluster.json'), 'utf8')) as { id: string }).id,
    });
    // A server that dies is restarted, after a second's back-off.
    const ps = execFileSync('ps', ['-o', 'pid=,args=', '--ppid', String(dev.pid)], { encoding: 'utf8' });
    const s2 = ps.split('\n').find((l) => l.includes('server-2.json'));
    expect(s2, ps).toBeDefined();
    process.kill(Number(s2!.trim().split(/\s+/)[0]), 'SIGKILL');
    const back = Date.now() + 20_000;
    while (!out.includes('server 2 exited (SIGKILL); restarting it in 1 s') && Date.now() < back) await sleep(50);
    expect(out).toContain('server 2 exited (SIGKILL); restarting it in 1 s');
    await waitFor(`http://127.0.0.1:${base + 2}/healthz`);
    dev.kill('SIGINT');
    expect(await new Promise((r) => dev.once('exit', r))).toBe(0);
    expect(out).toContain('all servers stopped');
    for (let id = 1; id <= 4; id++) await expect(fetch(`http://127.0.0.1:${base + id}/healthz`)).rejects.toThrow();
    // A second run reuses the cluster it created.
    expect(statSync(join(dir, 'data-1')).isDirectory()).toBe(true);
  }, 60_000);

  it('dev refuses to start when another process holds one of its ports', async () => {
    const base = await freeBasePort(5);
    const squatter = createNetServer().listen(base + 3, '127.0.0.1');
    await new Promise((r) => squatter.once('listening', r));
    try {
      const dir = fresh();
      const r = spawnSync(process.execPath, [CLI, 'dev', '--dir', dir, '--base-port', String(base + 1)], {
        encoding: 'utf8',
        timeout: 30_000,
      });
      expect(r.status).toBe(1);
      expect(r.stderr).toContain(`127.0.0.1:${base + 3} (server 3 of ${dir}) is taken by another process`);
      // Nothing was started: the free ports stay free.
      await expect(fetch(`http://127.0.0.1:${base + 1}/healthz`)).rejects.toThrow();
    } finally {
      squatter.close();
    }
  }, 60_000);
});

async function waitFor(url: string): Promise<void> {
  for (let i = 0; i < 400; i++) {
    try {
      if ((await fetch(url)).ok) return;
    } catch {
      // not up yet
    }
    await sleep(50);
  }
  throw new Error(`${url} never answered`);
}
