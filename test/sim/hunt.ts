import type { Mutant } from './mutants.js';
import { tForSeed } from './run.js';
import { replayCommand, simulate } from './simulate.js';

/** The first hostile seed in `first …` (up to `budget` seeds) on which `mutant` violates a property. */
export async function huntMutant(
  mutant: Mutant,
  first: number,
  budget: number,
): Promise<{ seed: number; t: number; tried: number; violations: string[]; replay: string } | undefined> {
  for (let seed = first; seed < first + budget; seed++) {
    const t = tForSeed(seed);
    let violations: string[];
    try {
      violations = (
        await simulate({
          seed,
          t,
          protocol: mutant.protocol,
          hostile: true,
          ...(mutant.lists ? { lists: true } : {}),
          ...(mutant.stripes ? { stripes: true } : {}),
          ...(mutant.rotate ? { rotate: true } : {}),
          ...(mutant.rebuild ? { rebuild: true } : {}),
          ...(mutant.behaviours ? { behaviours: mutant.behaviours } : {}),
          ...(mutant.deleteRate !== undefined ? { deleteRate: mutant.deleteRate } : {}),
          ...(mutant.hostFaults ? { hostFaults: mutant.hostFaults } : {}),
        })
      ).violations;
    } catch (err) {
      violations = [`threw: ${err instanceof Error ? err.message : String(err)}`];
    }
    if (violations.some((v) => !mutant.caughtBy || mutant.caughtBy.test(v)))
      return {
        seed,
        t,
        tried: seed - first + 1,
        violations,
        replay: replayCommand(seed, t, {
          mutant: mutant.name,
          lists: mutant.lists ?? false,
          stripes: mutant.stripes ?? false,
          rotate: mutant.rotate ?? false,
          rebuild: mutant.rebuild ?? false,
        }),
      };
  }
  return undefined;
}
