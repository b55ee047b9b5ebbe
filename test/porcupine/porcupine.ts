/**
 * Porcupine (Go, ./main.go) as a second opinion on register histories: histories are
 * written as JSON files into a directory and checked together by `go run .`. Used by the
 * cross-check test and by the nemesis.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { RegisterOp } from '../lincheck/lincheck.js';

const here = dirname(fileURLToPath(import.meta.url));

/** The Go toolchain: `$GO`, else the usual install path, else `go` on PATH. */
export const GO = process.env.GO ?? (existsSync('/usr/local/go/bin/go') ? '/usr/local/go/bin/go' : 'go');

/** Whether {@link GO} runs. */
export function goAvailable(): boolean {
  return spawnSync(GO, ['version'], { encoding: 'utf8' }).status === 0;
}

/** Porcupine's verdict on one history; `unknown` when it timed out (30 s a history). */
export type PorcupineVerdict = 'ok' | 'illegal' | 'unknown' | 'error';

/** Writes `ops` as `<dir>/<name>.json`, the format main.go reads. */
export function writeHistory(dir: string, name: string, ops: readonly RegisterOp[]): void {
  const json = { ops: ops.map((o) => ({ key: o.key, client: o.client, kind: o.kind, value: o.value, call: o.call, ret: o.ret ?? null })) };
  writeFileSync(join(dir, `${name}.json`), JSON.stringify(json));
}

/** Checks every history in `dir` (see {@link writeHistory}); the verdicts by name. Throws if Go fails. */
export function runPorcupine(dir: string): Map<string, PorcupineVerdict> {
  const out = execFileSync(GO, ['run', '.', dir], { cwd: here, encoding: 'utf8', env: { ...process.env, GOFLAGS: '-mod=readonly' } });
  return new Map(
    out
      .trim()
      .split('\n')
      .filter(Boolean)
      .map((line) => {
        const [file, verdict] = line.split(' ');
        return [file!.replace(/\.json$/, ''), verdict as PorcupineVerdict] as const;
      }),
  );
}
