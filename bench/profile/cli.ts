/**
 * The per-stage profile on its own, at any size and t:
 *   pnpm exec tsx --conditions=@powerstore/source bench/profile/cli.ts [--t 1] [--bytes 4096] [--ops 30] [--net PROFILE] [--out FILE.json]
 * (needs `tsc -b packages/server` first, like the bench scripts). --net as in run.ts:
 * the servers run on the emulated network's hosts, the client in this process (host
 * `bench`, with its own shaped link).
 */
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { createNetwork } from '../lib/netns.js';
import { runProfile } from './profile.js';

const { values } = parseArgs({
  options: {
    t: { type: 'string', default: '1' },
    bytes: { type: 'string', default: '262144' },
    ops: { type: 'string', default: '30' },
    net: { type: 'string', default: 'loopback' },
    out: { type: 'string' },
  },
});
const net = createNetwork(values.net);
try {
  const result = await runProfile({
    t: Number(values.t),
    valueBytes: Number(values.bytes),
    ops: Number(values.ops),
    net,
    log: (s) => console.log(s),
  });
  if (values.out) writeFileSync(values.out, JSON.stringify(result, null, 1) + '\n');
} finally {
  net.close();
}
