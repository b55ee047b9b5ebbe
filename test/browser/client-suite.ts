/**
 * @powerstore/client behaviours that need a running cluster but no control over it:
 * one suite, run in Node by vitest and in Chromium from an esbuild bundle
 * (client-suite.test.ts). Each case is `(env) => Promise<void>` and throws on failure;
 * it imports nothing but the client, so the same code runs on both platforms.
 */
import { connect, Identity, openBrowserIdentity, PowerStoreError, type Store } from '@powerstore/client';

/** What a case gets: plain JSON, so it can be handed into a page. */
export interface SuiteEnv {
  /** `cluster.json`. */
  readonly cluster: object;
  /**
   * Where each case's identity comes from: made in memory (`generate`), or kept by the
   * browser as a non-extractable WebCrypto key in IndexedDB (`browser`).
   */
  readonly identity: 'generate' | 'browser';
  /** `cluster.json` with server 2 replaced by a proxy that corrupts every fragment it returns. */
  readonly byzantineCluster: object;
  /**
   * `cluster.json` with server 2 replaced by a proxy that answers every FILTER with a frame
   * of over 1 MiB: more than any honest answer to a store with `maxValueBytes` of 256 KiB.
   */
  readonly oversizedCluster: object;
  /** Prefix for every key, unique per run, so runs sharing a cluster do not interfere. */
  readonly prefix: string;
}

export type SuiteCase = (env: SuiteEnv) => Promise<void>;

class AssertionError extends Error {
  override readonly name = 'AssertionError';
}

function assert(condition: unknown, message: string): asserts condition {
  if (!condition) throw new AssertionError(message);
}

function equalBytes(actual: Uint8Array | undefined, expected: Uint8Array, what: string): void {
  assert(actual !== undefined, `${what}: got undefined, expected ${expected.length} bytes`);
  assert(actual.length === expected.length, `${what}: got ${actual.length} bytes, expected ${expected.length}`);
  for (let i = 0; i < expected.length; i++) {
    assert(actual[i] === expected[i], `${what}: byte ${i} is ${actual[i]}, expected ${expected[i]}`);
  }
}

function text(bytes: Uint8Array | undefined): string | undefined {
  return bytes === undefined ? undefined : new TextDecoder().decode(bytes);
}

/** Rejects with a `PowerStoreError`'s code, or fails if `p` resolves or throws something else. */
async function errorCode(p: Promise<unknown>, what: string): Promise<string> {
  try {
    await p;
  } catch (e) {
    assert(e instanceof PowerStoreError, `${what}: threw ${String(e)}, not a PowerStoreError`);
    return e.code;
  }
  throw new AssertionError(`${what}: resolved, expected an error`);
}

function bytes(length: number, seed: number): Uint8Array {
  const out = new Uint8Array(length);
  let x = seed | 1;
  for (let i = 0; i < length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x;
  }
  return out;
}

/**
 * Opens stores for one case (all writing as one identity made for the case) and closes
 * them afterwards; `key(name)` is `name` in that identity's namespace.
 */
async function withStores(
  env: SuiteEnv,
  body: (
    open: (options?: { reader?: boolean; cluster?: object; maxValueBytes?: number; capabilities?: string[] }) => Promise<Store>,
    key: (name: string) => string,
    identity: Identity,
  ) => Promise<void>,
): Promise<void> {
  const identity = env.identity === 'browser' ? await openBrowserIdentity(`suite:${env.prefix}`) : await Identity.generate();
  const stores: Store[] = [];
  try {
    await body(
      async (options = {}) => {
        const store = await connect({
          cluster: options.cluster ?? env.cluster,
          ...(options.reader ? {} : { identity }),
          ...(options.maxValueBytes === undefined ? {} : { maxValueBytes: options.maxValueBytes }),
          ...(options.capabilities ? { capabilities: options.capabilities } : {}),
          timeoutMs: 15_000,
        });
        stores.push(store);
        return store;
      },
      (name) => `${identity.namespace}${env.prefix}/${name}`,
      identity,
    );
  } finally {
    for (const s of stores) s.close();
  }
}

/** A failure's code, for messages. */
const codeOf = (e: Error) => (e instanceof PowerStoreError ? e.code : e.message);

/** The case whose server 2 sends frames over the limit (its proxy's work is checked by the runner). */
export const OVERSIZED_CASE = 'a server sending frames over the size limit is flagged and reads go on from the others';

export const clientSuite: Record<string, SuiteCase> = {
  async 'puts and gets a string'(env) {
    await withStores(env, async (open, keyOf) => {
      const store = await open();
      const key = keyOf('string');
      await store.put(key, 'héllo wörld ✓');
      assert(text(await store.get(key)) === 'héllo wörld ✓', 'string read back differs');
      await store.put(key, 'second');
      assert(text(await store.get(key)) === 'second', 'an overwrite is not read back');
    });
  },

  async 'puts and gets bytes, including an empty value'(env) {
    await withStores(env, async (open, keyOf) => {
      const store = await open();
      const value = bytes(1000, 7);
      await store.put(keyOf('bytes'), value);
      equalBytes(await store.get(keyOf('bytes')), value, 'bytes');
      await store.put(keyOf('empty'), new Uint8Array(0));
      equalBytes(await store.get(keyOf('empty')), new Uint8Array(0), 'empty value');
      await store.put(keyOf('empty-string'), '');
      equalBytes(await store.get(keyOf('empty-string')), new Uint8Array(0), 'empty string');
    });
  },

  async 'puts and gets 1 MiB'(env) {
    await withStores(env, async (open, keyOf) => {
      const store = await open();
      const value = bytes(1024 * 1024, 11);
      await store.put(keyOf('mebibyte'), value);
      equalBytes(await store.get(keyOf('mebibyte')), value, '1 MiB');
      const stat = await store.stat(keyOf('mebibyte'));
      assert(stat.exists && stat.size === value.length, `stat says exists=${stat.exists} size=${stat.size}`);
    });
  },

  async 'lists keys under a prefix in pages, without deleted ones'(env) {
    await withStores(env, async (open, keyOf) => {
      const store = await open();
      for (const name of ['list/b', 'list/a', 'list/c']) await store.put(keyOf(name), name);
      await store.delete(keyOf('list/c'));
      const first = await store.list(keyOf('list/'), { limit: 1 });
      assert(first.keys.length === 1 && first.keys[0]!.key === keyOf('list/a') && first.cursor !== undefined, 'first page');
      const rest = await store.list(keyOf('list/'), { cursor: first.cursor });
      const names = rest.keys.map((k) => `${k.key}:${k.size}:${k.storedSize}`).join();
      // The plaintext's size, and the stored one: an encrypted value's envelope is 64 bytes over it.
      assert(names === `${keyOf('list/b')}:6:${6 + 64}` && rest.cursor === undefined, `second page: ${names}`);
    });
  },

  async 'gets undefined for a key never written'(env) {
    await withStores(env, async (open, keyOf) => {
      const store = await open();
      assert((await store.get(keyOf('never-written'))) === undefined, 'a never-written key has a value');
      const stat = await store.stat(keyOf('never-written'));
      assert(!stat.exists && !stat.deleted && stat.size === 0, `stat of a never-written key: ${JSON.stringify(stat)}`);
    });
  },

  async 'deletes a key: get returns undefined and stat says deleted'(env) {
    await withStores(env, async (open, keyOf) => {
      const store = await open();
      const key = keyOf('deleted');
      await store.put(key, 'doomed');
      await store.delete(key);
      assert((await store.get(key)) === undefined, 'a deleted key still has a value');
      const stat = await store.stat(key);
      assert(!stat.exists && stat.deleted, `stat of a deleted key: exists=${stat.exists} deleted=${stat.deleted}`);
      await store.put(key, 'back');
      assert(text(await store.get(key)) === 'back', 'a key cannot be written again after a delete');
    });
  },

  async 'stat reports size, timestamp and the servers that answered'(env) {
    await withStores(env, async (open, keyOf) => {
      const store = await open();
      const key = keyOf('stat');
      await store.put(key, 'one');
      const first = await store.stat(key);
      await store.put(key, 'three');
      const second = await store.stat(key);
      assert(second.exists && second.size === 5, `size ${second.size}, expected 5`);
      assert(second.timestamp.num > first.timestamp.num, `timestamps did not grow: ${first.timestamp.num} then ${second.timestamp.num}`);
      assert(/^[0-9a-f]+$/.test(second.timestamp.writerId), `writer id ${second.timestamp.writerId} is not hex`);
      assert(second.answered.length >= 3, `only ${second.answered.length} servers answered`);
      assert(second.misbehaving.length === 0, `servers misbehaving: ${JSON.stringify(second.misbehaving)}`);
    });
  },

  async 'a reader without an identity reads public values, and its put fails with NO_IDENTITY'(env) {
    await withStores(env, async (open, keyOf) => {
      const writer = await open();
      const reader = await open({ reader: true });
      assert(writer.canWrite && !reader.canWrite, `canWrite: writer ${writer.canWrite}, reader ${reader.canWrite}`);
      const key = keyOf('shared');
      await writer.put(key, 'for everyone', { public: true });
      assert(text(await reader.get(key)) === 'for everyone', 'the reader does not see the write');
      const put = await errorCode(reader.put(key, 'from a reader'), 'reader.put');
      assert(put === 'NO_IDENTITY', `reader.put failed with ${put}`);
      const del = await errorCode(reader.delete(key), 'reader.delete');
      assert(del === 'NO_IDENTITY', `reader.delete failed with ${del}`);
      assert(text(await reader.get(key)) === 'for everyone', 'the refused write changed the value');
    });
  },

  async 'writes only its own namespace: another key fails with NOT_AUTHORIZED'(env) {
    await withStores(env, async (open, keyOf, identity) => {
      const store = await open();
      assert(
        store.namespace === identity.namespace && identity.namespace === `~${identity.ownerId}/`,
        `namespace ${String(store.namespace)}`,
      );
      for (const key of [`${env.prefix}/outside`, `~${'a'.repeat(32)}/${env.prefix}`]) {
        const code = await errorCode(store.put(key, 'v'), `put ${key}`);
        assert(code === 'NOT_AUTHORIZED', `put ${key}: ${code}`);
      }
      await store.put(keyOf('inside'), 'v');
      const stat = await store.stat(keyOf('inside'));
      assert(stat.writer?.publicKey === identity.publicKey, `writer ${JSON.stringify(stat.writer)}`);
    });
  },

  async 'encrypts by default: ciphertext at rest, NOT_AUTHORIZED without the key, a capability reads, TAMPERED when altered'(env) {
    await withStores(env, async (open, keyOf, identity) => {
      const store = await open();
      const marker = `secret ${env.prefix} ✓`;
      const value = new TextEncoder().encode(`${marker} `.repeat(2000));
      await store.put(keyOf('private/notes'), value);
      equalBytes(await store.get(keyOf('private/notes')), value, 'encrypted round trip');
      const stat = await store.stat(keyOf('private/notes'));
      assert(stat.encrypted && stat.size === value.length, `stat: encrypted ${stat.encrypted}, size ${stat.size}`);
      // What the servers hold: the envelope (magic F5 50 53, format 1), no plaintext in it.
      const raw = (await store.get(keyOf('private/notes'), { raw: true }))!;
      assert(raw[0] === 0xf5 && raw[3] === 1 && raw.length === value.length + 64, `stored ${raw.length} bytes, format ${raw[3]}`);
      assert(!new TextDecoder().decode(raw).includes(marker), 'the stored bytes hold the plaintext');
      // A browser identity opened again (the encryption key is kept in IndexedDB beside the signing key) reads it.
      if (env.identity === 'browser') {
        const again = await connect({
          cluster: env.cluster,
          identity: await openBrowserIdentity(`suite:${env.prefix}`),
          timeoutMs: 15_000,
        });
        try {
          equalBytes(await again.get(keyOf('private/notes')), value, 'read by the identity reopened from IndexedDB');
        } finally {
          again.close();
        }
      }
      const stranger = await open({ reader: true });
      const denied = await errorCode(stranger.get(keyOf('private/notes')), 'get without the key');
      assert(denied === 'NOT_AUTHORIZED', `get without the key: ${denied}`);
      const cap = await store.share(keyOf('private/'));
      assert(/^psr1\.[A-Za-z0-9_-]+$/.test(cap), `capability ${cap}`);
      const friend = await open({ reader: true, capabilities: [cap] });
      equalBytes(await friend.get(keyOf('private/notes')), value, 'read with a capability');
      await store.put(keyOf('private2/x'), 'not shared');
      const outside = await errorCode(friend.get(keyOf('private2/x')), 'get of a sibling prefix');
      assert(outside === 'NOT_AUTHORIZED', `a capability for private/ read private2/: ${outside}`);
      const flipped = raw.slice();
      flipped[100]! ^= 1;
      await store.put(keyOf('private/notes'), flipped, { raw: true });
      for (const reader of [store, friend]) {
        const code = await errorCode(reader.get(keyOf('private/notes')), 'get of an altered value');
        assert(code === 'TAMPERED', `get of an altered value: ${code}`);
      }
      assert(identity.encryptionRoot !== undefined, 'the identity has no encryption root');
    });
  },

  async 'a browser identity stored before encryption gains an encryption key, kept across opens'(env) {
    if (env.identity !== 'browser') return;
    // The record older versions stored: the Ed25519 key pair only.
    const name = `suite-old:${env.prefix}`;
    const pair = await crypto.subtle.generateKey({ name: 'Ed25519' }, false, ['sign', 'verify']);
    const old = { privateKey: pair.privateKey, publicKey: new Uint8Array(await crypto.subtle.exportKey('raw', pair.publicKey)) };
    const open = indexedDB.open('powerstore', 1);
    open.onupgradeneeded = () => open.result.createObjectStore('identities');
    const db = await new Promise<IDBDatabase>((resolve, reject) => {
      open.onsuccess = () => resolve(open.result);
      open.onerror = () => reject(open.error ?? new Error('IndexedDB open failed'));
    });
    await new Promise<void>((resolve, reject) => {
      const tx = db.transaction('identities', 'readwrite');
      tx.objectStore('identities').put(old, name);
      tx.oncomplete = () => resolve();
      tx.onerror = () => reject(tx.error ?? new Error('IndexedDB put failed'));
    });
    db.close();
    const first = await openBrowserIdentity(name);
    assert(first.encryptionRoot !== undefined, 'no encryption root after upgrading an old record');
    equalBytes(first.signer.publicKey, old.publicKey, 'the upgraded identity keeps its signing key');
    const store = await connect({ cluster: env.cluster, identity: first, timeoutMs: 15_000 });
    const key = `${first.namespace}${env.prefix}/upgraded`;
    try {
      await store.put(key, 'sealed after the upgrade');
    } finally {
      store.close();
    }
    // Opened again (as after a reload), the identity reads it: the key added was kept, not remade.
    const again = await connect({ cluster: env.cluster, identity: await openBrowserIdentity(name), timeoutMs: 15_000 });
    try {
      assert(text(await again.get(key)) === 'sealed after the upgrade', 'the reopened identity does not read its value');
    } finally {
      again.close();
    }
  },

  async 'a browser identity never exposes its private key'(env) {
    await withStores(env, async (_open, _keyOf, identity) => {
      if (env.identity !== 'browser') return;
      const code = await errorCode(
        Promise.resolve().then(() => identity.toJSON()),
        'toJSON of a browser identity',
      );
      assert(code === 'INVALID_ARGUMENT', `toJSON: ${code}`);
      const again = await openBrowserIdentity(`suite:${env.prefix}`);
      assert(again.publicKey === identity.publicKey, 'the identity was not kept in IndexedDB');
    });
  },

  async 'rejects an invalid key with INVALID_ARGUMENT'(env) {
    await withStores(env, async (open, keyOf) => {
      const store = await open();
      const cases: [string, Promise<unknown>][] = [
        ['empty key', store.put('', 'v')],
        ['1025-byte key', store.put('k'.repeat(1025), 'v')],
        ['key over 1024 bytes of UTF-8', store.get('é'.repeat(513))],
        ['non-string key', store.get(42 as unknown as string)],
        ['non-string key on delete', store.delete(undefined as unknown as string)],
      ];
      for (const [what, p] of cases) {
        const code = await errorCode(p, what);
        assert(code === 'INVALID_ARGUMENT', `${what}: ${code}`);
      }
      const bad = await errorCode(store.put(keyOf('v'), 42 as unknown as string), 'non-bytes value');
      assert(bad === 'INVALID_ARGUMENT', `non-bytes value: ${bad}`);
    });
  },

  async 'aborts with ABORTED, before and during an operation'(env) {
    await withStores(env, async (open, keyOf) => {
      const store = await open();
      const key = keyOf('aborted');
      const before = await errorCode(store.put(key, 'v', { signal: AbortSignal.abort() }), 'put with an aborted signal');
      assert(before === 'ABORTED', `put with an aborted signal: ${before}`);
      const getBefore = await errorCode(store.get(key, { signal: AbortSignal.abort() }), 'get with an aborted signal');
      assert(getBefore === 'ABORTED', `get with an aborted signal: ${getBefore}`);
      const controller = new AbortController();
      const during = store.put(key, bytes(256 * 1024, 3), { signal: controller.signal });
      controller.abort(new Error('user cancelled'));
      const code = await errorCode(during, 'put aborted in flight');
      assert(code === 'ABORTED', `put aborted in flight: ${code}`);
      // The store is still usable.
      await store.put(key, 'after');
      assert(text(await store.get(key)) === 'after', 'the store does not work after an abort');
    });
  },

  async 'concurrent puts from two stores of one identity: reads agree, then see the last writes'(env) {
    await withStores(env, async (open, keyOf) => {
      const [a, b] = await Promise.all([open(), open()]);
      const reader = await open({ reader: true, capabilities: [await a.share(keyOf(''))] });
      const keys = Array.from({ length: 6 }, (_, i) => keyOf(`concurrent-${i}`));
      // Both stores write every key at once: each key ends with one of the two values,
      // and every reader sees the same one.
      await Promise.all(keys.flatMap((k) => [a.put(k, `a:${k}`), b.put(k, `b:${k}`)]));
      for (const k of keys) {
        const [x, y] = await Promise.all([reader.get(k), a.get(k)]);
        assert(text(x) === `a:${k}` || text(x) === `b:${k}`, `${k} holds ${String(text(x))}`);
        assert(text(x) === text(y), `${k}: two readers disagree (${String(text(x))} / ${String(text(y))})`);
      }
      // Writes that follow each other: the later one wins, whichever store made it.
      await Promise.all(keys.map((k) => a.put(k, `a2:${k}`)));
      await Promise.all(keys.map((k) => b.put(k, `b2:${k}`)));
      for (const k of keys) {
        const seen = text(await reader.get(k));
        assert(seen === `b2:${k}`, `${k}: read ${String(seen)} after b's later write`);
      }
    });
  },

  async 'a Byzantine server: reads return the right bytes and it is reported as misbehaving'(env) {
    await withStores(env, async (open, keyOf) => {
      const store = await open({ cluster: env.byzantineCluster });
      const key = keyOf('attacked');
      const value = bytes(300_000, 5);
      await store.put(key, value);
      // The corrupted answer is used only when it is among the first n − t to arrive;
      // read until it was (bounded).
      for (let i = 0; i < 30 && store.servers()[1]?.misbehaving === undefined; i++) {
        equalBytes(await store.get(key), value, `read ${i + 1}`);
      }
      const flagged = store.servers().filter((s) => s.misbehaving !== undefined);
      assert(
        flagged.length === 1 && flagged[0]!.id === 2,
        `misbehaving servers: ${JSON.stringify(flagged.map((s) => [s.id, s.misbehaving]))}`,
      );
      assert(/fragment/.test(flagged[0]!.misbehaving!), `reason: ${flagged[0]!.misbehaving}`);
      equalBytes(await store.get(key), value, 'read after the server was caught');
      const stat = await store.stat(key);
      assert(stat.size === value.length, `stat size ${stat.size}`);
    });
  },

  async 'putMany, getMany and deleteMany past a Byzantine server: per-key results, a key outside the namespace fails alone'(env) {
    await withStores(env, async (open, keyOf) => {
      const store = await open({ cluster: env.byzantineCluster });
      const entries = new Map<string, Uint8Array>();
      for (let i = 0; i < 40; i++) entries.set(keyOf(`many/${i}`), bytes(3000 + i * 101, i + 1));
      const outside = `${env.prefix}/not-my-namespace`;
      const put = await store.putMany([...entries, [outside, bytes(10, 1)]], { concurrency: 16 });
      assert(put.results.length === 41, `putMany results: ${put.results.length}`);
      assert(
        put.failed.length === 1 && put.failed[0]!.key === outside && codeOf(put.failed[0]!.error) === 'NOT_AUTHORIZED',
        `putMany failed: ${JSON.stringify(put.failed.map((f) => [f.key, codeOf(f.error)]))}`,
      );
      const keys = [...entries.keys()];
      const got = await store.getMany(keys, { concurrency: 16 });
      assert(got.failed.length === 0, `getMany failed: ${JSON.stringify(got.failed.map((f) => [f.key, codeOf(f.error)]))}`);
      got.results.forEach((r, i) => {
        assert(r.ok && r.key === keys[i], `getMany result ${i}: ${JSON.stringify(r)}`);
        equalBytes(r.value, entries.get(keys[i])!, `getMany ${keys[i]}`);
      });
      const gone = keys.slice(0, 10);
      const deleted = await store.deleteMany(gone);
      assert(deleted.failed.length === 0, `deleteMany failed: ${deleted.failed.length}`);
      const after = await store.getMany(keys.slice(0, 12));
      assert(
        after.results.every((r, i) => r.ok && (i < 10 ? r.value === undefined : r.value !== undefined)),
        'deleted keys read as undefined, the others as written',
      );
    });
  },

  async [OVERSIZED_CASE](env) {
    await withStores(env, async (open, keyOf) => {
      const writer = await open();
      const key = keyOf('oversized');
      const value = bytes(10_000, 9);
      await writer.put(key, value);
      // The frame limit at t = 1 is the fragment of the larger of maxValueBytes and a default
      // stripe (2 MiB + 64: 1 048 608), plus 64 KiB, plus the largest stripe layout (2 MiB):
      // 3 211 296 bytes. The proxy sends 4 MiB.
      const store = await open({
        cluster: env.oversizedCluster,
        reader: true,
        maxValueBytes: 256 * 1024,
        capabilities: [await writer.share(key)],
      });
      // Whether the proxy's answer comes before or after the read has its quorum, it is flagged.
      for (let i = 0; i < 20 && store.servers()[1]?.misbehaving === undefined; i++) {
        equalBytes(await store.get(key), value, `read ${i + 1}`);
      }
      const flagged = store.servers().filter((s) => s.misbehaving !== undefined);
      assert(
        flagged.length === 1 && flagged[0]!.id === 2,
        `misbehaving servers: ${JSON.stringify(flagged.map((s) => [s.id, s.misbehaving]))}`,
      );
      const reason = flagged[0]!.misbehaving!;
      // A browser has the whole message and says how large it was; Node's ws stops at the frame's header.
      const expected =
        env.identity === 'browser'
          ? /^sent a frame of \d{7} bytes, over the limit of 3211296$/
          : /^sent a frame over the limit of 3211296 bytes$/;
      assert(expected.test(reason), `reason: ${reason}`);
      equalBytes(await store.get(key), value, 'read after the server was caught');
      const stat = await store.stat(key);
      assert(stat.size === value.length && stat.answered.length >= 3, `stat: size ${stat.size}, answered by ${stat.answered.join(', ')}`);
    });
  },
};

export const caseNames: readonly string[] = Object.keys(clientSuite);

/** Runs one case by name. */
export async function runCase(name: string, env: SuiteEnv): Promise<void> {
  const c = clientSuite[name];
  if (!c) throw new Error(`no case named ${JSON.stringify(name)}`);
  await c(env);
}
