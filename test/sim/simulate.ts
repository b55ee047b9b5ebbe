/**
 * The simulator's entry point: {@link simulate} runs one seeded simulation
 * (`simulation.ts`) and checks every property on its history; {@link replayCommand} is
 * the command that runs it again.
 */
import type { SimOptions } from './options.js';
import { Simulation, type SimReport } from './simulation.js';

export type { SimOptions, SimReport };

/** Runs one seeded simulation and checks every property on its history. */
export async function simulate(options: SimOptions): Promise<SimReport> {
  const simulation = await Simulation.create(options);
  await simulation.run();
  return simulation.finish();
}

/** The command that replays one run exactly. */
export function replayCommand(
  seed: number,
  t: number,
  {
    mutant,
    hostile,
    contention,
    lists,
    stripes,
    rotate,
    rebuild,
  }: {
    mutant?: string;
    hostile?: boolean;
    contention?: boolean;
    lists?: boolean;
    stripes?: boolean;
    rotate?: boolean;
    rebuild?: boolean;
  } = {},
): string {
  // A mutant always runs hostile, so its replay needs no flag for it.
  const flags =
    (mutant ? ` --mutant ${mutant}` : hostile ? ' --hostile' : '') +
    (contention ? ' --contention' : '') +
    (lists ? ' --lists' : '') +
    (stripes ? ' --stripes' : '') +
    (rotate ? ' --rotate' : '') +
    (rebuild ? ' --rebuild' : '');
  return `pnpm sim -- --seed ${seed} --t ${t}${flags}`;
}
