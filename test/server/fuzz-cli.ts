/**
 * `pnpm fuzz:server [-- --frames N] [--seed S]`: a long fuzz campaign (default 100k
 * frames). Exits 1 on the first violation and prints the seed to replay it.
 */
import { fuzzCampaign } from './fuzz-run.js';
import { ensureBuilt } from './harness.js';

const flag = (name: string, fallback: number) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
};
const frames = flag('--frames', 100_000);
const seed = flag('--seed', Date.now() % 2 ** 31);
if (!Number.isInteger(frames) || frames < 1 || frames > 10_000_000 || !Number.isInteger(seed)) {
  console.error('usage: fuzz:server [-- --frames N] [--seed S]');
  process.exit(2);
}
await ensureBuilt();
try {
  const r = await fuzzCampaign(frames, seed, (line) => console.log(line));
  console.log(JSON.stringify(r.byOutcome));
  console.log(
    `fuzz: ${r.frames} frames (seed ${seed}) in ${r.seconds.toFixed(1)} s, ${r.replies} typed replies, ${r.oversizedClosed} oversized frames closed with 1009, ${r.abandonedConnections} abandoned connections, ` +
      `${r.errorsCounted} errors counted in metrics; RSS ${r.rssBeforeMiB.toFixed(0)} → ${r.rssAfterMiB.toFixed(0)} MiB; still serving`,
  );
} catch (err) {
  console.error(`fuzz: FAILED with seed ${seed}: ${(err as Error).stack ?? String(err)}`);
  process.exit(1);
}
