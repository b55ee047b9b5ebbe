/**
 * The behaviour every {@link ServerStorage} backend must have, as framework-free checks
 * (in the manner of abstract-level's suite): a backend's tests run each one, e.g.
 * `for (const c of storageConformance(make)) it(c.name, c.run)`. Backends are made for
 * clusters of `n = 4`.
 */
import type { Candidate } from './candidate.js';
import type { WriteCertificate } from './certificate.js';
import type { HistoryEntry } from './messages.js';
import type { Quota } from './policy.js';
import type { ServerStorage } from './storage.js';
import type { Timestamp } from './timestamp.js';

/** One named check; `run` rejects on failure. */
export interface ConformanceCheck {
  readonly name: string;
  run(): Promise<void>;
}

function fail(message: string): never {
  throw new Error(`storage conformance: ${message}`);
}

const n = 4;
const ts = (num: number): Timestamp => ({ num, writerId: new Uint8Array(32).fill(num) });
const cert = (num: number): WriteCertificate => ({
  nonceHash: new Uint8Array(32).fill(num),
  ccDigest: new Uint8Array(32).fill(2),
  signer: new Uint8Array(32).fill(3),
  signature: new Uint8Array(64).fill(num),
  grant: num % 2 === 0 ? { issuer: new Uint8Array(32).fill(5), grantee: new Uint8Array(32).fill(3), prefix: `~p${num}/`, expiresAt: 1e12 + num, signature: new Uint8Array(64).fill(6) } : undefined,
});
const candidate = (num: number): Candidate => ({
  ts: ts(num),
  nonce: new Uint8Array(32).fill(num + 1),
  cert: cert(num),
  proof: [0, 2, 3].map((server) => ({ server, signature: new Uint8Array(64).fill(server + num) })),
});
const entry = (num: number): HistoryEntry => ({
  ts: ts(num),
  stripe: 0,
  fragment: Uint8Array.of(num, 1, 2),
  cc: { tombstone: false, valueLength: 5, hashes: Array.from({ length: n }, (_, i) => new Uint8Array(32).fill(i)) },
  cert: cert(num),
});
const unlimited: Quota = {};
const charge = (owner: string, bytes: number, quota: Quota = unlimited) => ({ owner, bytes, quota });

/** The checks, each on a fresh storage from `make`. */
export function storageConformance(make: () => ServerStorage | Promise<ServerStorage>): ConformanceCheck[] {
  return [
    {
      name: 'an unknown key has lc = c0 and no history; nobody has usage',
      async run() {
        const s = await make();
        await s.withKey('k', async (r) => {
          if ((await r.getLc()) !== undefined) fail('lc of a new key must be undefined');
          if ((await r.getEntry(ts(1))) !== undefined) fail('history of a new key must be empty');
        });
        if (s.usage('o').bytes !== 0 || s.owners().size !== 0) fail('a new storage charges nobody');
      },
    },
    {
      name: 'lc and history entries (with certificates and grants) read back per key',
      async run() {
        const s = await make();
        await s.withKey('a', async (r) => {
          await r.setLc(candidate(4));
          if (!(await r.putEntry(entry(4), charge('o', 10)))) fail('putEntry without quota must store');
          await r.putEntry(entry(3), charge('o', 10));
        });
        await s.withKey('a', async (r) => {
          const lc = await r.getLc();
          if (lc?.ts.num !== 4 || lc.cert.grant?.prefix !== '~p4/' || lc.cert.signature[0] !== 4) fail('lc not read back whole');
          if (lc.proof.map((r) => `${r.server}:${r.signature[0]}`).join() !== '0:4,2:6,3:7') fail("lc's store proof not read back whole");
          const e = await r.getEntry(ts(4));
          if (!e || e.fragment[0] !== 4 || e.cc.valueLength !== 5 || e.cert.grant?.expiresAt !== 1e12 + 4) fail('history entry not read back whole');
          if ((await r.getEntry(ts(3)))?.cert.grant !== undefined) fail('an entry without a grant read back with one');
          if (await r.getEntry(ts(5))) fail('entry under another timestamp');
        });
        await s.withKey('b', async (r) => {
          if ((await r.getLc()) !== undefined) fail('keys must be independent');
        });
      },
    },
    {
      name: 'callbacks on one key never interleave; the result is returned',
      async run() {
        const s = await make();
        let inside = 0;
        const results = await Promise.all(
          Array.from({ length: 5 }, (_, i) =>
            s.withKey('k', async (r) => {
              if (++inside !== 1) fail('two callbacks on one key ran at once');
              const lc = await r.getLc();
              await r.setLc(candidate((lc?.ts.num ?? 0) + 1));
              inside--;
              return i;
            }),
          ),
        );
        if (results.join() !== '0,1,2,3,4') fail('withKey must resolve to the callback result');
        await s.withKey('k', async (r) => {
          if ((await r.getLc())?.ts.num !== 5) fail('a read-modify-write was lost');
        });
      },
    },
    {
      name: 'a failed callback rejects and leaves the key usable',
      async run() {
        const s = await make();
        const err = await s.withKey('k', () => Promise.reject(new Error('boom'))).then(
          () => undefined,
          (e: unknown) => e,
        );
        if (!(err instanceof Error) || err.message !== 'boom') fail('the callback error must propagate');
        await s.withKey('k', async (r) => r.getLc());
      },
    },
    {
      name: 'entries are charged to their owner: bytes per entry, one key per key',
      async run() {
        const s = await make();
        await s.withKey('a', async (r) => {
          await r.putEntry(entry(1), charge('alice', 100));
          await r.putEntry(entry(2), charge('alice', 50));
        });
        await s.withKey('b', (r) => r.putEntry(entry(1), charge('alice', 7)));
        await s.withKey('c', (r) => r.putEntry(entry(1), charge('bob', 1)));
        const a = s.usage('alice');
        if (a.bytes !== 157 || a.keys !== 2) fail(`alice should have 157 bytes in 2 keys, has ${a.bytes} in ${a.keys}`);
        if (s.usage('bob').keys !== 1 || s.owners().size !== 2) fail('bob should have one key, and there are two owners');
      },
    },
    {
      name: 'a put over quota stores nothing and charges nothing',
      async run() {
        const s = await make();
        const quota = { bytes: 100, keys: 2 };
        const stored = await s.withKey('a', async (r) => [
          await r.putEntry(entry(1), charge('o', 60, quota)),
          await r.putEntry(entry(2), charge('o', 60, quota)),
        ]);
        if (stored.join() !== 'true,false') fail('the second put exceeds 100 bytes and must be refused');
        await s.withKey('a', async (r) => {
          if (await r.getEntry(ts(2))) fail('a refused entry must not be stored');
        });
        if (!(await s.withKey('b', (r) => r.putEntry(entry(1), charge('o', 10, quota))))) fail('a second key fits');
        if (await s.withKey('c', (r) => r.putEntry(entry(1), charge('o', 10, quota)))) fail('a third key exceeds keys: 2');
        const u = s.usage('o');
        if (u.bytes !== 70 || u.keys !== 2) fail(`usage must count only what was stored: 70 bytes, 2 keys; got ${u.bytes}, ${u.keys}`);
      },
    },
    {
      name: 'concurrent puts of different keys never overshoot a quota',
      async run() {
        const s = await make();
        const quota = { bytes: 1000 };
        const stored = await Promise.all(Array.from({ length: 20 }, (_, i) => s.withKey(`k${i}`, (r) => r.putEntry(entry(1), charge('o', 100, quota)))));
        if (stored.filter(Boolean).length !== 10) fail(`exactly 10 of 20 puts of 100 bytes fit 1000 bytes, ${stored.filter(Boolean).length} did`);
        if (s.usage('o').bytes !== 1000) fail('usage must be exactly the quota');
      },
    },
    {
      name: 'the index lists entries oldest first; deleting one removes it, gives its bytes back and raises the collected mark',
      async run() {
        const s = await make();
        await s.withKey('a', async (r) => {
          for (const num of [3, 1, 2]) await r.putEntry(entry(num), charge('o', 10 * num));
          await r.putEntry({ ...entry(4), cc: { ...entry(4).cc, tombstone: true, valueLength: 0 } }, charge('o', 1));
        });
        const index = await s.withKey('a', (r) => r.index());
        if (index.map((e) => e.ts.num).join() !== '1,2,3,4') fail(`index must be oldest first, got ${index.map((e) => e.ts.num).join()}`);
        if (index.map((e) => e.bytes).join() !== '10,20,30,1' || index.map((e) => e.tombstone).join() !== 'false,false,false,true') fail('index must carry bytes and tombstones');
        await s.withKey('a', async (r) => {
          await r.deleteEntry(ts(2));
          await r.deleteEntry(ts(1));
          // Deleting what is not there is a no-op.
          await r.deleteEntry(ts(9));
        });
        await s.withKey('a', async (r) => {
          if (await r.getEntry(ts(2))) fail('a deleted entry must be gone');
          if ((await r.index()).map((e) => e.ts.num).join() !== '3,4') fail('the index must drop deleted entries');
          if ((await r.getCollected())?.num !== 2) fail('the collected mark is the highest deleted timestamp');
        });
        if (s.usage('o').bytes !== 31 || s.usage('o').keys !== 1) fail(`usage after deletes must be 31 bytes in 1 key, got ${s.usage('o').bytes}`);
        await s.withKey('a', async (r) => {
          await r.deleteEntry(ts(3));
          await r.deleteEntry(ts(4));
        });
        if (s.usage('o').bytes !== 0 || s.usage('o').keys !== 0) fail('a key whose entries are all deleted is no longer charged');
        await s.withKey('a', async (r) => {
          if ((await r.getCollected())?.num !== 4) fail('the collected mark must survive the last delete');
        });
      },
    },
    {
      name: 'a callback that fails after a put gives the charge back',
      async run() {
        const s = await make();
        await s
          .withKey('a', async (r) => {
            await r.putEntry(entry(1), charge('o', 10));
            throw new Error('boom');
          })
          .catch(() => undefined);
        const u = s.usage('o');
        // A backend may or may not have made the entry durable before the failure; its
        // charge must match what it kept.
        const kept = await s.withKey('a', (r) => r.getEntry(ts(1)));
        if (kept ? u.bytes !== 10 : u.bytes !== 0) fail(`usage ${u.bytes} does not match what was kept (${kept ? 'the entry' : 'nothing'})`);
      },
    },
  ];
}
