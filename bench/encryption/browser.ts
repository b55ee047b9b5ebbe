/**
 * The encryption microbenchmark in Debian's Chromium (headless): `page.ts` bundled with
 * esbuild for the browser, so the client's `#aead` is WebCrypto as on a web page.
 *
 *   pnpm exec tsx --conditions=@powerstore/source bench/encryption/browser.ts   # writes bench/results/encryption-chromium.md
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';
import { launchChromium, serveDirectory } from '../../test/browser/browser.js';
import type { Row, runBench } from './page.js';

const here = dirname(fileURLToPath(import.meta.url));
const out = mkdtempSync(join(tmpdir(), 'powerstore-encryption-bench-'));
const browser = await launchChromium();
try {
  await esbuild.build({
    entryPoints: [join(here, 'page.ts')],
    bundle: true,
    format: 'iife',
    globalName: 'encryptionBench',
    platform: 'browser',
    target: 'chrome110',
    conditions: ['@powerstore/source'],
    outfile: join(out, 'bench.js'),
    logLevel: 'silent',
  });
  writeFileSync(join(out, 'index.html'), '<!doctype html><meta charset="utf-8"><script src="./bench.js"></script>');
  const site = await serveDirectory(out);
  try {
    const page = await browser.newPage();
    await page.goto(`${site.url}/index.html`);
    await page.waitForFunction(() => 'encryptionBench' in globalThis);
    const version = browser.version();
    const rows = await page.evaluate(
      async (sizes) => {
        const bench = (globalThis as unknown as { encryptionBench: { runBench: typeof runBench } }).encryptionBench;
        return bench.runBench(sizes);
      },
      [4096, 262_144, 1_048_576],
    );
    const lines = [
      `# Encryption against the codec in Chromium ${version} (${new Date().toISOString().slice(0, 10)}, headless, ${process.arch})`,
      '',
      '`pnpm exec tsx --conditions=@powerstore/source bench/encryption/browser.ts`: one core, median of 7 batches of ≥ 200 ms (range in brackets); MB/s of plaintext.',
      '',
      '| operation | bytes | median ms [min–max] | MB/s |',
      '|---|---:|---|---:|',
      ...rows.map(
        (r: Row) =>
          `| ${r.what} | ${r.bytes} | ${r.medianMs.toFixed(3)} [${r.minMs.toFixed(3)}–${r.maxMs.toFixed(3)}] | ${r.mbPerS.toFixed(0)} |`,
      ),
      '',
    ];
    writeFileSync(join(here, '../results/encryption-chromium.md'), lines.join('\n'));
    console.log(lines.join('\n'));
  } finally {
    await site.close();
  }
} finally {
  await browser.close();
  rmSync(out, { recursive: true, force: true });
}
