/**
 * `pnpm soak:server [-- --cycles N]`: the crash-restart test for many cycles (default 20).
 * Builds the CLI first; exits 1 on the first lost acknowledgement.
 */
import { runCrashCycles } from './crash.js';
import { ensureBuilt } from './harness.js';

const arg = process.argv.indexOf('--cycles');
const cycles = arg >= 0 ? Number(process.argv[arg + 1]) : 20;
if (!Number.isInteger(cycles) || cycles < 1 || cycles > 10_000) {
  console.error('usage: soak:server [-- --cycles N]   (1 ≤ N ≤ 10000)');
  process.exit(2);
}
await ensureBuilt();
try {
  const r = await runCrashCycles({ cycles, log: (line) => console.log(line) });
  console.log(
    `soak: ${r.cycles} cycles in ${r.seconds.toFixed(1)} s: ${r.ackedWrites} acknowledged writes (${r.writesWhileDown} while a server was down, ` +
      `${r.timedOutWrites} timed out), ${r.reads} reads, ${r.durableAcksChecked} acknowledgements verified on the killed servers' disks; nothing lost`,
  );
} catch (err) {
  console.error(`soak: FAILED: ${(err as Error).stack ?? String(err)}`);
  process.exit(1);
}
