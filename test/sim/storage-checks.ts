/**
 * End-of-run checks on the correct servers' storage: the `lc` each must reach once it has
 * caught up, and that it did; that correct servers agree on the content of a timestamp;
 * and that garbage collection kept what it must and no more. What is checked as the run
 * goes, and linearizability, is in `checkers.ts`.
 */
import { compareTimestamps, TS0, type Server, type Timestamp } from '@powerstore/protocol';
import type { MemoryStorage } from '@powerstore/protocol/testing';
import type { Checker } from './checkers.js';

/**
 * Before the final catch-up, for each key: the timestamp every correct server's `lc` must
 * reach by the end. The latest honest write that completed, and the (t + 1)-th highest `lc`
 * among correct servers: at least t + 1 correct servers hold a write at least that high, so
 * any n − t answers to a listing name it (or a newer one).
 */
export async function lcFloors(
  checker: Checker,
  storages: readonly MemoryStorage[],
  correct: readonly number[],
  t: number,
): Promise<Map<string, Timestamp>> {
  const keys = new Set(correct.flatMap((i) => storages[i]!.keys()));
  const floors = new Map<string, Timestamp>();
  for (const key of keys) {
    const lcs: Timestamp[] = [];
    for (const i of correct) lcs.push((await storages[i]!.withKey(key, (r) => r.getLc()))?.ts ?? TS0);
    lcs.sort((a, b) => compareTimestamps(b, a));
    const done = checker.completedTop(key);
    floors.set(key, done && compareTimestamps(done, lcs[t]!) > 0 ? done : lcs[t]!);
  }
  for (const key of checker.completedKeys()) if (!floors.has(key)) floors.set(key, checker.completedTop(key)!);
  return floors;
}

/**
 * After the final catch-up: every completed write is on every correct server. For each
 * key, each correct server's `lc` reaches the key's floor ({@link lcFloors}: a newer write
 * may have superseded it), and the server holds `lc`'s entry (every stripe), unless its
 * writer encoded it inconsistently (no repair may store that).
 */
export async function checkConverged(
  checker: Checker,
  storages: readonly MemoryStorage[],
  servers: readonly Server[],
  correct: readonly number[],
  floors: ReadonlyMap<string, Timestamp>,
): Promise<void> {
  for (const [key, floor] of floors) {
    for (const i of correct) {
      const lc = await storages[i]!.withKey(key, (r) => r.getLc());
      if (compareTimestamps(lc?.ts ?? TS0, floor) < 0) {
        checker.violations.push(`catch-up: s${i}'s lc of ${key} is ${lc ? lc.ts.num : 'none'}, below the completed write at ${floor.num}`);
        continue;
      }
      if (lc && !checker.isUneven(key, lc.ts) && !(await servers[i]!.holds(key, lc.ts))) {
        const holders: string[] = [];
        for (const j of correct) if (await servers[j]!.holds(key, lc.ts)) holders.push(`s${j}`);
        checker.violations.push(
          `catch-up: s${i} does not hold the entry of its lc of ${key} (${lc.ts.num}) after catching up (correct servers holding it: ${holders.join(', ') || 'none'})`,
        );
      }
    }
  }
}

/** Garbage collection kept what it must and no more: below `lc`, at most δ entries, none below a completed delete. */
export async function checkHistoryBound(checker: Checker, server: string, storage: MemoryStorage, keep: number): Promise<void> {
  for (const key of storage.keys()) {
    const { lc, index } = await storage.withKey(key, async (r) => ({ lc: await r.getLc(), index: await r.index() }));
    if (!lc) continue;
    // Writes with their head: an upload without stripe 0 overtaken by a completed write (a
    // delete too) is kept while its stripes keep arriving, then deleted once idle (checked
    // by `unfinishedKept`).
    const below = index.filter((e) => compareTimestamps(e.ts, lc.ts) < 0 && e.head).length;
    // A completed delete erases everything below it, whether or not this server stored the delete.
    const bound = lc.cert.tombstone ? 0 : keep;
    if (below > bound)
      checker.violations.push(
        `history bound: ${server} keeps ${below} entries of ${key} below lc (δ = ${keep}${lc.cert.tombstone ? ', lc is a delete' : ''})`,
      );
  }
}

/** Two correct servers whose `lc` of a key has the same timestamp hold the same candidate. */
export async function checkLcAgreement(checker: Checker, storages: readonly MemoryStorage[]): Promise<void> {
  const seen = new Map<string, string>();
  for (const s of storages) {
    for (const key of s.keys()) {
      const lc = await s.withKey(key, (r) => r.getLc());
      if (!lc) continue;
      const id = `${key}@${lc.ts.num}:${Buffer.from(lc.ts.writerId).toString('hex')}`;
      // The delete flag too: a copy with it flipped is another content under the same signature.
      const sig = `${Buffer.from(lc.cert.signature).toString('hex')}${lc.cert.tombstone ? '/delete' : ''}`;
      const before = seen.get(id);
      if (before !== undefined && before !== sig) checker.violations.push(`two valid contents for one timestamp: ${id}`);
      seen.set(id, sig);
    }
  }
}
