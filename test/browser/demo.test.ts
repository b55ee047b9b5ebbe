/**
 * The demo web app (examples/web) end to end: built by Vite as `pnpm build:demo` builds
 * it, served with the cluster's public cluster.json and nothing else next to it, driven
 * in Debian's Chromium against a real 4-server cluster (t = 1) — with a server killed,
 * and with a Byzantine server. The page makes its own identity and never fetches a
 * secret. Also: the smallest Vite app importing @powerstore/client works.
 */
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { build as viteBuild } from 'vite';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startByzantineProxy, type ByzantineProxy } from '../fixtures/byzantine-proxy.js';
import { CliCluster, ROOT, ensureBuilt } from '../server/harness.js';
import { launchChromium, serveDirectory } from './browser.js';

const here = dirname(fileURLToPath(import.meta.url));
const SCREENSHOT = join(ROOT, 'test-results', 'demo.png');
/** Longest any single UI wait may take. */
const WAIT_MS = 20_000;

interface ClusterFile {
  t: number;
  n: number;
  servers: { id: number; url: string; publicKey: string }[];
}

let cluster: CliCluster;
let clusterFile: ClusterFile;
let proxy: ByzantineProxy;
let browser: Browser;
let site: { url: string; close: () => Promise<void> };
let siteDir: string;
let context: BrowserContext | undefined;
let pageErrors: string[] = [];

async function buildWithVite(root: string, outDir: string): Promise<void> {
  await viteBuild({ root, logLevel: 'silent', build: { outDir, emptyOutDir: true } });
}

beforeAll(async () => {
  await ensureBuilt(); // Vite bundles the published form: packages' dist/
  siteDir = mkdtempSync(join(tmpdir(), 'powerstore-demo-site-'));
  cluster = await CliCluster.create(1);
  const [b] = await Promise.all([launchChromium(), cluster.startAll(), buildWithVite(join(ROOT, 'examples/web'), siteDir)]);
  browser = b;
  // The demo at /, with the cluster as `init` wrote it …
  copyFileSync(join(cluster.dir, 'cluster.json'), join(siteDir, 'cluster.json'));
  clusterFile = JSON.parse(readFileSync(join(cluster.dir, 'cluster.json'), 'utf8')) as ClusterFile;
  // … and at /byzantine/, with server 2 replaced by a proxy that corrupts its fragments.
  proxy = await startByzantineProxy(clusterFile.servers[1]!.url, clusterFile.n);
  mkdirSync(join(siteDir, 'byzantine'));
  copyFileSync(join(siteDir, 'index.html'), join(siteDir, 'byzantine', 'index.html'));
  const byzantine = { ...clusterFile, servers: clusterFile.servers.map((s) => (s.id === 2 ? { ...s, url: proxy.url } : s)) };
  writeFileSync(join(siteDir, 'byzantine', 'cluster.json'), JSON.stringify(byzantine, null, 2));
  site = await serveDirectory(siteDir);
}, 240_000);

afterEach(() => {
  expect(pageErrors).toEqual([]);
  pageErrors = [];
});

afterAll(async () => {
  await context?.close();
  await browser?.close();
  await site?.close();
  await proxy?.close();
  await cluster?.stop();
  if (siteDir) rmSync(siteDir, { recursive: true, force: true });
});

/** Every URL a demo page requested: what the page fetched, to check it fetched no secret. */
const requested: string[] = [];

/** A page of the demo, in one browser profile for the whole run (its identity lives in IndexedDB). */
async function openDemo(path = '/'): Promise<Page> {
  if (!context) {
    context = await browser.newContext({ acceptDownloads: true, viewport: { width: 1100, height: 900 } });
    // Playwright sees what goes through the browser's downloads, not a file written
    // through the File System Access API (whose dialog a headless browser cannot answer):
    // these pages take the demo's fallback, a Blob download. large-file.test.ts drives
    // the streamed path.
    await context.addInitScript(() => Object.defineProperty(window, 'showSaveFilePicker', { value: undefined }));
  }
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT_MS);
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  page.on('request', (r) => requested.push(r.url()));
  await page.goto(`${site.url}${path}`);
  await page.waitForSelector('body[data-ready]');
  const ready = await page.getAttribute('body', 'data-ready');
  if (ready !== 'true') throw new Error(`the demo did not start: ${await page.textContent('[data-testid="error"]')}`);
  return page;
}

function content(length: number, seed: number): Buffer {
  const out = Buffer.alloc(length);
  let x = seed | 1;
  for (let i = 0; i < length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x & 255;
  }
  return out;
}

/** Stores a file through the page's file input and waits until it is listed. */
async function storeFile(page: Page, name: string, buffer: Buffer): Promise<void> {
  await page.setInputFiles('[data-testid="file-input"]', { name, mimeType: 'application/octet-stream', buffer });
  await page.waitForSelector(
    `[data-testid="upload"][data-name="${name}"][data-state="done"], [data-testid="upload"][data-name="${name}"][data-state="failed"]`,
  );
  const state = await page.getAttribute(`[data-testid="upload"][data-name="${name}"]`, 'data-state');
  if (state !== 'done') throw new Error(`storing ${name} failed: ${await page.textContent('[data-testid="error"]')}`);
  await page.waitForSelector(`[data-testid="file-row"][data-name="${name}"]`);
}

/** Clicks a file's Download button and returns the downloaded bytes. */
async function download(page: Page, name: string): Promise<Buffer> {
  const [file] = await Promise.all([
    page.waitForEvent('download', { timeout: WAIT_MS }),
    page.click(`[data-testid="file-row"][data-name="${name}"] [data-testid="download"]`),
  ]);
  expect(file.suggestedFilename()).toBe(name);
  const path = await file.path();
  return readFileSync(path);
}

async function listed(page: Page): Promise<string[]> {
  return page.$$eval('[data-testid="file-row"]', (rows) => rows.map((r) => (r as HTMLElement).dataset.name ?? ''));
}

describe('the demo web app', () => {
  it('stores a file, reads it back byte for byte, deletes one, and keeps the list across reloads', async () => {
    const page = await openDemo();
    expect(
      await page.locator('[data-testid="server-1"], [data-testid="server-2"], [data-testid="server-3"], [data-testid="server-4"]').count(),
    ).toBe(4);
    await page.waitForFunction(() => document.querySelectorAll('[data-testid^="server-"][data-state="connected"]').length === 4);

    // The page made its own identity and writes in its namespace.
    const namespace = (await page.textContent('[data-testid="identity"]'))!;
    expect(namespace).toMatch(/^~[a-z2-7]{32}\/$/);
    const notes = content(150_000, 1);
    await storeFile(page, 'notes.bin', notes);
    expect(await page.getAttribute('[data-testid="file-row"][data-name="notes.bin"]', 'data-key')).toBe(`${namespace}files/notes.bin`);
    expect(await page.getAttribute('[data-testid="upload"][data-name="notes.bin"] progress', 'value')).toBe('100');
    // The upload's progress counted the file's bytes.
    expect(await page.getAttribute('[data-testid="upload"][data-name="notes.bin"]', 'data-bytes-done')).toBe(String(notes.length));
    expect((await download(page, 'notes.bin')).equals(notes)).toBe(true);
    // … and so did the download's, in the file's row.
    const downloadProgress = '[data-testid="file-row"][data-name="notes.bin"] [data-testid="download-progress"]';
    await page.waitForSelector(`${downloadProgress}[data-state="done"]`);
    expect(await page.getAttribute(downloadProgress, 'data-bytes-done')).toBe(String(notes.length));
    expect(await page.getAttribute(downloadProgress, 'data-bytes-total')).toBe(String(notes.length));
    expect(await page.textContent('[data-testid="status"]')).toMatch(/buffered/);
    expect(await page.isVisible('[data-testid="save-note"]')).toBe(true);
    // A file not being downloaded shows no progress bar.
    await storeFile(page, 'idle.bin', content(1_000, 4));
    expect(await page.isVisible('[data-testid="file-row"][data-name="idle.bin"] [data-testid="download-progress"]')).toBe(false);
    await page.click('[data-testid="file-row"][data-name="idle.bin"] [data-testid="delete"]');
    await page.waitForSelector('[data-testid="file-row"][data-name="idle.bin"]', { state: 'detached' });

    // Dropped on the drop zone rather than chosen with the file input.
    const dropped = await page.evaluateHandle(() => {
      const transfer = new DataTransfer();
      transfer.items.add(new File(['delete me'], 'scratch.txt', { type: 'text/plain' }));
      return transfer;
    });
    await page.dispatchEvent('[data-testid="dropzone"]', 'dragover', { dataTransfer: dropped });
    await page.dispatchEvent('[data-testid="dropzone"]', 'drop', { dataTransfer: dropped });
    await page.waitForSelector('[data-testid="file-row"][data-name="scratch.txt"]');
    expect((await download(page, 'scratch.txt')).toString()).toBe('delete me');
    expect(await listed(page)).toEqual(['notes.bin', 'scratch.txt']);
    await page.click('[data-testid="file-row"][data-name="scratch.txt"] [data-testid="delete"]');
    await page.waitForSelector('[data-testid="file-row"][data-name="scratch.txt"]', { state: 'detached' });

    // The list is PowerStore's listing of ~<owner>/files/: a fresh page load sees it, with the same identity.
    await page.reload();
    await page.waitForSelector('body[data-ready="true"]');
    await page.waitForSelector('[data-testid="file-row"][data-name="notes.bin"]');
    expect(await listed(page)).toEqual(['notes.bin']);
    expect((await download(page, 'notes.bin')).equals(notes)).toBe(true);
    expect(await page.textContent('[data-testid="identity"]')).toBe(namespace);
  }, 60_000);

  it('two tabs storing files at the same moment both keep theirs: the list is the cluster listing, not a shared index', async () => {
    const [left, right] = [await openDemo(), await openDemo()];
    await Promise.all([storeFile(left, 'left.bin', content(20_000, 7)), storeFile(right, 'right.bin', content(20_000, 8))]);
    await left.reload();
    await left.waitForSelector('body[data-ready="true"]');
    await left.waitForSelector('[data-testid="file-row"][data-name="right.bin"]');
    expect(await listed(left)).toEqual(expect.arrayContaining(['left.bin', 'right.bin']));
    expect(await left.textContent('[data-testid="file-row"][data-name="left.bin"] [data-testid="file-version"]')).toBe('1');
    for (const name of ['left.bin', 'right.bin']) {
      await left.click(`[data-testid="file-row"][data-name="${name}"] [data-testid="delete"]`);
      await left.waitForSelector(`[data-testid="file-row"][data-name="${name}"]`, { state: 'detached' });
    }
    await right.close();
    await left.close();
  }, 60_000);

  it('fetched nothing but its own files and the public cluster.json, and its site holds no secret', () => {
    const paths = [
      ...new Set(
        requested
          .map((u) => new URL(u))
          .filter((u) => u.protocol.startsWith('http'))
          .map((u) => u.pathname),
      ),
    ];
    expect(paths.filter((p) => !/^\/(index\.html)?$|^\/assets\/|^\/cluster\.json$|^\/byzantine\//.test(p))).toEqual([]);
    // The only data the site holds is the public cluster file (twice: / and /byzantine/).
    const data = readdirRecursive(siteDir).filter((f) => !/\.(html|js|css|wasm)$/.test(f));
    expect(data.map((f) => f.slice(siteDir.length)).sort()).toEqual(['/byzantine/cluster.json', '/cluster.json']);
    for (const f of data)
      expect(Object.keys(JSON.parse(readFileSync(f, 'utf8')) as object).sort()).toEqual([
        'admin',
        'id',
        'n',
        'policy',
        'servers',
        't',
        'version',
      ]);
  });

  it('keeps storing and reading with a server killed, and shows that server as disconnected', async () => {
    const page = await openDemo();
    await page.waitForSelector('[data-testid="server-4"][data-state="connected"]');
    await cluster.signal(4, 'SIGKILL');
    await page.waitForSelector('[data-testid="server-4"][data-state="disconnected"]');
    expect(await page.textContent('[data-testid="server-4"] [data-testid="server-state"]')).toBe('disconnected');

    const during = content(200_000, 2);
    await storeFile(page, 'during-crash.bin', during);
    expect((await download(page, 'during-crash.bin')).equals(during)).toBe(true);
    expect((await download(page, 'notes.bin')).equals(content(150_000, 1))).toBe(true);
    expect(await page.getAttribute('[data-testid="server-4"]', 'data-state')).toBe('disconnected');

    // Bring it back (the next test needs every honest server) and watch the page reconnect.
    await cluster.start(4);
    await page.waitForSelector('[data-testid="server-4"][data-state="connected"]');
  }, 60_000);

  it('reads the right bytes through a Byzantine server 2 and marks it misbehaving, with the reason', async () => {
    const page = await openDemo('/byzantine/');
    const attacked = content(300_000, 3);
    await storeFile(page, 'attacked.bin', attacked);
    await storeFile(page, 'readme.txt', Buffer.from('PowerStore keeps this readable while one server lies.\n'));
    // The corrupted fragment is used only when server 2's answer is among the first
    // n − t; read until the page has caught it (bounded), checking every read.
    const corruptedBefore = proxy.corrupted;
    for (let i = 0; i < 25; i++) {
      expect((await download(page, 'attacked.bin')).equals(attacked)).toBe(true);
      if ((await page.getAttribute('[data-testid="server-2"]', 'data-state')) === 'misbehaving') break;
    }
    expect(proxy.corrupted).toBeGreaterThan(corruptedBefore);
    await page.waitForSelector('[data-testid="server-2"][data-state="misbehaving"]');
    expect(await page.isVisible('[data-testid="server-2"] [data-testid="server-misbehaving"]')).toBe(true);
    expect(await page.textContent('[data-testid="server-2"] [data-testid="server-reason"]')).toMatch(/fragment/);
    // The honest servers are up and never blamed (on a loaded machine one may show as slow).
    for (const id of [1, 3, 4])
      expect(['connected', 'slow']).toContain(await page.getAttribute(`[data-testid="server-${id}"]`, 'data-state'));
    expect((await download(page, 'during-crash.bin')).equals(content(200_000, 2))).toBe(true);
    expect(await listed(page)).toEqual(['attacked.bin', 'during-crash.bin', 'notes.bin', 'readme.txt']);

    mkdirSync(dirname(SCREENSHOT), { recursive: true });
    await page.screenshot({ path: SCREENSHOT, fullPage: true });
  }, 90_000);
});

describe('a Vite app importing @powerstore/client with no configuration', () => {
  it('builds for production and puts then gets in Chromium against the cluster', async () => {
    const out = mkdtempSync(join(tmpdir(), 'powerstore-vite-client-'));
    const served = await serveDirectory(out);
    const own = await browser.newContext();
    const page = await own.newPage();
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    try {
      await buildWithVite(join(here, 'fixtures', 'client-page'), out);
      const bundle = readFileSync(join(out, 'index.html'), 'utf8');
      expect(bundle).toContain('/assets/');
      await page.goto(`${served.url}/index.html`);
      await page.waitForFunction(() => document.title === 'ready', undefined, { timeout: WAIT_MS });
      const back = await page.evaluate(
        ({ cluster }) =>
          (globalThis as unknown as { putThenGet: (c: object, k: string, v: string) => Promise<string | undefined> }).putThenGet(
            cluster,
            'vite/greeting',
            'hello from a Vite build',
          ),
        { cluster: clusterFile },
      );
      expect(back).toBe('hello from a Vite build');
    } finally {
      await own.close();
      await served.close();
      rmSync(out, { recursive: true, force: true });
    }
  }, 60_000);
});

function readdirRecursive(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? readdirRecursive(join(dir, e.name)) : [join(dir, e.name)],
  );
}
