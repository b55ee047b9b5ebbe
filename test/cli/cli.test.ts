/**
 * The `powerstore` command, as a user runs it: the built bin against a real cluster.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { connect, Identity } from '@powerstore/client';
import { CliCluster, ensureBuilt, OPEN_WRITERS, ROOT } from '../server/harness.js';

const BIN = join(ROOT, 'packages/cli/dist/cli.js');
let cluster: CliCluster;

interface Run {
  code: number | null;
  stdout: Buffer;
  stderr: string;
}

function run(args: readonly string[], options: { input?: Uint8Array; env?: Record<string, string>; cwd?: string } = {}): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], { cwd: options.cwd ?? cluster.dir, env: { ...process.env, ...options.env } });
    const out: Buffer[] = [];
    let err = '';
    child.stdout.on('data', (d: Buffer) => out.push(d));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout: Buffer.concat(out), stderr: err }));
    child.stdin.end(options.input ?? new Uint8Array(0));
  });
}

/** Keys per owner and server (init --quota-keys). */
const QUOTA_KEYS = 6;
/** What `powerstore id --json` prints. */
interface IdJson {
  readonly namespace: string;
  readonly ownerId: string;
  readonly publicKey: string;
  readonly file: string;
}
/** What `powerstore stat --json` prints (the fields these tests read). */
interface StatJson {
  readonly writer: { readonly publicKey: string; readonly ownerId: string };
  readonly timestamp: { readonly num: number };
  readonly size: number;
  readonly encrypted: boolean;
}
const parse = <T>(text: string | Buffer): T => JSON.parse(text.toString()) as T;
/** A home of its own for `powerstore id`: $XDG_CONFIG_HOME/powerstore/identity.json. */
let home: string;
const env = () => ({ XDG_CONFIG_HOME: home });
/** The cluster file, and the admin identity (which may write any key). */
const files = () => ['--cluster', join(cluster.dir, 'cluster.json'), '--identity', join(cluster.dir, 'admin.json')];

beforeAll(async () => {
  await ensureBuilt();
  cluster = await CliCluster.create(1, [], [...OPEN_WRITERS, '--quota-keys', String(QUOTA_KEYS)]);
  await cluster.startAll();
  home = mkdtempSync(join(tmpdir(), 'powerstore-cli-home-'));
}, 240_000);

afterAll(async () => {
  await cluster?.stop();
  if (home) rmSync(home, { recursive: true, force: true });
});

it('puts a file and gets it back byte for byte, with a progress bar for large values', async () => {
  const value = randomBytes(3 * 1024 * 1024 + 17);
  writeFileSync(join(cluster.dir, 'in.bin'), value);
  const put = await run([...files(), 'put', 'photos/cat.jpg', 'in.bin']);
  expect(put.code, put.stderr).toBe(0);
  expect(put.stderr).toContain(`stored ${value.length} bytes under "photos/cat.jpg"`);
  expect(put.stderr).toMatch(/put photos\/cat\.jpg \[=+\] 100%/);
  const get = await run([...files(), 'get', 'photos/cat.jpg', 'out.bin']);
  expect(get.code, get.stderr).toBe(0);
  expect(Buffer.compare(readFileSync(join(cluster.dir, 'out.bin')), value)).toBe(0);
});

it('reads standard input and writes standard output, with cluster and identity from the environment', async () => {
  const env = { POWERSTORE_CLUSTER: join(cluster.dir, 'cluster.json'), POWERSTORE_IDENTITY: join(cluster.dir, 'admin.json') };
  expect((await run(['put', 'note', '-'], { input: Buffer.from('hello\n'), env })).code).toBe(0);
  const get = await run(['get', 'note'], { env });
  expect(get.stdout.toString()).toBe('hello\n');
});

it('id creates a 0600 identity once and prints it; @/ keys land in its namespace, encrypted; others read them with a capability', async () => {
  const created = await run(['id', '--json'], { env: env() });
  expect(created.code, created.stderr).toBe(0);
  const me = parse<IdJson>(created.stdout);
  expect(me.namespace).toBe(`~${me.ownerId}/`);
  expect(statSync(me.file).mode & 0o777).toBe(0o600);
  expect(parse<IdJson>((await run(['id', '--json'], { env: env() })).stdout).publicKey).toBe(me.publicKey);
  const cl = ['--cluster', join(cluster.dir, 'cluster.json')];
  const put = await run([...cl, 'put', '@/notes/today', '-'], { input: Buffer.from('mine'), env: env() });
  expect(put.code, put.stderr).toBe(0);
  expect(put.stderr).toContain(`under "${me.namespace}notes/today"`);
  expect((await run([...cl, 'get', '@/notes/today'], { env: env() })).stdout.toString()).toBe('mine');
  // Another identity (here the admin) gets NOT_AUTHORIZED (exit 6), not ciphertext…
  const denied = await run([...files(), 'get', `${me.namespace}notes/today`]);
  expect({ code: denied.code, stdout: denied.stdout.length }).toEqual({ code: 6, stdout: 0 });
  expect(denied.stderr).toContain('NOT_AUTHORIZED');
  // …and the value with a capability for the prefix, which covers no other prefix.
  const shared = await run([...cl, 'share', '@/notes/'], { env: env() });
  expect(shared.code, shared.stderr).toBe(0);
  const cap = shared.stdout.toString().trim();
  expect(cap).toMatch(/^psr1\.[A-Za-z0-9_-]+$/);
  expect((await run([...files(), '--cap', cap, 'get', `${me.namespace}notes/today`])).stdout.toString()).toBe('mine');
  await run([...cl, 'put', '@/notes2/x', '-'], { input: Buffer.from('other'), env: env() });
  expect((await run([...files(), '--cap', cap, 'get', `${me.namespace}notes2/x`])).code).toBe(6);
  // --public values are plaintext: anyone reads them.
  expect((await run([...cl, 'put', '--public', '@/site/index.html', '-'], { input: Buffer.from('<p>hi'), env: env() })).code).toBe(0);
  expect((await run([...files(), 'get', `${me.namespace}site/index.html`])).stdout.toString()).toBe('<p>hi');
  const stat = parse<StatJson>((await run([...cl, 'stat', '@/notes/today', '--json'], { env: env() })).stdout);
  expect(stat.writer).toMatchObject({ publicKey: me.publicKey, ownerId: me.ownerId });
  expect(stat).toMatchObject({ size: 4, encrypted: true });
  // The identity file is all it takes to read them back: a copy of it reads the same.
  const restored = join(home, 'restored.json');
  writeFileSync(restored, readFileSync(me.file), { mode: 0o600 });
  expect((await run([...cl, '--identity', restored, 'get', '@/notes/today'])).stdout.toString()).toBe('mine');
  // Outside its namespace, without a grant: exit 6, and nothing was sent.
  const refused = await run([...cl, 'put', 'photos/not-mine', '-'], { input: Buffer.from('x'), env: env() });
  expect(refused.code).toBe(6);
  expect(refused.stderr).toContain('NOT_AUTHORIZED');
});

it('grant lets another identity write a prefix of the granter’s namespace; the grant names the cluster and expiry', async () => {
  const cl = ['--cluster', join(cluster.dir, 'cluster.json')];
  const me = parse<IdJson>((await run(['id', '--json'], { env: env() })).stdout);
  const bobFile = join(home, 'bob.json');
  const bob = parse<IdJson>((await run(['--identity', bobFile, 'id', '--json'])).stdout);
  const grantFile = join(home, 'grant.json');
  const issued = await run([...cl, 'grant', bob.publicKey, '@/shared/', '--expires', '1h', '--out', grantFile], { env: env() });
  expect(issued.code, issued.stderr).toBe(0);
  expect(JSON.parse(readFileSync(grantFile, 'utf8'))).toMatchObject({
    kind: 'powerstore-grant',
    prefix: `${me.namespace}shared/`,
    grantee: bob.publicKey,
  });
  const asBob = [...cl, '--identity', bobFile, '--grant', grantFile];
  // Bob can write there, but only encrypt for it with the owner's capability (or write --public).
  const noKey = await run([...asBob, 'put', `${me.namespace}shared/from-bob`, '-'], { input: Buffer.from('hi') });
  expect(noKey.code).toBe(6);
  expect(noKey.stderr).toContain('cannot encrypt');
  const cap = (await run([...cl, 'share', '@/shared/'], { env: env() })).stdout.toString().trim();
  const put = await run([...asBob, '--cap', cap, 'put', `${me.namespace}shared/from-bob`, '-'], { input: Buffer.from('hi') });
  expect(put.code, put.stderr).toBe(0);
  expect((await run([...cl, 'get', '@/shared/from-bob'], { env: env() })).stdout.toString()).toBe('hi');
  expect((await run([...asBob, 'put', `${me.namespace}private`, '-'], { input: Buffer.from('no') })).code).toBe(6);
  expect((await run([...cl, 'grant', bob.publicKey, 'shared/', '--expires', '1h'], { env: env() })).code).toBe(2);
  expect((await run([...cl, 'grant', bob.publicKey, '@/x/', '--expires', 'yesterday'], { env: env() })).code).toBe(2);
});

it(`exits 7 once the owner's quota (${QUOTA_KEYS} keys) is reached`, async () => {
  const cl = ['--cluster', join(cluster.dir, 'cluster.json'), '--identity', join(home, 'quota.json')];
  await run([...cl, 'id']);
  for (let i = 0; i < QUOTA_KEYS; i++) expect((await run([...cl, 'put', `@/q${i}`, '-'], { input: Buffer.from('x') })).code).toBe(0);
  const over = await run([...cl, 'put', '@/one-more', '-'], { input: Buffer.from('x') });
  expect(over.code).toBe(7);
  expect(over.stderr).toContain('QUOTA_EXCEEDED');
});

it('reports stat, deletes with rm, and exits 3 for a missing key', async () => {
  await run([...files(), 'put', 'doomed', '-'], { input: Buffer.from('x') });
  const stat = await run([...files(), 'stat', 'doomed', '--json']);
  expect(stat.code).toBe(0);
  const s = parse<StatJson>(stat.stdout);
  expect(s).toMatchObject({ key: 'doomed', exists: true, size: 1, misbehaving: [] });
  expect(s.timestamp.num).toBeGreaterThan(0);
  expect((await run([...files(), 'rm', 'doomed'])).code).toBe(0);
  const gone = await run([...files(), 'get', 'doomed']);
  expect(gone.code).toBe(3);
  expect(gone.stderr).toContain('no value under "doomed"');
  const human = await run([...files(), 'stat', 'doomed']);
  expect(human.code).toBe(3);
  expect(human.stdout.toString()).toMatch(/state: +deleted/);
});

it('lists keys with ls: a prefix, @/ for your namespace, --json, --limit', async () => {
  const cl = ['--cluster', join(cluster.dir, 'cluster.json'), '--identity', join(home, 'lister.json')];
  await run([...cl, 'id']);
  for (const [name, body] of [
    ['ls/b', 'bb'],
    ['ls/a', 'a'],
    ['ls2/c', 'ccc'],
  ]) {
    expect((await run([...cl, 'put', `@/${name}`, '-'], { input: Buffer.from(body!) })).code).toBe(0);
  }
  const human = await run([...cl, 'ls', '@/ls/']);
  expect(human.code).toBe(0);
  expect(
    human.stdout
      .toString()
      .trim()
      .split('\n')
      .map((l) => l.trim().split(/ +/)),
  ).toEqual([
    // Plaintext sizes, as stat reports them (values are stored encrypted, 64 bytes longer).
    ['1', expect.stringMatching(/\/ls\/a$/)],
    ['2', expect.stringMatching(/\/ls\/b$/)],
  ]);
  expect(human.stderr).toContain('2 keys');
  const json = await run([...cl, 'ls', '@/', '--json', '--limit', '2']);
  const lines = json.stdout
    .toString()
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { key: string; size: number; storedSize: number; encrypted: boolean });
  expect(lines.map((l) => [l.key.slice(l.key.indexOf('/') + 1), l.size, l.storedSize, l.encrypted])).toEqual([
    ['ls/a', 1, 65, true],
    ['ls/b', 2, 66, true],
  ]);
  const zero = await run([...cl, 'ls', '@/', '--limit', '0']);
  expect(zero.code).toBe(2);
  // The option is named, and one line of advice follows, not the whole help.
  expect(zero.stderr).toContain("error: option '--limit <count>' argument '0' is invalid. expected a positive integer");
  expect(zero.stderr).not.toContain('Usage:');
});

it('exits 8 for a value that fails authentication, and prints no bytes of it', async () => {
  const idFile = join(home, 'tamper.json');
  const cl = ['--cluster', join(cluster.dir, 'cluster.json'), '--identity', idFile];
  const me = parse<IdJson>((await run([...cl, 'id', '--json'])).stdout);
  expect((await run([...cl, 'put', '@/sealed', '-'], { input: Buffer.from('top secret') })).code).toBe(0);
  // Only the owner can rewrite its namespace: it flips a ciphertext byte, stored as is.
  const store = await connect({
    cluster: parse<object>(readFileSync(join(cluster.dir, 'cluster.json'))),
    identity: await Identity.fromJSON(parse<object>(readFileSync(idFile))),
  });
  try {
    const key = `${me.namespace}sealed`;
    const sealed = (await store.get(key, { raw: true }))!.slice();
    sealed[sealed.length - 20]! ^= 0x80;
    await store.put(key, sealed, { raw: true });
  } finally {
    store.close();
  }
  const got = await run([...cl, 'get', '@/sealed']);
  expect(got.code).toBe(8);
  expect(got.stdout.length).toBe(0);
  expect(got.stderr).toContain('TAMPERED');
});

it('exits 5 without an identity for a write, 2 on a usage error, 5 on a broken cluster file', async () => {
  // From a directory with no .powerstore/ and a home with no identity to fall back on.
  const empty = mkdtempSync(join(tmpdir(), 'powerstore-cli-cwd-'));
  const noIdentity = await run(['--cluster', join(cluster.dir, 'cluster.json'), 'put', 'k', '-'], {
    cwd: empty,
    env: { XDG_CONFIG_HOME: empty },
  });
  rmSync(empty, { recursive: true, force: true });
  expect(noIdentity.code).toBe(5);
  expect(noIdentity.stderr).toContain("writing needs an identity: run 'powerstore id'");
  expect((await run([...files(), 'frobnicate'])).code).toBe(2);
  const soon = await run([...files(), '--timeout', 'soon', 'get', 'k']);
  expect(soon.code).toBe(2);
  expect(soon.stderr).toContain("option '--timeout <ms>' argument 'soon' is invalid. expected a positive integer");
  writeFileSync(join(cluster.dir, 'broken.json'), '{ nope');
  const broken = await run(['--cluster', join(cluster.dir, 'broken.json'), 'get', 'k']);
  expect(broken.code).toBe(5);
  expect(broken.stderr).toContain('is not valid JSON');
});

it('exits 5 for a cluster or grant file that is JSON but not valid, and 2 for other bad arguments (by the error, not its words)', async () => {
  const json = cluster.clusterJson() as { servers: { publicKey: string }[] };
  // A 16-byte server key: the servers refuse this file, so the CLI must too.
  const shortKey = join(home, 'short-key-cluster.json');
  writeFileSync(
    shortKey,
    JSON.stringify({
      ...json,
      servers: json.servers.map((s, i) => (i === 1 ? { ...s, publicKey: Buffer.alloc(16, 1).toString('base64url') } : s)),
    }),
  );
  const badCluster = await run(['--cluster', shortKey, 'get', 'k']);
  expect(badCluster.code).toBe(5);
  expect(badCluster.stderr).toContain('field "servers[1].publicKey"');
  const notAGrant = join(home, 'not-a-grant.json');
  writeFileSync(notAGrant, '{}');
  const badGrant = await run([...files(), '--grant', notAGrant, 'get', 'k']);
  expect(badGrant.code).toBe(5);
  expect(badGrant.stderr).toContain('INVALID_ARGUMENT: grants[0]');
  // INVALID_ARGUMENT about the key is a usage error, whatever its message says.
  const longKey = await run([...files(), 'get', 'x'.repeat(1100)]);
  expect(longKey.code).toBe(2);
  expect(longKey.stderr).toContain('INVALID_ARGUMENT: key is 1100 bytes');
});

it('a broken identity file is reported by file, line and column, never with a piece of its secret key', async () => {
  const file = join(home, 'broken-identity.json');
  await run(['--identity', file, 'id']);
  const text = readFileSync(file, 'utf8');
  const secret = parse<{ secretKey: string }>(text).secretKey;
  const at = text.indexOf(secret);
  // Every 10-character piece of the key, as in the file, in base64 and in hex.
  const bytes = Buffer.from(secret, 'base64url');
  const pieces = [secret, bytes.toString('base64'), bytes.toString('hex')].flatMap((t) =>
    Array.from({ length: t.length - 9 }, (_, i) => t.slice(i, i + 10)),
  );
  for (const content of [
    text.slice(0, at + 20),
    text.replace(`"${secret}"`, `"${secret}",`),
    text.replace(`"${secret}"`, `"${secret}" x`),
    `["${secret}",]`,
  ]) {
    writeFileSync(file, content, { mode: 0o600 });
    for (const args of [['id'], ['--cluster', join(cluster.dir, 'cluster.json'), 'put', '@/k', '-']]) {
      const r = await run(['--identity', file, ...args]);
      expect(r.code, content).toBe(5);
      expect(r.stderr).toContain(`the identity file ${file} is not valid JSON`);
      if (!content.startsWith('[')) expect(r.stderr).toMatch(/\(at line \d+, column \d+\)/);
      expect(
        pieces.filter((p) => r.stderr.includes(p) || r.stdout.toString().includes(p)),
        r.stderr,
      ).toEqual([]);
    }
  }
  // The key in the wrong field: named, not quoted.
  writeFileSync(file, JSON.stringify({ ...JSON.parse(text), version: secret }), { mode: 0o600 });
  const misplaced = await run(['--identity', file, 'id']);
  expect(misplaced.code).toBe(5);
  expect(misplaced.stderr).toContain('"version"');
  expect(pieces.filter((p) => misplaced.stderr.includes(p))).toEqual([]);
});

it('warns in one line, and goes on, when others may read the identity file', async () => {
  const file = join(home, 'shared-identity.json');
  expect((await run(['--identity', file, 'id'])).stderr).toBe('');
  chmodSync(file, 0o644);
  const r = await run(['--identity', file, 'id', '--json']);
  expect(r.code).toBe(0);
  expect(parse<IdJson>(r.stdout).file).toBe(file);
  const lines = r.stderr.split('\n').filter(Boolean);
  expect(lines).toHaveLength(1);
  expect(lines[0]).toContain(file);
  expect(lines[0]).toContain('0644');
  expect(lines[0]).toContain(`chmod 600 ${file}`);
  chmodSync(file, 0o600);
  expect((await run(['--identity', file, 'id'])).stderr).toBe('');
});

it("never writes with an identity planted in the current directory's .powerstore/ without saying so", async () => {
  // Someone else's directory: their identity in .powerstore/identity.json (they hold its
  // secret, so they read whatever is written with it) beside a cluster file.
  const theirs = mkdtempSync(join(tmpdir(), 'powerstore-cli-theirs-'));
  const planted = join(theirs, '.powerstore', 'identity.json');
  const attacker = parse<IdJson>((await run(['--identity', planted, 'id', '--json'], { cwd: theirs })).stdout);
  writeFileSync(join(theirs, '.powerstore', 'cluster.json'), readFileSync(join(cluster.dir, 'cluster.json')));
  // The user, with an identity of their own, and another with none.
  const myHome = mkdtempSync(join(tmpdir(), 'powerstore-cli-victim-'));
  const me = parse<IdJson>((await run(['id', '--json'], { env: { XDG_CONFIG_HOME: myHome } })).stdout);
  const bareHome = mkdtempSync(join(tmpdir(), 'powerstore-cli-bare-'));
  try {
    const inTheirs = { cwd: theirs, env: { XDG_CONFIG_HOME: myHome } };
    // Your own identity wins, for writes and reads, and the CLI says which file it passed over.
    const put = await run(['put', '@/diary', '-'], { ...inTheirs, input: Buffer.from('dear diary') });
    expect(put.code, put.stderr).toBe(0);
    expect(put.stderr).toContain(`under "${me.namespace}diary"`);
    expect(put.stderr).toContain(`not using ${planted}`);
    expect((await run(['get', '@/diary'], inTheirs)).stdout.toString()).toBe('dear diary');
    expect((await run(['--identity', planted, 'get', `${me.namespace}diary`], { cwd: theirs })).code).toBe(6);

    // No identity of your own, and a cluster named elsewhere (not this directory's): the
    // planted identity is not taken, a write needs one (exit 5).
    const bare = { cwd: theirs, env: { XDG_CONFIG_HOME: bareHome } };
    const elsewhere = await run(['--cluster', join(cluster.dir, 'cluster.json'), 'put', '@/diary', '-'], {
      ...bare,
      input: Buffer.from('x'),
    });
    expect(elsewhere.code, elsewhere.stderr).toBe(5);
    expect(elsewhere.stderr).toContain("writing needs an identity: run 'powerstore id'");
    expect(elsewhere.stderr).toContain(`not using ${planted}`);
    const viaEnv = await run(['put', '@/diary', '-'], {
      cwd: theirs,
      env: { XDG_CONFIG_HOME: bareHome, POWERSTORE_CLUSTER: join(cluster.dir, 'cluster.json') },
      input: Buffer.from('x'),
    });
    expect(viaEnv.code, viaEnv.stderr).toBe(5);

    // No identity of your own and this directory's own cluster (a `powerstore-server dev`
    // directory): its identity is used, with a warning naming the file.
    const dev = await run(['put', '@/notes', '-'], { ...bare, input: Buffer.from('dev') });
    expect(dev.code, dev.stderr).toBe(0);
    expect(dev.stderr).toContain(`under "${attacker.namespace}notes"`);
    const warning = dev.stderr.split('\n').find((l) => l.includes('warning'));
    expect(warning).toContain(`using the identity ${planted} from this directory`);

    // Asked for by name (--identity, POWERSTORE_IDENTITY), it is used without a warning.
    for (const named of [
      await run(['--identity', '.powerstore/identity.json', 'get', '@/notes'], inTheirs),
      await run(['get', '@/notes'], { cwd: theirs, env: { XDG_CONFIG_HOME: myHome, POWERSTORE_IDENTITY: planted } }),
    ]) {
      expect(named.code, named.stderr).toBe(0);
      expect(named.stdout.toString()).toBe('dev');
      expect(named.stderr).toBe('');
    }
  } finally {
    for (const dir of [theirs, myHome, bareHome]) rmSync(dir, { recursive: true, force: true });
  }
});

it('refuses plaintext ws:// to hosts that are not loopback unless --allow-insecure', async () => {
  // 192.0.2.0/24 is reserved for documentation: nobody answers there.
  const json = cluster.clusterJson() as { servers: { url: string }[] };
  const remote = join(home, 'remote-cluster.json');
  writeFileSync(remote, JSON.stringify({ ...json, servers: json.servers.map((s, i) => ({ ...s, url: `ws://192.0.2.1:${7001 + i}` })) }));
  const refused = await run(['--cluster', remote, '--timeout', '1000', 'get', 'k']);
  expect(refused.code).toBe(5);
  expect(refused.stderr).toMatch(/INVALID_ARGUMENT: cluster: s1 ws:\/\/192\.0\.2\.1:7001, .*plaintext.*wss:\/\/.*--allow-insecure/);
  const allowed = await run(['--cluster', remote, '--allow-insecure', '--timeout', '1000', 'get', 'k']);
  expect(allowed.code, allowed.stderr).toBe(4);
  expect(allowed.stderr).not.toContain('plaintext');
  expect((await run(['--help'])).stdout.toString()).toContain('--allow-insecure');
  // Loopback needs nothing.
  expect((await run([...files(), 'get', 'note'])).code).toBe(0);
});

it('exits 4 and names the servers when a quorum is unreachable', async () => {
  await cluster.signal(3, 'SIGKILL');
  await cluster.signal(4, 'SIGKILL');
  try {
    const r = await run([...files(), '--timeout', '2000', 'get', 'note']);
    expect(r.code).toBe(4);
    // At once, even before the other two connected: two refusing servers leave no quorum.
    expect(r.stderr).toMatch(/need 3 of 4 servers, \d reachable: .*s3 refused, s4 refused/);
  } finally {
    await Promise.all([cluster.start(3), cluster.start(4)]);
  }
});

it('exits 0 quietly when the reader of standard output goes away early', async () => {
  await run([...files(), 'put', 'long', 'in.bin']);
  const child = spawn(process.execPath, [BIN, ...files(), 'get', 'long'], { cwd: cluster.dir });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  child.stdout.once('data', () => child.stdout.destroy());
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  expect(stderr).not.toContain('EPIPE');
  expect(code).toBe(0);
});
