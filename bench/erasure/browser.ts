/**
 * The client's per-write CPU work (erasure coding plus the cross-checksum's fragment
 * hashes) in Chromium against Node, on one machine, in one run: the same code
 * (codec-workload.ts) with each platform's own allocator and crypto provider. Chromium
 * runs both WebAssembly builds (relaxed SIMD, its default, and SIMD128 forced); Node the
 * one it picks (SIMD128 on Node 20), and SIMD128 too when it picks relaxed SIMD (Node 20
 * with --experimental-wasm-relaxed-simd, which tsx passes on). Throughput is in GB/s of
 * value bytes, the median of several samples; the systems take turns sample by sample so
 * that noise on this shared machine falls on all of them alike.
 *
 *   pnpm bench:codec-browser [--samples 7] [--seconds 0.5] [--warmup 1] [--size 256k] [--k 2 --n 4] [--quick]
 *   pnpm exec tsx --experimental-wasm-relaxed-simd --conditions=@powerstore/source bench/erasure/browser.ts …
 */
import { fork, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import * as esbuild from 'esbuild';
import type { Page } from 'playwright-core';
import type { CodecKernel } from '@powerstore/erasure';
import { launchChromium, serveDirectory } from '../../test/browser/browser.js';
import { median } from '../lib/stats.js';
import type { BenchPage } from './codec-browser-page.js';
import type { WorkerReply, WorkerRequest } from './codec-node-worker.js';
import { OPS, type Op } from './codec-workload.js';

const here = dirname(fileURLToPath(import.meta.url));
const { values: args } = parseArgs({
  options: {
    samples: { type: 'string', default: '7' },
    seconds: { type: 'string', default: '0.5' },
    warmup: { type: 'string', default: '1' },
    size: { type: 'string', default: '256k' },
    k: { type: 'string', default: '2' },
    n: { type: 'string', default: '4' },
    quick: { type: 'boolean', default: false },
    out: { type: 'string', default: join(here, '..', 'results') },
  },
});
const SAMPLES = args.quick ? 3 : Number(args.samples);
const SECONDS = args.quick ? 0.2 : Number(args.seconds);
const WARMUP = args.quick ? 0.3 : Number(args.warmup);
const K = Number(args.k);
const N = Number(args.n);
const sizeMatch = /^(\d+)([km]?)$/i.exec(args.size);
if (!sizeMatch) throw new Error('--size is bytes, or a number with k or m (KiB, MiB)');
const VALUE_BYTES = Number(sizeMatch[1]) * ({ k: 1024, m: 1 << 20 }[sizeMatch[2]!.toLowerCase()] ?? 1);
if (!(SAMPLES >= 1 && SECONDS > 0 && WARMUP >= 0 && Number.isInteger(K) && Number.isInteger(N) && 1 <= K && K <= N)) {
  throw new Error('--samples ≥ 1, --seconds > 0, --warmup ≥ 0, 1 ≤ --k ≤ --n');
}

/** A place the workload runs: a Node process or a Chromium page. */
interface System {
  readonly name: string;
  readonly kernel: CodecKernel;
  sample(op: Op, seconds: number): Promise<number>;
}

/** codec-node-worker.ts in a child Node, with this process's flags (tsx, conditions, V8 flags). */
function forkNodeWorker(): { worker: BenchPage; child: ChildProcess } {
  const child = fork(join(here, 'codec-node-worker.ts'), [], { stdio: 'inherit' });
  const pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  let next = 0;
  child.on('message', (reply: WorkerReply) => {
    const p = pending.get(reply.id);
    pending.delete(reply.id);
    if ('error' in reply) p?.reject(new Error(`Node worker: ${reply.error}`));
    else p?.resolve(reply.result);
  });
  child.on('exit', (code) => {
    for (const p of pending.values()) p.reject(new Error(`Node worker exited (${code})`));
    pending.clear();
  });
  const call = (method: keyof BenchPage, args: unknown[]) =>
    new Promise<unknown>((resolve, reject) => {
      const id = next++;
      pending.set(id, { resolve, reject });
      child.send({ id, method, args } satisfies WorkerRequest);
    });
  const worker: BenchPage = {
    prepare: (id, params) => call('prepare', [id, params]) as Promise<CodecKernel>,
    sample: (id, op, seconds) => call('sample', [id, op, seconds]) as Promise<number>,
  };
  return { worker, child };
}

async function nodeSystem(worker: BenchPage, kernel: CodecKernel | undefined): Promise<System> {
  const id = kernel ?? 'default';
  const chosen = await worker.prepare(id, { k: K, n: N, valueBytes: VALUE_BYTES, ...(kernel ? { kernel } : {}) });
  return { name: 'Node', kernel: chosen, sample: (op, seconds) => worker.sample(id, op, seconds) };
}

async function chromiumSystem(tab: Page, kernel: CodecKernel | undefined): Promise<System> {
  const id = kernel ?? 'default';
  const params = { k: K, n: N, valueBytes: VALUE_BYTES, ...(kernel ? { kernel } : {}) };
  const chosen = await tab.evaluate(([id, params]) => (globalThis as unknown as { benchCodec: BenchPage }).benchCodec.prepare(id, params), [
    id,
    params,
  ] as const);
  return {
    name: 'Chromium',
    kernel: chosen,
    sample: (op, seconds) =>
      tab.evaluate(([id, op, seconds]) => (globalThis as unknown as { benchCodec: BenchPage }).benchCodec.sample(id, op, seconds), [
        id,
        op,
        seconds,
      ] as const),
  };
}

// The page: codec-browser-page.ts bundled as a web app would be, from the workspace's
// sources, with the browser's branches of every conditional import.
const loadBefore = os.loadavg()[0]!;
const out = mkdtempSync(join(os.tmpdir(), 'powerstore-codec-browser-'));
await esbuild.build({
  entryPoints: [join(here, 'codec-browser-page.ts')],
  bundle: true,
  format: 'esm',
  platform: 'browser',
  conditions: ['@powerstore/source'],
  target: 'es2022',
  outfile: join(out, 'app.js'),
  logLevel: 'warning',
});
writeFileSync(
  join(out, 'index.html'),
  '<!doctype html><html><head><meta charset="utf-8"><title>loading</title></head><body><script type="module" src="./app.js"></script></body></html>',
);
const server = await serveDirectory(out);
const node = forkNodeWorker();
const browser = await launchChromium();
const rows: { op: Op; system: string; kernel: CodecKernel; samplesGBps: number[]; medianGBps: number }[] = [];
let chromiumVersion = 'unknown';
try {
  chromiumVersion = browser.version();
  const tab = await browser.newPage();
  const errors: string[] = [];
  tab.on('pageerror', (e) => errors.push(String(e)));
  await tab.goto(`${server.url}/index.html`);
  await tab.waitForFunction(() => document.title === 'ready', undefined, { timeout: 20_000 });
  if (errors.length) throw new Error(`page errors: ${errors.join('; ')}`);
  const nodeDefault = await nodeSystem(node.worker, undefined);
  const chromium = await chromiumSystem(tab, undefined);
  // Chromium ships relaxed SIMD; if it did not pick it, the two Chromium rows measure one build.
  if (chromium.kernel !== 'relaxed-simd') process.stderr.write(`warning: Chromium chose ${chromium.kernel}\n`);
  const systems = [
    nodeDefault,
    ...(nodeDefault.kernel === 'simd128' ? [] : [await nodeSystem(node.worker, 'simd128')]),
    chromium,
    await chromiumSystem(tab, 'simd128'),
  ];

  for (const op of OPS) {
    // Warm-up: lets the engines tier the JavaScript and WebAssembly up to optimized code.
    for (const s of systems) await s.sample(op, WARMUP);
    const samples = systems.map(() => [] as number[]);
    for (let i = 0; i < SAMPLES; i++) {
      for (const [j, s] of systems.entries()) samples[j]!.push(((await s.sample(op, SECONDS)) * VALUE_BYTES) / 1e9);
    }
    systems.forEach((s, j) =>
      rows.push({ op, system: s.name, kernel: s.kernel, samplesGBps: samples[j]!, medianGBps: median(samples[j]!) }),
    );
    process.stderr.write(`${op}: ${systems.map((s, j) => `${s.name} ${s.kernel} ${median(samples[j]!).toFixed(2)}`).join(', ')} GB/s\n`);
  }
} finally {
  node.child.disconnect();
  await browser.close();
  await server.close();
  rmSync(out, { recursive: true, force: true });
}

const defaults = { samples: '7', seconds: '0.5', warmup: '1', size: '256k', k: '2', n: '4' } as const;
// Node 20 runs relaxed SIMD only with this V8 flag (tsx passes it on to node).
const nodeRelaxedFlag = process.execArgv.includes('--experimental-wasm-relaxed-simd');
const command = [
  nodeRelaxedFlag
    ? 'pnpm exec tsx --experimental-wasm-relaxed-simd --conditions=@powerstore/source bench/erasure/browser.ts'
    : 'pnpm bench:codec-browser',
  args.quick ? '--quick' : '',
]
  .concat(
    args.quick
      ? []
      : (Object.keys(defaults) as (keyof typeof defaults)[]).filter((o) => args[o] !== defaults[o]).map((o) => `--${o} ${args[o]}`),
  )
  .filter(Boolean)
  .join(' ');
const gbps = (op: Op, system: string, kernel: CodecKernel) =>
  rows.find((r) => r.op === op && r.system === system && r.kernel === kernel)?.medianGBps ?? NaN;
const nodeKernel = rows.find((r) => r.system === 'Node')!.kernel;
const size = VALUE_BYTES >= 1 << 20 ? `${VALUE_BYTES / (1 << 20)} MiB` : `${VALUE_BYTES / 1024} KiB`;
const columns = [...new Map(rows.map((r) => [`${r.system} (${r.kernel})`, r])).values()];
const ratios: [string, (op: Op) => number][] = [
  [`Node (${nodeKernel}) ÷ Chromium (relaxed-simd)`, (op) => gbps(op, 'Node', nodeKernel) / gbps(op, 'Chromium', 'relaxed-simd')],
  ['relaxed ÷ simd128 in Chromium', (op) => gbps(op, 'Chromium', 'relaxed-simd') / gbps(op, 'Chromium', 'simd128')],
  ...(nodeKernel === 'relaxed-simd'
    ? [
        ['relaxed ÷ simd128 in Node', (op: Op) => gbps(op, 'Node', 'relaxed-simd') / gbps(op, 'Node', 'simd128')] as [
          string,
          (op: Op) => number,
        ],
      ]
    : []),
];
const table = [
  `| operation | ${columns.map((c) => `${c.system} (${c.kernel})`).join(' | ')} | ${ratios.map(([name]) => name).join(' | ')} |`,
  `|---|${columns.map(() => '---:|').join('')}${ratios.map(() => '---:|').join('')}`,
  ...OPS.map(
    (op) =>
      `| ${op} | ${columns.map((c) => gbps(op, c.system, c.kernel).toFixed(2)).join(' | ')} | ${ratios.map(([, f]) => `${f(op).toFixed(2)}×`).join(' | ')} |`,
  ),
].join('\n');
const meta = {
  command,
  date: new Date().toISOString(),
  node: process.version,
  chromium: chromiumVersion,
  cpu: os.cpus()[0]?.model ?? 'unknown',
  code: { k: K, n: N },
  valueBytes: VALUE_BYTES,
  samples: SAMPLES,
  secondsPerSample: SECONDS,
  warmupSeconds: WARMUP,
  unit: 'GB/s of value bytes (1e9), median of samples, one JavaScript thread (WebCrypto may hash on Chromium worker threads)',
  // The machine is shared: the 1-minute load average says how much else was running.
  loadAverage: { before: loadBefore, after: os.loadavg()[0]! },
};
const name = `codec-browser${nodeRelaxedFlag ? '-node-relaxed' : ''}${args.quick ? '-quick' : ''}`;
mkdirSync(args.out, { recursive: true });
writeFileSync(join(args.out, `${name}.json`), JSON.stringify({ ...meta, rows }, null, 2) + '\n');
writeFileSync(
  join(args.out, `${name}.md`),
  `# Codec and cross-checksum: Chromium against Node\n\n` +
    `\`${command}\` on ${meta.cpu} (${os.cpus().length} cores, 1-minute load average ${meta.loadAverage.before.toFixed(1)} before, ` +
    `${meta.loadAverage.after.toFixed(1)} after), Node ${meta.node}, Chromium ${meta.chromium}, ${meta.date.slice(0, 10)}.\n` +
    `(k, n) = (${K}, ${N}), ${size} values. ${meta.unit}; ${SAMPLES} samples of ${SECONDS} s after ${WARMUP} s of warm-up, ` +
    `systems interleaved sample by sample.\n\n` +
    `- *encode*: \`codec.encode(value)\`, new parity arrays each time; *encode-into*: \`codec.encodeInto\` into parity buffers allocated once.\n` +
    `- *hash*: \`computeCrossChecksum\` of the ${N} fragments (SHA-256 of each, with its domain prefix), through each platform's crypto provider: \`node:crypto\` in Node, WebCrypto in Chromium.\n` +
    `- *encode+hash*: both, the client's CPU work per write before signing.\n\n` +
    table +
    '\n',
);
console.log(table);
console.log(`\nwrote ${join(args.out, `${name}.json`)} and ${name}.md`);
