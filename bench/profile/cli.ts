/**
 * The per-stage profile on its own, at any size and t:
 *   pnpm exec tsx --conditions=@powerstore/source bench/profile/cli.ts [--t 1] [--bytes 4096] [--ops 30] [--out FILE.json]
 * (needs `tsc -b packages/server` first, like the bench scripts).
 */
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { runProfile } from './profile.js';

const { values } = parseArgs({ options: { t: { type: 'string', default: '1' }, bytes: { type: 'string', default: '262144' }, ops: { type: 'string', default: '30' }, out: { type: 'string' } } });
const result = await runProfile({ t: Number(values.t), valueBytes: Number(values.bytes), ops: Number(values.ops), log: (s) => console.log(s) });
if (values.out) writeFileSync(values.out, JSON.stringify(result, null, 1) + '\n');
