/**
 * One large object through the `powerstore` CLI on a running cluster, measured: a file of
 * `bytes` random bytes put with `powerstore put`, read back whole with `powerstore get` to
 * standard output (hashed as it arrives, never held), and 1 MiB read from its middle with
 * `get --range`. Reports throughput, the CLI's peak RSS over that of a CLI reading a
 * 1-byte value, and each server's peak RSS per phase. Used by test/cli/large.test.ts and
 * bench/large/run.ts.
 */
import { createHash, randomFillSync } from 'node:crypto';
import { closeSync, openSync, readSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { procStatusBytes, resetPeakRss, runCli, type CliRun } from './run.js';

/** Where the cluster is and what to write with. */
export interface LargeTransferSetup {
  /** A directory for the source file (deleted afterwards) and the CLI's working directory. */
  readonly dir: string;
  readonly clusterFile: string;
  /** An identity allowed to write `key` (the admin's, for a key outside namespaces). */
  readonly identityFile: string;
  /** Server process ids, in server order, for their RSS. */
  readonly serverPids: readonly number[];
  readonly bytes: number;
  readonly key?: string;
  /** Time each round may take (`--timeout`). */
  readonly timeoutMs?: number;
  /** Progress lines go here (default: none). */
  readonly log?: (line: string) => void;
  /** FILTER requests the servers have handled so far (from their metrics), to count what each phase asked for. */
  readonly filterRequests?: () => Promise<number>;
}

/** One timed phase. */
export interface Phase {
  readonly bytes: number;
  readonly seconds: number;
  /** 10^6 bytes per second, over the CLI process's whole life (start-up and connecting included). */
  readonly mbPerSecond: number;
  /** The CLI process's peak RSS. */
  readonly cliPeakRss: number;
  /** `cliPeakRss` over the baseline's. */
  readonly cliPeakRssGrowth: number;
  /** Each server's peak RSS during the phase (since start where the kernel does not let it be reset), in server order. */
  readonly serverPeakRss: readonly (number | undefined)[];
  /**
   * Each server's highest RssAnon seen (sampled every 100 ms) during the phase: its own
   * memory, without the pages of LevelDB's table files it maps, which VmHWM counts too.
   */
  readonly serverPeakAnon: readonly (number | undefined)[];
  /** FILTER requests the servers handled during the phase (each stripe read asks `n` servers), when counted. */
  readonly filterRequests?: number;
}

/** What {@link largeTransfer} measured. */
export interface LargeTransferResult {
  readonly bytes: number;
  readonly sha256: string;
  /** Whether the full get's SHA-256 equals the source's. */
  readonly identical: boolean;
  /** Whether the ranged get returned exactly the source's bytes there. */
  readonly rangeIdentical: boolean;
  /** Peak RSS of a CLI reading a 1-byte value: what start-up, connecting and a read cost. */
  readonly cliBaselineRss: number;
  /** Each server's RSS before the put. */
  readonly serverRssBefore: readonly (number | undefined)[];
  /** Whether server peaks are per phase (VmHWM reset between phases) rather than since start. */
  readonly serverPeaksPerPhase: boolean;
  readonly put: Phase;
  readonly get: Phase;
  readonly rangeGet: Phase & { readonly start: number };
}

const RANGE_BYTES = 1024 * 1024;
const CHUNK = 16 * 1024 * 1024;

class CliFailed extends Error {
  constructor(what: string, run: CliRun) {
    super(`${what} exited ${run.code}: ${run.stderr.trim()}`);
  }
}

/** Writes `bytes` random bytes to `path`; resolves with their SHA-256. */
function writeRandomFile(path: string, bytes: number): string {
  const hash = createHash('sha256');
  const chunk = Buffer.allocUnsafe(Math.min(CHUNK, Math.max(bytes, 1)));
  const fd = openSync(path, 'w');
  try {
    for (let done = 0; done < bytes;) {
      const n = Math.min(chunk.length, bytes - done);
      const piece = randomFillSync(chunk.subarray(0, n));
      hash.update(piece);
      writeSync(fd, piece);
      done += n;
    }
  } finally {
    closeSync(fd);
  }
  return hash.digest('hex');
}

function readAt(path: string, start: number, length: number): Buffer {
  const out = Buffer.alloc(length);
  const fd = openSync(path, 'r');
  try {
    let got = 0;
    while (got < length) {
      const n = readSync(fd, out, got, length - got, start + got);
      if (n === 0) break;
      got += n;
    }
    return out.subarray(0, got);
  } finally {
    closeSync(fd);
  }
}

/** Puts, gets and range-gets one object of `setup.bytes` through the CLI; see the file comment. */
export async function largeTransfer(setup: LargeTransferSetup): Promise<LargeTransferResult> {
  const log = setup.log ?? (() => {});
  const key = setup.key ?? 'large/object';
  const common = [
    '--cluster',
    setup.clusterFile,
    '--identity',
    setup.identityFile,
    '--timeout',
    String(setup.timeoutMs ?? 120_000),
    '--no-progress',
  ];
  const cli = (args: readonly string[], options: Parameters<typeof runCli>[1] = { cwd: setup.dir }) =>
    runCli([...common, ...args], { ...options, measure: true });
  const source = join(setup.dir, 'large-source.bin');
  try {
    log(`writing ${setup.bytes} random bytes to ${source}`);
    const sha256 = writeRandomFile(source, setup.bytes);

    // Baseline: the same CLI reading a 1-byte value.
    const tiny = await cli(['put', `${key}.tiny`], { cwd: setup.dir, input: Buffer.from('x') });
    if (tiny.code !== 0) throw new CliFailed('put of a 1-byte value', tiny);
    const baseline = await cli(['get', `${key}.tiny`]);
    if (baseline.code !== 0) throw new CliFailed('get of a 1-byte value', baseline);
    const cliBaselineRss = baseline.peakRss!;

    const serverRssBefore = setup.serverPids.map((pid) => procStatusBytes(pid, 'VmRSS'));
    let perPhase = true;
    const phase = async (bytes: number, run: () => Promise<CliRun>, what: string): Promise<Phase> => {
      for (const pid of setup.serverPids) perPhase = resetPeakRss(pid) && perPhase;
      const filtersBefore = await setup.filterRequests?.();
      const anon = setup.serverPids.map((): number | undefined => undefined);
      const sample = () =>
        setup.serverPids.forEach((pid, i) => {
          const now = procStatusBytes(pid, 'RssAnon');
          if (now !== undefined) anon[i] = Math.max(anon[i] ?? 0, now);
        });
      const sampler = setInterval(sample, 100);
      let r: CliRun;
      try {
        r = await run();
      } finally {
        clearInterval(sampler);
      }
      sample();
      if (r.code !== 0) throw new CliFailed(what, r);
      const filtersAfter = await setup.filterRequests?.();
      const phaseResult: Phase = {
        ...(filtersBefore !== undefined && filtersAfter !== undefined ? { filterRequests: filtersAfter - filtersBefore } : {}),
        bytes,
        seconds: r.seconds,
        mbPerSecond: bytes / 1e6 / r.seconds,
        cliPeakRss: r.peakRss!,
        cliPeakRssGrowth: r.peakRss! - cliBaselineRss,
        serverPeakRss: setup.serverPids.map((pid) => procStatusBytes(pid, 'VmHWM')),
        serverPeakAnon: anon,
      };
      log(
        `${what}: ${phaseResult.seconds.toFixed(2)} s, ${phaseResult.mbPerSecond.toFixed(1)} MB/s, CLI peak RSS +${(phaseResult.cliPeakRssGrowth / 1048576).toFixed(1)} MiB`,
      );
      return phaseResult;
    };

    const put = await phase(setup.bytes, () => cli(['put', key, source]), 'put');

    const got = createHash('sha256');
    let gotBytes = 0;
    const get = await phase(
      setup.bytes,
      () =>
        cli(['get', key], {
          cwd: setup.dir,
          onStdout: (chunk) => {
            got.update(chunk);
            gotBytes += chunk.length;
          },
        }),
      'get',
    );
    const identical = gotBytes === setup.bytes && got.digest('hex') === sha256;

    const start = Math.max(0, Math.floor(setup.bytes / 2) - RANGE_BYTES / 2);
    const rangeLength = Math.min(RANGE_BYTES, setup.bytes - start);
    let ranged: Buffer = Buffer.alloc(0);
    const rangePhase = await phase(
      rangeLength,
      async () => {
        const r = await cli(['get', key, '--range', `${start}:${start + RANGE_BYTES}`]);
        ranged = r.stdout;
        return r;
      },
      'ranged get',
    );
    const rangeIdentical = Buffer.compare(ranged, readAt(source, start, rangeLength)) === 0;

    return {
      bytes: setup.bytes,
      sha256,
      identical,
      rangeIdentical,
      cliBaselineRss,
      serverRssBefore,
      serverPeaksPerPhase: perPhase,
      put,
      get,
      rangeGet: { ...rangePhase, start },
    };
  } finally {
    rmSync(source, { force: true });
  }
}

/** `1GiB`, `64MiB`, `512KiB`, `4G`, `1000000`: bytes. */
export function parseSize(v: string): number {
  const m = /^(\d+(?:\.\d+)?)\s*(|B|KiB|MiB|GiB|TiB|K|M|G|T)$/i.exec(v.trim());
  if (!m) throw new Error(`not a size: ${JSON.stringify(v)} (e.g. 64MiB, 1GiB, 4GiB)`);
  const unit = m[2]!.toUpperCase().replace(/I?B$/, '');
  const scale = { '': 1, K: 2 ** 10, M: 2 ** 20, G: 2 ** 30, T: 2 ** 40 }[unit]!;
  return Math.round(Number(m[1]) * scale);
}
