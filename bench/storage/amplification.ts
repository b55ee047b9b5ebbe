/**
 * Write and space amplification of the server's fragment storage, and what key–value
 * separation would change (the per-operation-cost issue). Each run is a fresh child
 * process on a fresh directory that drives one backend through the storage interface
 * exactly as a server's STORE and COMPLETE do (`Server.storeEntry`, `writeBack`,
 * `collect` with the default history bound, keep = 2: each key holds lc and the two
 * versions before it, older ones are deleted as new writes complete), 16 requests in
 * flight, over keys overwritten again and again, then waits for the backend's background
 * writes (compactions) to stop. It reads the process's I/O counters before and after.
 *
 *   pnpm bench:storage [--sizes 4k,64k,128k] [--mb 4k=128,512] [--reps 3]
 *       [--variants leveldb-only,level,rocksdb,rocksdb-blob,vlog] [--rocksdb-from DIR] [--out NAME]
 *
 * Backends: `level` is the server's LevelStorage, unchanged (synced group commit, its
 * default tuning and eraser) with its value log on (`--value-log-min-bytes 16384`:
 * fragments of 16 KiB and more; its maintenance passes run after the stores so that their
 * writes count); `leveldb-only` is the same with the value log off (every fragment in
 * LevelDB, the server's default and the baseline); the others
 * are bench prototypes (`backends.ts`). The
 * rocksdb variants need rocksdb-native, which the workspace does not depend on (161 MB
 * of prebuilds for every platform): `npm install --prefix bench/storage/.rocksdb
 * rocksdb-native@3.18.1` puts it where the bench looks by default.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir, cpus, totalmem, release } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { historyEntryBytes, type AbstractStorage, type HistoryEntry, type KeyRecord, type Timestamp } from '@powerstore/protocol';
import { LevelStorage } from 'powerstore-server';
import { KvStorage, loadRocks, openRocksEngine, openValueLogEngine } from './backends.js';
import { ioDelta, markdownTable, readProcIo, summarize, type RunResult } from './measure.js';

const here = dirname(fileURLToPath(import.meta.url));
const ALL_VARIANTS = ['leveldb-only', 'level', 'rocksdb', 'rocksdb-blob', 'vlog'] as const;
type Variant = (typeof ALL_VARIANTS)[number];
const N = 4;
/** Requests in flight, as concurrent clients give a server. */
const CONCURRENCY = 16;
/** History kept below lc (the server's default, `DEFAULT_HISTORY.keep`). */
const KEEP = 2;
/** Fragment stores per key over a run: the live set is KEEP + 1 of them, the rest is deleted. */
const VERSIONS = 8;
const MIN_BLOB = 4096;

const { values } = parseArgs({
  options: {
    sizes: { type: 'string', default: '4k,64k,128k' },
    /** MiB of fragments per run: one number, or per size (`4k=128,512`: 128 for 4 KiB, 512 for the rest). */
    mb: { type: 'string', default: '4k=128,512' },
    reps: { type: 'string', default: '3' },
    variants: { type: 'string', default: ALL_VARIANTS.join(',') },
    'rocksdb-from': { type: 'string', default: join(here, '.rocksdb') },
    out: { type: 'string', default: 'storage-amplification' },
    'settle-max-s': { type: 'string', default: '60' },
    child: { type: 'string' },
    size: { type: 'string' },
    rep: { type: 'string' },
  },
});

const parseSize = (s: string) => {
  const m = /^(\d+)(k|m)?$/i.exec(s.trim());
  if (!m) throw new Error(`bad size ${s}`);
  return Number(m[1]) * (m[2]?.toLowerCase() === 'k' ? 1024 : m[2]?.toLowerCase() === 'm' ? 1024 * 1024 : 1);
};

function diskUsage(dir: string): number {
  let total = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) total += diskUsage(p);
    else if (e.isFile()) total += statSync(p).blocks * 512;
  }
  return total;
}

async function openVariant(
  variant: Variant,
  dir: string,
  notes: Record<string, number>,
): Promise<AbstractStorage & { engineNotes(): Record<string, number> }> {
  if (variant === 'level' || variant === 'leveldb-only') {
    const s = await LevelStorage.open({
      path: dir,
      n: N,
      // `leveldb-only`: every fragment in LevelDB (the server's default); `level`: the value log on.
      valueLog: variant === 'leveldb-only' ? (false as const) : {},
      onErase: (p) => (notes.erasePasses = (notes.erasePasses ?? 0) + (p.error ? 0 : 1)),
      onValueLogPass: (p) => {
        for (const k of ['erased', 'removed', 'moved'] as const) notes[`valueLog_${k}`] = (notes[`valueLog_${k}`] ?? 0) + p[k];
      },
    });
    return Object.assign(s, { engineNotes: () => ({}) });
  }
  const engine =
    variant === 'vlog'
      ? await openValueLogEngine(dir)
      : await openRocksEngine(dir, { from: values['rocksdb-from'], blobs: variant === 'rocksdb-blob', minBlobSize: MIN_BLOB });
  const s = new KvStorage(engine, N);
  return Object.assign(s, { engineNotes: () => engine.notes?.() ?? {} });
}

const fill = (length: number, seed: number) => Uint8Array.from({ length }, (_, i) => (seed * 131 + i * 7) & 0xff);

/** One run, in this (child) process: stores, settles, reports. */
async function child(variant: Variant, fragmentBytes: number, totalBytes: number, rep: number): Promise<RunResult> {
  const dir = mkdtempSync(join(tmpdir(), `powerstore-amp-${variant}-`));
  const notes: Record<string, number> = {};
  const storage = await openVariant(variant, dir, notes);
  const fragments = Math.max(1, Math.floor(totalBytes / fragmentBytes));
  const keys = Math.max(CONCURRENCY, Math.ceil(fragments / VERSIONS));
  // Incompressible fragments, as erasure-coded (often encrypted) data is; a pool, so making them costs nothing.
  const pool = Array.from({ length: 64 }, () => new Uint8Array(randomBytes(fragmentBytes)));
  const writerId = fill(32, 1);
  const cert = (num: number) => ({
    nonceHash: fill(32, num),
    ccDigest: fill(32, num + 1),
    signer: fill(32, 3),
    signature: fill(64, num + 2),
    tombstone: false,
    grant: undefined,
  });
  const owner = 'bench-owner';
  let live = 0;

  /** `Server.collect`: delete every write below lc but the KEEP newest with a head. */
  const collect = async (r: KeyRecord) => {
    const lc = await r.getLc();
    const lcNum = lc?.ts.num ?? 0;
    const headed = (await r.index()).filter((w) => w.head && w.ts.num < lcNum);
    for (const w of headed.slice(0, Math.max(0, headed.length - KEEP))) {
      await r.deleteEntry(w.ts, { mark: true });
      live -= fragmentBytes;
    }
  };

  const storeAndComplete = async (i: number) => {
    const key = `~bench/k${String(i % keys).padStart(7, '0')}`;
    const ts: Timestamp = { num: Math.floor(i / keys) + 1, writerId };
    const entry: HistoryEntry = {
      ts,
      stripe: 0,
      fragment: pool[i % pool.length]!,
      cc: { tombstone: false, valueLength: fragmentBytes * 2, hashes: Array.from({ length: N }, (_, s) => fill(32, i + s)) },
      cert: cert(ts.num),
    };
    // STORE (`Server.storeEntry`): a retry check on metadata, the collected mark, lc and the index, the put, collection.
    await storage.withKey(key, async (r) => {
      if (await r.getEntryMeta(ts, 0)) return;
      await r.getCollected();
      await r.getLc();
      await r.index();
      if (!(await r.putEntry(entry, { owner, bytes: historyEntryBytes(entry), quota: {}, at: Date.now() }))) throw new Error('quota');
      live += fragmentBytes;
      await collect(r);
    });
    // COMPLETE (`Server.writeBack`): lc raised, then collection.
    await storage.withKey(key, async (r) => {
      const lc = await r.getLc();
      if ((lc?.ts.num ?? 0) >= ts.num) return;
      await r.setLc({
        ts,
        nonce: fill(32, ts.num + 3),
        cert: entry.cert,
        proof: [0, 2, 3].map((server) => ({ server, signature: fill(64, server) })),
      });
      await collect(r);
      await r.index();
    });
  };

  const io0 = readProcIo();
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  let next = 0;
  let lastReport = t0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < fragments) {
        await storeAndComplete(next++);
        const now = performance.now();
        if (now - lastReport > 5000) {
          lastReport = now;
          process.stderr.write(`  ${variant} ${fragmentBytes} B: ${next}/${fragments} fragments, ${((now - t0) / 1000).toFixed(0)} s\n`);
        }
      }
    }),
  );
  const seconds = (performance.now() - t0) / 1000;
  // The value log's maintenance (erasure of collected fragments, collection of mostly dead
  // segments), which the server runs every 15 s: run now, so that its writes count.
  if (storage instanceof LevelStorage) {
    for (let i = 0; i < 5; i++) {
      const pass = await storage.valueLogPass();
      if (!pass || pass.error || pass.erased + pass.removed + pass.moved === 0) break;
    }
  }
  // Background writes (flushes, compactions, blob collection) the stores caused: wait until
  // write_bytes has not moved for 3 s, at most --settle-max-s.
  const s0 = performance.now();
  let settled = false;
  let last = readProcIo().write_bytes;
  let quiet = 0;
  while ((performance.now() - s0) / 1000 < Number(values['settle-max-s'])) {
    await new Promise((r) => setTimeout(r, 500));
    const now = readProcIo().write_bytes;
    quiet = now === last ? quiet + 1 : 0;
    last = now;
    if (quiet >= 6) {
      settled = true;
      break;
    }
  }
  const settleSeconds = (performance.now() - s0) / 1000;
  const io = ioDelta(io0, readProcIo());
  const cpu = process.cpuUsage(cpu0);
  const diskBytes = diskUsage(dir);
  const engineNotes = storage.engineNotes();
  await storage.close();
  rmSync(dir, { recursive: true, force: true });
  return {
    variant,
    fragmentBytes,
    rep,
    fragments,
    seconds,
    settleSeconds,
    settled,
    cpuMs: (cpu.user + cpu.system) / 1000,
    io,
    liveBytes: live,
    diskBytes,
    notes: { keys, ...notes, ...engineNotes },
  };
}

if (values.child !== undefined) {
  const r = await child(values.child as Variant, Number(values.size), Number(values.mb) * 1024 * 1024, Number(values.rep));
  process.stdout.write(`${JSON.stringify(r)}\n`);
  process.exit(0);
}

// Parent: every (repetition, size) measures each variant in turn, the order rotated per
// repetition, so load from other users of the machine hits them alike.
const sizes = values.sizes.split(',').map(parseSize);
const mbFor = (size: number): number => {
  let fallback: number | undefined;
  for (const part of values.mb.split(',')) {
    const [k, v] = part.includes('=') ? part.split('=') : [undefined, part];
    if (k === undefined) fallback = Number(v);
    else if (parseSize(k) === size) return Number(v);
  }
  if (fallback === undefined || !Number.isFinite(fallback)) throw new Error(`--mb names no amount for ${size} B fragments`);
  return fallback;
};
let variants = values.variants.split(',').map((v) => v.trim()) as Variant[];
for (const v of variants) if (!ALL_VARIANTS.includes(v)) throw new Error(`unknown variant ${v} (${ALL_VARIANTS.join(', ')})`);
const unavailable: Record<string, string> = {};
if (variants.some((v) => v.startsWith('rocksdb'))) {
  const loaded = loadRocks(values['rocksdb-from']);
  if ('error' in loaded) {
    for (const v of variants.filter((x) => x.startsWith('rocksdb'))) unavailable[v] = loaded.error;
    variants = variants.filter((v) => !v.startsWith('rocksdb'));
    console.error(`rocksdb variants skipped: ${loaded.error}`);
  }
}
const reps = Number(values.reps);
const results: RunResult[] = [];
const started = new Date();
const outJson = join(here, '..', 'results', `${values.out}.json`);
const outMd = join(here, '..', 'results', `${values.out}.md`);
const command = `pnpm bench:storage ${process.argv.slice(2).join(' ')}`.trim();
const machine = `${cpus().length} × ${cpus()[0]?.model ?? '?'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Linux ${release()}, Node ${process.version}; data in ${tmpdir()}`;
const save = (partial: boolean) =>
  writeFileSync(
    outJson,
    `${JSON.stringify({ command, machine, started, partial, mbPerRun: Object.fromEntries(sizes.map((s) => [s, mbFor(s)])), unavailable, results }, null, 1)}\n`,
  );

for (let rep = 1; rep <= reps; rep++) {
  for (const size of sizes) {
    const order = variants.map((_, i) => variants[(i + rep - 1) % variants.length]!);
    for (const variant of order) {
      console.error(`rep ${rep}/${reps}, ${size} B fragments, ${variant} …`);
      const out = spawnSync(
        process.execPath,
        [
          ...process.execArgv,
          fileURLToPath(import.meta.url),
          '--child',
          variant,
          '--size',
          String(size),
          '--mb',
          String(mbFor(size)),
          '--rep',
          String(rep),
          '--rocksdb-from',
          values['rocksdb-from'],
          '--settle-max-s',
          values['settle-max-s'],
        ],
        { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], maxBuffer: 1 << 24 },
      );
      if (out.status !== 0) throw new Error(`run failed (${variant}, ${size} B): exit ${out.status}`);
      const r = JSON.parse(out.stdout.trim().split('\n').at(-1)!) as RunResult;
      results.push(r);
      const f = summarize([r])[0]!;
      console.error(
        `  ${f.fragmentsPerSec.toFixed(0)} fragments/s, ${f.mbPerSec.toFixed(1)} MB/s, write amp ${f.writeAmp.toFixed(2)}, space amp ${f.spaceAmp.toFixed(2)}, settled in ${r.settleSeconds.toFixed(0)} s${r.settled ? '' : ' (not quiet)'} ${JSON.stringify(r.notes)}`,
      );
      save(true);
    }
  }
}
save(false);
const table = markdownTable(summarize(results), 'leveldb-only');
console.log(table);
writeFileSync(
  outMd,
  `# Storage amplification (\`bench/storage/amplification.ts\`)\n\n\`${command}\`, ${started.toISOString()}\n\nMachine: ${machine}\n\nMedians of ${reps} repetitions; MiB of fragments per run: ${sizes.map((s) => `${s / 1024} KiB: ${mbFor(s)}`).join(', ')}; ratios to \`leveldb-only\` (the server's LevelStorage with every fragment in LevelDB, its default; \`level\`: with its value log on, fragments of 16 KiB and more).\n\n${table}\n${
    Object.keys(unavailable).length
      ? `\nNot measured: ${Object.entries(unavailable)
          .map(([v, e]) => `${v} (${e})`)
          .join('; ')}\n`
      : ''
  }`,
);
