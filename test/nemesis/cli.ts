/**
 * `pnpm nemesis -- [--seed S] [--minutes M] [--t T] [--runs N] [--clients C] [--keys K] [--faults a,b] [--op-timeout-ms MS] [--keep] [--report FILE]`
 *
 * Nemesis runs against a real cluster (run.ts); root only. One run ends with `passed` or
 * `FAILED`, the seed, and for a failure the directory holding its logs and history; a
 * batch (`--runs N`: seeds S, S + 1, …, t cycling through `--t`'s list) ends with its
 * totals and every failing seed.
 */
import { appendFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { fiuMissing } from '../fiu.js';
import { KNOWN_ISSUES } from './history.js';
import { lazyfsUnavailable } from './lazyfs.js';
import { runNemesis, type NemesisReport } from './run.js';
import { ALL_FAULT_KINDS, LAZYFS_KINDS, OPT_IN_KINDS, type FaultKind } from './schedule.js';

const { values } = parseArgs({
  args: process.argv.slice(2).filter((a) => a !== '--'),
  options: {
    seed: { type: 'string' },
    minutes: { type: 'string', default: '1' },
    t: { type: 'string', default: '1' },
    runs: { type: 'string', default: '1' },
    clients: { type: 'string', default: '3' },
    keys: { type: 'string', default: '3' },
    faults: { type: 'string' },
    'op-timeout-ms': { type: 'string', default: '20000' },
    keep: { type: 'boolean', default: false },
    report: { type: 'string' },
    help: { type: 'boolean', short: 'h', default: false },
  },
  strict: true,
});

if (values.help) {
  console.log(`usage: pnpm nemesis -- [options]          (root: it builds network namespaces)

  --seed S            the fault schedule's seed (default: a random one, printed); with
                      --runs, the first run's seed, the next runs S + 1, S + 2, …
  --minutes M         how long faults go on, per run (default 1; set-up, healing and checks add ~30 s)
  --t T               fault threshold 1 or 2: 3t + 1 servers, at most t faulty at once (default 1);
                      a list (1,2) is cycled through run by run
  --runs N            runs one after another (default 1); a failing run keeps its logs, the batch goes on
  --clients C         client processes, each on a host of its own (default 3)
  --keys K            keys the clients share (default 3)
  --faults LIST       fault kinds, comma-separated (default all: ${ALL_FAULT_KINDS.join(', ')});
                      power, disk-full and blackout need FUSE and Go (lazyfs), disk needs
                      libfiu: both are set up by node scripts/setup.mjs --for-tests
  --op-timeout-ms MS  every operation's timeout (default 20000)
  --keep              keep each run's directory even when it passes
  --report FILE       append one JSON line per run (seed, t, verdict, faults, operations) to FILE`);
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

const firstSeed = values.seed === undefined ? Math.floor(Math.random() * 1_000_000) : number('seed', values.seed, 0, 2 ** 52);
const kinds = (values.faults?.split(',').map((k) => k.trim()) ?? ALL_FAULT_KINDS) as FaultKind[];
const unknown = kinds.filter((k) => !ALL_FAULT_KINDS.includes(k));
if (unknown.length) {
  console.error(`unknown fault kind ${unknown.join(', ')}; known: ${ALL_FAULT_KINDS.join(', ')}`);
  process.exit(2);
}
// What the opt-in kinds need, said before anything starts.
const lazyfsKinds = kinds.filter((k) => LAZYFS_KINDS.includes(k));
const missing = [
  lazyfsKinds.length ? lazyfsUnavailable() && `${lazyfsKinds.join(', ')}: ${lazyfsUnavailable()}` : undefined,
  kinds.includes('disk') ? fiuMissing() && `disk: ${fiuMissing()}` : undefined,
].filter((m): m is string => !!m);
if (missing.length) {
  const rest = kinds.filter((k) => !OPT_IN_KINDS.includes(k));
  console.error(
    `nemesis: cannot inject every fault kind asked for:\n${missing.map((m) => `  ${m}`).join('\n')}\n` +
      `set up with \`node scripts/setup.mjs --for-tests\`, or leave them out: --faults ${rest.join(',')}`,
  );
  process.exit(2);
}
const minutes = number('minutes', values.minutes, 0.1, 24 * 60, false);
const ts = values.t.split(',').map((v) => number('t', v.trim(), 1, 2));
const runs = number('runs', values.runs, 1, 100_000);
const clients = number('clients', values.clients, 1, 20);
const keys = number('keys', values.keys, 1, 100);
const opTimeoutMs = number('op-timeout-ms', values['op-timeout-ms'], 1000, 600_000);

/** A batch's sums. */
const total = { runs: 0, passed: 0, operations: 0, powerLosses: 0, seconds: 0, faults: new Map<string, number>() };
const failed: { seed: number; t: number; dir?: string; first: string }[] = [];

for (let i = 0; i < runs; i++) {
  const seed = firstSeed + i;
  const t = ts[i % ts.length]!;
  if (runs > 1) console.log(`\n=== run ${i + 1}/${runs}: seed ${seed}, t = ${t} ===`);
  let report: NemesisReport;
  try {
    report = await runNemesis({
      seed,
      t,
      durationMs: minutes * 60_000,
      clients,
      keys,
      opTimeoutMs,
      kinds,
      keep: values.keep,
      log: (line) => console.log(line),
    });
  } catch (e) {
    console.error(`nemesis: ${(e as Error).message}`);
    process.exit(1);
  }
  summarize(report);
  const injected = report.faults.filter((f) => f.startedAt !== undefined);
  total.runs++;
  if (report.ok) total.passed++;
  else failed.push({ seed, t, ...(report.dir ? { dir: report.dir } : {}), first: report.violations[0] ?? '' });
  total.operations += report.operations;
  total.powerLosses += report.powerLosses;
  total.seconds += report.seconds;
  for (const f of injected) total.faults.set(f.planned.fault.kind, (total.faults.get(f.planned.fault.kind) ?? 0) + 1);
  if (values.report)
    appendFileSync(
      values.report,
      JSON.stringify({
        seed,
        t,
        ok: report.ok,
        minutes,
        kinds,
        faults: countKinds(injected.map((f) => f.planned.fault.kind)),
        powerLosses: report.powerLosses,
        operations: report.operations,
        outcomes: report.outcomes,
        known: report.known,
        porcupine: report.porcupine,
        violations: report.violations.slice(0, 5),
        seconds: Math.round(report.seconds),
        ...(report.dir ? { dir: report.dir } : {}),
      }) + '\n',
    );
  if (runs > 1)
    console.log(
      `=== after ${total.runs} runs: ${total.passed} passed, ${failed.length} failed${failed.length ? ` (seeds ${failed.map((f) => f.seed).join(', ')})` : ''} ===`,
    );
}

if (runs > 1) {
  console.log(`\nbatch: ${total.runs} runs (seeds ${firstSeed}–${firstSeed + runs - 1}, t = ${ts.join(', ')}), ${total.passed} passed`);
  console.log(`faults injected: ${[...total.faults].map(([k, v]) => `${k} ${v}`).join(', ') || 'none'}`);
  console.log(`power losses: ${total.powerLosses}; operations: ${total.operations}; ${(total.seconds / 60).toFixed(0)} min`);
  for (const f of failed) console.log(`FAILED seed ${f.seed}, t = ${f.t}: ${f.first}${f.dir ? `\n  logs: ${f.dir}` : ''}`);
}
process.exit(failed.length === 0 ? 0 : 1);

function countKinds(list: readonly string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const k of list) out[k] = (out[k] ?? 0) + 1;
  return out;
}

/** One run's summary, and for a failure its violations and the command that replays it. */
function summarize(report: NemesisReport): void {
  const injected = report.faults.filter((f) => f.startedAt !== undefined);
  const byKind = countKinds(injected.map((f) => f.planned.fault.kind));
  console.log(
    `\nfaults injected: ${injected.length} (${
      Object.entries(byKind)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ') || 'none'
    }), skipped: ${report.faults.length - injected.length}`,
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
    return;
  }
  console.log(`\nFAILED (seed ${report.seed}, t = ${report.t}):`);
  for (const v of report.violations.slice(0, 30)) console.log(`  ${v}`);
  if (report.violations.length > 30) console.log(`  … ${report.violations.length - 30} more`);
  // The same schedule again: every option as given but the batch's, with this run's seed and t.
  const given = process.argv.slice(2).filter((a) => a !== '--');
  const dropped = new Set(['--seed', '--t', '--runs', '--report']);
  const rest = given.filter(
    (a, i) => !dropped.has(a) && !dropped.has(given[i - 1] ?? '') && ![...dropped].some((d) => a.startsWith(`${d}=`)) && a !== '--keep',
  );
  console.log(`replay: pnpm nemesis -- --seed ${report.seed} --t ${report.t} ${rest.join(' ')}`.trimEnd());
  console.log(`logs and history (history.json): ${report.dir}`);
}
