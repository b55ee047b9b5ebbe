/**
 * LevelDB's memtable and file sizes for fragment-sized values: process CPU per synced put
 * (user + system, LevelDB's background threads included) for each size pair, each in a
 * fresh child process and database, alternating, median of the repetitions. The numbers
 * behind powerstore-server's LEVELDB_TUNING.
 *
 *   pnpm exec tsx bench/leveldb-tuning.ts [--puts 4000] [--bytes 131072] [--repeats 3]
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { ClassicLevel } from 'classic-level';
import { median } from './lib/stats.js';

const MiB = 1024 * 1024;
const VARIANTS: Record<string, { writeBufferSize?: number; maxFileSize?: number }> = {
  'default (4 MiB / 2 MiB)': {},
  '16 MiB / 16 MiB': { writeBufferSize: 16 * MiB, maxFileSize: 16 * MiB },
  '32 MiB / 32 MiB': { writeBufferSize: 32 * MiB, maxFileSize: 32 * MiB },
  '64 MiB / 32 MiB': { writeBufferSize: 64 * MiB, maxFileSize: 32 * MiB },
};

const { values } = parseArgs({
  options: {
    puts: { type: 'string', default: '4000' },
    bytes: { type: 'string', default: '131072' },
    repeats: { type: 'string', default: '3' },
    child: { type: 'string' },
  },
});
const puts = Number(values.puts);
const bytes = Number(values.bytes);

if (values.child !== undefined) {
  // One measurement: 4 writers, each a synced batch of a fragment and its metadata under a
  // new key, as a server's STORE writes them; then time for compactions to finish.
  const dir = mkdtempSync(join(tmpdir(), 'powerstore-leveldb-tuning-'));
  const db = new ClassicLevel<string, Uint8Array>(dir, { keyEncoding: 'utf8', valueEncoding: 'view', ...VARIANTS[values.child] });
  await db.open();
  const fragments = Array.from({ length: 16 }, () => randomBytes(bytes));
  const meta = randomBytes(300);
  const c0 = process.cpuUsage();
  let next = 0;
  const writer = async () => {
    while (next < puts) {
      const k = next++;
      await db.batch(
        [
          { type: 'put', key: `f:${k}`, value: fragments[k % 16]! },
          { type: 'put', key: `h:${k}`, value: meta },
        ],
        { sync: true },
      );
    }
  };
  await Promise.all([writer(), writer(), writer(), writer()]);
  await new Promise((r) => setTimeout(r, 1500));
  const c = process.cpuUsage(c0);
  await db.close();
  rmSync(dir, { recursive: true, force: true });
  console.log(JSON.stringify((c.user + c.system) / 1000 / puts));
} else {
  const results = new Map<string, number[]>(Object.keys(VARIANTS).map((v) => [v, []]));
  for (let r = 0; r < Number(values.repeats); r++) {
    for (const v of Object.keys(VARIANTS)) {
      const out = spawnSync(
        process.execPath,
        [...process.execArgv, fileURLToPath(import.meta.url), '--child', v, '--puts', String(puts), '--bytes', String(bytes)],
        { encoding: 'utf8' },
      );
      if (out.status !== 0) throw new Error(`child failed: ${out.stderr}`);
      results.get(v)!.push(Number(out.stdout.trim()));
    }
  }
  console.log(`${puts} synced puts of ${bytes} B under distinct keys, 4 writers; process CPU ms per put, median of ${values.repeats}:`);
  for (const [v, ms] of results) console.log(`  ${v.padEnd(24)} ${median(ms).toFixed(3)}  (${ms.map((m) => m.toFixed(3)).join(', ')})`);
}
