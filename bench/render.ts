/**
 * Renders a bench run's report again from its JSON, after the report's format changed:
 *   pnpm exec tsx bench/render.ts bench/results/<name>.json
 * Rewrites <name>.md and its chart beside it; the measurements are not touched.
 */
import { readFileSync } from 'node:fs';
import { basename, dirname } from 'node:path';
import { writeReports, type BenchResults } from './lib/report.js';

const file = process.argv[2];
if (!file?.endsWith('.json')) {
  console.error('usage: pnpm exec tsx bench/render.ts bench/results/<name>.json');
  process.exit(2);
}
const results = JSON.parse(readFileSync(file, 'utf8')) as BenchResults;
for (const f of writeReports(dirname(file), basename(file, '.json'), results)) console.log(`wrote ${f}`);
