import { describe, expect, it } from 'vitest';
import { huntMutant } from './hunt.js';
import { MUTANTS } from './mutants.js';

describe('mutants', () => {
  it('there are at least five', () => {
    expect(MUTANTS.length).toBeGreaterThanOrEqual(5);
  });

  for (const mutant of MUTANTS) {
    it(`the simulator catches ${mutant.name}: ${mutant.description}`, async () => {
      const hunt = await huntMutant(mutant, 1, 600);
      expect(hunt, `${mutant.name} survived 600 hostile seeds`).toBeDefined();
    }, 300_000);
  }
});
