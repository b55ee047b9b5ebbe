/**
 * The client suite (client-suite.ts) twice against one real 4-server cluster: in Node, and
 * in Debian's Chromium from an esbuild bundle that resolves @powerstore/client's browser
 * build (platform WebSocket, WebCrypto, the codec's embedded WebAssembly).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startByzantineProxy, startOversizedProxy, type ByzantineProxy } from '../fixtures/byzantine-proxy.js';
import { CliCluster, ensureBuilt } from '../server/harness.js';
import { launchChromium, serveDirectory } from './browser.js';
import { caseNames, OVERSIZED_CASE, runCase, type SuiteEnv } from './client-suite.js';

const here = dirname(fileURLToPath(import.meta.url));
const BYZANTINE = 'a Byzantine server: reads return the right bytes and it is reported as misbehaving';

let cluster: CliCluster;
let proxy: ByzantineProxy;
let oversized: ByzantineProxy;
let env: Omit<SuiteEnv, 'prefix' | 'identity'>;

beforeAll(async () => {
  await ensureBuilt();
  cluster = await CliCluster.create(1);
  await cluster.startAll();
  const clusterFile = JSON.parse(readFileSync(join(cluster.dir, 'cluster.json'), 'utf8')) as { servers: { id: number; url: string }[] };
  proxy = await startByzantineProxy(clusterFile.servers[1]!.url, clusterFile.servers.length);
  oversized = await startOversizedProxy(clusterFile.servers[1]!.url, clusterFile.servers.length, 4 * 1024 * 1024);
  env = {
    cluster: clusterFile,
    byzantineCluster: { ...clusterFile, servers: clusterFile.servers.map((s) => (s.id === 2 ? { ...s, url: proxy.url } : s)) },
    oversizedCluster: { ...clusterFile, servers: clusterFile.servers.map((s) => (s.id === 2 ? { ...s, url: oversized.url } : s)) },
  };
}, 240_000);

afterAll(async () => {
  await proxy?.close();
  await oversized?.close();
  await cluster?.stop();
});

/** Runs `body`; for the Byzantine cases, also checks the proxy really changed answers meanwhile. */
async function checked(name: string, body: () => Promise<void>): Promise<void> {
  const byzantine = name === BYZANTINE ? proxy : name === OVERSIZED_CASE ? oversized : undefined;
  const before = byzantine?.corrupted ?? 0;
  await body();
  if (byzantine) expect(byzantine.corrupted).toBeGreaterThan(before);
}

describe('client suite in Node', () => {
  for (const name of caseNames) {
    it(name, () => checked(name, () => runCase(name, { ...env, identity: 'generate', prefix: `node/${name}` })), 60_000);
  }
});

describe('client suite in Chromium (esbuild bundle of the browser build, identities kept in IndexedDB)', () => {
  let browser: Browser;
  let page: Page;
  let site: { url: string; close: () => Promise<void> };
  let out: string;
  const errors: string[] = [];

  beforeAll(async () => {
    out = mkdtempSync(join(tmpdir(), 'powerstore-client-suite-'));
    const [b] = await Promise.all([
      launchChromium(),
      esbuild.build({
        entryPoints: [join(here, 'client-suite.ts')],
        bundle: true,
        format: 'iife',
        globalName: 'clientSuite',
        platform: 'browser',
        target: 'chrome110',
        outfile: join(out, 'suite.js'),
        logLevel: 'silent',
      }),
    ]);
    browser = b;
    // The bundle must have taken the browser build: no Node built-ins, no `ws`.
    const bundle = readFileSync(join(out, 'suite.js'), 'utf8');
    expect(bundle).not.toMatch(/require\(["'](ws|node:[a-z]+)["']\)/);
    expect(bundle).toContain('new WebSocket(');
    writeFileSync(
      join(out, 'index.html'),
      '<!doctype html><html><head><meta charset="utf-8"><title>client suite</title></head><body><script src="./suite.js"></script></body></html>',
    );
    site = await serveDirectory(out);
    page = await browser.newPage();
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.goto(`${site.url}/index.html`);
    await page.waitForFunction(() => 'clientSuite' in globalThis, undefined, { timeout: 10_000 });
  }, 120_000);

  afterAll(async () => {
    await page?.close();
    await browser?.close();
    await site?.close();
    if (out) rmSync(out, { recursive: true, force: true });
    expect(errors).toEqual([]);
  });

  for (const name of caseNames) {
    it(
      name,
      async () => {
        await checked(name, async () => {
          const outcome = await page.evaluate(
            async ({ name, env }) => {
              const suite = (globalThis as unknown as { clientSuite: { runCase: typeof runCase } }).clientSuite;
              try {
                await suite.runCase(name, env);
                return { ok: true as const };
              } catch (e) {
                return { ok: false as const, error: e instanceof Error ? `${e.name}: ${e.message}` : String(e) };
              }
            },
            { name, env: { ...env, identity: 'browser' as const, prefix: `chromium/${name}` } },
          );
          if (!outcome.ok) throw new Error(`in Chromium: ${outcome.error}`);
        });
      },
      60_000,
    );
  }
});
