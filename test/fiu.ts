/**
 * Failing disks through Debian's libfiu (`fiu-utils`, `libfiu0`): a process started under
 * `fiu-run -x` has libc's POSIX I/O wrapped by `fiu_posix_preload.so` (LD_PRELOAD, which
 * reaches classic-level's LevelDB too), and `fiu-ctrl` turns failure points on and off in
 * it while it runs, with the errno chosen (`failinfo`).
 *
 * Usable points, checked on Node 20 with classic-level:
 * - `posix/io/sync/fdatasync` and `posix/io/sync/fsync`: LevelDB syncs its log with
 *   fdatasync; Node itself does not sync, so the process survives and the next synced
 *   batch fails ("IO error: …/000003.log: Input/output error").
 * - `posix/io/oc/open`: LevelDB opens a file for each new log, table and manifest; Node
 *   opens files rarely once started (module loading is over).
 *
 * Not usable: `posix/io/rw/write`. libuv wakes its event loop from the thread pool with
 * write() on an eventfd and aborts the process when that write fails (exit 134), so a
 * failing write() kills Node long before LevelDB's next write. A full disk is made for
 * real instead (a small tmpfs filled up).
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

/** Prefix for `CliCluster.start`'s `wrap` (and the nemesis's): the server execs under it, keeping its pid. */
export const FIU_RUN: readonly string[] = ['fiu-run', '-x'];

export const EIO = 5;
export const ENOSPC = 28;

/** Failure points of one disk failure, each failing with `errno`. */
export interface DiskFault {
  readonly points: readonly string[];
  readonly errno: number;
}

/** fsync and fdatasync fail with EIO. */
export const FSYNC_EIO: DiskFault = { points: ['posix/io/sync/fdatasync', 'posix/io/sync/fsync'], errno: EIO };

/** Why libfiu cannot be used here, or `undefined` when it can. */
export function fiuMissing(): string | undefined {
  if (!existsSync('/usr/lib/fiu/fiu_posix_preload.so') && !existsSync('/usr/lib/x86_64-linux-gnu/fiu/fiu_posix_preload.so')) {
    return 'libfiu0 is not installed (apt-get install libfiu0 fiu-utils, or scripts/setup.mjs --for-tests)';
  }
  for (const cmd of ['fiu-run', 'fiu-ctrl']) {
    if (spawnSync('sh', ['-c', `command -v ${cmd}`]).status !== 0) return `${cmd} is not installed (apt-get install fiu-utils)`;
  }
  return undefined;
}

/**
 * Runs `fiu-ctrl` commands in process `pid` (started under {@link FIU_RUN}). `fiu-ctrl`
 * writes to the process's control FIFO and waits for its reply, forever if the process
 * is gone: hence the timeout. Throws when a command is refused or times out.
 */
export function fiuCtrl(pid: number, commands: readonly string[], timeoutMs = 5000): void {
  const r = spawnSync('fiu-ctrl', [...commands.flatMap((c) => ['-c', c]), String(pid)], { encoding: 'utf8', timeout: timeoutMs });
  const out = `${r.stdout ?? ''}${r.stderr ?? ''}`;
  if (r.status !== 0 || /error|unknown pid/i.test(out)) {
    throw new Error(`fiu-ctrl ${commands.join('; ')} in ${pid} failed (${r.error?.message ?? `status ${r.status}`}): ${out.trim()}`);
  }
}

/** Turns `fault` on in `pid`: every call of its points fails with its errno until {@link healDisk}. */
export function failDisk(pid: number, fault: DiskFault): void {
  fiuCtrl(
    pid,
    fault.points.map((p) => `enable name=${p},failinfo=${fault.errno}`),
  );
}

/** Turns `fault` off in `pid`. */
export function healDisk(pid: number, fault: DiskFault): void {
  fiuCtrl(
    pid,
    fault.points.map((p) => `disable name=${p}`),
  );
}
