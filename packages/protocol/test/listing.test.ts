import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  clusterConfig,
  compareKeys,
  decodeMessage,
  encodeMessage,
  MAX_LIST_LIMIT,
  MAX_LIST_SCAN,
  receiptMessage,
  Server,
  type KeyState,
  type ListAck,
  type ListOperation,
  type ListPage,
  type Reply,
  type ServerStorage,
} from '../src/index.js';
import { MemoryStorage } from '../src/testing/memory-storage.js';
import { MIN_LIST_PAGE } from '../src/wire/list-bounds.js';
import { entry, ts } from '../src/testing/storage-conformance.js';
import { crypto, makeCluster, own, storeFor, testCluster } from '../src/testing/cluster.js';

const text = (s: string) => new TextEncoder().encode(s);
const utf8Order = (a: string, b: string) => Math.sign(Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8')));

type Cluster = Awaited<ReturnType<typeof makeCluster>>;
/** Replaces server `from`'s answer (a Byzantine server), or keeps it (`undefined`). */
type Tamper = (from: number, reply: ListAck) => Reply | undefined;

/** Runs one LIST page, delivering to servers in `order`; collects evidence. */
async function listPage(c: Cluster, op: ListOperation, order: readonly number[], tamper?: Tamper): Promise<ListPage> {
  const sent = (await op.start()).send ?? [];
  for (const to of order) {
    const o = sent.find((m) => m.to === to)!;
    let reply = await c.servers[to]!.handle(o.message);
    if (tamper && reply.type === 'LIST_ACK') reply = tamper(to, reply) ?? reply;
    const step = await op.onReply(to, reply);
    if (step.error) throw step.error;
    if (step.result) return step.result;
  }
  throw new Error('list did not finish');
}

async function writeAll(c: Cluster, keys: readonly string[]) {
  for (const k of keys) await c.write(k, { kind: 'value', value: text(`value of ${k}`) });
}

/** Stores `keys` with a write in progress each (a STORE never completed: an entry, no `lc`). */
async function putPending(storage: ServerStorage, keys: readonly string[]) {
  for (let i = 0; i < keys.length; i += 1000) {
    await Promise.all(
      keys.slice(i, i + 1000).map((k) => storage.withKey(k, (r) => r.putEntry(entry(ts(1)), { owner: 'o', bytes: 1, quota: {} }))),
    );
  }
}

/**
 * A MemoryStorage that counts the key records `list` reads. It sorts its keys once, when
 * first listed (the plain one sorts them on every read, too slow for tens of thousands).
 */
class CountingStorage extends MemoryStorage {
  read = 0;
  #sorted: string[] | undefined;

  protected override async readStates(prefix: string, after: string, limit: number): Promise<readonly (readonly [string, KeyState])[]> {
    const keys = (this.#sorted ??= this.keys().sort(compareKeys));
    // The first key after both `after` and everything before `prefix`.
    const from = compareKeys(after, prefix) >= 0 ? after : undefined;
    let lo = 0;
    let hi = keys.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (from === undefined ? compareKeys(keys[mid]!, prefix) < 0 : compareKeys(keys[mid]!, from) <= 0) lo = mid + 1;
      else hi = mid;
    }
    const out: (readonly [string, KeyState])[] = [];
    for (let i = lo; i < keys.length && out.length < limit && keys[i]!.startsWith(prefix); i++) {
      out.push([keys[i]!, (await this.readState(keys[i]!))!]);
    }
    this.read += out.length;
    return out;
  }
}

describe('compareKeys', () => {
  it('orders like UTF-8 bytes (what LevelDB sorts by), surrogate pairs included', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary' }), fc.string({ unit: 'binary' }), (a, b) => {
        expect(Math.sign(compareKeys(a, b))).toBe(utf8Order(a, b));
      }),
    );
    expect(compareKeys('\u{10000}', '\uffff')).toBeGreaterThan(0);
    expect('\u{10000}' < '\uffff').toBe(true); // what plain string comparison gets wrong
  });
});

describe('LIST on the wire', () => {
  it('round-trips requests and answers, and refuses limits out of range and unknown flags', async () => {
    const c = await makeCluster(1);
    await c.write(own(c.owner, 'a'), { kind: 'value', value: text('x') });
    const ack = await c.servers[0]!.handle({ type: 'LIST', key: '', opId: 9, after: '', limit: 10 });
    expect(ack).toMatchObject({ type: 'LIST_ACK', more: false, entries: [{ key: own(c.owner, 'a') }] });
    expect(decodeMessage(encodeMessage(ack), { n: 4 })).toEqual(ack);
    const req = { type: 'LIST', key: 'p/', opId: 3, after: 'p/a', limit: MAX_LIST_LIMIT } as const;
    expect(decodeMessage(encodeMessage(req), { n: 4 })).toEqual(req);
    expect(() => encodeMessage({ ...req, limit: 0 })).toThrow(/limit/);
    expect(() => encodeMessage({ ...req, limit: MAX_LIST_LIMIT + 1 })).toThrow(/limit/);
    const frame = encodeMessage(ack);
    // The flags byte follows the header: version, type, key (u16 length + bytes), opId, epoch.
    const flags = 1 + 1 + 2 + 0 + 8 + 4;
    frame[flags] = 0x04;
    expect(() => decodeMessage(frame, { n: 4 })).toThrow(/flags/);
  });
});

describe('ListOperation', () => {
  it('lists completed writes under a prefix with sizes and timestamps, leaves deleted keys out', async () => {
    const c = await makeCluster(1);
    const keys = ['b', 'a', 'c/1', 'c/2'].map((k) => own(c.owner, k));
    await writeAll(c, keys);
    await c.write(own(c.owner, 'elsewhere'), { kind: 'value', value: text('x') });
    await c.write(keys[0]!, { kind: 'tombstone' });
    const page = await listPage(c, c.listOp(own(c.owner, '')), [0, 1, 2, 3]);
    expect(page.cursor).toBeUndefined();
    expect(page.keys.map((k) => k.key)).toEqual(['a', 'c/1', 'c/2', 'elsewhere'].map((k) => own(c.owner, k)));
    expect(page.keys[0]).toMatchObject({ size: `value of ${own(c.owner, 'a')}`.length, candidate: { ts: { num: 1 } } });
    const sub = await listPage(c, c.listOp(own(c.owner, 'c/')), [3, 2, 1]);
    expect(sub.keys.map((k) => k.key)).toEqual(['c/1', 'c/2'].map((k) => own(c.owner, k)));
  });

  it('pages through many keys with a cursor, each key once, in order', async () => {
    const c = await makeCluster(1);
    const keys = Array.from({ length: 9 }, (_, i) => own(c.owner, `k${i}`));
    await writeAll(c, keys);
    const seen: string[] = [];
    let after = '';
    for (let pages = 0; ; pages++) {
      expect(pages).toBeLessThan(10);
      const page = await listPage(c, c.listOp(own(c.owner, ''), after, 4), [1, 2, 3]);
      seen.push(...page.keys.map((k) => k.key));
      if (!page.cursor) break;
      after = page.cursor;
    }
    expect(seen).toEqual(keys);
  });

  it('a Byzantine server can neither hide a completed write nor invent a key; its answer is dropped and reported', async () => {
    // Writes complete at servers 0, 1 and 2 only; server 3 never hears of them.
    const c = await makeCluster(1, { skip: new Set([3]) });
    const key = own(c.owner, 'real');
    await writeAll(c, [key]);
    const evidence: [number, string][] = [];
    const hide: Tamper = (from, r) => (from === 0 ? { ...r, entries: [] } : undefined);
    // Answers from the liar (0), the server that missed the write (3) and one more suffice.
    const hidden = await listPage(
      c,
      c.listOp('', '', 100, (s, why) => evidence.push([s, why])),
      [0, 3, 1],
      hide,
    );
    expect(hidden.keys.map((k) => k.key)).toEqual([key]);

    // Inventing: the real candidate under a name its writer never wrote, or a made-up timestamp.
    const forged = own(c.owner, 'forged');
    const invent: Tamper = (from, r) =>
      from === 0 && r.entries[0] ? { ...r, entries: [{ ...r.entries[0], key: forged }, ...r.entries] } : undefined;
    const invented = await listPage(
      c,
      c.listOp('', '', 100, (s, why) => evidence.push([s, why])),
      [0, 1, 2, 3],
      invent,
    );
    expect(invented.keys.map((k) => k.key)).toEqual([key]);
    expect(evidence.at(-1)).toEqual([0, expect.stringMatching(/not valid/)]);
    const bump: Tamper = (from, r) =>
      from === 0
        ? { ...r, entries: r.entries.map((e) => ({ ...e, candidate: { ...e.candidate, ts: { ...e.candidate.ts, num: 99 } } })) }
        : undefined;
    const bumped = await listPage(
      c,
      c.listOp('', '', 100, (s, why) => evidence.push([s, why])),
      [0, 1, 2, 3],
      bump,
    );
    expect(bumped.keys[0]!.candidate.ts.num).toBe(1);
    expect(evidence.at(-1)).toEqual([0, expect.stringMatching(/not valid/)]);
  });

  it('a server replaying a deleted key’s old write does not bring it back', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'gone');
    await writeAll(c, [key]);
    const before = await c.servers[0]!.handle({ type: 'LIST', key: '', opId: 1, after: '', limit: 10 });
    await c.write(key, { kind: 'tombstone' });
    const replay: Tamper = (from) => (from === 0 ? { ...(before as ListAck), opId: 0 } : undefined);
    const tamper: Tamper = (from, r) => {
      const old = replay(from, r);
      return old ? { ...(old as ListAck), opId: r.opId } : undefined;
    };
    const page = await listPage(c, c.listOp(''), [0, 1, 2], tamper);
    expect(page.keys).toEqual([]);
  });

  it('a correct server holding the other value a writer signed for its lc timestamp still gives an answer the listing takes', async () => {
    // A writer signs two values for one timestamp: servers 0 and 1 store A, servers 2 and 3
    // B, which gets the store proof and completes everywhere. Servers 0 and 1 hold A's entry
    // at lc's timestamp; their answers must not carry A's cross-checksum beside B's
    // certificate (which does not sign it), or the listing drops them as Byzantine, and
    // with t + 1 such servers it never gets n − t answers.
    const c = await makeCluster(1);
    const key = own(c.owner, 'twice');
    const a = await storeFor(c, c.owner, key, text('value A'), { nonce: new Uint8Array(32).fill(1) });
    const writerId = a.store.ts.writerId;
    const b = await storeFor(c, c.owner, key, text('value B, longer'), { nonce: new Uint8Array(32).fill(2), writerId });
    const proof = [];
    for (const i of [0, 1])
      expect(await c.servers[i]!.handle({ ...a.store, fragment: a.fragments[i]! })).toMatchObject({ type: 'STORE_ACK' });
    for (const i of [2, 3]) {
      const ack = await c.servers[i]!.handle({ ...b.store, fragment: b.fragments[i]! });
      if (ack.type === 'STORE_ACK') proof.push({ server: i, signature: ack.receipt });
    }
    // Servers 0 and 1 refuse B (history is write-once); a third receipt from a Byzantine server 1 completes it.
    const receipt1 = await c.serverSigners[1]!.sign(receiptMessage(crypto, c.cluster.id, key, b.store.ts, b.store.cert, 1));
    const candidate = { ...b.candidate, proof: [{ server: 1, signature: receipt1 }, ...proof] };
    expect(await c.verifier.valid(key, candidate)).toBe(true);
    for (const s of c.servers) await s.handle({ type: 'COMPLETE', key, opId: 2, candidate });
    const evidence: string[] = [];
    const page = await listPage(
      c,
      c.listOp('', '', 1000, (from, reason) => evidence.push(`s${from}: ${reason}`)),
      [0, 1, 2, 3],
      (from) => (from === 3 ? { type: 'ERROR', key: '', opId: 0, code: 'INTERNAL', message: 'down' } : undefined),
    );
    expect(evidence).toEqual([]);
    expect(page.keys.map((k) => k.key)).toEqual([key]);
  });

  it('answers out of range, out of order, over the limit or cut short are dropped', async () => {
    const c = await makeCluster(1);
    const keys = Array.from({ length: 3 }, (_, i) => own(c.owner, `k${i}`));
    await writeAll(c, keys);
    const cases: [string, Tamper, RegExp][] = [
      ['reversed', (_f, r) => ({ ...r, entries: [...r.entries].reverse() }), /out of order/],
      ['duplicated', (_f, r) => ({ ...r, entries: [r.entries[0]!, ...r.entries] }), /out of order|more than/],
      ['cut short', (_f, r) => ({ ...r, entries: r.entries.slice(0, 1), more: true }), /cut its listing short/],
      [
        'a cross-checksum of another write',
        (_f, r) => ({ ...r, entries: [{ ...r.entries[0]!, cc: r.entries[1]!.cc }, ...r.entries.slice(1)] }),
        /does not cover/,
      ],
    ];
    for (const [name, bad, why] of cases) {
      const evidence: [number, string][] = [];
      const tamper: Tamper = (from, r) => (from === 0 ? bad(from, r) : undefined);
      const page = await listPage(
        c,
        c.listOp(own(c.owner, ''), '', 3, (s, w) => evidence.push([s, w])),
        [0, 1, 2, 3],
        tamper,
      );
      expect(
        page.keys.map((k) => k.key),
        name,
      ).toEqual(keys);
      expect(evidence, name).toEqual([[0, expect.stringMatching(why)]]);
    }
    // Cutting short is allowed once the answer carries MIN_LIST_PAGE keys: paging still advances.
    expect(MIN_LIST_PAGE).toBeGreaterThan(1);
    const outside: Tamper = (from, r) => (from === 0 ? { ...r, entries: r.entries.map((e) => ({ ...e, key: 'zzz' })) } : undefined);
    const evidence: [number, string][] = [];
    await listPage(
      c,
      c.listOp(own(c.owner, ''), '', 3, (s, w) => evidence.push([s, w])),
      [0, 1, 2, 3],
      outside,
    );
    expect(evidence).toEqual([[0, expect.stringMatching(/outside the range/)]]);
  });

  it('a page held back by a server naming a horizon just past the cursor waits for the other answers, which outvote it; with none, it still moves forward', async () => {
    const c = await makeCluster(1);
    const keys = Array.from({ length: 5 }, (_, i) => own(c.owner, `k${i}`));
    await writeAll(c, keys);
    const prefix = own(c.owner, '');
    // Server 0 claims to have read only up to the first key after the cursor, with nothing to list.
    const stall: Tamper = (from, r) => (from === 0 ? { ...r, entries: [], more: true, resumeAfter: `${prefix}\u0000` } : undefined);
    const evidence: [number, string][] = [];
    const op = c.listOp(prefix, '', 100, (s, w) => evidence.push([s, w]));
    const sent = (await op.start()).send ?? [];
    const answer = async (to: number) => {
      const reply = (await c.servers[to]!.handle(sent.find((m) => m.to === to)!.message)) as ListAck;
      return op.onReply(to, stall(to, reply) ?? reply);
    };
    for (const to of [0, 1, 2]) expect(await answer(to)).toEqual({});
    // n − t answers are in, but the page would be thin and one more answer could take it further.
    expect(op.awaitingAnswers).toBe(true);
    const step = await answer(3);
    expect(step.result?.keys.map((k) => k.key)).toEqual(keys);
    expect(step.result?.cursor).toBeUndefined();
    // Nothing a correct server could not say: no evidence.
    expect(evidence).toEqual([]);

    // Server 3 is silent: the host's timer ends the wait with a thin page that still moves the cursor.
    const alone = c.listOp(prefix, '', 100);
    const out = (await alone.start()).send ?? [];
    for (const to of [0, 1, 2]) {
      const reply = (await c.servers[to]!.handle(out.find((m) => m.to === to)!.message)) as ListAck;
      expect(await alone.onReply(to, stall(to, reply) ?? reply)).toEqual({});
    }
    const page = alone.stalled().result!;
    expect(page).toEqual({ keys: [], cursor: `${prefix}\u0000` });
    expect(compareKeys(page.cursor!, '')).toBeGreaterThan(0);
    expect(alone.awaitingAnswers).toBe(false);
  });

  it('a resume key outside the range, before the last key listed, or without more is dropped and reported', async () => {
    const c = await makeCluster(1);
    const keys = Array.from({ length: 3 }, (_, i) => own(c.owner, `k${i}`));
    await writeAll(c, keys);
    const prefix = own(c.owner, '');
    const cases: [string, Tamper, RegExp][] = [
      ['outside the prefix', (_f, r) => ({ ...r, more: true, resumeAfter: 'elsewhere' }), /outside the range/],
      ['at the cursor', (_f, r) => ({ ...r, entries: [], more: true, resumeAfter: keys[0]! }), /outside the range/],
      ['before its last key', (_f, r) => ({ ...r, more: true, resumeAfter: keys[1]! }), /before its last key/],
      ['without more', (_f, r) => ({ ...r, more: false, resumeAfter: keys[2]! }), /without having more/],
    ];
    for (const [name, bad, why] of cases) {
      const evidence: [number, string][] = [];
      const page = await listPage(
        c,
        c.listOp(prefix, keys[0], 3, (s, w) => evidence.push([s, w])),
        [0, 1, 2, 3],
        (from, r) => (from === 0 ? bad(from, r) : undefined),
      );
      expect(
        page.keys.map((k) => k.key),
        name,
      ).toEqual(keys.slice(1));
      expect(evidence, name).toEqual([[0, expect.stringMatching(why)]]);
    }
  });

  it('pages across keys without lc: empty pages carry a cursor, and every completed key is listed once', async () => {
    const c = await makeCluster(1);
    const prefix = own(c.owner, '');
    const done = ['a', 'm/2500x', 'z'].map((k) => own(c.owner, k));
    await writeAll(c, done);
    // 8,000 keys with writes never completed around the middle key, at every server; 3,000
    // more at server 2 only, so its answers lag behind the others' (which outvote it).
    const pending = Array.from({ length: 8000 }, (_, i) => own(c.owner, `m/${String(i).padStart(4, '0')}`));
    const extra = Array.from({ length: 3000 }, (_, i) => own(c.owner, `q/${i}`));
    for (const storage of c.storages) await putPending(storage, pending);
    await putPending(c.storages[2]!, extra);
    const seen: string[] = [];
    const sizes: number[] = [];
    let cursor = '';
    for (let pages = 0; ; pages++) {
      expect(pages).toBeLessThan(20);
      const page = await c.drive(c.listOp(prefix, cursor, 1000));
      seen.push(...page.keys.map((k) => k.key));
      sizes.push(page.keys.length);
      if (page.cursor === undefined) break;
      expect(compareKeys(page.cursor, cursor)).toBeGreaterThan(0);
      cursor = page.cursor;
    }
    expect(seen).toEqual(done);
    // Pages cut by the servers' bound on records read (MAX_LIST_SCAN), two with no key at all.
    expect(sizes).toEqual([1, 1, 0, 0, 1]);
  });

  it('says, server by server, why it waits when answers fail verification, and which servers can no longer count', async () => {
    const c = await makeCluster(1);
    const keys = Array.from({ length: 3 }, (_, i) => own(c.owner, `k${i}`));
    await writeAll(c, keys);
    const prefix = own(c.owner, '');
    const op = c.listOp(prefix, '', 100);
    expect(op.waiting()).toBeUndefined();
    const sent = (await op.start()).send ?? [];
    const answer = async (to: number, tamper?: (r: ListAck) => Reply) => {
      const reply = (await c.servers[to]!.handle(sent.find((m) => m.to === to)!.message)) as ListAck;
      return op.onReply(to, tamper ? tamper(reply) : reply);
    };
    // s3 answers in order; s1 lists a key its writer never wrote; s4 is silent so far.
    expect(await answer(2)).toEqual({});
    expect(op.waiting()).toBeUndefined(); // nothing failed verification: who did not answer says it all
    const forged = own(c.owner, 'k0-forged');
    expect(await answer(0, (r) => ({ ...r, entries: [r.entries[0]!, { ...r.entries[0]!, key: forged }, ...r.entries.slice(1)] }))).toEqual(
      {},
    );
    expect(await answer(1)).toEqual({});
    expect(op.waiting()).toBe(
      `the LIST needs 3 answers that verify: s2, s3 sent one; s1 sent one that fails verification (listed ${JSON.stringify(forged)} with a candidate that is not valid)`,
    );
    expect([...op.unusable()]).toEqual([0]);
    // s4 refuses: with s1's answer dropped, no third answer can come.
    expect(await op.onReply(3, { type: 'ERROR', key: prefix, opId: op.opId, code: 'UNAVAILABLE', message: 'the disk is full' })).toEqual(
      {},
    );
    expect([...op.unusable()].sort()).toEqual([0, 3]);
  });

  it('names each dropped answer with what was wrong with it, and nothing once the page is out', async () => {
    const c = await makeCluster(1);
    const keys = Array.from({ length: 3 }, (_, i) => own(c.owner, `k${i}`));
    await writeAll(c, keys);
    const op = c.listOp(own(c.owner, ''), '', 3);
    const sent = (await op.start()).send ?? [];
    const answer = async (to: number, tamper?: (r: ListAck) => Reply) => {
      const reply = (await c.servers[to]!.handle(sent.find((m) => m.to === to)!.message)) as ListAck;
      return op.onReply(to, tamper ? tamper(reply) : reply);
    };
    // (Writes complete at the first n − t servers: s4 may hold none, so s1 and s2 lie.)
    await answer(1, (r) => ({ ...r, entries: r.entries.map((e) => ({ ...e, key: 'zzz' })) }));
    await answer(0, (r) => ({ ...r, entries: [...r.entries].reverse() }));
    await answer(2);
    expect(op.waiting()).toBe(
      'the LIST needs 3 answers that verify: s3 sent one; s1 sent one that fails verification (listed keys out of order); s2 sent one that fails verification (listed "zzz", outside the range asked for)',
    );
    expect([...op.unusable()].sort()).toEqual([0, 1]);
    // One answer more finishes nothing (two of four dropped, t = 1): the page cannot come.
    expect(await answer(3)).toEqual({});
    expect(op.waiting()).toMatch(/^the LIST needs 3 answers that verify: s3, s4 sent one; s1 sent one/);

    const fine = c.listOp(own(c.owner, ''), '', 3);
    const out = (await fine.start()).send ?? [];
    let step = {};
    for (const to of [0, 1, 2, 3]) {
      const reply = (await c.servers[to]!.handle(out.find((m) => m.to === to)!.message)) as ListAck;
      step = await fine.onReply(to, to === 0 ? { ...reply, entries: [...reply.entries].reverse() } : reply);
    }
    expect(step).toMatchObject({ result: { keys: expect.any(Array) as unknown } });
    expect(fine.waiting()).toBeUndefined();
  });

  it('more than t refusals fail the listing with their code', async () => {
    const c = await makeCluster(1);
    const op = c.listOp('');
    await op.start();
    const refuse = (from: number) => op.onReply(from, { type: 'ERROR', key: '', opId: op.opId, code: 'INTERNAL', message: 'no' });
    expect(await refuse(0)).toEqual({});
    expect((await refuse(1)).error?.code).toBe('INTERNAL');
  });
});

describe('the work of one LIST is bounded', () => {
  it('LIST(limit 1) over 20,000 keys without lc reads at most MAX_LIST_SCAN key records and answers where to resume', async () => {
    const storage = new CountingStorage();
    const pending = Array.from({ length: 20_000 }, (_, i) => `p/${String(i).padStart(5, '0')}`);
    await putPending(storage, pending);
    const listed = await storage.list('p/', '', 1);
    expect(storage.read).toBeLessThanOrEqual(MAX_LIST_SCAN);
    expect(listed).toEqual({ keys: [], more: true, resumeAfter: pending[storage.read - 1] });

    // Through the server: one 50-byte request, bounded work, an empty answer that says where to go on.
    const { cluster, serverSigners } = await testCluster(1);
    const server = new Server({ config: clusterConfig(1), index: 0, crypto, storage, cluster, signer: serverSigners[0]!, now: () => 0 });
    storage.read = 0;
    const reply = await server.handle({ type: 'LIST', key: 'p/', opId: 1, after: '', limit: 1 });
    expect(storage.read).toBeLessThanOrEqual(MAX_LIST_SCAN);
    expect(reply).toMatchObject({ type: 'LIST_ACK', entries: [], more: true, resumeAfter: pending[storage.read - 1] });
    expect(decodeMessage(encodeMessage(reply), { n: 4 })).toEqual(reply);

    // Resuming after it pages through all 20,000: 10 answers of MAX_LIST_SCAN records, and
    // one more that finds nothing after them.
    let after = (reply as ListAck).resumeAfter!;
    let answers = 1;
    for (;;) {
      const next = (await server.handle({ type: 'LIST', key: 'p/', opId: 1, after, limit: 1 })) as ListAck;
      answers++;
      expect(next.entries).toEqual([]);
      if (!next.more) break;
      after = next.resumeAfter!;
    }
    expect(answers).toBe(pending.length / MAX_LIST_SCAN + 1);
  });
});
