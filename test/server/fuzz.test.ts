/** 5k fuzzed frames against a live server in CI; `pnpm fuzz:server` runs 100k. */
import { beforeAll, expect, it } from 'vitest';
import { fuzzCampaign } from './fuzz-run.js';
import { ensureBuilt } from './harness.js';

beforeAll(ensureBuilt, 240_000);

it('answers 5000 random and mutated frames with typed replies, keeps serving, memory bounded', async () => {
  const seed = Number(process.env['FUZZ_SEED'] ?? 20261122);
  const r = await fuzzCampaign(5000, seed);
  expect(r.replies).toBe(r.frames);
  expect(r.frames).toBeGreaterThanOrEqual(5000);
  // The mix reaches both rejections and accepted requests.
  expect(r.byOutcome['ERROR:INVALID_FRAME']).toBeGreaterThan(100);
  expect(r.byOutcome['ERROR:UNAUTHENTICATED']).toBeGreaterThan(10);
  expect(r.byOutcome['STORE_ACK']).toBeGreaterThan(10);
  expect(r.oversizedClosed).toBe(2);
  expect(r.abandonedConnections).toBe(5);
  expect(r.framesTooLargeCounted).toBe(2);
  expect(r.errorsCounted).toBeGreaterThanOrEqual(
    r.frames -
      Object.entries(r.byOutcome)
        .filter(([k]) => !k.startsWith('ERROR'))
        .reduce((s, [, v]) => s + v, 0) -
      20,
  );
}, 170_000);
