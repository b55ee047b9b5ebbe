/**
 * The storage amplification bench's arithmetic, kept pure so it is tested
 * (`test/bench/storage-amplification.test.ts`): reading `/proc/self/io`, turning two
 * readings into amplification figures, and the medians table of a run.
 */
import { readFileSync } from 'node:fs';
import { median } from '../lib/stats.js';

/** The counters of `/proc/<pid>/io` (bytes), as the kernel names them. */
export interface ProcIo {
  /** Bytes passed to read()-like calls. */
  readonly rchar: number;
  /** Bytes passed to write()-like calls (page cache or not). */
  readonly wchar: number;
  /** Bytes the process caused to be fetched from the storage layer. */
  readonly read_bytes: number;
  /** Bytes the process caused to be sent to the storage layer (counted when a page is dirtied). */
  readonly write_bytes: number;
  /** Dirty bytes that were never written because their file was truncated or deleted first. */
  readonly cancelled_write_bytes: number;
}

const FIELDS = ['rchar', 'wchar', 'read_bytes', 'write_bytes', 'cancelled_write_bytes'] as const;

/** Parses the text of `/proc/<pid>/io`; throws if a counter this bench needs is missing. */
export function parseProcIo(text: string): ProcIo {
  const found = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = /^(\w+):\s*(\d+)\s*$/.exec(line);
    if (m) found.set(m[1]!, Number(m[2]));
  }
  const out: Record<string, number> = {};
  for (const f of FIELDS) {
    const v = found.get(f);
    if (v === undefined) throw new Error(`/proc/self/io has no ${f} (a kernel without task I/O accounting?)`);
    out[f] = v;
  }
  return out as unknown as ProcIo;
}

/** This process's I/O counters; LevelDB's and RocksDB's background threads are threads of it, so counted. */
export function readProcIo(): ProcIo {
  return parseProcIo(readFileSync('/proc/self/io', 'utf8'));
}

/** `after − before`, counter by counter. */
export function ioDelta(before: ProcIo, after: ProcIo): ProcIo {
  const out: Record<string, number> = {};
  for (const f of FIELDS) out[f] = after[f] - before[f];
  return out as unknown as ProcIo;
}

/** What one run (one backend, one fragment size, one repetition) measured. */
export interface RunResult {
  readonly variant: string;
  readonly fragmentBytes: number;
  readonly rep: number;
  /** Fragments stored (each one STORE and one COMPLETE, as a server receives them). */
  readonly fragments: number;
  /** Seconds from the first STORE to the last COMPLETE acknowledged. */
  readonly seconds: number;
  /** Seconds waited afterwards for background writes (compactions) to stop, and whether they did. */
  readonly settleSeconds: number;
  readonly settled: boolean;
  /** Process CPU (user + system, every thread) over the stores and the settling, ms. */
  readonly cpuMs: number;
  /** I/O counters over the stores and the settling. */
  readonly io: ProcIo;
  /** Fragment bytes still stored at the end (the live history), and the data directory's size on disk. */
  readonly liveBytes: number;
  readonly diskBytes: number;
  /** Backend counters worth reporting (e.g. erase passes, value-log segments collected). */
  readonly notes?: Readonly<Record<string, number>>;
}

/** The figures the report compares, for one run. */
export interface Figures {
  readonly fragmentsPerSec: number;
  readonly mbPerSec: number;
  /** Bytes written to the device per fragment byte stored (write_bytes − cancelled_write_bytes). */
  readonly writeAmp: number;
  /** Bytes passed to write() per fragment byte stored. */
  readonly syscallWriteAmp: number;
  /** Bytes on disk at the end per live fragment byte. */
  readonly spaceAmp: number;
  /** Process CPU per fragment, ms. */
  readonly cpuMsPerFragment: number;
}

export function figures(r: RunResult): Figures {
  const stored = r.fragments * r.fragmentBytes;
  return {
    fragmentsPerSec: r.fragments / r.seconds,
    mbPerSec: stored / r.seconds / 1e6,
    writeAmp: (r.io.write_bytes - r.io.cancelled_write_bytes) / stored,
    syscallWriteAmp: r.io.wchar / stored,
    spaceAmp: r.liveBytes > 0 ? r.diskBytes / r.liveBytes : NaN,
    cpuMsPerFragment: r.cpuMs / r.fragments,
  };
}

/** Medians over repetitions of one (fragment size, variant) cell. */
export interface Cell extends Figures {
  readonly variant: string;
  readonly fragmentBytes: number;
  readonly reps: number;
  /** Repetitions whose background writes did not stop within the settle bound. */
  readonly unsettled: number;
}

/** One cell per (fragment size, variant), sizes ascending, variants in first-seen order; figures are medians. */
export function summarize(results: readonly RunResult[]): Cell[] {
  const groups = new Map<string, RunResult[]>();
  for (const r of results) {
    const k = `${r.fragmentBytes}\u0000${r.variant}`;
    const g = groups.get(k);
    if (g) g.push(r);
    else groups.set(k, [r]);
  }
  const cells: Cell[] = [];
  for (const runs of groups.values()) {
    const fs = runs.map(figures);
    const m = (pick: (f: Figures) => number) => median(fs.map(pick));
    cells.push({
      variant: runs[0]!.variant,
      fragmentBytes: runs[0]!.fragmentBytes,
      reps: runs.length,
      unsettled: runs.filter((r) => !r.settled).length,
      fragmentsPerSec: m((f) => f.fragmentsPerSec),
      mbPerSec: m((f) => f.mbPerSec),
      writeAmp: m((f) => f.writeAmp),
      syscallWriteAmp: m((f) => f.syscallWriteAmp),
      spaceAmp: m((f) => f.spaceAmp),
      cpuMsPerFragment: m((f) => f.cpuMsPerFragment),
    });
  }
  return cells.sort((a, b) => a.fragmentBytes - b.fragmentBytes);
}

const sizeName = (b: number) => (b % 1024 === 0 ? `${b / 1024} KiB` : `${b} B`);
const fixed = (v: number, d: number) => (Number.isFinite(v) ? v.toFixed(d) : '—');

/**
 * The medians as a Markdown table; each variant's throughput and write amplification also
 * as a ratio to `baseline`'s at the same size (`×1.00` for the baseline itself).
 */
export function markdownTable(cells: readonly Cell[], baseline: string): string {
  const lines = [
    '| fragment | backend | fragments/s | MB/s | × baseline | write amp (device) | × baseline | write amp (write() calls) | space amp | CPU ms/fragment | reps |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const c of cells) {
    const base = cells.find((b) => b.fragmentBytes === c.fragmentBytes && b.variant === baseline);
    const ratio = (v: number, b: number | undefined) => (b === undefined ? '—' : `×${fixed(v / b, 2)}`);
    lines.push(
      `| ${sizeName(c.fragmentBytes)} | ${c.variant} | ${fixed(c.fragmentsPerSec, 0)} | ${fixed(c.mbPerSec, 1)} | ${ratio(c.fragmentsPerSec, base?.fragmentsPerSec)} | ${fixed(c.writeAmp, 2)} | ${ratio(c.writeAmp, base?.writeAmp)} | ${fixed(c.syscallWriteAmp, 2)} | ${fixed(c.spaceAmp, 2)} | ${fixed(c.cpuMsPerFragment, 3)} | ${c.reps}${c.unsettled ? ` (${c.unsettled} unsettled)` : ''} |`,
    );
  }
  return lines.join('\n');
}
