/**
 * `pnpm nemesis -- [--seed S] [--minutes M] [--t T] [--clients C] [--keys K] [--faults a,b] [--op-timeout-ms MS] [--keep]`
 *
 * One nemesis run against a real cluster (run.ts); root only. Ends with `passed` or
 * `FAILED`, the seed, and for a failure the directory holding its logs and history.
 */
import { parseArgs } from 'node:util';
import { KNOWN_ISSUES } from './history.js';
import { runNemesis } from './run.js';
import { ALL_FAULT_KINDS, FAULT_KINDS, type FaultKind } from './schedule.js';

const { values } = parseArgs({
  args: process.argv.slice(2).filter((a) => a !== '--'),
  options: {
    seed: { type: 'string' },
    minutes: { type: 'string', default: '1' },
    t: { type: 'string', default: '1' },
    clients: { type: 'string', default: '3' },
    keys: { type: 'string', default: '3' },
    faults: { type: 'string' },
    'op-timeout-ms': { type: 'string', default: '20000' },
    keep: { type: 'boolean', default: false },
    help: { type: 'boolean', short: 'h', default: false },
  },
  strict: true,
});

if (values.help) {
  console.log(`usage: pnpm nemesis -- [options]          (root: it builds network namespaces)

  --seed S            the fault schedule's seed (default: a random one, printed)
  --minutes M         how long faults go on (default 1; set-up, healing and checks add ~30 s)
  --t T               fault threshold 1 or 2: 3t + 1 servers, at most t faulty at once (default 1)
  --clients C         client processes, each on a host of its own (default 3)
  --keys K            keys the clients share (default 3)
  --faults LIST       fault kinds, comma-separated (default ${FAULT_KINDS.join(', ')});
                      also power (lazyfs: needs FUSE and Go) and disk (fsync fails with EIO: needs libfiu)
  --op-timeout-ms MS  every operation's timeout (default 20000)
  --keep              keep the run's directory even when it passes`);
  process.exit(0);
}

function number(name: string, v: string, min: number, max: number, integer = true): number {
  const x = Number(v);
  if (!Number.isFinite(x) || x < min || x > max || (integer && !Number.isSafeInteger(x))) {
    console.error(`--${name} must be ${integer ? 'an integer' : 'a number'} from ${min} to ${max}, got ${v}`);
    process.exit(2);
  }
  return x;
}

const seed = values.seed === undefined ? Math.floor(Math.random() * 1_000_000) : number('seed', values.seed, 0, 2 ** 52);
const kinds = values.faults?.split(',').map((k) => k.trim()) as FaultKind[] | undefined;
const unknown = kinds?.filter((k) => !ALL_FAULT_KINDS.includes(k));
if (unknown?.length) {
  console.error(`unknown fault kind ${unknown.join(', ')}; known: ${ALL_FAULT_KINDS.join(', ')}`);
  process.exit(2);
}
const minutes = number('minutes', values.minutes, 0.1, 24 * 60, false);
const t = number('t', values.t, 1, 2);

let report;
try {
  report = await runNemesis({
    seed,
    t,
    durationMs: minutes * 60_000,
    clients: number('clients', values.clients, 1, 20),
    keys: number('keys', values.keys, 1, 100),
    opTimeoutMs: number('op-timeout-ms', values['op-timeout-ms'], 1000, 600_000),
    ...(kinds ? { kinds } : {}),
    keep: values.keep,
    log: (line) => console.log(line),
  });
} catch (e) {
  console.error(`nemesis: ${(e as Error).message}`);
  process.exit(1);
}

const injected = report.faults.filter((f) => f.startedAt !== undefined);
const byKind = new Map<string, number>();
for (const f of injected) byKind.set(f.planned.fault.kind, (byKind.get(f.planned.fault.kind) ?? 0) + 1);
console.log(
  `\nfaults injected: ${injected.length} (${[...byKind].map(([k, v]) => `${k} ${v}`).join(', ') || 'none'}), skipped: ${report.faults.length - injected.length}`,
);
const quiet = injected.filter((f) => f.planned.fault.kind !== 'bridge' && f.opsOk === 0);
if (quiet.length) console.log(`faults during which no operation completed: ${quiet.map((f) => f.description).join('; ')}`);
console.log(
  `operations: ${report.operations} (${Object.entries(report.outcomes)
    .sort()
    .map(([k, v]) => `${k} ${v}`)
    .join(', ')})`,
);
if (report.powerLosses > 0) console.log(`power losses: ${report.powerLosses} (data directories on lazyfs)`);
for (const [name, count] of Object.entries(report.known))
  console.log(`known PowerStore issue met ${count} times: ${KNOWN_ISSUES.find((k) => k.name === name)!.description}`);
console.log(
  `latency of operations that succeeded: p50 ${report.latencyMs.p50} ms, p99 ${report.latencyMs.p99} ms, max ${report.latencyMs.max} ms`,
);
console.log(`porcupine: ${report.porcupine}`);
console.log(`${report.seconds.toFixed(0)} s`);
if (report.ok) {
  console.log(`passed (seed ${report.seed}, t = ${report.t})${report.dir ? `; kept ${report.dir}` : ''}`);
} else {
  console.log(`\nFAILED (seed ${report.seed}, t = ${report.t}):`);
  for (const v of report.violations.slice(0, 30)) console.log(`  ${v}`);
  if (report.violations.length > 30) console.log(`  … ${report.violations.length - 30} more`);
  // The same schedule again: every option as given, the seed as drawn.
  const given = process.argv.slice(2).filter((a) => a !== '--');
  const rest = given.filter((a, i) => a !== '--seed' && given[i - 1] !== '--seed' && !a.startsWith('--seed=') && a !== '--keep');
  console.log(`replay: pnpm nemesis -- --seed ${report.seed} ${rest.join(' ')}`.trimEnd());
  console.log(`logs and history (history.json): ${report.dir}`);
}
process.exit(report.ok ? 0 : 1);
