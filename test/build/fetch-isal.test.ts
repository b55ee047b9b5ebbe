/**
 * ISA-L's source is trusted only through the pins in wasm/isal.lock: a download whose
 * .dsc does not hash to the pinned value must stop the build.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it } from 'vitest';

const script = join(import.meta.dirname, '..', '..', 'wasm', 'fetch-isal.sh');

it('refuses an ISA-L source package that does not match the pinned .dsc hash', () => {
  const cache = mkdtempSync(join(tmpdir(), 'powerstore-isal-'));
  try {
    const r = spawnSync('bash', [script], {
      env: { ...process.env, ISAL_CACHE_DIR: cache, ISAL_DSC_SHA256_OVERRIDE: '0'.repeat(64) },
      encoding: 'utf8',
    });
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain('does not match the pinned SHA-256');
    // Nothing unverified is left where the build would pick it up.
    expect(readdirSync(cache).some((d) => d.startsWith('isa-l-'))).toBe(false);
  } finally {
    rmSync(cache, { recursive: true, force: true });
  }
}, 120_000);

it('accepts the pinned package and unpacks ISA-L', () => {
  const cache = mkdtempSync(join(tmpdir(), 'powerstore-isal-'));
  try {
    const r = spawnSync('bash', [script], { env: { ...process.env, ISAL_CACHE_DIR: cache }, encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    const dir = readdirSync(cache).find((d) => d.startsWith('isa-l-'))!;
    expect(existsSync(join(cache, dir, 'erasure_code', 'ec_base.c'))).toBe(true);
  } finally {
    rmSync(cache, { recursive: true, force: true });
  }
}, 120_000);
