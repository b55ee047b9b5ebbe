/**
 * The codec as a web app gets it: @powerstore/erasure's built package, bundled by
 * esbuild, Vite and webpack with no WebAssembly-specific configuration, running in
 * Chromium, must produce the same fragments as in Node. Chromium ships relaxed SIMD, so
 * the page runs the relaxed-SIMD build, and the SIMD128 build forced beside it must agree.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';
import type { Browser } from 'playwright-core';
import { build as viteBuild } from 'vite';
import webpack from 'webpack';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCodec } from '@powerstore/erasure';
import { launchChromium, serveDirectory } from './browser.js';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..');
const entry = join(here, 'fixtures', 'erasure-entry.mjs');
const page = (script: string) =>
  `<!doctype html><html><head><meta charset="utf-8"><title>loading</title></head><body><script type="module" src="${script}"></script></body></html>`;

const bundlers: Record<string, (out: string) => Promise<void>> = {
  async esbuild(out) {
    await esbuild.build({
      entryPoints: [entry],
      bundle: true,
      format: 'esm',
      platform: 'browser',
      outfile: join(out, 'app.js'),
      logLevel: 'silent',
    });
    writeFileSync(join(out, 'index.html'), page('./app.js'));
  },
  async vite(out) {
    const src = mkdtempSync(join(tmpdir(), 'powerstore-vite-src-'));
    writeFileSync(join(src, 'index.html'), page(entry));
    try {
      await viteBuild({ root: src, logLevel: 'silent', configFile: false, build: { outDir: out, emptyOutDir: true } });
    } finally {
      rmSync(src, { recursive: true, force: true });
    }
  },
  async webpack(out) {
    const stats = await new Promise<webpack.Stats>((resolve, reject) =>
      webpack({ mode: 'production', entry, output: { path: out, filename: 'app.js' }, target: 'web' }, (err, s) =>
        err || !s ? reject(err ?? new Error('no stats')) : resolve(s),
      ),
    );
    if (stats.hasErrors()) throw new Error(stats.toString('errors-only'));
    writeFileSync(join(out, 'index.html'), page('./app.js'));
  },
};

const CASES = [
  { k: 2, n: 4, length: 1000, seed: 1, lost: [0, 1] },
  { k: 3, n: 7, length: 4097, seed: 2, lost: [0, 2, 5, 6] },
  { k: 4, n: 10, length: 77, seed: 3, lost: [1, 2, 3] },
];

/** What fixtures/erasure-entry.mjs's runCodec reports. */
interface CodecResult {
  fragments: number[][];
  roundTrip: boolean;
  kernel: string;
  preferred: string;
  fallbackAgrees: boolean;
}

let browser: Browser;
beforeAll(async () => {
  // Bundlers consume the built package (dist/), as users do.
  execFileSync('pnpm', ['exec', 'tsc', '-b'], { cwd: root, stdio: 'inherit' });
  browser = await launchChromium();
}, 180_000);
afterAll(async () => {
  await browser?.close();
});

describe.each(Object.keys(bundlers))('bundled by %s', (name) => {
  it('runs in Chromium on the relaxed-SIMD kernel and matches the Node codec byte for byte', async () => {
    const out = mkdtempSync(join(tmpdir(), `powerstore-${name}-`));
    const server = await serveDirectory(out);
    const tab = await browser.newPage();
    const errors: string[] = [];
    tab.on('pageerror', (e) => errors.push(String(e)));
    try {
      await bundlers[name]!(out);
      await tab.goto(`${server.url}/index.html`);
      await tab.waitForFunction(() => document.title === 'ready', undefined, { timeout: 20_000 });
      for (const c of CASES) {
        const result = await tab.evaluate(
          (args) => (globalThis as unknown as { runCodec: (a: typeof args) => Promise<CodecResult> }).runCodec(args),
          c,
        );
        const codec = await createCodec({ k: c.k, n: c.n });
        const value = new Uint8Array(c.length);
        let x = c.seed;
        for (let i = 0; i < c.length; i++) {
          x ^= x << 13;
          x ^= x >>> 17;
          x ^= x << 5;
          value[i] = x;
        }
        expect(result.roundTrip).toBe(true);
        expect(result.preferred).toBe('relaxed-simd');
        expect(result.kernel).toBe('relaxed-simd');
        expect(result.fallbackAgrees).toBe(true);
        expect(result.fragments).toEqual(codec.encode(value).map((f) => Array.from(f)));
      }
      expect(errors).toEqual([]);
    } finally {
      await tab.close();
      await server.close();
      rmSync(out, { recursive: true, force: true });
    }
  }, 120_000);
});
