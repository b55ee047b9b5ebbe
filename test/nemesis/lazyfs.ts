/**
 * lazyfs (./lazyfs/main.go, a FUSE file system that keeps unsynced writes in memory and
 * can drop them: a power loss) from TypeScript: build it, mount it over a backing
 * directory, read its stats, pull the plug, and the power-loss cycle of a server whose
 * data directory is on it. Root only (a FUSE mount), with /dev/fuse and Go.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, statSync } from 'node:fs';
import { connect } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { GO } from '../porcupine/porcupine.js';

const SOURCE = join(dirname(fileURLToPath(import.meta.url)), 'lazyfs');
/** The binary `go build` makes (git-ignored). */
export const LAZYFS_BIN = join(SOURCE, 'lazyfs');

/** lazyfs's counters (see main.go). */
export interface LazyFsStats {
  /** Written and not yet fsynced: what a power loss now would drop. */
  readonly pendingBytes: number;
  readonly pendingFiles: number;
  /** Directory entries created, renamed or removed whose directory has not been fsynced since. */
  readonly uncommittedNames: number;
  readonly files: number;
  readonly writes: number;
  readonly writtenBytes: number;
  readonly fsyncs: number;
  readonly fdatasyncs: number;
  readonly dirFsyncs: number;
  readonly syncedBytes: number;
  readonly mode: 'strict' | 'ext4';
  /** Whether the disk is full (`setFull`). */
  readonly full: boolean;
}

/** Why lazyfs cannot run here, or undefined when it can. */
export function lazyfsUnavailable(): string | undefined {
  if (process.platform !== 'linux') return 'not Linux';
  if (process.getuid?.() !== 0) return 'not root (a FUSE mount needs root here)';
  if (!existsSync('/dev/fuse')) return 'no /dev/fuse';
  if (!existsSync(LAZYFS_BIN) && spawnSync(GO, ['version']).status !== 0) return 'no Go toolchain to build lazyfs';
  return undefined;
}

/** Builds the binary when it is missing or older than its sources (`go build`, a few seconds; the module comes from the Go proxy the first time). */
export function buildLazyfs(): string {
  const built = existsSync(LAZYFS_BIN) ? statSync(LAZYFS_BIN).mtimeMs : 0;
  const stale = ['main.go', 'go.mod', 'go.sum'].some((f) => statSync(join(SOURCE, f)).mtimeMs > built);
  if (stale) {
    const r = spawnSync(GO, ['build', '-o', 'lazyfs', '.'], {
      cwd: SOURCE,
      encoding: 'utf8',
      env: { ...process.env, GOFLAGS: '-mod=readonly' },
    });
    if (r.status !== 0) throw new Error(`go build of lazyfs failed: ${r.stderr}`);
  }
  return LAZYFS_BIN;
}

/** Whether `path` is a mount point (of this mount namespace). */
export function mounted(path: string): boolean {
  const target = resolve(path);
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .some((line) => line.split(' ')[4]?.replace(/\\040/g, ' ') === target);
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** One lazyfs mount: `mountpoint` shows `backing` with page-cache semantics. */
export class LazyFs {
  #child: ChildProcess;
  #exited: Promise<void>;

  private constructor(
    readonly backing: string,
    readonly mountpoint: string,
    readonly control: string,
    readonly mode: 'strict' | 'ext4',
    child: ChildProcess,
  ) {
    this.#child = child;
    this.#exited = new Promise((done) => (child.exitCode !== null ? done() : child.once('exit', () => done())));
  }

  /** Mounts lazyfs (both directories are made if missing); resolves once it serves. `log` gets its stderr (appended). */
  static async mount(
    backing: string,
    mountpoint: string,
    options: { control?: string; mode?: 'strict' | 'ext4'; log?: string } = {},
  ): Promise<LazyFs> {
    const bin = buildLazyfs();
    mkdirSync(backing, { recursive: true });
    mkdirSync(mountpoint, { recursive: true });
    const control = options.control ?? `${resolve(mountpoint)}.lazyfs.sock`;
    const args = ['--backing', backing, '--mount', mountpoint, '--control', control, '--mode', options.mode ?? 'strict'];
    const err = options.log ? openSync(options.log, 'a') : 'pipe';
    const child = spawn(bin, args, { stdio: ['ignore', 'pipe', err] });
    if (typeof err === 'number') closeSync(err);
    let stderr = '';
    child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
    LIVE.add(child);
    child.once('exit', () => LIVE.delete(child));
    await new Promise<void>((ready, fail) => {
      let out = '';
      child.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        if (out.includes('ready\n')) ready();
      });
      child.once('exit', (code, signal) => fail(new Error(`lazyfs exited (${signal ?? code}) before mounting: ${stderr}`)));
      setTimeout(() => fail(new Error(`lazyfs did not mount ${mountpoint} within 20 s`)), 20_000).unref();
    });
    return new LazyFs(backing, mountpoint, control, options.mode ?? 'strict', child);
  }

  async #ask(command: string): Promise<LazyFsStats> {
    return new Promise((done, fail) => {
      const sock = connect(this.control);
      let buf = '';
      sock.once('error', fail);
      sock.on('data', (d) => {
        buf += d.toString();
        const nl = buf.indexOf('\n');
        if (nl >= 0) {
          sock.destroy();
          done(JSON.parse(buf.slice(0, nl)) as LazyFsStats);
        }
      });
      sock.write(`${command}\n`);
    });
  }

  /** The counters now. */
  stats(): Promise<LazyFsStats> {
    return this.#ask('stats');
  }

  /**
   * Fills the disk (`true`: writes, new files and directories fail with ENOSPC, statfs
   * reports no free blocks) or frees it again (`false`).
   */
  setFull(full: boolean): Promise<LazyFsStats> {
    return this.#ask(full ? 'full' : 'room');
  }

  /**
   * Pulls the plug: everything not durable is dropped, lazyfs unmounts and exits. Resolves
   * with the stats just before (what was dropped), once the mount point is free. Kill the
   * processes using the mount first (a power loss kills them too).
   */
  async crash(): Promise<LazyFsStats> {
    const s = await this.#ask('crash');
    await this.#gone();
    return s;
  }

  /** Unmounts cleanly (everything pending is made durable first, as a clean shutdown would). */
  async stop(): Promise<void> {
    if (this.#child.exitCode === null && this.#child.signalCode === null) this.#child.kill('SIGTERM');
    await this.#gone();
  }

  async #gone(): Promise<void> {
    const timer = setTimeout(() => this.#child.kill('SIGKILL'), 10_000);
    await this.#exited;
    clearTimeout(timer);
    for (let i = 0; i < 50 && mounted(this.mountpoint); i++) await sleep(20);
    // A lazyfs killed before it could unmount leaves a dead mount ("transport endpoint is not connected").
    if (mounted(this.mountpoint)) spawnSync('umount', ['-l', this.mountpoint]);
  }
}

/** Every lazyfs started here, unmounted (detached) if this process exits without stopping them. */
const LIVE = new Set<ChildProcess>();
process.once('exit', () => {
  for (const c of LIVE) c.kill('SIGTERM');
});

/** What a power loss needs of a server: kill it, start it again (as PowerStoreCluster does). */
export interface PowerTarget {
  signal(id: number, signal: NodeJS.Signals): Promise<void>;
  start(id: number): Promise<void>;
}

/**
 * A power loss of server `id` whose data directory is `fs`'s mount point: kill -9 (the
 * process dies with the machine), the plug pulled (unsynced writes and directory entries
 * gone), lazyfs mounted again on the same disk (the machine boots), and, after
 * `downMs`, the server started again on the same data directory (resolves once its
 * /healthz answers; throws if it does not start). Returns the new mount and what was
 * dropped.
 */
export async function powerLoss(
  target: PowerTarget,
  id: number,
  fs: LazyFs,
  options: { downMs?: number; log?: string; beforeRestart?: () => void } = {},
): Promise<{ fs: LazyFs; dropped: LazyFsStats }> {
  await target.signal(id, 'SIGKILL');
  const dropped = await fs.crash();
  const again = await LazyFs.mount(fs.backing, fs.mountpoint, {
    control: fs.control,
    mode: fs.mode,
    ...(options.log ? { log: options.log } : {}),
  });
  if (options.downMs) await sleep(options.downMs);
  options.beforeRestart?.();
  await target.start(id);
  return { fs: again, dropped };
}
