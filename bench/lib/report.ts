/** bench/results/<out>.json, .md and the throughput–latency SVG, from one run's rows. */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { serversOf, type SystemName } from './clusters.js';
import type { NetProfileName } from './netns.js';
import { median, round } from './stats.js';
import type { KeyPattern, Op } from '../load/worker.js';
import type { ProfileResult } from '../profile/profile.js';

export interface Cell {
  readonly t: number;
  readonly valueBytes: number;
  readonly op: Op;
  readonly keys: KeyPattern;
  readonly fsync: boolean;
  readonly repeats: number;
}

export interface Row {
  readonly system: SystemName;
  /** The network it ran on (run.ts --net). */
  readonly net: NetProfileName;
  readonly op: Op;
  readonly t: number;
  readonly valueBytes: number;
  readonly clients: number;
  readonly opsPerSec: number;
  readonly mbPerSec: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly fsync: boolean;
  readonly keys: KeyPattern;
  readonly rep: number;
  readonly errors: number;
  readonly readP50Ms?: number;
  readonly writeP50Ms?: number;
}

export interface BenchResults {
  readonly meta: Record<string, unknown>;
  readonly rows: Row[];
  readonly peaks?: Peak[];
  readonly profile?: ProfileResult;
  readonly many?: ManyResult;
}

/**
 * One client's `putMany` of many small values (run.ts, beside the ladder's 4 KiB cells): keys
 * per second, set against M-ABD's single-key write peak at that size in the same run.
 */
export interface ManyResult {
  readonly net: NetProfileName;
  readonly t: number;
  readonly keys: number;
  readonly valueBytes: number;
  readonly concurrency: number;
  /** Keys per second of each repetition (each a fresh set of keys). */
  readonly repKeysPerSec: number[];
  /** Their median. */
  readonly keysPerSec: number;
  /** Keys that failed, over every repetition. */
  readonly failed: number;
}

/** The `putMany` row's ratio: its median keys/s over M-ABD's single-key write peak at its size and t, when the run measured it. */
export function manyVsAbd(many: ManyResult, ps: readonly Peak[]): number | undefined {
  const abd = ps.find(
    (p) => p.system === 'm-abd' && p.op === 'write' && p.t === many.t && p.valueBytes === many.valueBytes && p.net === many.net && p.fsync,
  );
  return abd ? round(many.keysPerSec / abd.opsPerSec, 2) : undefined;
}

/** A system's peak in one cell: medians over repetitions of each repetition's best step. */
export interface Peak {
  readonly system: SystemName;
  readonly net: NetProfileName;
  readonly op: Op;
  readonly t: number;
  readonly valueBytes: number;
  readonly keys: KeyPattern;
  readonly fsync: boolean;
  readonly reps: number;
  readonly clients: number;
  readonly opsPerSec: number;
  readonly mbPerSec: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  /** Every repetition's peak op/s, for the spread. */
  readonly repPeaks: number[];
  /** Median over repetitions of (this system's peak / M-ABD's peak), and / single's. */
  readonly vsAbd?: number;
  readonly vsSingle?: number;
}

const cellKey = (r: { net: NetProfileName; t: number; valueBytes: number; op: Op; keys: KeyPattern; fsync: boolean }) =>
  `${r.net}|${r.t}|${r.valueBytes}|${r.op}|${r.keys}|${r.fsync}`;
const size = (b: number) => (b >= 1048576 ? `${b / 1048576} MiB` : `${b / 1024} KiB`);

/** A meta field as text (they are strings and numbers). */
const str = (v: unknown): string =>
  typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean' ? String(v) : (JSON.stringify(v) ?? '');

export function peaks(rows: readonly Row[]): Peak[] {
  const best = new Map<string, Row>(); // cell|system|rep → best row
  for (const r of rows) {
    const k = `${cellKey(r)}|${r.system}|${r.rep}`;
    const b = best.get(k);
    if (!b || r.opsPerSec > b.opsPerSec) best.set(k, r);
  }
  const byCellSystem = new Map<string, Row[]>();
  for (const [k, r] of best) {
    const ck = k.slice(0, k.lastIndexOf('|'));
    byCellSystem.set(ck, [...(byCellSystem.get(ck) ?? []), r]);
  }
  const perRep = (cell: string, system: string, rep: number) => best.get(`${cell}|${system}|${rep}`)?.opsPerSec;
  const out: Peak[] = [];
  for (const [, reps] of byCellSystem) {
    const r0 = reps[0]!;
    const cell = cellKey(r0);
    const ratio = (other: SystemName) => {
      const rs = reps.map((r) => {
        const o = perRep(cell, other, r.rep);
        return o ? r.opsPerSec / o : NaN;
      });
      const m = median(rs);
      return Number.isFinite(m) ? round(m, 2) : undefined;
    };
    const vsAbd = r0.system === 'm-abd' ? undefined : ratio('m-abd');
    const vsSingle = r0.system === 'single' ? undefined : ratio('single');
    out.push({
      system: r0.system,
      net: r0.net,
      op: r0.op,
      t: r0.t,
      valueBytes: r0.valueBytes,
      keys: r0.keys,
      fsync: r0.fsync,
      reps: reps.length,
      clients: median(reps.map((r) => r.clients)),
      opsPerSec: round(median(reps.map((r) => r.opsPerSec)), 1),
      mbPerSec: round(median(reps.map((r) => r.mbPerSec)), 2),
      p50Ms: round(median(reps.map((r) => r.p50Ms))),
      p99Ms: round(median(reps.map((r) => r.p99Ms))),
      repPeaks: reps.map((r) => r.opsPerSec),
      ...(vsAbd !== undefined ? { vsAbd } : {}),
      ...(vsSingle !== undefined ? { vsSingle } : {}),
    });
  }
  return out;
}

/**
 * What PowerStore aims for against the baselines (t = 1, 256 KiB, fsync on, per-host
 * 1 Gbit/s links; the same ratios are reported for every t and size): the paper measured
 * reads at 2.8× M-ABD and writes at 1.55×.
 */
export const TARGETS: readonly { readonly op: Op; readonly vs: 'm-abd' | 'single'; readonly atLeast: number }[] = [
  { op: 'read', vs: 'm-abd', atLeast: 3.0 },
  { op: 'write', vs: 'm-abd', atLeast: 1.6 },
  { op: 'read', vs: 'single', atLeast: 0.9 },
];

/** One line of the targets table: PowerStore's ratio in one cell against one target. */
export interface TargetRow {
  readonly net: NetProfileName;
  readonly t: number;
  readonly valueBytes: number;
  readonly op: Op;
  readonly vs: 'm-abd' | 'single';
  readonly ratio: number | undefined;
  readonly atLeast: number;
  readonly met: boolean;
}

/** PowerStore's ratios against {@link TARGETS} in every cell measured with fsync on and distinct keys. */
export function targetRows(ps: readonly Peak[]): TargetRow[] {
  const out: TargetRow[] = [];
  for (const p of ps) {
    if (p.system !== 'powerstore' || !p.fsync || p.keys !== 'distinct') continue;
    for (const target of TARGETS) {
      if (target.op !== p.op) continue;
      const ratio = target.vs === 'm-abd' ? p.vsAbd : p.vsSingle;
      if (ratio === undefined) continue;
      out.push({
        net: p.net,
        t: p.t,
        valueBytes: p.valueBytes,
        op: p.op,
        vs: target.vs,
        ratio,
        atLeast: target.atLeast,
        met: ratio >= target.atLeast,
      });
    }
  }
  return out.sort((a, b) => a.t - b.t || a.valueBytes - b.valueBytes || a.op.localeCompare(b.op) || a.vs.localeCompare(b.vs));
}

/** One line of the CPU budget: what one operation costs all processes together, and the throughput that allows. */
export interface CpuBudgetRow {
  readonly system: SystemName;
  readonly op: Op;
  /** The client's own work: its profile's stages but `wait`. */
  readonly clientMs: number;
  /** Every server's CPU time for the operation (per-server CPU × servers). */
  readonly serversMs: number;
  readonly totalMs: number;
  /** Operations per second if all `cores` did nothing else. */
  readonly ceiling: number;
  /** The measured peak in the profile's cell, if the run measured it. */
  readonly peak: number | undefined;
}

/**
 * When every process shares the machine's cores, an operation's CPU time summed over the
 * client and every server bounds throughput at `cores × 1000 / ms`, whatever the network
 * allows: the limit the paper's testbed (one machine per server) did not have.
 */
export function cpuBudget(profile: ProfileResult, cores: number, ps: readonly Peak[]): CpuBudgetRow[] {
  const out: CpuBudgetRow[] = [];
  for (const c of profile.client) {
    const server = profile.server.find((s) => s.system === c.system && s.op === c.op);
    if (server?.cpuMs === undefined) continue;
    const clientMs = c.totalMs - (c.stages['wait'] ?? 0);
    const serversMs = server.cpuMs * serversOf(c.system, profile.t);
    const totalMs = clientMs + serversMs;
    const peak = ps.find(
      (p) =>
        p.system === c.system &&
        p.op === c.op &&
        p.t === profile.t &&
        p.valueBytes === profile.valueBytes &&
        p.fsync &&
        p.keys === 'distinct' &&
        p.net === (profile.net ?? 'loopback'),
    )?.opsPerSec;
    out.push({
      system: c.system,
      op: c.op,
      clientMs: round2(clientMs),
      serversMs: round2(serversMs),
      totalMs: round2(totalMs),
      ceiling: Math.round((cores * 1000) / totalMs),
      peak,
    });
  }
  return out;
}

const round2 = (x: number) => Math.round(x * 100) / 100;

const SYSTEM_ORDER: SystemName[] = ['powerstore', 'm-abd', 'single'];
const COLORS: Record<SystemName, string> = { powerstore: '#1f77b4', 'm-abd': '#d62728', single: '#7f7f7f' };

function markdown(results: BenchResults, ps: Peak[], svgName: string): string {
  const m = results.meta;
  const lines: string[] = [];
  lines.push('# PowerStore vs M-ABD vs single server', '');
  lines.push(
    `Produced by \`${str(m['invocation'])}\` (args: \`${str(m['command'])}\`), ${str(m['started'])} → ${str(m['finished'])}; Node ${str(m['node'])}, ${str(m['cpus'])} cores (${str(m['cpuModel'])}), ${str(m['memGiB'])} GiB, shared with other users, so absolute numbers are noisy: compare ratios from the same run.`,
    '',
  );
  if (m['wsZeroMask']) lines.push(`**${str(m['wsZeroMask'])}.**`, '');
  lines.push(netLine(m['net']), '');
  if (m['partial'])
    lines.push(
      '**Partial: written while the run was still going (it writes after every t/fsync group); the profile comes at the end.**',
      '',
    );
  lines.push(
    `Closed-loop clients (one operation at a time each), ladder ${JSON.stringify(m['ladder'])}, each step ${str(m['warmupMs'])} ms warm-up + ${str(m['measureMs'])} ms measured; systems take turns at every step. Peak = the best step; with several repetitions, the median of the repetitions' peaks, and the ratio column is the median of per-repetition ratios. ${str(m['mbDefinition'])}.`,
    '',
  );
  lines.push(`![throughput against latency](${svgName})`, '');
  lines.push('## Peaks', '');
  lines.push(
    '| net | t | value | op | keys | fsync | system | peak op/s | MB/s | clients | p50 ms | p99 ms | × M-ABD | × single | reps (peak op/s) |',
  );
  lines.push('|---|---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|');
  const sorted = [...ps].sort(
    (a, b) =>
      Number(b.fsync) - Number(a.fsync) ||
      a.t - b.t ||
      a.keys.localeCompare(b.keys) ||
      a.valueBytes - b.valueBytes ||
      a.op.localeCompare(b.op) ||
      SYSTEM_ORDER.indexOf(a.system) - SYSTEM_ORDER.indexOf(b.system),
  );
  for (const p of sorted) {
    lines.push(
      `| ${p.net} | ${p.t} | ${size(p.valueBytes)} | ${p.op} | ${p.keys} | ${p.fsync ? 'on' : 'off'} | ${p.system} | ${p.opsPerSec} | ${p.mbPerSec} | ${p.clients} | ${p.p50Ms} | ${p.p99Ms} | ${p.vsAbd ?? ''} | ${p.vsSingle ?? ''} | ${p.repPeaks.join(', ')} |`,
    );
  }
  const targets = targetRows(ps);
  if (targets.length > 0) {
    lines.push('', '## PowerStore against its targets', '');
    lines.push(
      'Targets (set for t = 1, 256 KiB on per-host 1 Gbit/s links, shown for every cell): reads ≥ 3.0× M-ABD (the paper: 2.8×), writes ≥ 1.6× M-ABD (the paper: 1.55×), reads ≥ 0.9× a single server.',
      '',
    );
    lines.push('| net | t | value | op | against | ratio | target | met |');
    lines.push('|---|---|---|---|---|---:|---:|---|');
    for (const r of targets)
      lines.push(
        `| ${r.net} | ${r.t} | ${size(r.valueBytes)} | ${r.op} | ${r.vs} | ${r.ratio} | ≥ ${r.atLeast} | ${r.met ? 'yes' : 'no'} |`,
      );
  }
  if (results.many) {
    const m = results.many;
    const abd = manyVsAbd(m, ps);
    lines.push('', `## Many keys: \`putMany\` (t = ${m.t}, ${m.keys} values of ${size(m.valueBytes)}, fsync on)`, '');
    lines.push(
      `One client's \`store.putMany\` of ${m.keys} values, ${m.concurrency} keys in flight, each repetition a fresh set of keys, against M-ABD's single-key write peak at ${size(m.valueBytes)} in this run (the issue's target: ≥ 3×).`,
      '',
    );
    lines.push('| net | keys/s (median) | reps (keys/s) | failed keys | × M-ABD write peak |');
    lines.push('|---|---:|---|---:|---:|');
    lines.push(`| ${m.net} | ${m.keysPerSec} | ${m.repKeysPerSec.join(', ')} | ${m.failed} | ${abd ?? 'not measured'} |`);
  }
  if (results.profile) {
    lines.push(
      '',
      `## Profile (t = 1, 256 KiB, one client, one operation at a time; mean ms per operation; net ${results.profile.net ?? 'loopback'})`,
      '',
    );
    lines.push(results.profile.method, '');
    for (const side of ['client', 'server'] as const) {
      const table = results.profile[side];
      const stages = [...new Set(table.flatMap((r) => Object.keys(r.stages)))];
      lines.push(`### ${side}`, '');
      lines.push(`| system | op | total ms | ${stages.join(' | ')} |`);
      lines.push(`|---|---|---:|${stages.map(() => '---:').join('|')}|`);
      for (const r of table)
        lines.push(
          `| ${r.system} | ${r.op} | ${r.totalMs} | ${stages.map((s) => (r.stages[s] === undefined ? '' : String(r.stages[s]))).join(' | ')} |`,
        );
      lines.push('');
    }
    const cores = Number(results.meta['cpus']);
    if (cores > 0) {
      lines.push(
        `### CPU budget (${cores} cores shared by every process)`,
        '',
        'CPU time one operation costs the client (its stages but wait) and all servers together (per-server CPU × servers), measured one operation at a time, and the throughput that cost allows when every process shares these cores, beside the peak measured in the same cell. Under load operations get cheaper (group commit shares fsyncs, reads batch), so a peak may pass its ceiling: a peak near or above it is CPU-bound, one well below it is bound by the network or the disk. Systems compare by their totals.',
        '',
        '| system | op | client ms | servers ms | total ms | ceiling op/s (cores × 1000 / total) | measured peak op/s |',
        '|---|---|---:|---:|---:|---:|---:|',
      );
      for (const b of cpuBudget(results.profile, cores, ps))
        lines.push(`| ${b.system} | ${b.op} | ${b.clientMs} | ${b.serversMs} | ${b.totalMs} | ${b.ceiling} | ${b.peak ?? ''} |`);
      lines.push('');
    }
    const m = results.profile.wsMask;
    lines.push(
      `ws, one client→server frame of ${m.frameBytes / 1024} KiB on loopback (ms per frame, mean of ${m.frames}): random mask (as the clients send) ${m.randomMask.sendMs} in send(), ${m.randomMask.totalMs} until delivered; all-zero mask (ws skips masking) ${m.zeroMask.sendMs} / ${m.zeroMask.totalMs}; bufferutil ${m.bufferutil ? 'installed' : 'not installed, so ws masks byte by byte in JavaScript'}.`,
      '',
    );
  }
  lines.push('', '## All steps', '');
  lines.push('| net | t | value | op | keys | fsync | rep | system | clients | op/s | MB/s | p50 ms | p99 ms | errors |');
  lines.push('|---|---|---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|');
  for (const r of results.rows) {
    lines.push(
      `| ${r.net} | ${r.t} | ${size(r.valueBytes)} | ${r.op} | ${r.keys} | ${r.fsync ? 'on' : 'off'} | ${r.rep} | ${r.system} | ${r.clients} | ${r.opsPerSec} | ${r.mbPerSec} | ${r.p50Ms} | ${r.p99Ms} | ${r.errors} |`,
    );
  }
  return lines.join('\n') + '\n';
}

/** The results' network paragraph, from meta.net (lib/netns.ts's describe(), plus run.ts's link check). */
function netLine(net: unknown): string {
  const n = (net ?? {}) as {
    profile?: string;
    description?: string;
    omits?: string;
    tbf?: { burstBytes: number; limitBytes: number; hz: number };
    rateMbit?: number;
    clientLink?: {
      hosts: string[];
      upMbit: number;
      downMbit: number;
      up: { burstBytes: number; limitBytes: number };
      down: { burstBytes: number; limitBytes: number };
    };
    linkCheck?: { mbitPerSec: number; from: string[]; to: string };
    linkCheckDown?: { mbitPerSec: number; from: string[]; to: string };
    qdiscTotals?: { drops: number; overlimits: number; sentBytes: number };
  };
  const parts = [`**Network: \`${n.profile ?? 'loopback'}\`** — ${n.description ?? 'loopback'}.`];
  const c = n.clientLink;
  if (n.tbf)
    parts.push(
      `tbf rate ${n.rateMbit} Mbit/s${c ? " (servers' links)" : ''}, burst ${n.tbf.burstBytes} B, limit ${n.tbf.limitBytes} B (HZ ${n.tbf.hz}).`,
    );
  if (c)
    parts.push(
      `Client hosts (${c.hosts.join(', ')}): ${c.upMbit} Mbit/s up (burst ${c.up.burstBytes} B, limit ${c.up.limitBytes} B), ${c.downMbit} Mbit/s down (burst ${c.down.burstBytes} B, limit ${c.down.limitBytes} B).`,
    );
  const check = (l: { mbitPerSec: number; from: string[]; to: string }) => `${l.from.join(', ')} → ${l.to} at ${l.mbitPerSec} Mbit/s`;
  if (n.linkCheck)
    parts.push(
      `Link check before the run: bulk TCP ${check(n.linkCheck)}${n.linkCheckDown ? `, ${check(n.linkCheckDown)}` : ''} of payload.`,
    );
  if (n.qdiscTotals)
    parts.push(
      `Shaped qdiscs over the run (after the check): ${(n.qdiscTotals.sentBytes / 1e9).toFixed(2)} GB sent (summed over the shaped qdiscs: on the switched profiles a byte leaves two, its sender's and the switch's port towards its receiver), ${n.qdiscTotals.drops} packets dropped (queue full), ${n.qdiscTotals.overlimits} overlimits (packets held back by the rate).`,
    );
  if (n.omits) parts.push(`Not emulated: ${n.omits}.`);
  return parts.join(' ');
}

/** A chart panel's size and margins. */
const W = 420;
const H = 320;
const pad = { l: 56, r: 16, t: 36, b: 46 };

/**
 * Throughput (x) against median latency (y), one line per system, one panel per operation,
 * one row of panels per value size measured with the headline cell's t, keys and fsync.
 */
function svg(rows: readonly Row[]): string {
  // The headline cell: t = 1, 256 KiB, distinct keys, fsync on (else the first cell there is).
  const pick = rows.find((r) => r.t === 1 && r.valueBytes === 262144 && r.keys === 'distinct' && r.fsync) ?? rows[0];
  if (!pick) return '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>';
  const groupRows = rows.filter((r) => r.t === pick.t && r.keys === pick.keys && r.fsync === pick.fsync && r.rep === 1);
  const sizes = [...new Set(groupRows.map((r) => r.valueBytes))].sort((a, b) => a - b);
  const ops = [...new Set(groupRows.map((r) => r.op))];
  const panels: string[] = [];
  sizes.forEach((valueBytes, j) =>
    ops.forEach((op, i) => {
      const pts = groupRows.filter((r) => r.valueBytes === valueBytes && r.op === op && Number.isFinite(r.p50Ms));
      if (pts.length > 0) panels.push(panel(pts, i * W, j * H));
    }),
  );
  const legend = SYSTEM_ORDER.map(
    (s, i) =>
      `<g transform="translate(${20 + i * 140},${sizes.length * H + 8})"><rect width="14" height="4" y="-4" fill="${COLORS[s]}"/><text x="20" y="0" font-size="12">${s}</text></g>`,
  ).join('');
  const width = Math.max(1, ops.length) * W;
  const height = sizes.length * H;
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height + 24}" font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="#fff"/>${panels.join('')}${legend}<text x="${width - 10}" y="${height + 16}" text-anchor="end" font-size="10" fill="#555">points: client counts of repetition 1 (hover for values)</text></svg>\n`;
}

/** One chart panel, placed at (`left`, `top`): the steps `pts` of one cell (one line per system). */
function panel(pts: readonly Row[], left: number, top: number): string {
  const { op, t, valueBytes, fsync, net } = pts[0]!;
  const xMax = Math.max(1, ...pts.map((r) => r.opsPerSec)) * 1.1;
  const yMax = Math.max(1, ...pts.map((r) => r.p50Ms)) * 1.1;
  const x = (v: number) => pad.l + (v / xMax) * (W - pad.l - pad.r);
  const y = (v: number) => H - pad.b - (v / yMax) * (H - pad.t - pad.b);
  const g: string[] = [`<g transform="translate(${left},${top})">`];
  g.push(
    `<text x="${W / 2}" y="20" text-anchor="middle" font-weight="bold">${op}, t=${t}, ${size(valueBytes)}, fsync ${fsync ? 'on' : 'off'}, net ${net}</text>`,
  );
  g.push(
    `<line x1="${pad.l}" y1="${H - pad.b}" x2="${W - pad.r}" y2="${H - pad.b}" stroke="#000"/><line x1="${pad.l}" y1="${pad.t}" x2="${pad.l}" y2="${H - pad.b}" stroke="#000"/>`,
  );
  for (let k = 0; k <= 4; k++) {
    const xv = (xMax / 4) * k;
    const yv = (yMax / 4) * k;
    g.push(`<text x="${x(xv)}" y="${H - pad.b + 16}" text-anchor="middle" font-size="11">${Math.round(xv)}</text>`);
    g.push(`<text x="${pad.l - 6}" y="${y(yv) + 4}" text-anchor="end" font-size="11">${yv.toFixed(yv < 10 ? 1 : 0)}</text>`);
    g.push(`<line x1="${pad.l}" y1="${y(yv)}" x2="${W - pad.r}" y2="${y(yv)}" stroke="#eee"/>`);
  }
  g.push(`<text x="${(W + pad.l) / 2}" y="${H - 8}" text-anchor="middle" font-size="12">throughput (op/s)</text>`);
  g.push(
    `<text x="14" y="${(H - pad.b + pad.t) / 2}" text-anchor="middle" font-size="12" transform="rotate(-90 14 ${(H - pad.b + pad.t) / 2})">median latency (ms)</text>`,
  );
  for (const s of SYSTEM_ORDER) {
    const line = pts.filter((r) => r.system === s).sort((a, b) => a.clients - b.clients);
    if (line.length === 0) continue;
    g.push(
      `<polyline fill="none" stroke="${COLORS[s]}" stroke-width="2" points="${line.map((r) => `${x(r.opsPerSec).toFixed(1)},${y(r.p50Ms).toFixed(1)}`).join(' ')}"/>`,
    );
    for (const r of line)
      g.push(
        `<circle cx="${x(r.opsPerSec).toFixed(1)}" cy="${y(r.p50Ms).toFixed(1)}" r="3" fill="${COLORS[s]}"><title>${s} ${r.clients} clients: ${r.opsPerSec} op/s, p50 ${r.p50Ms} ms</title></circle>`,
      );
  }
  g.push('</g>');
  return g.join('');
}

/** Writes the three files; returns their paths. */
export function writeReports(dir: string, out: string, results: BenchResults): string[] {
  const ps = peaks(results.rows);
  const full: BenchResults = { ...results, peaks: ps };
  const svgName = out === 'latest' ? 'throughput-latency.svg' : `${out}-throughput-latency.svg`;
  const files = [join(dir, `${out}.json`), join(dir, `${out}.md`), join(dir, svgName)];
  writeFileSync(files[0]!, JSON.stringify(full, null, 1) + '\n');
  writeFileSync(files[1]!, markdown(full, ps, svgName));
  writeFileSync(files[2]!, svg(results.rows));
  return files;
}
