/**
 * Runs batches of seeds, shared by the CLI and the vitest suite.
 */
import type { HostFaultOptions } from './options.js';
import type { Behaviour } from './byzantine.js';
import type { ProtocolFactories } from './protocol-factories.js';
import { replayCommand, simulate, type SimReport } from './simulate.js';

/** Seeds `first … first + count − 1`; `t` fixed, or cycling 1, 2, 3 when undefined. */
export interface BatchOptions {
  readonly first: number;
  readonly count: number;
  readonly t?: number;
  readonly protocol?: ProtocolFactories;
  readonly hostile?: boolean;
  /** Heavy write contention on one key in every run (otherwise some seeds draw it). */
  readonly contention?: boolean;
  /** Readers list keys too (see `SimOptions.lists`). */
  readonly lists?: boolean;
  /** Many more striped writes (see `SimOptions.stripes`). */
  readonly stripes?: boolean;
  /** A server's key replaced mid-run (see `SimOptions.rotate`). */
  readonly rotate?: boolean;
  /** Servers losing their disk mid-run and rebuilding (see `SimOptions.rebuild`). */
  readonly rebuild?: boolean;
  /** Byzantine servers draw only these behaviours (a mutant's focus). */
  readonly behaviours?: readonly Behaviour[];
  /** Chance an operation is a delete, instead of the usual (a mutant that breaks what deletes do). */
  readonly deleteRate?: number;
  /** Client-host faults replacing those drawn (a mutant's focus). */
  readonly hostFaults?: Partial<HostFaultOptions>;
  /** Stop at the first failure (mutant hunting). */
  readonly stopOnFailure?: boolean;
  readonly mutant?: string;
  readonly onFailure?: (report: SimReport, replay: string) => void;
}

/** Totals of a batch. */
export interface BatchResult {
  passed: number;
  failed: number;
  failures: { seed: number; t: number; violations: string[]; replay: string }[];
  reads: number;
  writes: number;
  /** Listing pages finished. */
  lists: number;
  /** Writes that overlapped another write of the same session and key. */
  overlappingWrites: number;
  /** Writes that failed, by code (the expiring grantee's GRANT_EXPIRED). */
  failedWrites: Record<string, number>;
  /** Hostile requests correct servers refused, by code. */
  refusals: Record<string, number>;
  /** Attacks the hostile client mounted, by name. */
  attacks: Record<string, number>;
  /** Finished reads and writes by rounds taken, over all runs and over contention runs. */
  readRounds: Record<string, number>;
  writeRounds: Record<string, number>;
  contentionReadRounds: Record<string, number>;
  contentionRuns: number;
  /** Striped writes started and completed, crashed mid-upload; striped values read whole; reads that met VALUE_CHANGED. */
  stripedWrites: number;
  stripedWritesDone: number;
  crashedMidStripe: number;
  stripedReads: number;
  valueChanged: number;
  /** Receipts correct servers signed in batches of two or more. */
  batchedReceipts: number;
  /** Certificates honest writers signed in batches of two or more. */
  batchedCertificates: number;
  /** What the clients' hosts met: links closed under them, frames over their limit, reads failed as too large. */
  linksClosed: number;
  oversized: number;
  tooLarge: number;
  /** Runs that replaced a server's key on an empty disk, and operations refused by servers of another key epoch. */
  rotatedEmpty: number;
  staleOps: number;
  /** Disks lost and rebuilds finished (`rebuild`), and what repairs did over every run that caught up at its end. */
  disksLost: number;
  rebuildsDone: number;
  /** Writes under way at a disk loss that rebuilds repaired (by certificate), and those whose repair never finished. */
  pendingRepaired: number;
  pendingUnfinished: number;
  repairs: Record<string, number>;
  /** The fence at work (see `SimReport.fences`). */
  fences: Record<string, number>;
  /** Runs in which each Byzantine behaviour was played, and writers crashed mid-operation. */
  behaviours: Record<string, number>;
  crashedWriters: number;
}

// Array.isArray narrows a readonly array to any[]; this keeps its element type.
const isList = (x: Record<string, number> | readonly string[]): x is readonly string[] => Array.isArray(x);

function add(into: Record<string, number>, from: Record<string, number> | readonly string[] | undefined): void {
  if (!from) return;
  if (isList(from)) for (const k of from) into[k] = (into[k] ?? 0) + 1;
  else for (const [k, v] of Object.entries(from)) into[k] = (into[k] ?? 0) + v;
}

/** The `t` a seed runs with when none is given, so one seed range covers t = 1..3. */
export function tForSeed(seed: number): number {
  return (seed % 3) + 1;
}

/** Runs the batch, sequentially (each run is deterministic; parallelism is per process). */
export async function runBatch(options: BatchOptions): Promise<BatchResult> {
  const result: BatchResult = {
    passed: 0,
    failed: 0,
    failures: [],
    reads: 0,
    writes: 0,
    lists: 0,
    overlappingWrites: 0,
    failedWrites: {},
    refusals: {},
    attacks: {},
    readRounds: {},
    writeRounds: {},
    contentionReadRounds: {},
    contentionRuns: 0,
    stripedWrites: 0,
    stripedWritesDone: 0,
    crashedMidStripe: 0,
    stripedReads: 0,
    valueChanged: 0,
    batchedReceipts: 0,
    batchedCertificates: 0,
    linksClosed: 0,
    oversized: 0,
    tooLarge: 0,
    rotatedEmpty: 0,
    staleOps: 0,
    disksLost: 0,
    rebuildsDone: 0,
    pendingRepaired: 0,
    pendingUnfinished: 0,
    repairs: {},
    fences: {},
    behaviours: {},
    crashedWriters: 0,
  };
  for (let seed = options.first; seed < options.first + options.count; seed++) {
    const t = options.t ?? tForSeed(seed);
    let report: SimReport;
    try {
      report = await simulate({
        seed,
        t,
        ...(options.protocol ? { protocol: options.protocol } : {}),
        hostile: options.hostile ?? false,
        ...(options.contention ? { contention: true } : {}),
        ...(options.lists ? { lists: true } : {}),
        ...(options.stripes ? { stripes: true } : {}),
        ...(options.rotate ? { rotate: true } : {}),
        ...(options.rebuild ? { rebuild: true } : {}),
        ...(options.behaviours ? { behaviours: options.behaviours } : {}),
        ...(options.deleteRate !== undefined ? { deleteRate: options.deleteRate } : {}),
        ...(options.hostFaults ? { hostFaults: options.hostFaults } : {}),
      });
    } catch (err) {
      // A crash of the simulated protocol is a failure of that seed, not of the batch.
      const violations = [`threw: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`];
      report = { seed, t, ok: false, violations, options: '' } as unknown as SimReport;
    }
    result.reads += report.reads ?? 0;
    result.writes += report.writes ?? 0;
    result.lists += report.lists ?? 0;
    result.overlappingWrites += report.overlappingWrites ?? 0;
    result.stripedWrites += report.stripedWrites ?? 0;
    result.stripedWritesDone += report.stripedWritesDone ?? 0;
    result.crashedMidStripe += report.crashedMidStripe ?? 0;
    result.stripedReads += report.stripedReads ?? 0;
    result.batchedReceipts += report.batchedReceipts ?? 0;
    result.batchedCertificates += report.batchedCertificates ?? 0;
    result.valueChanged += report.valueChanged ?? 0;
    result.linksClosed += report.hostFaults?.linksClosed ?? 0;
    result.oversized += report.hostFaults?.oversized ?? 0;
    result.tooLarge += report.hostFaults?.tooLarge ?? 0;
    result.staleOps += report.staleOps ?? 0;
    if (report.rotation?.includes('empty')) result.rotatedEmpty++;
    result.disksLost += report.rebuilds?.filter((r) => r.includes('lost')).length ?? 0;
    result.rebuildsDone += report.rebuilds?.filter((r) => r.includes('rebuilt')).length ?? 0;
    for (const line of report.rebuilds ?? []) {
      const m = / (\d+) of them under way, (\d+) under way unfinished/.exec(line);
      if (m) {
        result.pendingRepaired += Number(m[1]);
        result.pendingUnfinished += Number(m[2]);
      }
    }
    add(result.repairs, report.repairs);
    add(result.failedWrites, report.failedWrites);
    add(result.refusals, report.refusals);
    add(result.attacks, report.attacks);
    add(result.fences, report.fences);
    add(result.behaviours, [...new Set((report.byzantine ?? []).map((b) => b.split(':')[1]!))]);
    result.crashedWriters += report.crashedWriters ?? 0;
    add(result.readRounds, report.readRounds);
    add(result.writeRounds, report.writeRounds);
    if (report.contention) {
      result.contentionRuns++;
      add(result.contentionReadRounds, report.readRounds);
    }
    if (report.ok) {
      result.passed++;
      continue;
    }
    result.failed++;
    const replay = replayCommand(seed, t, {
      ...(options.mutant ? { mutant: options.mutant } : {}),
      hostile: options.hostile ?? false,
      contention: options.contention ?? false,
      lists: options.lists ?? false,
      stripes: options.stripes ?? false,
      rotate: options.rotate ?? false,
      rebuild: options.rebuild ?? false,
    });
    result.failures.push({ seed, t, violations: report.violations, replay });
    options.onFailure?.(report, replay);
    if (options.stopOnFailure) break;
  }
  return result;
}
