import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  compareKeys,
  decodeMessage,
  encodeMessage,
  MAX_LIST_LIMIT,
  MIN_LIST_PAGE,
  type ListAck,
  type ListOperation,
  type ListPage,
  type Reply,
} from '../src/index.js';
import { makeCluster, own } from './cluster.js';

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
    frame[flags] = 0x02;
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

  it('more than t refusals fail the listing with their code', async () => {
    const c = await makeCluster(1);
    const op = c.listOp('');
    await op.start();
    const refuse = (from: number) => op.onReply(from, { type: 'ERROR', key: '', opId: op.opId, code: 'INTERNAL', message: 'no' });
    expect(await refuse(0)).toEqual({});
    expect((await refuse(1)).error?.code).toBe('INTERNAL');
  });
});
