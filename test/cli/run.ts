/**
 * Running the built `powerstore` bin as a user does, for the streaming tests and the large
 * object bench: standard input from bytes or a stream, standard output collected or
 * handed to a sink (a hash, so gigabytes need not be held), and the process's own peak
 * RSS, and the peak RSS of server processes.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { ROOT } from '../server/harness.js';

/** The built bin, as npm installs it. */
export const BIN = join(ROOT, 'packages/cli/dist/cli.js');

/**
 * Preloaded into a measured CLI: at exit it writes the process's peak resident set
 * (`getrusage` ru_maxrss, KiB on Linux) to `$POWERSTORE_PEAK_RSS_FILE`. The kernel's own
 * figure for the whole life of the process, read by the process itself, so nothing is
 * missed between samples; the CLI's code is untouched.
 */
const PEAK_RSS_PRELOAD =
  'data:text/javascript,' +
  encodeURIComponent(
    "import { writeFileSync } from 'node:fs';" +
      "process.on('exit', () => writeFileSync(process.env.POWERSTORE_PEAK_RSS_FILE, String(process.resourceUsage().maxRSS * 1024)));",
  );

/** One run of the CLI. */
export interface CliRun {
  readonly code: number | null;
  /** Standard output, unless `onStdout` took it. */
  readonly stdout: Buffer;
  readonly stderr: string;
  /** Wall time from spawn to exit. */
  readonly seconds: number;
  /** Peak RSS of the CLI process in bytes, with `measure`. */
  readonly peakRss?: number;
}

/** How to run it. */
export interface CliRunOptions {
  readonly cwd: string;
  /** Bytes, or a stream piped in with backpressure; nothing (an empty stdin) by default. */
  readonly input?: Uint8Array | Readable;
  readonly env?: Record<string, string>;
  /** Gets standard output chunk by chunk instead of collecting it. */
  readonly onStdout?: (chunk: Buffer) => void;
  /** Report the process's peak RSS. */
  readonly measure?: boolean;
}

/** Runs `powerstore <args>` to completion. */
export async function runCli(args: readonly string[], options: CliRunOptions): Promise<CliRun> {
  const rssDir = options.measure ? mkdtempSync(join(tmpdir(), 'powerstore-rss-')) : undefined;
  const rssFile = rssDir ? join(rssDir, 'peak') : undefined;
  try {
    const started = performance.now();
    const child = spawn(process.execPath, [...(rssFile ? ['--import', PEAK_RSS_PRELOAD] : []), BIN, ...args], {
      cwd: options.cwd,
      env: { ...process.env, ...options.env, ...(rssFile ? { POWERSTORE_PEAK_RSS_FILE: rssFile } : {}) },
    });
    const out: Buffer[] = [];
    let err = '';
    child.stdout.on('data', (d: Buffer) => (options.onStdout ? options.onStdout(d) : out.push(d)));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const closed = new Promise<number | null>((resolve, reject) => {
      child.on('error', reject);
      child.on('close', resolve);
    });
    // The CLI may exit without reading all of its input (a refused put): EPIPE is its choice.
    child.stdin.on('error', () => {});
    const input = options.input;
    if (input === undefined || input instanceof Uint8Array) child.stdin.end(input ?? new Uint8Array(0));
    else void pipeline(input, child.stdin).catch(() => {});
    const code = await closed;
    const seconds = (performance.now() - started) / 1000;
    const peakRss = rssFile ? Number(readFileSync(rssFile, 'utf8')) : undefined;
    return { code, stdout: Buffer.concat(out), stderr: err, seconds, ...(peakRss === undefined ? {} : { peakRss }) };
  } finally {
    if (rssDir) rmSync(rssDir, { recursive: true, force: true });
  }
}

/**
 * A process's `/proc/<pid>/status` field in bytes (VmHWM: peak RSS, VmRSS: current,
 * RssAnon: the part of it that is the process's own memory, not pages of mapped files).
 */
export function procStatusBytes(pid: number, field: 'VmHWM' | 'VmRSS' | 'RssAnon'): number | undefined {
  try {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Resets a process's peak RSS (VmHWM) to its current RSS, so the next reading is the peak
 * of what came after; false where the kernel does not allow it (then VmHWM is the peak
 * since the process started).
 */
export function resetPeakRss(pid: number): boolean {
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, '5');
    return true;
  } catch {
    return false;
  }
}

/** `n` bytes as MiB with one decimal. */
export const mib = (n: number): string => (n / 1024 / 1024).toFixed(1);
