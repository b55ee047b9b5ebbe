/**
 * `pnpm sim -- --seeds N [--t T] [--seed S] [--first F] [--mutant NAME] [--hostile] [--contention] [--lists] [--stripes] [--rotate] [--rebuild] [--verbose]`
 *
 * Runs seeded simulations and ends with `N passed, M failed`. A failure prints its seed
 * and the command that replays it exactly.
 */
import { parseArgs } from 'node:util';
import { MUTANTS } from './mutants.js';
import { runBatch } from './run.js';
import { simulate } from './simulate.js';

const { values } = parseArgs({
  args: process.argv.slice(2).filter((a) => a !== '--'),
  options: {
    seeds: { type: 'string', default: '100' },
    seed: { type: 'string' },
    first: { type: 'string', default: '1' },
    t: { type: 'string' },
    mutant: { type: 'string' },
    hostile: { type: 'boolean', default: false },
    contention: { type: 'boolean', default: false },
    lists: { type: 'boolean', default: false },
    stripes: { type: 'boolean', default: false },
    rotate: { type: 'boolean', default: false },
    rebuild: { type: 'boolean', default: false },
    verbose: { type: 'boolean', default: false },
    help: { type: 'boolean', short: 'h', default: false },
  },
  strict: true,
});

if (values.help) {
  console.log(`usage: pnpm sim -- [options]

  --seeds N      how many seeds to run (default 100)
  --first F      the first seed (default 1)
  --seed S       run only seed S (what a failure's replay line gives)
  --t T          fault threshold 1, 2 or 3 (default: varies with the seed)
  --hostile      always t Byzantine servers and several Byzantine-client attacks
                 (otherwise each seed draws how many, from none up)
  --contention   heavy write contention on one key in every run (otherwise some
                 seeds draw it); reports how many rounds reads took
  --lists        readers also list the keys (a page of random size instead of about
                 one read in four), checked for invented and hidden keys
  --stripes      about half the writes are striped (2–4 stripes of 64 KiB, otherwise a
                 few), read stripe by stripe; checked for mixed values
  --rotate       a correct server's key is replaced mid-run (a new key epoch): the other
                 servers and the clients take the new cluster file each at its own time,
                 and a thief tries the retired key; everything is checked as always
  --rebuild      servers lose their disk mid-run (one after another, faulty servers
                 never more than t, so at most t − 1 Byzantine) and rebuild from the
                 others while the workload runs; Byzantine servers lie to rebuilding
                 servers; servers cut off by a partition catch up when it heals; a writer
                 stores a write encoded inconsistently (repairs must refuse it); at the
                 end every correct server catches up and must hold every completed write
                 (a quarter of ordinary seeds do that end check too)
  --mutant NAME  run against a deliberately broken server: ${MUTANTS.map((m) => m.name).join(', ')}
  --verbose      with --seed: print the options and the whole history`);
  process.exit(0);
}

function int(name: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const x = Number(v);
  if (!Number.isSafeInteger(x) || x < 0) {
    console.error(`--${name} must be a non-negative integer, got ${v}`);
    process.exit(2);
  }
  return x;
}

const t = int('t', values.t);
if (t !== undefined && (t < 1 || t > 3)) {
  console.error('--t must be 1, 2 or 3');
  process.exit(2);
}
const mutant = values.mutant === undefined ? undefined : MUTANTS.find((m) => m.name === values.mutant);
if (values.mutant !== undefined && !mutant) {
  console.error(`unknown mutant ${values.mutant}; known: ${MUTANTS.map((m) => m.name).join(', ')}`);
  process.exit(2);
}
if (values.rotate && values.rebuild) {
  console.error('--rotate and --rebuild do not go together (a rebuilding host of another key epoch would be refused)');
  process.exit(2);
}
const seed = int('seed', values.seed);
const started = performance.now();

if (seed !== undefined && values.verbose) {
  const report = await simulate({
    seed,
    t: t ?? (seed % 3) + 1,
    hostile: values.hostile || mutant !== undefined,
    ...(mutant ? { protocol: mutant.protocol } : {}),
    ...(values.contention ? { contention: true } : {}),
    ...(values.lists || mutant?.lists ? { lists: true } : {}),
    ...(values.stripes || mutant?.stripes ? { stripes: true } : {}),
    ...(values.rotate || mutant?.rotate ? { rotate: true } : {}),
    ...(values.rebuild || mutant?.rebuild ? { rebuild: true } : {}),
    ...(mutant?.behaviours ? { behaviours: mutant.behaviours } : {}),
    ...(mutant?.deleteRate !== undefined ? { deleteRate: mutant.deleteRate } : {}),
    ...(mutant?.hostFaults ? { hostFaults: mutant.hostFaults } : {}),
  });
  console.log(report.options);
  console.log(JSON.stringify({ ...report, history: report.history }, null, 1));
}

const result = await runBatch({
  first: seed ?? int('first', values.first)!,
  count: seed !== undefined ? 1 : int('seeds', values.seeds)!,
  ...(t !== undefined ? { t } : {}),
  ...(mutant ? { protocol: mutant.protocol, mutant: mutant.name, hostile: true } : { hostile: values.hostile }),
  ...(values.contention ? { contention: true } : {}),
  ...(values.lists || mutant?.lists ? { lists: true } : {}),
  ...(values.stripes || mutant?.stripes ? { stripes: true } : {}),
  ...(values.rotate || mutant?.rotate ? { rotate: true } : {}),
  ...(values.rebuild || mutant?.rebuild ? { rebuild: true } : {}),
  ...(mutant?.behaviours ? { behaviours: mutant.behaviours } : {}),
  ...(mutant?.deleteRate !== undefined ? { deleteRate: mutant.deleteRate } : {}),
  ...(mutant?.hostFaults ? { hostFaults: mutant.hostFaults } : {}),
  onFailure(report, replay) {
    console.log(`FAIL seed ${report.seed} (t = ${report.t}): ${report.violations.join('; ')}`);
    if (report.options) console.log(report.options.replace(/^/gm, '  '));
    console.log(`  replay: ${replay}`);
  },
});
const seconds = ((performance.now() - started) / 1000).toFixed(1);
const list = (r: Record<string, number>) =>
  Object.entries(r)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ') || 'none';
const rounds = (r: Record<string, number>) =>
  Object.entries(r)
    .sort(([a], [b]) => Number(a) - Number(b))
    .map(([k, v]) => `${k} rounds: ${v}`)
    .join(', ') || 'none';
console.log(
  `reads ${result.reads} (${rounds(result.readRounds)}), writes ${result.writes} (${rounds(result.writeRounds)}; ${result.overlappingWrites} overlapping another of the same session and key), ${seconds} s`,
);
if (result.lists > 0) console.log(`listing pages: ${result.lists}`);
console.log(
  `striped writes: ${result.stripedWrites} (${result.stripedWritesDone} completed, ${result.crashedMidStripe} crashed mid-upload); striped values read whole: ${result.stripedReads}; reads ending in VALUE_CHANGED: ${result.valueChanged}; receipts signed in batches: ${result.batchedReceipts}, certificates: ${result.batchedCertificates}`,
);
console.log(
  `client hosts (the client's own): links closed under them ${result.linksClosed}, frames over their limit ${result.oversized}, reads failed as too large ${result.tooLarge}`,
);
if (values.rebuild || mutant?.rebuild)
  console.log(
    `disks lost: ${result.disksLost}, rebuilds finished: ${result.rebuildsDone} (writes under way repaired: ${result.pendingRepaired}, unfinished: ${result.pendingUnfinished}); repairs (runs that caught up at the end): ${list(result.repairs)}`,
  );
else if (result.repairs.runs) console.log(`runs that caught up at the end: ${result.repairs.runs}; repairs: ${list(result.repairs)}`);
if (values.rotate)
  console.log(
    `key rotations: ${result.passed + result.failed} (${result.rotatedEmpty} on an empty disk); operations refused by servers of another key epoch: ${result.staleOps}`,
  );
console.log(`heavy contention on one key in ${result.contentionRuns} runs: reads ${rounds(result.contentionReadRounds)}`);
console.log(`failed writes: ${list(result.failedWrites)}`);
console.log(`hostile attacks mounted: ${list(result.attacks)}`);
console.log(`fences: ${list(result.fences)}`);
console.log(`refused by correct servers: ${list(result.refusals)}`);
console.log(`${result.passed} passed, ${result.failed} failed`);
process.exit(result.failed === 0 ? 0 : 1);
