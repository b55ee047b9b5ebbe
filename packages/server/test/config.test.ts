import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { identityFromJson, ownerIdOf, parseClusterFile } from '@powerstore/protocol';
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import { acceptedClusterFiles, refusedClusterFiles } from '@powerstore/protocol/testing';
import {
  ConfigError,
  DEFAULT_QUOTA,
  initCluster,
  loadClusterFile,
  loadPolicy,
  loadServerConfig,
  reloadClusterFile,
  rotateServerKey,
} from '../src/index.js';

const root = mkdtempSync(join(tmpdir(), 'powerstore-config-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let dirs = 0;
const fresh = () => join(root, `c${dirs++}`);

describe('cluster files', () => {
  it('init writes a public cluster file, 0600 server files and an admin identity that load back', async () => {
    const dir = fresh();
    const r = await initCluster({ t: 2, dir, basePort: 9100 });
    expect(r.serverFiles).toHaveLength(7);
    const cluster = loadClusterFile(r.clusterFile);
    expect(cluster.config).toEqual({ t: 2, n: 7 });
    expect(cluster.servers[6]).toMatchObject({ id: 7, url: 'ws://127.0.0.1:9106' });
    // Closed by default: only the owners the file lists (none yet) and the admin may write.
    expect(cluster.policy).toMatchObject({ writers: 'owners', owners: [], quotas: { default: DEFAULT_QUOTA } });
    expect(loadClusterFile((await initCluster({ t: 1, dir: fresh(), writers: 'open' })).clusterFile).policy.writers).toBe('open');
    expect(readFileSync(r.clusterFile, 'utf8')).not.toMatch(/secret/i);
    expect(statSync(r.clusterFile).mode & 0o777).toBe(0o644);
    for (const f of [...r.serverFiles, r.adminFile]) expect(statSync(f).mode & 0o777, f).toBe(0o600);
    const s3 = await loadServerConfig(r.serverFiles[2]!);
    expect(s3).toMatchObject({ id: 3, index: 2, port: 9102, host: '127.0.0.1', clusterFile: r.clusterFile });
    expect(s3.cluster.file.id).toBe(r.cluster.id);
    // The admin identity is the cluster's admin key; no server file holds it.
    const admin = identityFromJson(JSON.parse(readFileSync(r.adminFile, 'utf8')));
    expect(cluster.identity.admin).toEqual(admin.publicKey);
    const crypto = createCryptoProvider();
    expect((JSON.parse(readFileSync(r.adminFile, 'utf8')) as { ownerId: string }).ownerId).toBe(ownerIdOf(crypto, admin.publicKey));
    for (const f of r.serverFiles)
      expect(readFileSync(f, 'utf8')).not.toContain((JSON.parse(readFileSync(r.adminFile, 'utf8')) as { secretKey: string }).secretKey);
  });

  it('init writes wss:// for a host that is not loopback, and says to start the servers with a certificate', async () => {
    const remote = await initCluster({ t: 1, dir: fresh(), host: '10.1.2.3' });
    expect(remote.tls).toBe(true);
    expect(remote.cluster.servers.map((s) => s.url)).toEqual([
      'wss://10.1.2.3:7001',
      'wss://10.1.2.3:7002',
      'wss://10.1.2.3:7003',
      'wss://10.1.2.3:7004',
    ]);
    const notes = remote.notes.join('\n');
    expect(notes).toContain('--tls-cert');
    expect(notes).toContain('--tls-key');
    expect(notes).toContain('subjectAltName=IP:10.1.2.3');
    expect(notes).toContain('--insecure');
    expect(remote.warnings).toEqual([]);
    expect((await initCluster({ t: 1, dir: fresh(), host: 'store.example.com' })).cluster.servers[0]!.url).toBe(
      'wss://store.example.com:7001',
    );
    // Plaintext on request, with a warning.
    const plain = await initCluster({ t: 1, dir: fresh(), host: '10.1.2.3', tls: false });
    expect(plain.tls).toBe(false);
    expect(plain.cluster.servers[0]!.url).toBe('ws://10.1.2.3:7001');
    expect(plain.notes).toEqual([]);
    expect(plain.warnings.join('\n')).toMatch(/ws:\/\/ URLs to 10\.1\.2\.3 are plaintext.*allowInsecure/);
    // Loopback stays ws:// and quiet.
    for (const host of ['127.0.0.1', 'localhost', '::1', '127.0.0.2']) {
      const local = await initCluster({ t: 1, dir: fresh(), host });
      expect(local.cluster.servers[0]!.url, host).toMatch(/^ws:\/\//);
      expect([...local.notes, ...local.warnings], host).toEqual([]);
    }
    expect((await initCluster({ t: 1, dir: fresh(), host: '::1' })).cluster.servers[0]!.url).toBe('ws://[::1]:7001');
  });

  it('init --hosts gives each server a machine of its own: its host in the URL, one port, listening on all interfaces', async () => {
    const hosts = ['ps1.example.com', 'ps2.example.com', '10.0.0.3', '2001:db8::4'];
    const r = await initCluster({ t: 1, dir: fresh(), hosts, basePort: 7443 });
    expect(r.tls).toBe(true);
    expect(r.cluster.servers.map((s) => s.url)).toEqual([
      'wss://ps1.example.com:7443',
      'wss://ps2.example.com:7443',
      'wss://10.0.0.3:7443',
      'wss://[2001:db8::4]:7443',
    ]);
    for (const [i, file] of r.serverFiles.entries()) {
      expect(JSON.parse(readFileSync(file, 'utf8')), file).toMatchObject({ id: i + 1, host: '0.0.0.0', port: 7443 });
      expect((await loadServerConfig(file)).cluster.servers[i]!.url).toBe(r.cluster.servers[i]!.url);
    }
    const notes = r.notes.join('\n');
    for (const h of ['DNS:ps1.example.com', 'DNS:ps2.example.com', 'IP:10.0.0.3', 'IP:2001:db8::4'])
      expect(notes).toContain(`subjectAltName=${h}`);
    expect(notes).toContain('0.0.0.0');
    // One host per server, exactly; and not beside --host.
    await expect(initCluster({ t: 1, dir: fresh(), hosts: hosts.slice(0, 3) })).rejects.toThrow(/give 4 hosts, one per server, not 3/);
    await expect(initCluster({ t: 1, dir: fresh(), hosts, host: 'a' })).rejects.toThrow(/not both/);
    await expect(initCluster({ t: 1, dir: fresh(), hosts: ['a', 'b', 'c d', 'e'] })).rejects.toThrow(/not a host name/);
  });

  it('refuses to overwrite a cluster unless forced', async () => {
    const dir = fresh();
    const first = await initCluster({ t: 1, dir });
    await expect(initCluster({ t: 1, dir })).rejects.toMatchObject({ code: 'CONFIG_EXISTS' });
    const again = await initCluster({ t: 1, dir, force: true });
    expect(again.cluster.id).not.toBe(first.cluster.id);
  });

  it('names the file and the field it rejects, and never echoes a secret', async () => {
    const dir = fresh();
    const r = await initCluster({ t: 1, dir });
    const file = r.serverFiles[0]!;
    const good = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
    const other = JSON.parse(readFileSync(r.serverFiles[1]!, 'utf8')) as Record<string, unknown>;
    const cases: [Record<string, unknown> | string, string | undefined][] = [
      [{ ...good, secretKey: 'abc' }, 'secretKey'],
      [{ ...good, secretKey: undefined }, 'secretKey'],
      [{ ...good, secretKey: other.secretKey }, 'secretKey'],
      [{ ...good, port: 70000 }, 'port'],
      [{ ...good, id: 5 }, 'id'],
      [{ ...good, version: 3 }, 'version'],
      [{ ...good, host: 'a b' }, 'host'],
      [{ version: 1, id: 1, t: 1, n: 4, host: 'h', port: 1, key: '00' }, 'version'],
      [`{ "secretKey": "${String(good.secretKey)}", not json`, undefined],
    ];
    for (const [content, field] of cases) {
      writeFileSync(file, typeof content === 'string' ? content : JSON.stringify(content));
      let err: unknown;
      try {
        await loadServerConfig(file);
      } catch (e) {
        err = e;
      }
      expect(err, JSON.stringify(content)).toBeInstanceOf(ConfigError);
      expect(err).toMatchObject({ code: 'CONFIG_INVALID', file, field });
      expect((err as Error).message).toContain(file);
      if (field) expect((err as Error).message).toContain(`"${field}"`);
      expect((err as Error).message).not.toContain(String(good.secretKey).slice(0, 12));
    }
    await expect(loadServerConfig(join(dir, 'missing.json'))).rejects.toMatchObject({ code: 'CONFIG_MISSING' });
    writeFileSync(r.clusterFile, JSON.stringify({ version: 1, t: 1, n: 4, servers: [{ id: 1, url: 'http://x' }] }));
    expect(() => loadClusterFile(r.clusterFile)).toThrow(expect.objectContaining({ field: 'version' }));
  });

  // The protocol's own cases (packages/protocol/test/cluster-file-cases.ts): the server
  // judges every cluster file as the protocol's validator (and so every client) does, and
  // says which file.
  it('accepts and refuses the same cluster files as the protocol and the client, naming the file and field', () => {
    const dir = fresh();
    mkdirSync(dir);
    const file = join(dir, 'cluster.json');
    for (const [name, json] of acceptedClusterFiles()) {
      writeFileSync(file, JSON.stringify(json));
      expect(loadClusterFile(file).file, name).toEqual(parseClusterFile(json).file);
    }
    for (const [name, json, field] of refusedClusterFiles()) {
      writeFileSync(file, JSON.stringify(json));
      let err: unknown;
      try {
        loadClusterFile(file);
      } catch (e) {
        err = e;
      }
      expect(err, name).toBeInstanceOf(ConfigError);
      expect(err, name).toMatchObject({ code: 'CONFIG_INVALID', file, field });
      expect((err as Error).message, name).toContain(file);
      if (field) expect((err as Error).message, name).toContain(`field "${field}"`);
    }
  });

  it('rotate-key replaces one server key in a new epoch; the retired server file is refused with a message saying so', async () => {
    const dir = fresh();
    const r = await initCluster({ t: 1, dir, basePort: 9200 });
    const before = loadClusterFile(r.clusterFile);
    const oldFile = readFileSync(r.serverFiles[1]!, 'utf8');
    const retiredFile = join(dir, 'server-2.retired.json');
    writeFileSync(retiredFile, oldFile, { mode: 0o600 });
    const rotated = await rotateServerKey({ dir, id: 2 });
    expect(rotated).toMatchObject({
      epoch: 1,
      serverFile: r.serverFiles[1],
      host: '127.0.0.1',
      port: 9201,
      retired: before.file.servers[1]!.publicKey,
    });
    const after = loadClusterFile(r.clusterFile);
    expect(after.file.epoch).toBe(1);
    expect(after.file.servers[1]).toMatchObject({
      publicKey: rotated.publicKey,
      keys: [
        { epoch: 0, publicKey: before.file.servers[1]!.publicKey },
        { epoch: 1, publicKey: rotated.publicKey },
      ],
    });
    expect(after.file.servers.filter((_, i) => i !== 1)).toEqual(before.file.servers.filter((_, i) => i !== 1));
    expect(statSync(r.serverFiles[1]!).mode & 0o777).toBe(0o600);
    expect(readFileSync(r.serverFiles[1]!, 'utf8')).not.toBe(oldFile);
    // A running server accepts the new file (it only adds an epoch).
    expect(reloadClusterFile(r.clusterFile, before).identity.epoch).toBe(1);
    // The new server file loads; the old one names its key as retired; the others still load.
    expect((await loadServerConfig(r.serverFiles[1]!)).cluster.identity.epoch).toBe(1);
    const err: unknown = await loadServerConfig(retiredFile, r.clusterFile).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'CONFIG_INVALID', field: 'secretKey' });
    expect((err as Error).message).toMatch(/server 2's retired key \(epochs 0\.\.0\), replaced in epoch 1/);
    expect((err as Error).message).not.toContain((JSON.parse(oldFile) as { secretKey: string }).secretKey);
    expect((await loadServerConfig(r.serverFiles[0]!)).id).toBe(1);
    // Again, for another server, moving it: epoch 2 keeps epoch 1.
    const moved = await rotateServerKey({ dir, id: 4, url: 'ws://127.0.0.2:9300' });
    expect(moved).toMatchObject({ epoch: 2, host: '127.0.0.2', port: 9300 });
    const third = loadClusterFile(r.clusterFile);
    expect(third.file.servers[3]!.url).toBe('ws://127.0.0.2:9300');
    expect(third.file.servers[1]!.keys).toEqual(after.file.servers[1]!.keys);
    expect(reloadClusterFile(r.clusterFile, after).identity.epoch).toBe(2);
    // Nothing published may change: a file that rewrites epoch 0's key of server 2 is refused.
    const json = JSON.parse(readFileSync(r.clusterFile, 'utf8')) as { servers: { keys?: { epoch: number; publicKey: string }[] }[] };
    json.servers[1]!.keys![0]!.publicKey = third.file.servers[2]!.publicKey.replace(/^./, (ch) => (ch === 'A' ? 'B' : 'A'));
    writeFileSync(r.clusterFile, JSON.stringify(json));
    expect(() => reloadClusterFile(r.clusterFile, third)).toThrow(/key of server 2 in epoch 0 changed/);
    await expect(rotateServerKey({ dir: fresh(), id: 1 })).rejects.toMatchObject({ code: 'CONFIG_MISSING' });
    await expect(rotateServerKey({ dir, id: 5 })).rejects.toThrow(ConfigError);
  });

  it('a policy reload takes only the policy; anything else changed is refused', async () => {
    const r = await initCluster({ t: 1, dir: fresh() });
    const current = loadClusterFile(r.clusterFile);
    const json = JSON.parse(readFileSync(r.clusterFile, 'utf8')) as { policy: object };
    writeFileSync(r.clusterFile, JSON.stringify({ ...json, policy: { ...json.policy, writers: 'open' } }));
    expect(loadPolicy(r.clusterFile, current).writers).toBe('open');
    writeFileSync(r.clusterFile, JSON.stringify({ ...json, t: 2 }));
    expect(() => loadPolicy(r.clusterFile, current)).toThrow(ConfigError);
  });
});
