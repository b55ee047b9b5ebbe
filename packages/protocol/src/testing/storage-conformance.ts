/**
 * The behaviour every {@link ServerStorage} backend must have, as framework-free checks
 * (in the manner of abstract-level's suite): a backend's tests register each one, e.g.
 * `for (const c of storageConformance(make, supports)) it(c.name, c.run)`. Optional
 * guarantees (durability across reopening, group commit) are switched by
 * {@link StorageSupports}; checks of a guarantee a backend lacks are not returned at all.
 * Backends are made for clusters of `n = 4`.
 */
import { bytesEqual } from '../core/bytes.js';
import { candidatesEqual, certificatesEqual, type Candidate } from '../auth/candidate.js';
import type { WriteCertificate } from '../auth/certificate.js';
import type { HistoryEntry } from '../wire/messages.js';
import type { Quota } from '../auth/policy.js';
import type { EntryMeta } from '../storage/record.js';
import { AbstractStorage, type Charge, type KeyRecord, type ServerStorage } from '../storage/abstract-storage.js';
import { layoutsEqual } from '../core/stripes.js';
import { compareTimestamps, type Timestamp } from '../auth/timestamp.js';

/** One named check; `run` rejects on failure. */
export interface ConformanceCheck {
  readonly name: string;
  readonly run: () => Promise<void>;
}

/** A backend under test, as its factory returns it. */
export interface StorageHarness {
  readonly storage: ServerStorage;
  /** Closes the backend and opens it again on the same data (durable backends). */
  reopen?(): Promise<ServerStorage>;
  /** Releases the backend (the current one, after a reopen). */
  close?(): Promise<void>;
  /** Commits written so far (group-committing backends). */
  commits?(): number;
}

/** Optional guarantees. */
export interface StorageSupports {
  /** Data, usage and totals survive {@link StorageHarness.reopen}. */
  readonly durable: boolean;
  /** Concurrent callbacks on different keys share commits. */
  readonly groupCommit: boolean;
}

function fail(message: string): never {
  throw new Error(`storage conformance: ${message}`);
}

function check(ok: boolean, message: string): void {
  if (!ok) fail(message);
}

const n = 4;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Bytes that differ per `seed` and per `salt`, so a mixed-up field is noticed. */
const fill = (length: number, seed: number, salt: number) => Uint8Array.from({ length }, (_, i) => (seed * 31 + salt * 7 + i) & 0xff);

/** A timestamp; `writer` tells apart timestamps with the same number. */
export const ts = (num: number, writer = 1): Timestamp => ({ num, writerId: fill(32, writer, 1) });

const cert = (num: number): WriteCertificate => ({
  nonceHash: fill(32, num, 2),
  ccDigest: fill(32, num, 3),
  signer: fill(32, 3, 4),
  signature: fill(64, num, 5),
  tombstone: false,
  grant:
    num % 2 === 0
      ? { issuer: fill(32, 5, 6), grantee: fill(32, 3, 4), prefix: `~p${num}/`, expiresAt: 1e12 + num, signature: fill(64, num, 7) }
      : undefined,
});

/** A well-formed candidate. */
export const candidate = (t: Timestamp): Candidate => ({
  ts: t,
  nonce: fill(32, t.num, 8),
  cert: cert(t.num),
  proof: [0, 2, 3].map((server) => ({ server, signature: fill(64, t.num + server, 9) })),
});

/** A well-formed history entry with a fragment of `size` bytes. */
export const entry = (t: Timestamp, size = 3, tombstone = false): HistoryEntry => ({
  ts: t,
  stripe: 0,
  fragment: fill(size, t.num, 10),
  cc: { tombstone, valueLength: tombstone ? 0 : size * 2, hashes: Array.from({ length: n }, (_, i) => fill(32, t.num + i, 11)) },
  cert: cert(t.num),
});

const unlimited: Quota = {};
const charge = (owner: string, bytes: number, quota: Quota = unlimited, at?: number): Charge =>
  at === undefined ? { owner, bytes, quota } : { owner, bytes, quota, at };

function sameEntry(a: EntryMeta | undefined, b: HistoryEntry, what: string, withFragment: boolean): void {
  check(a !== undefined, `${what}: missing`);
  const ok =
    compareTimestamps(a!.ts, b.ts) === 0 &&
    a!.stripe === b.stripe &&
    a!.cc.tombstone === b.cc.tombstone &&
    a!.cc.valueLength === b.cc.valueLength &&
    a!.cc.hashes.length === b.cc.hashes.length &&
    a!.cc.hashes.every((h, i) => bytesEqual(h, b.cc.hashes[i]!)) &&
    certificatesEqual(a!.cert, b.cert) &&
    layoutsEqual(a!.layout, b.layout) &&
    (!withFragment || bytesEqual((a as HistoryEntry).fragment, b.fragment));
  check(ok, `${what}: not read back whole`);
}

/** `value` with every byte array moved into `frame` as a view, as a decoder leaves it. */
function viewsInto<T>(value: T, frame: Uint8Array, at = { offset: 0 }): T {
  if (value instanceof Uint8Array) {
    frame.set(value, at.offset);
    at.offset += value.length;
    return frame.subarray(at.offset - value.length, at.offset) as T;
  }
  if (Array.isArray(value)) return value.map((v: unknown) => viewsInto(v, frame, at)) as T;
  if (typeof value === 'object' && value !== null)
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, viewsInto(v, frame, at)])) as T;
  return value;
}

/** Byte arrays whose `slice` returns a view, as a Node `Buffer`'s does. */
class ViewSlicing extends Uint8Array {
  override slice(start?: number, end?: number): Uint8Array<ArrayBuffer> {
    return this.subarray(start, end);
  }
}

/** Whether any byte array in `value` is a view into `buffer`. */
function holds(value: unknown, buffer: ArrayBufferLike): boolean {
  if (value instanceof Uint8Array) return value.buffer === buffer;
  if (typeof value === 'object' && value !== null) return Object.values(value).some((v) => holds(v, buffer));
  return false;
}

/** The checks, each on a fresh backend from `make`, which it closes when done. */
export function storageConformance(
  make: () => StorageHarness | Promise<StorageHarness>,
  supports: StorageSupports = { durable: false, groupCommit: false },
): ConformanceCheck[] {
  const on = (name: string, body: (h: StorageHarness) => Promise<void>): ConformanceCheck => ({
    name,
    async run() {
      const h = await make();
      try {
        await body(h);
      } finally {
        await h.close?.();
      }
    },
  });
  const checks: ConformanceCheck[] = [
    on('an unknown key has lc = c0, no history and no collected mark; nobody has usage', async ({ storage: s }) => {
      await s.withKey('k', async (r) => {
        check((await r.getLc()) === undefined, 'lc of a new key must be undefined');
        check((await r.getEntry(ts(1))) === undefined && (await r.getEntryMeta(ts(1))) === undefined, 'history of a new key must be empty');
        check((await r.index()).length === 0 && (await r.getCollected()) === undefined, 'a new key has no index and no collected mark');
      });
      check(s.usage('o').bytes === 0 && s.owners().size === 0, 'a new storage charges nobody');
    }),
    on('lc and history entries (with certificates, grants and proofs) read back field by field, per key', async ({ storage: s }) => {
      const e4 = entry(ts(4), 100);
      const e3 = entry(ts(3), 0);
      await s.withKey('a', async (r) => {
        await r.setLc(candidate(ts(4)));
        check(await r.putEntry(e4, charge('o', 10)), 'putEntry without quota must store');
        await r.putEntry(e3, charge('o', 10));
      });
      await s.withKey('a', async (r) => {
        const lc = await r.getLc();
        check(lc !== undefined && candidatesEqual(lc, candidate(ts(4))), 'lc not read back whole (certificate, grant, proof)');
        sameEntry(await r.getEntry(ts(4)), e4, 'entry 4', true);
        sameEntry(await r.getEntry(ts(3)), e3, 'entry 3 (empty fragment, no grant)', true);
        sameEntry(await r.getEntryMeta(ts(4)), e4, 'entry 4 metadata', false);
        check((await r.getEntry(ts(4, 2))) === undefined, 'an entry under another writer id');
        check((await r.getEntry(ts(5))) === undefined, 'an entry under another timestamp');
      });
      await s.withKey('b', async (r) => {
        check((await r.getLc()) === undefined && (await r.getEntry(ts(4))) === undefined, 'keys must be independent');
      });
    }),
    on('keys that share prefixes or hold odd characters stay apart', async ({ storage: s }) => {
      const keys = ['a', 'a:', 'a:1', '1:a', 'ü∂', 'a\u0000b', 'k;', ''];
      await Promise.all(keys.map((k, i) => s.withKey(k, (r) => r.putEntry(entry(ts(1), i + 1), charge('o', 1)))));
      for (const [i, k] of keys.entries()) {
        const e = await s.withKey(k, (r) => r.getEntry(ts(1)));
        check(e?.fragment.length === i + 1, `key ${JSON.stringify(k)} read another key's entry`);
      }
    }),
    on(
      'list: keys with lc in code point order, by prefix, after a key, in pages, with lc and its cross-checksum',
      async ({ storage: s }) => {
        // Code point order puts U+10000 (a surrogate pair in UTF-16) after U+FFFD.
        const names = ['p/b', 'p/a', 'p/\u{10000}', 'p/\ufffd', 'p0', 'p', 'q/a', 'p/c'];
        for (const [i, k] of names.entries()) {
          await s.withKey(k, async (r) => {
            await r.putEntry(entry(ts(i + 1)), charge('o', 1));
            await r.setLc(candidate(ts(i + 1)));
          });
        }
        // Written back (no entry here), and one still being written (no lc): listed without cc, and not at all.
        await s.withKey('p/d', (r) => r.setLc(candidate(ts(20))));
        await s.withKey('p/e', async (r) => void (await r.putEntry(entry(ts(21)), charge('o', 1))));
        const all = await s.list('p/', '', 100);
        const got = all.keys.map((k) => k.key);
        const want = ['p/a', 'p/b', 'p/c', 'p/d', 'p/\ufffd', 'p/\u{10000}'];
        check(JSON.stringify(got) === JSON.stringify(want) && !all.more, `list('p/') gave ${JSON.stringify(got)}, more=${all.more}`);
        const a = all.keys[0]!;
        check(
          candidatesEqual(a.lc, candidate(ts(2))) && a.cc?.valueLength === entry(ts(2)).cc.valueLength,
          'list must carry lc and its cc',
        );
        check(all.keys[3]!.cc === undefined, "a key whose lc's entry is not here is listed without a cross-checksum");
        const page1 = await s.list('p/', '', 2);
        check(page1.keys.map((k) => k.key).join() === 'p/a,p/b' && page1.more, 'a page of 2 with more');
        const page2 = await s.list('p/', 'p/b', 3);
        check(
          page2.keys.map((k) => k.key).join() === 'p/c,p/d,p/\ufffd' && page2.more,
          `page after p/b: ${page2.keys.map((k) => k.key).join()}`,
        );
        const last = await s.list('p/', 'p/\ufffd', 3);
        check(last.keys.map((k) => k.key).join() === 'p/\u{10000}' && !last.more, 'the last page has no more');
        const everything = await s.list('', '', 100);
        check(everything.keys.length === names.length + 1, `list('') lists every key with lc, got ${everything.keys.length}`);
        check((await s.list('p/', 'p/\u{10000}', 10)).keys.length === 0 && (await s.list('r', '', 10)).keys.length === 0, 'empty ranges');
      },
    ),
    on('list: reads at most maxScan key records, with lc or not, and says which it read last', async ({ storage: s }) => {
      // q/0 … q/9; only q/3 and q/7 completed a write, the others hold writes in progress.
      for (let i = 0; i < 10; i++) {
        await s.withKey(`q/${i}`, async (r) => {
          await r.putEntry(entry(ts(i + 1)), charge('o', 1));
          if (i === 3 || i === 7) await r.setLc(candidate(ts(i + 1)));
        });
      }
      const names = (l: { keys: readonly { key: string }[] }) => l.keys.map((k) => k.key).join();
      const first = await s.list('q/', '', 5, 4);
      check(names(first) === 'q/3' && first.more && first.resumeAfter === 'q/3', `first 4 records: ${JSON.stringify(first)}`);
      const second = await s.list('q/', 'q/3', 5, 3);
      check(
        names(second) === '' && second.more && second.resumeAfter === 'q/6',
        `q/4 … q/6 hold no lc: ${names(second)}, ${second.resumeAfter}`,
      );
      const third = await s.list('q/', 'q/6', 5, 4);
      check(names(third) === 'q/7' && !third.more && third.resumeAfter === undefined, `the rest: ${names(third)}, more=${third.more}`);
      // The limit is reached before the bound: more, and no resume key (the last key listed is where to go on).
      const limited = await s.list('q/', '', 1, 10);
      check(names(limited) === 'q/3' && limited.more && limited.resumeAfter === undefined, `limit 1: ${JSON.stringify(limited)}`);
      const everything = await s.list('q/', '', 5);
      check(names(everything) === 'q/3,q/7' && !everything.more, 'the default bound reads these ten keys');
    }),
    on('a callback reads its own writes, and deletes of its own puts', async ({ storage: s }) => {
      await s.withKey('k', async (r) => {
        await r.setLc(candidate(ts(1)));
        check((await r.getLc())?.ts.num === 1, 'lc written in the callback must read back in it');
        await r.putEntry(entry(ts(1)), charge('o', 5));
        sameEntry(await r.getEntry(ts(1)), entry(ts(1)), 'an entry put in the callback', true);
        await r.putEntry(entry(ts(2)), charge('o', 5));
        await r.deleteEntry(ts(2));
        check((await r.getEntry(ts(2))) === undefined, 'an entry deleted in the callback must be gone in it');
      });
      check(s.usage('o').bytes === 5, `usage must count the one entry kept, got ${s.usage('o').bytes}`);
    }),
    on(
      'the state of a key keeps no view into the buffers of a request (a cached state would keep whole frames alive)',
      async ({ storage: s }) => {
        const frame = new ViewSlicing(1 << 20);
        await s.withKey('k', async (r) => {
          await r.putEntry(viewsInto(entry(ts(1)), frame), charge('o', 5));
          await r.setLc(viewsInto(candidate(ts(1)), frame, { offset: 1 << 19 }));
          await r.putEntry(viewsInto(entry(ts(2)), frame, { offset: 3 << 18 }), charge('o', 5));
          await r.deleteEntry(viewsInto(ts(2), frame, { offset: 7 << 17 }));
        });
        await s.withKey('k', async (r) => {
          check(!holds(await r.index(), frame.buffer), 'the index holds a view into a request');
          check(!holds(await r.getLc(), frame.buffer), 'lc holds a view into a request');
          check(!holds(await r.getCollected(), frame.buffer), 'the collected mark holds a view into a request');
        });
      },
    ),
    on('callbacks on one key never interleave, other keys run meanwhile; the result is returned', async ({ storage: s }) => {
      const active = new Map<string, number>();
      let maxSameKey = 0;
      let overall = 0;
      let maxOverall = 0;
      const task = (key: string, i: number) =>
        s.withKey(key, async (r) => {
          const now = (active.get(key) ?? 0) + 1;
          active.set(key, now);
          maxSameKey = Math.max(maxSameKey, now);
          maxOverall = Math.max(maxOverall, ++overall);
          // A read-modify-write with a pause in the middle: lost updates if not exclusive.
          const lc = await r.getLc();
          await sleep(1);
          await r.setLc(candidate(ts((lc?.ts.num ?? 0) + 1)));
          active.set(key, now - 1);
          overall--;
          return i;
        });
      const keys = ['x', 'y', 'z'];
      const results = await Promise.all(Array.from({ length: 30 }, (_, i) => task(keys[i % keys.length]!, i)));
      check(maxSameKey === 1, 'two callbacks on one key ran at once');
      check(maxOverall > 1, 'callbacks on different keys must run concurrently');
      check(
        results.every((r, i) => r === i),
        'withKey must resolve to the callback result',
      );
      for (const k of keys) check((await s.withKey(k, (r) => r.getLc()))?.ts.num === 10, 'a read-modify-write was lost');
    }),
    on('a failed callback rejects with its error, leaves nothing behind and the key usable', async ({ storage: s }) => {
      const boom = new Error('boom');
      const err = await s
        .withKey('k', async (r) => {
          await r.setLc(candidate(ts(7)));
          await r.putEntry(entry(ts(7)), charge('o', 10));
          throw boom;
        })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      check(err === boom, 'the callback error must propagate');
      await s.withKey('k', async (r) => {
        check((await r.getLc()) === undefined && (await r.getEntry(ts(7))) === undefined, 'a failed callback must leave nothing behind');
      });
      check(s.usage('o').bytes === 0 && s.usage('o').keys === 0, 'a failed callback must give its charge back');
      await s.withKey('k', (r) => r.setLc(candidate(ts(8))));
      check((await s.withKey('k', (r) => r.getLc()))?.ts.num === 8, 'the key must stay usable');
    }),
    on('a record used after its callback settled is refused', async ({ storage: s }) => {
      let leaked: KeyRecord | undefined;
      await s.withKey('k', async (r) => {
        leaked = r;
      });
      const err = await leaked!.setLc(candidate(ts(1))).then(
        () => undefined,
        (e: unknown) => e,
      );
      check((err as { code?: string } | undefined)?.code === 'STORAGE_CLOSED', 'a stale record must reject with STORAGE_CLOSED');
    }),
    on('entries are charged to their owner: bytes per entry, one key per key', async ({ storage: s }) => {
      await s.withKey('a', async (r) => {
        await r.putEntry(entry(ts(1)), charge('alice', 100));
        await r.putEntry(entry(ts(2)), charge('alice', 50));
      });
      await s.withKey('b', (r) => r.putEntry(entry(ts(1)), charge('alice', 7)));
      await s.withKey('c', (r) => r.putEntry(entry(ts(1)), charge('bob', 1)));
      const a = s.usage('alice');
      check(a.bytes === 157 && a.keys === 2, `alice should have 157 bytes in 2 keys, has ${a.bytes} in ${a.keys}`);
      check(s.usage('bob').keys === 1 && s.owners().size === 2, 'bob should have one key, and there are two owners');
    }),
    on('a put over quota stores nothing and charges nothing', async ({ storage: s }) => {
      const quota = { bytes: 100, keys: 2 };
      const stored = await s.withKey('a', async (r) => [
        await r.putEntry(entry(ts(1)), charge('o', 60, quota)),
        await r.putEntry(entry(ts(2)), charge('o', 60, quota)),
      ]);
      check(stored.join() === 'true,false', 'the second put exceeds 100 bytes and must be refused');
      await s.withKey('a', async (r) => check((await r.getEntry(ts(2))) === undefined, 'a refused entry must not be stored'));
      check(await s.withKey('b', (r) => r.putEntry(entry(ts(1)), charge('o', 10, quota))), 'a second key fits');
      check(!(await s.withKey('c', (r) => r.putEntry(entry(ts(1)), charge('o', 10, quota)))), 'a third key exceeds keys: 2');
      const u = s.usage('o');
      check(u.bytes === 70 && u.keys === 2, `usage must count only what was stored: 70 bytes, 2 keys; got ${u.bytes}, ${u.keys}`);
    }),
    on('concurrent puts of different keys never overshoot a quota', async ({ storage: s }) => {
      const quota = { bytes: 1000 };
      const stored = await Promise.all(
        Array.from({ length: 20 }, (_, i) => s.withKey(`k${i}`, (r) => r.putEntry(entry(ts(1)), charge('o', 100, quota)))),
      );
      check(
        stored.filter(Boolean).length === 10,
        `exactly 10 of 20 puts of 100 bytes fit 1000 bytes, ${stored.filter(Boolean).length} did`,
      );
      check(s.usage('o').bytes === 1000, 'usage must be exactly the quota');
    }),
    on(
      'the index lists entries oldest first; deleting one removes it, gives its bytes back and raises the collected mark',
      async ({ storage: s }) => {
        await s.withKey('a', async (r) => {
          for (const num of [3, 1, 2]) await r.putEntry(entry(ts(num)), charge('o', 10 * num));
          await r.putEntry(entry(ts(4), 0, true), charge('o', 1));
        });
        const index = await s.withKey('a', (r) => r.index());
        check(index.map((e) => e.ts.num).join() === '1,2,3,4', `index must be oldest first, got ${index.map((e) => e.ts.num).join()}`);
        check(index.map((e) => e.bytes).join() === '10,20,30,1', 'index must carry the bytes charged');
        await s.withKey('a', async (r) => {
          await r.deleteEntry(ts(2));
          await r.deleteEntry(ts(1));
          // Deleting what is not there is a no-op.
          await r.deleteEntry(ts(9));
        });
        await s.withKey('a', async (r) => {
          check((await r.getEntry(ts(2))) === undefined && (await r.getEntryMeta(ts(2))) === undefined, 'a deleted entry must be gone');
          check((await r.index()).map((e) => e.ts.num).join() === '3,4', 'the index must drop deleted entries');
          check((await r.getCollected())?.num === 2, 'the collected mark is the highest deleted timestamp');
        });
        check(
          s.usage('o').bytes === 31 && s.usage('o').keys === 1,
          `usage after deletes must be 31 bytes in 1 key, got ${s.usage('o').bytes}`,
        );
        await s.withKey('a', async (r) => {
          await r.deleteEntry(ts(3));
          await r.deleteEntry(ts(4));
        });
        check(s.usage('o').bytes === 0 && s.usage('o').keys === 0, 'a key whose entries are all deleted is no longer charged');
        await s.withKey('a', async (r) => check((await r.getCollected())?.num === 4, 'the collected mark must survive the last delete'));
      },
    ),
    on('concurrent writers of many keys all land', async (h) => {
      const before = h.commits?.() ?? 0;
      const count = 64;
      await Promise.all(
        Array.from({ length: count }, (_, i) =>
          h.storage.withKey(`key-${i}`, async (r) => {
            await r.putEntry(entry(ts(1), 1000), charge('o', 1));
            await r.setLc(candidate(ts(1)));
          }),
        ),
      );
      if (supports.groupCommit) {
        const batches = (h.commits?.() ?? 0) - before;
        check(batches > 0 && batches < count / 2, `64 concurrent callbacks must share commits, took ${batches}`);
      }
      const s = supports.durable ? await h.reopen!() : h.storage;
      for (let i = 0; i < count; i++) {
        await s.withKey(`key-${i}`, async (r) => {
          check((await r.getLc())?.ts.num === 1 && (await r.getEntry(ts(1)))?.fragment.length === 1000, `key-${i} lost its writes`);
        });
      }
    }),
  ];
  checks.push(
    on('stripes of one timestamp are entries of their own, read by stripe, indexed, and collected together', async (h) => {
      const s = h.storage;
      const layout = { valueLength: 3 * 65_536, stripeSize: 65_536, digests: [fill(32, 1, 12), fill(32, 2, 12), fill(32, 3, 12)] };
      const stripes = [
        { ...entry(ts(2), 7), layout },
        { ...entry(ts(2), 5), stripe: 1 },
        { ...entry(ts(2), 6), stripe: 2 },
      ];
      await s.withKey('k', async (r) => {
        await r.putEntry(entry(ts(1), 4), charge('o', 10));
        for (const e of stripes.slice(1)) check(await r.putEntry(e, charge('o', 10)), 'putEntry of a stripe must store');
      });
      await s.withKey('k', (r) => r.putEntry(stripes[0]!, charge('o', 10)));
      check(s.usage('o').bytes === 40 && s.usage('o').keys === 1, `usage ${JSON.stringify(s.usage('o'))}: four entries of one key`);
      await s.withKey('k', async (r) => {
        for (const e of stripes) sameEntry(await r.getEntry(ts(2), e.stripe), e, `stripe ${e.stripe}`, true);
        sameEntry(await r.getEntryMeta(ts(2)), stripes[0]!, 'stripe 0 metadata (with its layout)', false);
        check((await r.getEntry(ts(2), 3)) === undefined && (await r.getEntry(ts(1), 1)) === undefined, 'a stripe never stored');
        const index = (await r.index()).map((e) => `${e.ts.num}/${e.head ? 'h' : '-'}${e.stripes}^${e.top}`);
        check(index.join(' ') === '1/h0^0 2/h2^2', `index ${index.join(' ')}: one entry per write, its head and stripes`);
        await r.deleteEntry(ts(2));
      });
      await s.withKey('k', async (r) => {
        check(
          (await r.index()).length === 1 && (await r.getEntry(ts(2), 1)) === undefined,
          'collecting a timestamp removes all its stripes',
        );
        check((await r.getCollected())?.num === 2, 'the collected mark is the timestamp');
      });
      check(s.usage('o').bytes === 10, `usage ${s.usage('o').bytes} after collecting the stripes, want 10`);
      if (h.reopen) {
        const again = await h.reopen();
        await again.withKey('k', async (r) => check((await r.index()).length === 1, 'the collection survives reopening'));
      }
    }),
    on('keys holding stripes without a stripe 0 are listed as unfinished until the stripe 0 arrives or they are collected', async (h) => {
      const s = h.storage;
      const unfinished = async (store: ServerStorage) => {
        const keys: string[] = [];
        for await (const k of store.unfinishedKeys()) keys.push(k);
        return keys.sort().join(' ');
      };
      await s.withKey('up/a', (r) => r.putEntry({ ...entry(ts(1), 5), stripe: 1 }, charge('o', 1, {}, 77)));
      await s.withKey('up/b', (r) => r.putEntry({ ...entry(ts(1), 5), stripe: 2 }, charge('o', 1)));
      await s.withKey('up/c', (r) => r.putEntry(entry(ts(1), 5), charge('o', 1)));
      check((await unfinished(s)) === 'up/a up/b', `unfinished keys: ${await unfinished(s)}`);
      await s.withKey('up/a', async (r) => {
        check((await r.index())[0]?.touched === 77, 'the index keeps when a write was last stored (Charge.at)');
        await r.putEntry(entry(ts(1), 5), charge('o', 1));
      });
      await s.withKey('up/b', (r) => r.deleteEntry(ts(1), { mark: false }));
      await s.withKey('up/b', async (r) => check((await r.getCollected()) === undefined, 'deleteEntry with mark: false raises no mark'));
      check((await unfinished(s)) === '', `unfinished keys after the head and a collection: ${await unfinished(s)}`);
      await s.withKey('up/d', (r) => r.putEntry({ ...entry(ts(3), 5), stripe: 1 }, charge('o', 1)));
      if (h.reopen) {
        const again = await h.reopen();
        check((await unfinished(again)) === 'up/d', 'unfinished keys survive reopening');
      }
    }),
    on('close finishes running callbacks, then refuses new ones with STORAGE_CLOSED', async (h) => {
      const s = h.storage;
      if (!(s instanceof AbstractStorage)) return;
      let finished = false;
      const running = s.withKey('k', async (r) => {
        await sleep(20);
        await r.setLc(candidate(ts(1)));
        finished = true;
      });
      const closed = s.close();
      const err = await s
        .withKey('k', async () => 1)
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      check((err as { code?: string } | undefined)?.code === 'STORAGE_CLOSED', 'a callback after close must reject with STORAGE_CLOSED');
      await running;
      await closed;
      check(finished, 'a running callback must finish before close resolves');
    }),
    on('keeps count of keys with entries, entries and the longest fragment', async ({ storage: s }) => {
      if (!(s instanceof AbstractStorage)) return;
      await s.withKey('a', async (r) => {
        await r.putEntry(entry(ts(1), 10), charge('o', 1));
        await r.putEntry(entry(ts(2), 300), charge('o', 1));
        await r.setLc(candidate(ts(1)));
      });
      await s.withKey('b', (r) => r.putEntry(entry(ts(1), 20), charge('o', 1)));
      await s.withKey('c', (r) => r.setLc(candidate(ts(1))));
      check(
        s.keyCount === 2 && s.historyEntryCount === 3 && s.largestFragmentBytes === 300,
        `counts ${s.keyCount}/${s.historyEntryCount}/${s.largestFragmentBytes}, want 2/3/300`,
      );
      await s.withKey('b', (r) => r.deleteEntry(ts(1)));
      check(s.keyCount === 1 && s.historyEntryCount === 2, "deleting a key's last entry uncounts the key");
    }),
    on('a callback on a key starts only once the previous one on that key is durable', async ({ storage: s }) => {
      const order: string[] = [];
      const first = s
        .withKey('k', async (r) => {
          await r.setLc(candidate(ts(1)));
          order.push('first returned');
        })
        .then(() => order.push('first durable'));
      const second = s.withKey('k', async (r) => {
        order.push('second started');
        check((await r.getLc())?.ts.num === 1, "the second callback must see the first one's lc");
      });
      await Promise.all([first, second]);
      check(order.indexOf('second started') > order.indexOf('first returned'), `order ${order.join(', ')}`);
    }),
  );
  if (supports.durable) {
    checks.push(
      on('what withKey acknowledged survives reopening, exactly', async (h) => {
        const written: [string, Candidate, HistoryEntry][] = [];
        await Promise.all(
          Array.from({ length: 20 }, async (_, i) => {
            const key = `durable-${i}`;
            const c = candidate(ts(i + 1));
            const e = entry(c.ts, 10 * i);
            await h.storage.withKey(key, async (r) => {
              await r.putEntry(e, charge('o', 1));
              await r.setLc(c);
            });
            written.push([key, c, e]);
          }),
        );
        const s = await h.reopen!();
        for (const [key, c, e] of written) {
          await s.withKey(key, async (r) => {
            const lc = await r.getLc();
            check(lc !== undefined && candidatesEqual(lc, c), `${key}: lc changed across reopening`);
            sameEntry(await r.getEntry(c.ts), e, `${key}'s entry after reopening`, true);
          });
        }
      }),
      on('usage per owner, counts and collected marks survive reopening', async (h) => {
        await h.storage.withKey('a', async (r) => {
          await r.putEntry(entry(ts(1), 50), charge('alice', 100));
          await r.putEntry(entry(ts(2)), charge('alice', 50));
          await r.putEntry(entry(ts(3)), charge('alice', 25));
        });
        await h.storage.withKey('a', (r) => r.deleteEntry(ts(1)));
        await h.storage.withKey('b', (r) => r.putEntry(entry(ts(1)), charge('bob', 7)));
        await h.storage.withKey('c', async (r) => {
          await r.putEntry(entry(ts(1)), charge('bob', 1));
          await r.deleteEntry(ts(1));
        });
        const s = await h.reopen!();
        check(s.usage('alice').bytes === 75 && s.usage('alice').keys === 1, `alice after reopening: ${JSON.stringify(s.usage('alice'))}`);
        check(
          s.usage('bob').bytes === 7 && s.usage('bob').keys === 1 && s.owners().size === 2,
          `bob after reopening: ${JSON.stringify(s.usage('bob'))}`,
        );
        if (s instanceof AbstractStorage) {
          check(s.keyCount === 2 && s.historyEntryCount === 3, `counts after reopening ${s.keyCount}/${s.historyEntryCount}, want 2/3`);
          check(s.largestFragmentBytes >= 50, 'the longest fragment is remembered');
        }
        await s.withKey('a', async (r) => check((await r.getCollected())?.num === 1, 'the collected mark survives reopening'));
      }),
    );
  }
  return checks;
}
