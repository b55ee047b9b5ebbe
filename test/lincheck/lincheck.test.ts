import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { LINEARIZABLE, NOT_LINEARIZABLE } from './histories.js';
import { checkLinearizable, checkRegister, type RegisterOp, type RegisterValue } from './lincheck.js';

/** Tries every order: the definition of linearizability, for small histories. */
function bruteForce(ops: readonly RegisterOp[]): boolean {
  const done = ops.filter((o) => o.ret !== undefined).length;
  const used = new Array<boolean>(ops.length).fill(false);
  const search = (state: RegisterValue, placed: number, completedPlaced: number): boolean => {
    if (completedPlaced === done) return true;
    for (let i = 0; i < ops.length; i++) {
      if (used[i]) continue;
      const op = ops[i]!;
      // op may go next only if no unplaced operation returned before op was called.
      if (ops.some((o, j) => !used[j] && j !== i && o.ret !== undefined && o.ret < op.call)) continue;
      if (op.kind === 'read' && op.value !== state) continue;
      used[i] = true;
      const ok = search(op.kind === 'write' ? op.value : state, placed + 1, completedPlaced + (op.ret !== undefined ? 1 : 0));
      used[i] = false;
      if (ok) return true;
    }
    return false;
  };
  return search(null, 0, 0);
}

const history = fc
  .array(
    fc.record({
      kind: fc.constantFrom('write' as const, 'read' as const),
      value: fc.constantFrom<RegisterValue>('x', 'y', 'z', null),
      start: fc.nat({ max: 20 }),
      length: fc.nat({ max: 8 }),
      crashed: fc.boolean(),
    }),
    { maxLength: 7 },
  )
  .map((raw) => {
    // Distinct times: call = 2 * (slot) spread, ret after call.
    let time = 0;
    const events = raw.flatMap((o, i) => [
      { i, at: o.start * 2, call: true },
      { i, at: o.start * 2 + 2 * o.length + 1, call: false },
    ]);
    events.sort((a, b) => a.at - b.at || a.i - b.i);
    const call = new Map<number, number>();
    const ret = new Map<number, number>();
    for (const e of events) (e.call ? call : ret).set(e.i, ++time);
    return raw.map((o, i): RegisterOp => ({
      key: 'k',
      client: `c${i}`,
      kind: o.kind,
      value: o.value,
      call: call.get(i)!,
      ret: o.kind === 'write' && o.crashed ? undefined : ret.get(i)!,
    }));
  });

describe('linearizability checker', () => {
  for (const [name, ops] of Object.entries(LINEARIZABLE)) {
    it(`accepts: ${name}`, () => expect(checkLinearizable(ops).ok).toBe(true));
  }
  for (const [name, ops] of Object.entries(NOT_LINEARIZABLE)) {
    it(`rejects: ${name}`, () => expect(checkLinearizable(ops).ok).toBe(false));
  }

  it('agrees with brute force on random small histories', () => {
    fc.assert(
      fc.property(history, (ops) => {
        expect(checkRegister(ops).ok).toBe(bruteForce(ops));
      }),
      { numRuns: 3000 },
    );
  });

  it('finds both verdicts among the random histories (the property is not vacuous)', () => {
    const verdicts = fc.sample(history, { numRuns: 500, seed: 7 }).map((ops) => checkRegister(ops).ok);
    expect(verdicts.filter(Boolean).length).toBeGreaterThan(50);
    expect(verdicts.filter((v) => !v).length).toBeGreaterThan(50);
  });

  it('checks a 200-operation history quickly thanks to memoization', () => {
    const ops: RegisterOp[] = [];
    let time = 0;
    // Four clients, overlapping, each write followed by reads of it: linearizable.
    for (let round = 0; round < 50; round++) {
      const v = `v${round}`;
      const c = ++time;
      const rc = [++time, ++time, ++time];
      ops.push({ key: 'k', client: 'w', kind: 'write', value: v, call: c, ret: ++time });
      rc.forEach((call, j) => ops.push({ key: 'k', client: `r${j}`, kind: 'read', value: v, call, ret: ++time }));
    }
    const started = performance.now();
    expect(checkRegister(ops).ok).toBe(true);
    expect(performance.now() - started).toBeLessThan(5000);
  });
});
