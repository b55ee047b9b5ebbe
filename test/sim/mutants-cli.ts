/**
 * `pnpm sim:mutants [-- --seeds N]`: hunts each mutant with up to N hostile seeds and
 * ends with `caught X of Y mutants`; exits non-zero if any mutant survives.
 */
import { parseArgs } from 'node:util';
import { huntMutant } from './hunt.js';
import { MUTANTS } from './mutants.js';

const { values } = parseArgs({
  args: process.argv.slice(2).filter((a) => a !== '--'),
  options: {
    seeds: { type: 'string', default: '600' },
    first: { type: 'string', default: '1' },
    help: { type: 'boolean', short: 'h', default: false },
  },
  strict: true,
});
if (values.help) {
  console.log(
    'usage: pnpm sim:mutants -- [--seeds N (default 600)] [--first F (default 1)]\n\nHunts each mutant with up to N hostile seeds; exits non-zero if any survives.',
  );
  process.exit(0);
}
const budget = Number(values.seeds);
const first = Number(values.first);
if (!Number.isSafeInteger(budget) || budget < 1 || !Number.isSafeInteger(first) || first < 0) {
  console.error('--seeds must be a positive integer and --first a non-negative one');
  process.exit(2);
}

let caught = 0;
for (const mutant of MUTANTS) {
  const started = performance.now();
  const hunt = await huntMutant(mutant, first, budget);
  const ms = Math.round(performance.now() - started);
  if (hunt) {
    caught++;
    console.log(`caught   ${mutant.name} (${mutant.description}) at seed ${hunt.seed}, t = ${hunt.t}, after ${hunt.tried} seeds, ${ms} ms`);
    console.log(`         ${hunt.violations.find((v) => !mutant.caughtBy || mutant.caughtBy.test(v)) ?? hunt.violations[0]}`);
    console.log(`         replay: ${hunt.replay}`);
  } else {
    console.log(`SURVIVED ${mutant.name} (${mutant.description}) after ${budget} seeds`);
  }
}
console.log(`caught ${caught} of ${MUTANTS.length} mutants`);
process.exit(caught === MUTANTS.length ? 0 : 1);
