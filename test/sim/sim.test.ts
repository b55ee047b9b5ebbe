import { describe, expect, it } from 'vitest';
import { ATTACKS } from './hostile-clients.js';
import { BEHAVIOURS } from './byzantine.js';
import { runBatch } from './run.js';
import { simulate } from './simulate.js';

// CI budget: 900 seeds across t = 1..3 (seed % 3 picks t), 200 hostile and 200 listing runs, to keep `npm test` well
// under 30 minutes; `pnpm sim -- --seeds 2000` runs the batch this used to be, and a soak is `pnpm sim -- --seeds 100000`.
const SEEDS = Number(process.env.SIM_SEEDS ?? 900);
const HOSTILE_SEEDS = 200;
const LISTING_SEEDS = 200;

describe('simulation', () => {
  it(`${SEEDS} seeded runs with Byzantine servers, a hostile client, crashing writers and a hostile network, every honest client the client's own operation host, all pass`, async () => {
    const result = await runBatch({ first: 1, count: SEEDS });
    const report = result.failures.map((f) => `seed ${f.seed}: ${f.violations.join('; ')}\n  replay: ${f.replay}`).join('\n');
    expect(report).toBe('');
    expect(result.passed).toBe(SEEDS);
    // The runs must actually exercise the protocol: reads, writes, overlapping writes of
    // one session, writes refused for an expired grant, and forgeries refused.
    expect(result.reads).toBeGreaterThan(SEEDS * 4);
    expect(result.writes).toBeGreaterThan(SEEDS * 3);
    expect(result.overlappingWrites).toBeGreaterThan(SEEDS / 10);
    expect(result.failedWrites.GRANT_EXPIRED ?? 0).toBeGreaterThan(0);
    // Striped writes cannot take a fresh timestamp, and may meet stragglers (see allowedFailure).
    expect(
      Object.keys(result.failedWrites).filter((c) => !['GRANT_EXPIRED', 'SUPERSEDED', 'STRIPES_MISSING', 'INTERNAL'].includes(c)),
    ).toEqual([]);
    expect(result.stripedReads).toBeGreaterThan(SEEDS / 40);
    // Correct servers signed receipts in batches (STOREs delivered together, in the runs that batch).
    expect(result.batchedReceipts).toBeGreaterThan(SEEDS / 10);
    // Every Byzantine behaviour was played, and writers crashed mid-operation.
    expect(Object.keys(result.behaviours).sort()).toEqual([...BEHAVIOURS].sort());
    expect(result.crashedWriters).toBeGreaterThan(SEEDS / 30);
    // The clients' hosts met the faults they must survive: connections closing mid-round,
    // frames over their limit (Byzantine ones, and correct answers too large for a reader).
    expect(result.linksClosed).toBeGreaterThan(SEEDS);
    expect(result.oversized).toBeGreaterThan(SEEDS / 2);
    expect(result.tooLarge).toBeGreaterThan(0);
    for (const code of [
      'UNAUTHENTICATED',
      'NOT_AUTHORIZED',
      'GRANT_EXPIRED',
      'REVOKED',
      'INVALID_ARGUMENT',
      'QUOTA_EXCEEDED',
      'CONFLICT',
      'STRIPES_MISSING',
    ]) {
      expect(result.refusals[code] ?? 0, `no hostile request was refused with ${code}`).toBeGreaterThan(0);
    }
  }, 900_000);

  it(`${HOSTILE_SEEDS} hostile runs (t Byzantine servers, several attacks each) all pass`, async () => {
    const result = await runBatch({ first: 1_000_001, count: HOSTILE_SEEDS, hostile: true });
    expect(result.failures.map((f) => `seed ${f.seed}: ${f.violations.join('; ')}`)).toEqual([]);
    expect(Object.keys(result.attacks).sort()).toEqual([...ATTACKS].sort());
    // The fence attacks got store proofs for their plants and completed them after the
    // owner's write, owners jumped over them, and reads came after the owner's write.
    expect(result.fences['completed late'] ?? 0).toBeGreaterThan(0);
    expect(result.fences.jumps ?? 0).toBeGreaterThan(0);
    expect(result.fences['fenced reads'] ?? 0).toBeGreaterThan(0);
    for (const code of ['STRIPES_MISSING', 'INVALID_ARGUMENT', 'REVOKED'])
      expect(result.refusals[code] ?? 0, `no hostile request was refused with ${code}`).toBeGreaterThan(0);
  }, 600_000);

  it(`${LISTING_SEEDS} runs whose readers also list keys, past Byzantine servers that hide, invent, inflate and misstate, all pass`, async () => {
    const result = await runBatch({ first: 2_000_001, count: LISTING_SEEDS, lists: true });
    expect(result.failures.map((f) => `seed ${f.seed}: ${f.violations.join('; ')}\n  replay: ${f.replay}`)).toEqual([]);
    expect(result.lists).toBeGreaterThan(LISTING_SEEDS);
  }, 600_000);

  it('60 runs with many striped writes (concurrent with stripe-by-stripe reads, writers crashing mid-upload) all pass', async () => {
    const result = await runBatch({ first: 3_000_001, count: 60, stripes: true });
    expect(result.failures.map((f) => `seed ${f.seed}: ${f.violations.join('; ')}\n  replay: ${f.replay}`)).toEqual([]);
    expect(result.stripedWritesDone).toBeGreaterThan(60);
    expect(result.stripedReads).toBeGreaterThan(30);
    // Allowed outcomes, but the runs must reach them: a read losing its version between stripes, a writer crashing mid-upload.
    expect(result.valueChanged).toBeGreaterThan(0);
    expect(result.crashedMidStripe).toBeGreaterThan(0);
  }, 600_000);

  it('60 runs replacing a server’s key mid-run (a new key epoch reaching servers and clients at different times) all pass', async () => {
    const result = await runBatch({ first: 4_000_001, count: 60, rotate: true });
    expect(result.failures.map((f) => `seed ${f.seed}: ${f.violations.join('; ')}\n  replay: ${f.replay}`)).toEqual([]);
    // The runs must reach the interesting states: replacements on an empty disk, operations
    // refused by servers of another epoch, and the retired key's forgeries refused.
    expect(result.rotatedEmpty).toBeGreaterThan(6);
    expect(result.staleOps).toBeGreaterThan(60);
    expect(result.refusals.CLUSTER_OUTDATED ?? 0).toBeGreaterThan(60);
    expect(result.reads).toBeGreaterThan(240);
  }, 600_000);

  it('60 runs with servers losing their disks and rebuilding while the workload runs (Byzantine peers lying to them) all pass', async () => {
    const result = await runBatch({ first: 5_000_001, count: 60, rebuild: true });
    expect(result.failures.map((f) => `seed ${f.seed}: ${f.violations.join('; ')}\n  replay: ${f.replay}`)).toEqual([]);
    // The runs must reach the interesting states: disks lost and rebuilt, repairs stored, and
    // the inconsistently encoded write refused by every repair of it.
    expect(result.disksLost).toBeGreaterThan(30);
    expect(result.rebuildsDone).toBe(result.disksLost);
    expect(result.repairs.stored).toBeGreaterThan(30);
    expect(result.repairs.inconsistent).toBeGreaterThan(0);
  }, 600_000);

  it('replays a seed exactly', async () => {
    const a = await simulate({ seed: 4242, t: 2 });
    const b = await simulate({ seed: 4242, t: 2 });
    expect(b.history).toEqual(a.history);
    expect(b.messages).toBe(a.messages);
    expect(b.byzantine).toEqual(a.byzantine);
    expect(b.options).toBe(a.options);
  });
});
