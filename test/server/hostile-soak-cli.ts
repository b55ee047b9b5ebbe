/**
 * `pnpm soak:hostile [-- --minutes M] [--clients N]`: honest clients with and without
 * hostile ones against a 4-server cluster (see hostile-soak.ts). Prints both phases, the
 * servers' peak RSS and what the servers enforced; exits 1 if an honest operation failed
 * under attack or a server outgrew its budget.
 */
import { parseArgs } from 'node:util';
import { DEFAULT_LIMITS } from 'powerstore-server';
import { describe, runHostileSoak } from './hostile-soak.js';
import { ensureBuilt } from './harness.js';

const usage = 'usage: pnpm soak:hostile [-- --minutes M] [--clients N]   (0 < M ≤ 600, default 2; 1 ≤ N ≤ 64, default 4)';
let values;
try {
  // pnpm passes the `--` separator through.
  const args = process.argv.slice(2).filter((a, i) => !(i === 0 && a === '--'));
  ({ values } = parseArgs({
    args,
    options: {
      minutes: { type: 'string', default: '2' },
      clients: { type: 'string', default: '4' },
      help: { type: 'boolean', short: 'h' },
    },
  }));
} catch (err) {
  console.error(`${(err as Error).message}\n${usage}`);
  process.exit(2);
}
if (values.help) {
  console.log(usage);
  process.exit(0);
}
const minutes = Number(values.minutes);
const clients = Number(values.clients);
if (!(minutes > 0 && minutes <= 600) || !Number.isInteger(clients) || clients < 1 || clients > 64) {
  console.error(usage);
  process.exit(2);
}
await ensureBuilt();
const MiB = 1024 * 1024;
const r = await runHostileSoak({ minutes, honestClients: clients, log: (line) => console.log(`soak: ${line}`) });
const budget = DEFAULT_LIMITS.maxBufferedBytes + 2 * DEFAULT_LIMITS.maxFrameBytes;
console.log(
  `soak: attackers: ${Object.entries(r.attacks)
    .map(([k, n]) => `${k} ${n}`)
    .join(', ')}`,
);
console.log(
  `soak: servers enforced: ${Object.entries(r.enforced)
    .map(([k, n]) => `${k} ${n}`)
    .join(', ')}`,
);
console.log(
  `soak: peak RSS per server: ${r.peakRss.map((b) => `${(b / MiB).toFixed(0)} MiB`).join(', ')} (budget ${(budget / MiB).toFixed(0)} MiB + the process)`,
);
console.log(`soak: honest without attackers: ${describe(r.quiet)}`);
console.log(`soak: honest under attack:      ${describe(r.hostile)}`);
// The process itself (V8 heap, LevelDB caches) is allowed 160 MiB beside the budget.
const ok = r.hostile.errors === 0 && r.peakRss.every((b) => b < budget + 160 * MiB);
console.log(ok ? 'soak: honest clients saw no errors and every server stayed within its budget' : 'soak: FAILED');
process.exit(ok ? 0 : 1);
