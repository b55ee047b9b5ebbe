/**
 * The behaviour every {@link ServerStorage} backend must have, as framework-free checks
 * (in the manner of abstract-level's suite): a backend's tests run each one, e.g.
 * `for (const c of storageConformance(make)) it(c.name, c.run)`.
 */
import { initialCandidate, type Candidate } from './candidate.js';
import type { HistoryEntry } from './messages.js';
import type { ServerStorage } from './storage.js';

/** One named check; `run` rejects on failure. */
export interface ConformanceCheck {
  readonly name: string;
  run(): Promise<void>;
}

function fail(message: string): never {
  throw new Error(`storage conformance: ${message}`);
}

function candidate(num: number, n = 4): Candidate {
  const c0 = initialCandidate(n);
  return { ...c0, ts: { num, writerId: new Uint8Array(16).fill(num), mac: new Uint8Array(32).fill(num) } };
}

function entry(num: number): HistoryEntry {
  const c = candidate(num);
  return {
    ts: c.ts,
    stripe: 0,
    fragment: Uint8Array.of(num, 1, 2),
    cc: { tombstone: false, valueLength: 5, hashes: c.vec },
    nonceHash: new Uint8Array(32).fill(7),
    vec: c.vec,
  };
}

/** The checks, each on a fresh storage from `make`. */
export function storageConformance(make: () => ServerStorage | Promise<ServerStorage>): ConformanceCheck[] {
  return [
    {
      name: 'an unknown key has lc = c0 and no history',
      async run() {
        const s = await make();
        await s.withKey('k', async (r) => {
          if ((await r.getLc()) !== undefined) fail('lc of a new key must be undefined');
          if ((await r.getEntry(candidate(1).ts)) !== undefined) fail('history of a new key must be empty');
        });
      },
    },
    {
      name: 'lc and history entries read back per key',
      async run() {
        const s = await make();
        await s.withKey('a', async (r) => {
          await r.setLc(candidate(3));
          await r.putEntry(entry(3));
        });
        await s.withKey('a', async (r) => {
          if ((await r.getLc())?.ts.num !== 3) fail('lc not read back');
          const e = await r.getEntry(candidate(3).ts);
          if (!e || e.fragment[0] !== 3 || e.cc.valueLength !== 5) fail('history entry not read back');
          if (await r.getEntry(candidate(4).ts)) fail('entry under another timestamp');
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
  ];
}
