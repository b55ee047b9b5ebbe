/**
 * Erasure-codec benchmark: PowerStore's WebAssembly codec side by side, in one run and
 * one thread, with @ronomon/reed-solomon (native addon) and ISA-L's portable C compiled
 * to WebAssembly. Throughput is in GB/s of value bytes; each figure is the median of
 * several samples, and the systems take turns sample by sample so that noise on this
 * shared machine falls on all of them alike.
 *
 *   pnpm bench:erasure [--samples 5] [--seconds 0.5] [--quick]
 */
import { writeFileSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { createCodec, createCodecFromModule, type ErasureCodec } from '@powerstore/erasure';
import { wasmBase64 as portableWasm } from '../../wasm/generated/isal-portable.js';
import { randomBytes, sample } from './codec-workload.js';

const here = dirname(fileURLToPath(import.meta.url));
const { values: args } = parseArgs({
  options: {
    samples: { type: 'string', default: '5' },
    seconds: { type: 'string', default: '0.5' },
    quick: { type: 'boolean', default: false },
    out: { type: 'string', default: join(here, '..', 'results') },
  },
});
const SAMPLES = args.quick ? 3 : Number(args.samples);
const SECONDS = args.quick ? 0.1 : Number(args.seconds);
if (!(SAMPLES >= 1 && SECONDS > 0)) throw new Error('--samples must be ≥ 1 and --seconds > 0');

const SHAPES = [
  { n: 4, k: 2 },
  { n: 7, k: 3 },
  { n: 10, k: 4 },
] as const;
const SIZES = [256 * 1024, 4 * 1024 * 1024];
const OPS = ['encode', 'decode-1-lost', 'decode-k-lost'] as const;
type Op = (typeof OPS)[number];
const SYSTEMS = ['powerstore-wasm', 'powerstore-wasm-into', 'ronomon-native', 'isal-portable-wasm'] as const;
type System = (typeof SYSTEMS)[number];

/** One operation of one system, ready to run repeatedly. */
type Runner = () => void | Promise<void>;

interface RonomonModule {
  create(k: number, m: number): unknown;
  encode(
    ctx: unknown,
    sources: number,
    targets: number,
    buffer: Uint8Array,
    bufferOffset: number,
    bufferSize: number,
    parity: Uint8Array,
    parityOffset: number,
    paritySize: number,
    callback: (error?: Error) => void,
  ): void;
}

function loadRonomon(): RonomonModule {
  const require = createRequire(join(here, 'ronomon', 'package.json'));
  try {
    return require('@ronomon/reed-solomon') as RonomonModule;
  } catch (e) {
    throw new Error(`@ronomon/reed-solomon is not built: run bash bench/erasure/setup-ronomon.sh (${String(e)})`);
  }
}

function equal(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && Buffer.compare(a, b) === 0;
}

/** Fragment slots with `lost` removed. */
function without(fragments: Uint8Array[], lost: (i: number) => boolean): (Uint8Array | undefined)[] {
  return fragments.map((f, i) => (lost(i) ? undefined : f));
}

function lostFor(op: Op, k: number): (i: number) => boolean {
  return op === 'decode-1-lost' ? (i) => i === 0 : (i) => i < k;
}

function codecRunner(codec: ErasureCodec, op: Op, value: Uint8Array): Runner {
  if (op === 'encode') return () => void codec.encode(value);
  const slots = without(codec.encode(value), lostFor(op, codec.k));
  const decoded = codec.decode(slots, value.length);
  if (!equal(decoded, value)) throw new Error('codec decoded the wrong bytes');
  return () => void codec.decode(slots, value.length);
}

/** The same codec writing into buffers allocated once, as @ronomon does. */
function codecIntoRunner(codec: ErasureCodec, op: Op, value: Uint8Array): Runner {
  const len = codec.fragmentLength(value.length);
  if (op === 'encode') {
    const parity = Array.from({ length: codec.n - codec.k }, () => new Uint8Array(len));
    return () => void codec.encodeInto(value, parity);
  }
  const slots = without(codec.encode(value), lostFor(op, codec.k));
  const out = new Uint8Array(value.length);
  if (!equal(codec.decodeInto(slots, value.length, out), value)) throw new Error('codec decoded the wrong bytes');
  return () => void codec.decodeInto(slots, value.length, out);
}

function ronomonRunner(rs: RonomonModule, n: number, k: number, op: Op, value: Uint8Array): Runner {
  const m = n - k;
  // Shards must be a multiple of 8 bytes.
  const shard = Math.ceil(value.length / k / 8) * 8;
  const buffer = new Uint8Array(shard * k);
  buffer.set(value);
  const parity = new Uint8Array(shard * m);
  const ctx = rs.create(k, m);
  const all = (1 << n) - 1;
  const run = (sources: number, targets: number) =>
    new Promise<void>((resolve, reject) =>
      rs.encode(ctx, sources, targets, buffer, 0, buffer.length, parity, 0, parity.length, (e) => (e ? reject(e) : resolve())),
    );
  const dataMask = (1 << k) - 1;
  if (op === 'encode') return () => run(dataMask, all & ~dataMask);
  const lost = lostFor(op, k);
  let targets = 0;
  for (let i = 0; i < n; i++) if (lost(i)) targets |= 1 << i;
  return async () => {
    await run(all & ~targets, targets);
  };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

interface Row {
  system: System;
  n: number;
  k: number;
  valueBytes: number;
  op: Op;
  samplesGBps: number[];
  medianGBps: number;
}

const ronomon = loadRonomon();
const rows: Row[] = [];
const total = SHAPES.length * SIZES.length * OPS.length;
let done = 0;
const started = performance.now();
for (const { n, k } of SHAPES) {
  const ours = await createCodec({ k, n });
  const portable = await createCodecFromModule(portableWasm, { k, n });
  for (const valueBytes of SIZES) {
    const value = randomBytes(valueBytes, valueBytes ^ (n << 8) ^ k);
    for (const op of OPS) {
      const runners: Record<System, Runner> = {
        'powerstore-wasm': codecRunner(ours, op, value),
        'powerstore-wasm-into': codecIntoRunner(ours, op, value),
        'ronomon-native': ronomonRunner(ronomon, n, k, op, value),
        'isal-portable-wasm': codecIntoRunner(portable, op, value),
      };
      const samples = Object.fromEntries(SYSTEMS.map((s) => [s, [] as number[]])) as Record<System, number[]>;
      for (const system of SYSTEMS) await sample(runners[system], Math.min(0.1, SECONDS)); // warm-up, tier-up
      for (let s = 0; s < SAMPLES; s++) {
        for (const system of SYSTEMS) {
          const opsPerSec = await sample(runners[system], SECONDS);
          samples[system].push((opsPerSec * valueBytes) / 1e9);
        }
      }
      for (const system of SYSTEMS) {
        rows.push({ system, n, k, valueBytes, op, samplesGBps: samples[system], medianGBps: median(samples[system]) });
      }
      done++;
      const elapsed = (performance.now() - started) / 1000;
      process.stderr.write(
        `[${done}/${total}] (${n},${k}) ${valueBytes / 1024} KiB ${op}: ` +
          SYSTEMS.map((s) => `${s} ${median(samples[s]).toFixed(2)}`).join(', ') +
          ` GB/s  (${elapsed.toFixed(0)} s, ~${((elapsed / done) * (total - done)).toFixed(0)} s left)\n`,
      );
    }
  }
}

const command = `pnpm bench:erasure${args.quick ? ' --quick' : ''}${args.samples !== '5' && !args.quick ? ` --samples ${args.samples}` : ''}${args.seconds !== '0.5' && !args.quick ? ` --seconds ${args.seconds}` : ''}`;
const get = (system: System, r: Row) =>
  rows.find((x) => x.system === system && x.n === r.n && x.k === r.k && x.valueBytes === r.valueBytes && x.op === r.op)!.medianGBps;
const ours = rows.filter((r) => r.system === 'powerstore-wasm');
const table = [
  '| (n,k) | value | operation | PowerStore WASM | PowerStore WASM, into buffers | @ronomon native | ISA-L portable WASM | into vs ronomon | new arrays vs ronomon | vs portable |',
  '|---|---|---|---:|---:|---:|---:|---:|---:|---:|',
  ...ours.map((r) => {
    const ron = get('ronomon-native', r);
    const port = get('isal-portable-wasm', r);
    const into = get('powerstore-wasm-into', r);
    const size = r.valueBytes >= 1 << 20 ? `${r.valueBytes >> 20} MiB` : `${r.valueBytes >> 10} KiB`;
    return `| (${r.n},${r.k}) | ${size} | ${r.op} | ${r.medianGBps.toFixed(2)} | ${into.toFixed(2)} | ${ron.toFixed(2)} | ${port.toFixed(2)} | ${(into / ron).toFixed(2)}× | ${(r.medianGBps / ron).toFixed(2)}× | ${(into / port).toFixed(1)}× |`;
  }),
].join('\n');

const meta = {
  command,
  date: new Date().toISOString(),
  node: process.version,
  cpu: os.cpus()[0]?.model ?? 'unknown',
  samples: SAMPLES,
  secondsPerSample: SECONDS,
  unit: 'GB/s of value bytes (1e9), median of samples, one thread',
};
mkdirSync(args.out, { recursive: true });
const name = args.quick ? 'erasure-quick' : 'erasure';
writeFileSync(join(args.out, `${name}.json`), JSON.stringify({ ...meta, rows }, null, 2) + '\n');
writeFileSync(
  join(args.out, `${name}.md`),
  `# Erasure codec throughput\n\n` +
    `\`${command}\` on ${meta.cpu}, Node ${meta.node}, ${meta.date.slice(0, 10)}.\n` +
    `${meta.unit}; ${SAMPLES} samples of ${SECONDS} s each, systems interleaved sample by sample.\n\n` +
    `- *PowerStore WASM* is \`encode\`/\`decode\`, returning new arrays; *into buffers* is \`encodeInto\`/\`decodeInto\` with buffers allocated once, which is how *@ronomon* works (in place, asynchronously on libuv's thread pool, one operation at a time). "vs portable" compares the into-buffers figures, the same harness around both kernels.\n` +
    `- *decode-1-lost*: data fragment 0 lost; *decode-k-lost*: all k data fragments lost, rebuilt from parity.\n\n` +
    table +
    '\n',
);
console.log(table);
console.log(`\nwrote ${join(args.out, `${name}.json`)} and ${name}.md`);
