import { describe, expect, it } from 'vitest';
import { runBatch } from './run.js';
import { simulate } from './simulate.js';

// CI budget: 2000 seeds across t = 1..3 (seed % 3 picks t). A soak is `pnpm sim -- --seeds 100000`.
const SEEDS = Number(process.env.SIM_SEEDS ?? 2000);

describe('simulation', () => {
  it(`${SEEDS} seeded runs with Byzantine servers, crashing writers and a hostile network all pass`, async () => {
    const result = await runBatch({ first: 1, count: SEEDS });
    const report = result.failures.map((f) => `seed ${f.seed}: ${f.violations.join('; ')}\n  replay: ${f.replay}`).join('\n');
    expect(report).toBe('');
    expect(result.passed).toBe(SEEDS);
    // The runs must actually exercise the protocol, including the REPAIR round.
    expect(result.reads).toBeGreaterThan(SEEDS * 4);
    expect(result.writes).toBeGreaterThan(SEEDS * 3);
    expect(result.threeRoundReads).toBeGreaterThan(0);
  }, 600_000);

  it('300 hostile runs (t Byzantine servers, usually a Byzantine reader) all pass', async () => {
    const result = await runBatch({ first: 1_000_001, count: 300, hostile: true });
    expect(result.failures.map((f) => `seed ${f.seed}: ${f.violations.join('; ')}`)).toEqual([]);
    expect(result.threeRoundReads).toBeGreaterThan(0);
  }, 300_000);

  it('replays a seed exactly', async () => {
    const a = await simulate({ seed: 4242, t: 2 });
    const b = await simulate({ seed: 4242, t: 2 });
    expect(b.history).toEqual(a.history);
    expect(b.messages).toBe(a.messages);
    expect(b.byzantine).toEqual(a.byzantine);
  });

  it('covers every Byzantine behaviour, Byzantine readers and crashed writers over the CI seeds', async () => {
    const seen = new Set<string>();
    let crashed = 0;
    let mallory = 0;
    for (let seed = 1; seed <= 300; seed++) {
      const r = await simulate({ seed, t: (seed % 3) + 1 });
      r.byzantine.forEach((b) => seen.add(b.split(':')[1]!));
      crashed += r.crashedWriters;
      if (r.byzantineReader) mallory++;
    }
    const { BEHAVIOURS } = await import('./byzantine.js');
    expect([...seen].sort()).toEqual([...BEHAVIOURS].sort());
    expect(crashed).toBeGreaterThan(10);
    expect(mallory).toBeGreaterThan(10);
  }, 120_000);
});
