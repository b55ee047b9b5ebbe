/**
 * kill -9 under load, restart on the same data directory: nothing acknowledged is lost
 * and the cluster keeps serving meanwhile. CI runs 3 cycles; `pnpm soak:server` runs 20+.
 */
import { beforeAll, expect, it } from 'vitest';
import { runCrashCycles } from './crash.js';
import { ensureBuilt } from './harness.js';

beforeAll(ensureBuilt, 240_000);

it('survives 3 kill -9 / restart cycles under load without losing an acknowledged write', async () => {
  const report = await runCrashCycles({ cycles: 3 });
  expect(report.ackedWrites).toBeGreaterThan(10);
  expect(report.writesWhileDown).toBeGreaterThanOrEqual(3);
  expect(report.durableAcksChecked).toBeGreaterThan(0);
  expect(report.reads).toBeGreaterThan(0);
}, 120_000);

it('survives 2 kill -9 / restart cycles with fragments in the value log: acknowledged writes read back, live bytes match the pointers', async () => {
  // Values up to 20 kB: fragments up to 10 kB, so a low threshold puts most in the log.
  const report = await runCrashCycles({ cycles: 2, serverArgs: ['--value-log-min-bytes', '2048'] });
  expect(report.ackedWrites).toBeGreaterThan(10);
  expect(report.durableAcksChecked).toBeGreaterThan(0);
  expect(report.valueLogSegments).toBeGreaterThan(0);
}, 120_000);
