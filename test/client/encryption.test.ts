/**
 * Client-side encryption against a real cluster (`powerstore-server` processes on LevelDB):
 * round trips, readers without the key, tampered and swapped values, stripes of other
 * versions spliced into one value by a grantee, capabilities and key epochs, and what the
 * servers' disks hold: never the plaintext of an encrypted value (the same scan finds a
 * public value's).
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { ClassicLevel } from 'classic-level';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, Identity, PowerStoreError, STRIPE_BYTES, type Store } from '@powerstore/client';
import { grantFromJson } from '@powerstore/protocol';
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import { TestClient } from '../server/driver.js';
import { CliCluster, ensureBuilt } from '../server/harness.js';

let cluster: CliCluster;
let clusterFile: object;
const stores: Store[] = [];
const clients: TestClient[] = [];

async function open(
  options: { identity?: Identity | false; capabilities?: string[]; keyEpoch?: number; stripeBytes?: number } = {},
): Promise<Store> {
  const identity = options.identity === undefined ? await Identity.generate() : options.identity;
  const store = await connect({
    cluster: clusterFile,
    ...(identity ? { identity } : {}),
    ...(options.capabilities ? { capabilities: options.capabilities } : {}),
    ...(options.keyEpoch === undefined ? {} : { keyEpoch: options.keyEpoch }),
    ...(options.stripeBytes === undefined ? {} : { stripeBytes: options.stripeBytes }),
    timeoutMs: 15_000,
  });
  stores.push(store);
  return store;
}

const k = (store: Store, name: string) => `${store.namespace}${name}`;
const text = (b: Uint8Array | undefined) => (b === undefined ? undefined : new TextDecoder().decode(b));

async function failure(p: Promise<unknown>): Promise<PowerStoreError> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(PowerStoreError);
    return e as PowerStoreError;
  }
  throw new Error('resolved');
}

/** Bytes that never repeat a 4-byte run of a marker: LevelDB's Snappy keeps a marker in them verbatim. */
function randomBytes(n: number): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i += 65_536) crypto.getRandomValues(out.subarray(i, Math.min(n, i + 65_536)));
  return out;
}

/** `filler` with `marker` at 10 % and 70 % of it: in both data fragments at t = 1. */
function withMarker(marker: string, size: number): Uint8Array {
  const value = randomBytes(size);
  const m = new TextEncoder().encode(marker);
  value.set(m, Math.floor(size * 0.1));
  value.set(m, Math.floor(size * 0.7));
  return value;
}

/** Every file under `dir`. */
function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? filesUnder(path) : [path];
  });
}

/** Which servers' data directories hold `marker` anywhere in any file. */
function serversHolding(marker: string): number[] {
  const needle = Buffer.from(marker);
  return [1, 2, 3, 4].filter((id) => filesUnder(join(cluster.dir, `data-${id}`)).some((f) => readFileSync(f).includes(needle)));
}

beforeAll(async () => {
  await ensureBuilt();
  cluster = await CliCluster.create(1);
  await cluster.startAll();
  clusterFile = cluster.clusterJson();
}, 240_000);

afterAll(async () => {
  for (const s of stores) s.close();
  for (const c of clients) c.close();
  await cluster?.stop();
});

describe('encrypted by default', () => {
  it('round-trips values of every size through the cluster, and an identity restored from its file reads them', async () => {
    const identity = await Identity.generate();
    const store = await open({ identity });
    const values = [new Uint8Array(0), new TextEncoder().encode('héllo'), randomBytes(256 * 1024), randomBytes(1024 * 1024 + 13)];
    for (const [i, v] of values.entries()) await store.put(k(store, `v${i}`), v);
    // Buffer.compare: toEqual walks a MiB element by element for seconds.
    const same = (x: Uint8Array | undefined, y: Uint8Array) => x !== undefined && Buffer.compare(x, y) === 0;
    for (const [i, v] of values.entries()) expect(same(await store.get(k(store, `v${i}`)), v), `v${i}`).toBe(true);
    expect(await store.stat(k(store, 'v3'))).toMatchObject({ exists: true, size: values[3]!.length, encrypted: true });
    // What the servers hold is the envelope: larger by its overhead, and not the plaintext.
    const raw = (await store.get(k(store, 'v1'), { raw: true }))!;
    expect(raw.length).toBe(5 + 1 + 64);
    expect(Buffer.from(raw).includes(Buffer.from('héllo'))).toBe(false);
    const restored = await open({ identity: await Identity.fromJSON(JSON.parse(JSON.stringify(identity.toJSON()))) });
    for (const [i, v] of values.entries()) expect(same(await restored.get(k(store, `v${i}`)), v), `restored v${i}`).toBe(true);
    await store.delete(k(store, 'v1'));
    expect(await restored.get(k(store, 'v1'))).toBeUndefined();
  });

  it('refuses readers without the key with NOT_AUTHORIZED, never with the ciphertext', async () => {
    const owner = await open();
    const key = k(owner, 'diary/monday');
    await owner.put(key, 'dear diary');
    const other = await open();
    const anonymous = await open({ identity: false });
    for (const reader of [other, anonymous]) {
      const e = await failure(reader.get(key));
      expect(e.code).toBe('NOT_AUTHORIZED');
      expect(e.message).toContain('encrypted');
    }
    // stat needs no key: the size is the plaintext's.
    expect(await anonymous.stat(key)).toMatchObject({ exists: true, size: 10, encrypted: true });
    // A capability for another key, or for a prefix that merely starts the same: no key either.
    const wrongKey = await open({ identity: false, capabilities: [await owner.share(k(owner, 'diary/tuesday'))] });
    expect((await failure(wrongKey.get(key))).code).toBe('NOT_AUTHORIZED');
    await owner.put(k(owner, 'diary2/x'), 'not shared');
    const prefix = await open({ identity: false, capabilities: [await owner.share(k(owner, 'diary/'))] });
    expect(text(await prefix.get(key))).toBe('dear diary');
    expect((await failure(prefix.get(k(owner, 'diary2/x')))).code).toBe('NOT_AUTHORIZED');
    // A made-up capability with a real scope: its key check tells it from tampering.
    const forged = await owner.share(key);
    const bytes = Buffer.from(forged.slice(5), 'base64url');
    bytes[10]! ^= 1;
    const liar = await open({ identity: false, capabilities: [`psr1.${bytes.toString('base64url')}`] });
    expect(await failure(liar.get(key))).toMatchObject({
      code: 'NOT_AUTHORIZED',
      message: expect.stringContaining('another key') as string,
    });
  });

  it('reports a flipped ciphertext byte, and a value moved to another key, as TAMPERED and returns neither', async () => {
    const owner = await open();
    const [a, b] = [k(owner, 'a'), k(owner, 'b')];
    await owner.put(a, 'value of a');
    await owner.put(b, 'value of b');
    const sealedA = (await owner.get(a, { raw: true }))!;
    // The owner (the only one who can write here) rewrites the stored bytes: servers cannot,
    // the fragments are bound to the writer's signature.
    const flipped = sealedA.slice();
    flipped[flipped.length - 20]! ^= 0x80;
    await owner.put(a, flipped, { raw: true });
    const e = await failure(owner.get(a));
    expect(e.code).toBe('TAMPERED');
    expect(e.message).toContain(JSON.stringify(a));
    expect(e.message).toContain(owner.publicKey!);
    // a's sealed value stored under b: the owner derives b's key, and the value was not sealed under it.
    await owner.put(b, sealedA, { raw: true });
    expect(await failure(owner.get(b))).toMatchObject({ code: 'TAMPERED', message: expect.stringContaining('another key name') as string });
    // A reader whose capability covers both gets no plaintext either.
    const both = await open({ identity: false, capabilities: [await owner.share(owner.namespace!)] });
    expect((await failure(both.get(b))).code).toBe('NOT_AUTHORIZED');
    // Rewriting the header's stripe fields (here: "stripe 0 of 2" for a value written whole) is tampering.
    const striped = sealedA.slice();
    striped[15] = 2;
    await owner.put(a, striped, { raw: true });
    expect((await failure(owner.get(a))).code).toBe('TAMPERED');
  });

  it('reports a value whose header was rewritten (another write nonce: another version) as TAMPERED', async () => {
    const owner = await open();
    const a = k(owner, 'box/a');
    await owner.put(a, 'in a');
    const renonced = (await owner.get(a, { raw: true }))!.slice();
    renonced[30]! ^= 1; // inside the write nonce, which derives the value's key and is associated data
    await owner.put(a, renonced, { raw: true });
    expect((await failure(owner.get(a))).code).toBe('TAMPERED');
  });

  it('stores public values as plaintext, readable by anyone, and raw values as given', async () => {
    const owner = await open();
    await owner.put(k(owner, 'site/index.html'), '<h1>hi</h1>', { public: true });
    const anonymous = await open({ identity: false });
    expect(text(await anonymous.get(k(owner, 'site/index.html')))).toBe('<h1>hi</h1>');
    expect(await anonymous.stat(k(owner, 'site/index.html'))).toMatchObject({ size: 11, encrypted: false });
    // Bytes written raw (as clients before encryption did) are not mistaken for either form.
    await owner.put(k(owner, 'legacy'), 'old plaintext', { raw: true });
    expect(await failure(anonymous.get(k(owner, 'legacy')))).toMatchObject({
      code: 'UNKNOWN_FORMAT',
      message: expect.stringContaining('raw: true') as string,
    });
    expect(text(await anonymous.get(k(owner, 'legacy'), { raw: true }))).toBe('old plaintext');
    expect((await failure(owner.put(k(owner, 'x'), 'y', { raw: true, public: true }))).code).toBe('INVALID_ARGUMENT');
  });

  it('refuses to encrypt for an identity made from a bare signer, which still writes public values', async () => {
    const signer = await createCryptoProvider().signerFromSeed(crypto.getRandomValues(new Uint8Array(32)));
    const bare = await open({ identity: new Identity(signer) });
    expect(await failure(bare.put(k(bare, 'x'), 'y'))).toMatchObject({
      code: 'NOT_AUTHORIZED',
      message: expect.stringContaining('bare signer') as string,
    });
    await bare.put(k(bare, 'x'), 'y', { public: true });
    expect(text(await bare.get(k(bare, 'x')))).toBe('y');
  });
});

describe('stripes of one write', () => {
  const SMALL = 64 * 1024;
  const same = (x: Uint8Array | undefined, y: Uint8Array) => x !== undefined && Buffer.compare(x, y) === 0;

  async function drain(stream: ReadableStream<Uint8Array>): Promise<Buffer> {
    const parts: Uint8Array[] = [];
    for await (const chunk of stream as unknown as AsyncIterable<Uint8Array>) parts.push(chunk);
    return Buffer.concat(parts);
  }

  /**
   * A grantee of `prefix` in `owner`'s namespace with no capability: it may write there, and
   * reads only what anyone reads, the stored bytes. It writes through the protocol core
   * (`TestClient`), which stores the bytes it is given under its own write certificate.
   */
  async function grantee(owner: Store, prefix: string): Promise<{ client: TestClient; store: Store; publicKey: string }> {
    const identity = await Identity.generate();
    const json = await owner.grant(identity.publicKey, prefix, 'never');
    const client = await TestClient.open(cluster, identity.signer, [grantFromJson(createCryptoProvider(), json).grant]);
    clients.push(client);
    const store = await connect({ cluster: clusterFile, identity, grants: [json], timeoutMs: 15_000 });
    stores.push(store);
    return { client, store, publicKey: identity.publicKey };
  }

  /** The stored bytes (envelopes, ciphertext) of every stripe of the value `key` holds now. */
  async function storedStripes(reader: TestClient, key: string): Promise<Uint8Array[]> {
    const first = await reader.read(key, 15_000, { stripe: 0 });
    const out = [first.value!];
    for (let s = 1; s < first.layout!.digests.length; s++) {
      out.push((await reader.read(key, 15_000, { stripe: s, pinned: first.candidate!, layout: first.layout! })).value!);
    }
    return out;
  }

  /** Writes `stripes` as one striped value of `key` under `writer`'s own certificate: a legitimate write for a grantee. */
  async function writeStripes(writer: TestClient, key: string, stripes: readonly Uint8Array[]): Promise<void> {
    let next = 0;
    const source = { stripeSize: stripes[0]!.length, next: async () => stripes[next++] };
    await writer.write(key, { kind: 'stripes', source }, 30_000);
  }

  it('a grantee splicing stripes of two versions into a write of its own gets TAMPERED from the owner, whole and by range', async () => {
    const owner = await open({ stripeBytes: SMALL });
    const prefix = k(owner, 'films/');
    const key = `${prefix}cut.mp4`;
    const size = 3 * SMALL - 1000;
    const [v1, v2] = [randomBytes(size), randomBytes(size)];
    const { client: writer, store: library, publicKey } = await grantee(owner, prefix);
    await owner.putStream(key, new Blob([v1]));
    // The grantee holds no key: the client library gives it no plaintext, the protocol core the stored bytes.
    expect((await failure(library.get(key))).code).toBe('NOT_AUTHORIZED');
    const old = await storedStripes(writer, key);
    await owner.putStream(key, new Blob([v2]));
    const current = await storedStripes(writer, key);
    expect([old.length, current.length]).toEqual([3, 3]);
    expect(same(await owner.get(key), v2)).toBe(true);

    // Stripe 0 of v2, stripe 1 of v1, stripe 2 of v2: each authenticates on its own.
    await writeStripes(writer, key, [current[0]!, old[1]!, current[2]!]);
    expect(await owner.stat(key)).toMatchObject({ exists: true, size, encrypted: true, writer: { publicKey } });
    expect(await failure(owner.get(key))).toMatchObject({ code: 'TAMPERED', message: expect.stringContaining('another write') as string });
    expect((await failure(drain((await owner.getStream(key))!.stream))).code).toBe('TAMPERED');
    // By range: stripes 1 and 2, and stripe 1 alone, which is checked against stripe 0.
    expect((await failure(owner.get(key, { range: { start: SMALL + 10, end: 2 * SMALL + 10 } }))).code).toBe('TAMPERED');
    expect((await failure(owner.get(key, { range: { start: SMALL + 10, end: SMALL + 20 } }))).code).toBe('TAMPERED');
    const ranged = await owner.getStream(key, { range: { start: SMALL + 10 } });
    expect((await failure(drain(ranged!.stream))).code).toBe('TAMPERED');
    // Stripe 2 alone is of stripe 0's write, in its place: v2's bytes there.
    expect(same(await owner.get(key, { range: { start: 2 * SMALL } }), v2.subarray(2 * SMALL))).toBe(true);
    // The stripes back in order are v2 again: what is refused is the splice, not the grantee's write.
    await writeStripes(writer, key, current);
    expect(same(await owner.get(key), v2)).toBe(true);
  });

  it('a value cut short or extended with stripes of its own write is TAMPERED wherever a read reaches its end', async () => {
    const owner = await open({ stripeBytes: SMALL });
    const prefix = k(owner, 'logs/');
    const key = `${prefix}day`;
    const v = randomBytes(3 * SMALL);
    const { client: writer } = await grantee(owner, prefix);
    await owner.putStream(key, new Blob([v]));
    const [s0, s1, s2] = (await storedStripes(writer, key)) as [Uint8Array, Uint8Array, Uint8Array];
    // Cut short: its first two stripes. Stripe 1 says more follow.
    await writeStripes(writer, key, [s0, s1]);
    expect((await failure(owner.get(key))).code).toBe('TAMPERED');
    expect((await failure(drain((await owner.getStream(key))!.stream))).code).toBe('TAMPERED');
    expect((await failure(owner.get(key, { range: { start: SMALL, end: 3 * SMALL } }))).code).toBe('TAMPERED');
    // A range starting past the end it claims reads the last stripe too.
    expect((await failure(owner.get(key, { range: { start: 2 * SMALL + 5 } }))).code).toBe('TAMPERED');
    // A range short of the end is v's own bytes, in their place.
    expect(same(await owner.get(key, { range: { start: 10, end: 100 } }), v.subarray(10, 100))).toBe(true);
    // Extended: its last stripe again, and a stripe of another value after it.
    await writeStripes(writer, key, [s0, s1, s2, s2]);
    expect((await failure(owner.get(key))).code).toBe('TAMPERED');
    await owner.putStream(key, new Blob([randomBytes(2 * SMALL)]));
    const [other] = await storedStripes(writer, key);
    await writeStripes(writer, key, [s0, s1, s2, other!]);
    expect((await failure(owner.get(key))).code).toBe('TAMPERED');
  });

  it('a ranged read starting past stripe 0 checks the stripes it reads against stripe 0', async () => {
    const owner = await open();
    const prefix = k(owner, 'big/');
    const key = `${prefix}file`;
    const size = 2 * STRIPE_BYTES + 5000;
    const [v1, v2] = [randomBytes(size), randomBytes(size)];
    const { client: writer } = await grantee(owner, prefix);
    await owner.putStream(key, new Blob([v1]));
    const old = await storedStripes(writer, key);
    await owner.putStream(key, new Blob([v2]));
    const current = await storedStripes(writer, key);
    // Stripe 0 of v1 before stripes 1 and 2 of v2: these two agree with each other, not with stripe 0.
    await writeStripes(writer, key, [old[0]!, current[1]!, current[2]!]);
    expect((await failure(owner.get(key, { range: { start: STRIPE_BYTES + 10 } }))).code).toBe('TAMPERED');
    const ranged = await owner.getStream(key, { range: { start: STRIPE_BYTES + 10, end: STRIPE_BYTES + 20 } });
    expect((await failure(drain(ranged!.stream))).code).toBe('TAMPERED');
    // Stripe 1 of v1 in v2: a range in stripe 1 fails, one in stripe 2 is v2's.
    await writeStripes(writer, key, [current[0]!, old[1]!, current[2]!]);
    expect((await failure(owner.get(key, { range: { start: STRIPE_BYTES + 10, end: STRIPE_BYTES + 20 } }))).code).toBe('TAMPERED');
    const tail = { start: 2 * STRIPE_BYTES + 10, end: 2 * STRIPE_BYTES + 4000 };
    expect(same(await owner.get(key, { range: tail }), v2.subarray(tail.start, tail.end))).toBe(true);
  });
});

describe('capabilities and key epochs', () => {
  it('revoke by re-encryption: values rewritten at a higher key epoch are closed to the old capability', async () => {
    const identity = await Identity.generate();
    const owner = await open({ identity });
    const key = k(owner, 'team/plan');
    await owner.put(key, 'v1');
    const oldCap = await owner.share(k(owner, 'team/'));
    const old = await open({ identity: false, capabilities: [oldCap] });
    expect(text(await old.get(key))).toBe('v1');
    const rotated = await open({ identity, keyEpoch: 1 });
    await rotated.put(key, 'v2');
    expect(await failure(old.get(key))).toMatchObject({
      code: 'NOT_AUTHORIZED',
      message: expect.stringContaining('key epoch 1') as string,
    });
    // The owner reads every epoch; a capability of the new epoch reads the new value.
    expect(text(await owner.get(key))).toBe('v2');
    const fresh = await open({ identity: false, capabilities: [await rotated.share(k(owner, 'team/'))] });
    expect(text(await fresh.get(key))).toBe('v2');
  });

  it('are refused when malformed, and only shared by who holds the key', async () => {
    const owner = await open();
    const e = await failure(connect({ cluster: clusterFile, capabilities: ['psr1.nope!'] }));
    expect(e).toMatchObject({ code: 'INVALID_ARGUMENT', source: 'capabilities' });
    expect((await failure(connect({ cluster: clusterFile, capabilities: 'psr1.x' as never }))).source).toBe('capabilities');
    expect((await failure(owner.share('shared/'))).code).toBe('INVALID_ARGUMENT');
    expect((await failure(owner.share(`~${'a'.repeat(32)}/x/`))).code).toBe('NOT_AUTHORIZED');
    expect((await failure((await open({ identity: false })).share(k(owner, 'x')))).code).toBe('NOT_AUTHORIZED');
    // A holder of a prefix shares narrower, not wider.
    const holder = await open({ identity: false, capabilities: [await owner.share(k(owner, 'p/'))] });
    await owner.put(k(owner, 'p/q/r'), 'deep');
    const narrow = await open({ identity: false, capabilities: [await holder.share(k(owner, 'p/q/'))] });
    expect(text(await narrow.get(k(owner, 'p/q/r')))).toBe('deep');
    expect((await failure(holder.share(owner.namespace!))).code).toBe('NOT_AUTHORIZED');
  });
});

describe("the servers' disks", () => {
  it('never hold the plaintext of an encrypted value; they do hold a public one, and every key name', async () => {
    const owner = await open();
    const secret = `SECRET-MARKER-${crypto.randomUUID()}`;
    const control = `PUBLIC-MARKER-${crypto.randomUUID()}`;
    const keyName = `name-marker-${crypto.randomUUID()}`;
    for (const size of [1000, 256 * 1024]) {
      await owner.put(k(owner, `${keyName}/secret-${size}`), withMarker(secret, size));
      await owner.put(k(owner, `public-${size}`), withMarker(control, size), { public: true });
    }
    for (const s of stores) s.close();
    stores.length = 0;
    await cluster.stop(false);
    // As the servers left them (LevelDB's log and tables), then compacted into tables.
    const scans = [{ secret: serversHolding(secret), control: serversHolding(control), name: serversHolding(keyName) }];
    for (const id of [1, 2, 3, 4]) {
      const db = new ClassicLevel<Uint8Array, Uint8Array>(join(cluster.dir, `data-${id}`), { keyEncoding: 'view', valueEncoding: 'view' });
      await db.open();
      await db.compactRange(new Uint8Array(0), new Uint8Array(1024).fill(0xff));
      await db.close();
    }
    scans.push({ secret: serversHolding(secret), control: serversHolding(control), name: serversHolding(keyName) });
    for (const scan of scans) {
      expect(scan.secret).toEqual([]);
      // At t = 1 servers 1 and 2 hold the data fragments, each with one copy of the marker.
      expect(scan.control).toEqual(expect.arrayContaining([1, 2]));
      // Key names are not encrypted: every server has them.
      expect(scan.name).toEqual([1, 2, 3, 4]);
    }
    await cluster.startAll();
  });
});
