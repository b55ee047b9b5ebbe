#!/usr/bin/env node
/**
 * Runs every test: the type check, lint (ESLint, type-aware) and the format check
 * (Prettier), then vitest (unit, property, simulation and cross-checker tests), and ends
 * with one summary line, `tests: N passed, M failed`; a lint or format failure counts as
 * one failed test each, and vitest still runs.
 * Extra arguments go to vitest (`pnpm test:all -- packages/erasure`).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const report = join(root, 'test-results', 'vitest.json');

const tsc = spawnSync('pnpm', ['exec', 'tsc', '-b'], { stdio: 'inherit', cwd: root });
if (tsc.status !== 0) {
  console.log('\ntests: 0 passed, 1 failed (type check)');
  process.exit(1);
}

// `pnpm lint` on its own; `pnpm format` rewrites what the format check refuses.
const checks = [
  ['lint', ['exec', 'eslint', '.']],
  ['format', ['exec', 'prettier', '--check', '.', '--log-level', 'warn']],
];
// With arguments (a subset of the tests) lint and format are left to the full run.
const subset = process.argv.length > 2;
const failedChecks = (subset ? [] : checks)
  .filter(([, args]) => spawnSync('pnpm', args, { stdio: 'inherit', cwd: root }).status !== 0)
  .map(([name]) => name);
if (failedChecks.length > 0)
  console.log(`\n${failedChecks.join(' and ')} failed (run \`pnpm format\` for formatting); running the tests anyway\n`);

mkdirSync(dirname(report), { recursive: true });
rmSync(report, { force: true });
const vitest = spawnSync(
  'pnpm',
  ['exec', 'vitest', 'run', '--reporter=default', '--reporter=json', `--outputFile.json=${report}`, ...process.argv.slice(2)],
  { stdio: 'inherit', cwd: root },
);

if (!existsSync(report)) {
  console.log(`\ntests: 0 passed, ${1 + failedChecks.length} failed (vitest exited ${vitest.status ?? vitest.signal} without a report)`);
  process.exit(1);
}
const r = JSON.parse(readFileSync(report, 'utf8'));
const failed = r.numFailedTests + countFilesFailedWithoutTests(r) + failedChecks.length;
const skipped = r.numPendingTests + (r.numTodoTests ?? 0);
const checked = failedChecks.length ? ` (${failedChecks.join(', ')})` : '';
console.log(
  `\ntests: ${r.numPassedTests + (subset ? 0 : checks.length - failedChecks.length)} passed, ${failed} failed${checked}${skipped ? `, ${skipped} skipped` : ''}`,
);
process.exit(vitest.status === 0 && failed === 0 && r.numPassedTests > 0 ? 0 : 1);

/**
 * Test files that failed with no failed test (one that did not load, or whose hooks threw)
 * count as one failure each. (vitest's `numFailedTestSuites` counts describe blocks too, so
 * it cannot be used for this: a failed test inside a describe was counted twice.)
 */
function countFilesFailedWithoutTests(result) {
  return result.testResults.filter((s) => s.status === 'failed' && !s.assertionResults.some((a) => a.status === 'failed')).length;
}
