/**
 * The packages as a user gets them. Every package is packed by pnpm (as `pnpm publish`
 * packs it: `publishConfig` applied, `workspace:*` replaced by versions) and the tarballs
 * are installed with npm into a fresh project outside the workspace, so their
 * dependencies come from the registry and nothing of the workspace leaks in. Then the
 * installed `powerstore-server dev` runs a cluster that the installed client and
 * `powerstore` command put to and get from, TypeScript checks an import of the client
 * under the module resolutions users configure, and Vite bundles a page importing it.
 *
 * Slow parts (npm install, the cluster) get generous time limits: the machine may be
 * loaded by other test files.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureBuiltProjects, freeBasePort, ROOT } from '../server/harness.js';

/** Package directory → what its tarball must carry besides README.md, LICENSE, package.json and dist/. */
const PACKAGES: Record<string, readonly string[]> = {
  'packages/erasure': ['NOTICE', 'LICENSE-ISA-L'],
  'packages/protocol': [],
  'packages/client': [],
  'packages/server': [],
  'packages/cli': [],
};

interface Manifest {
  name: string;
  version: string;
  main?: string;
  types?: string;
  engines?: { node?: string };
  keywords?: string[];
  license?: string;
  bin?: Record<string, string>;
  exports?: Record<string, unknown>;
  imports?: Record<string, unknown>;
  dependencies?: Record<string, string>;
}

const manifest = (dir: string): Manifest => JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as Manifest;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let work: string;
/** The user's project: the tarballs installed with npm. */
let app: string;

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * The environment of a user's shell: without the npm_/pnpm_ variables the test runner was
 * started with (a nested npm would take them as its own configuration) and without
 * NODE_OPTIONS (which could carry the workspace's `@powerstore/source` condition).
 */
function userEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!/^(npm_|pnpm_|node_options$)/i.test(k)) env[k] = v;
  return { ...env, ...extra };
}

/** Runs a command to completion (killed after `timeoutMs`), collecting its output. */
function run(
  cmd: string,
  args: readonly string[],
  opts: { cwd: string; env?: NodeJS.ProcessEnv; timeoutMs?: number; input?: Uint8Array },
): Promise<Result> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: opts.cwd, env: opts.env ?? userEnv() });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => {
      stderr += `\n[killed after ${opts.timeoutMs ?? 120_000} ms]`;
      child.kill('SIGKILL');
    }, opts.timeoutMs ?? 120_000);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    child.stdin.end(opts.input ?? new Uint8Array(0));
  });
}

/** `run`, failing with the command's output unless it exits 0. */
async function ok(cmd: string, args: readonly string[], opts: Parameters<typeof run>[2]): Promise<Result> {
  const r = await run(cmd, args, opts);
  if (r.code !== 0) throw new Error(`${cmd} ${args.join(' ')} exited ${r.code}\n${r.stdout}\n${r.stderr}`);
  return r;
}

/** Every string in an exports/imports map: the files it points at. */
function targets(map: unknown): string[] {
  if (typeof map === 'string') return [map];
  if (map && typeof map === 'object') return Object.values(map).flatMap(targets);
  return [];
}

const bin = (name: string) => join(app, 'node_modules', '.bin', name);
const installed = (name: string) => join(app, 'node_modules', ...name.split('/'));

beforeAll(async () => {
  // Everything the tarballs ship: cli references client, which references erasure and
  // protocol; server references erasure and protocol.
  await ensureBuiltProjects(['packages/server', 'packages/cli']);
  work = mkdtempSync(join(tmpdir(), 'powerstore-packaging-'));
  const packs = join(work, 'packs');
  app = join(work, 'app');
  mkdirSync(app);
  // One at a time: pnpm reads the whole workspace for each pack.
  for (const dir of Object.keys(PACKAGES))
    await ok('pnpm', ['pack', '--pack-destination', packs], { cwd: join(ROOT, dir), timeoutMs: 120_000 });
  const tarballs = readdirSync(packs).filter((f) => f.endsWith('.tgz'));
  expect(tarballs).toHaveLength(Object.keys(PACKAGES).length);
  writeFileSync(
    join(app, 'package.json'),
    `${JSON.stringify({ name: 'powerstore-packaging-app', private: true, type: 'module' }, null, 2)}\n`,
  );
  // All tarballs in one install: the @powerstore/* versions they depend on are satisfied
  // by each other, everything else comes from the registry.
  await ok('npm', ['install', '--no-audit', '--no-fund', ...tarballs.map((t) => join(packs, t))], { cwd: app, timeoutMs: 300_000 });
}, 420_000);

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

describe('published packages', () => {
  it('pack only README.md, LICENSE, package.json and dist/ (and the ISA-L notices for the codec)', async () => {
    await Promise.all(
      Object.entries(PACKAGES).map(async ([dir, extra]) => {
        const r = await ok('npm', ['pack', '--dry-run', '--json'], { cwd: join(ROOT, dir), timeoutMs: 120_000 });
        const files = (JSON.parse(r.stdout) as { files: { path: string }[] }[])[0]!.files.map((f) => f.path);
        const allowed = (f: string) => ['README.md', 'LICENSE', 'package.json', ...extra].includes(f) || f.startsWith('dist/');
        expect(
          files.filter((f) => !allowed(f)),
          dir,
        ).toEqual([]);
        for (const f of ['README.md', 'LICENSE', 'package.json', ...extra]) expect(files, `${dir} ships ${f}`).toContain(f);
        // Declaration maps could only point at src/, which is not shipped (tsconfig.base.json).
        expect(
          files.filter((f) => f.endsWith('.d.ts.map')),
          `${dir}: stale declaration maps; delete dist/ and rebuild`,
        ).toEqual([]);
      }),
    );
  }, 240_000);

  it('have manifests without the source condition or workspace versions, and every entry point exists', () => {
    for (const dir of Object.keys(PACKAGES)) {
      const source = manifest(join(ROOT, dir));
      const m = manifest(installed(source.name));
      const text = JSON.stringify(m);
      expect(text, m.name).not.toContain('@powerstore/source');
      expect(text, m.name).not.toContain('workspace:');
      expect(m.version).toBe(source.version);
      // The server's value log checks records with node:zlib's crc32 (Node 20.15).
      expect(m.engines?.node, m.name).toBe(m.name === 'powerstore-server' ? '>=20.15' : '>=20.10');
      expect(m.keywords?.length, m.name).toBeGreaterThan(0);
      expect(m.license, m.name).toBe(m.name === '@powerstore/erasure' ? 'Apache-2.0 AND BSD-3-Clause' : 'Apache-2.0');
      expect(m.exports?.['./package.json'], m.name).toBe('./package.json');
      // main/types serve `moduleResolution: node`, which does not read exports.
      const files = [m.main, m.types, ...Object.values(m.bin ?? {}), ...targets(m.exports), ...targets(m.imports)];
      for (const f of files) expect(f && existsSync(join(installed(m.name), f)), `${m.name}: ${f}`).toBe(true);
      for (const [dep, version] of Object.entries(m.dependencies ?? {})) {
        if (dep.startsWith('@powerstore/')) expect(version, `${m.name} → ${dep}`).toBe(manifest(installed(dep)).version);
      }
    }
  });

  it('ship source maps that carry their sources (src/ is not shipped)', () => {
    for (const dir of Object.keys(PACKAGES)) {
      const name = manifest(join(ROOT, dir)).name;
      const maps: string[] = [];
      const walk = (rel: string) => {
        for (const e of readdirSync(join(installed(name), rel), { withFileTypes: true })) {
          const path = `${rel}/${e.name}`;
          if (e.isDirectory()) walk(path);
          // Only outputs of current sources: a working tree's dist/ may still hold outputs of
          // removed ones (a fresh clone, as CI and publishing use, has none).
          else if (e.name.endsWith('.js.map') && existsSync(join(ROOT, dir, path.replace(/^dist\//, 'src/').replace(/\.js\.map$/, '.ts'))))
            maps.push(join(installed(name), path));
        }
      };
      walk('dist');
      expect(maps.length, name).toBeGreaterThan(0);
      for (const file of maps) {
        const map = JSON.parse(readFileSync(file, 'utf8')) as { sources: string[]; sourcesContent?: (string | null)[] };
        expect(map.sourcesContent?.length, file).toBe(map.sources.length);
        expect(
          map.sourcesContent!.every((s) => typeof s === 'string' && s.length > 0),
          file,
        ).toBe(true);
      }
    }
  });

  it('run: the installed powerstore-server starts a cluster; the installed client and powerstore command put and get', async () => {
    const serverVersion = manifest(join(ROOT, 'packages/server')).version;
    const cliVersion = manifest(join(ROOT, 'packages/cli')).version;
    expect((await ok(bin('powerstore-server'), ['--version'], { cwd: app })).stdout.trim()).toBe(serverVersion);
    expect((await ok(bin('powerstore'), ['--version'], { cwd: app })).stdout.trim()).toBe(cliVersion);
    // A usage error, documented as exit code 2, and the help says which option is missing.
    const noT = await run(bin('powerstore-server'), ['init', '--dir', join(app, 'unused')], { cwd: app });
    expect(noT.code, noT.stderr).toBe(2);
    expect(noT.stderr).toContain("required option '--t <t>' not specified");
    const help = (await ok(bin('powerstore-server'), ['init', '--help'], { cwd: app })).stdout;
    expect(help.slice(help.indexOf('--t <t>'), help.indexOf('--dir <dir>'))).toContain('(required)');

    const base = await freeBasePort(4);
    const dir = join(app, 'cluster');
    const dev = spawn(bin('powerstore-server'), ['dev', '--dir', dir, '--base-port', String(base)], {
      cwd: app,
      env: userEnv(),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let devOutput = '';
    dev.stdout.on('data', (d: Buffer) => (devOutput += d.toString()));
    dev.stderr.on('data', (d: Buffer) => (devOutput += d.toString()));
    const exited = new Promise<number | null>((resolve) => dev.once('exit', (code) => resolve(code)));
    try {
      const deadline = Date.now() + 90_000;
      for (let id = 1; id <= 4; id++) {
        for (;;) {
          if (dev.exitCode !== null) throw new Error(`powerstore-server dev exited ${dev.exitCode}:\n${devOutput}`);
          if (Date.now() > deadline) throw new Error(`server ${id} did not become healthy:\n${devOutput}`);
          try {
            if ((await fetch(`http://127.0.0.1:${base + id - 1}/healthz`, { signal: AbortSignal.timeout(2000) })).ok) break;
          } catch {
            // not up yet
          }
          await sleep(100);
        }
      }

      // A second server on a data directory a running server holds: one line saying so.
      const locked = await run(bin('powerstore-server'), ['start', '--config', join(dir, 'server-2.json'), '--data', join(dir, 'data-1')], {
        cwd: app,
        timeoutMs: 60_000,
      });
      expect(locked.code, locked.stderr).toBe(1);
      expect(locked.stderr).toContain(
        `STORAGE_FAILED: cannot open LevelDB at ${join(dir, 'data-1')}: another process (a running server?) holds its lock`,
      );

      // The client, from a plain Node script of the user's.
      writeFileSync(
        join(app, 'roundtrip.mjs'),
        `import { readFileSync } from 'node:fs';
import { connect, Identity } from '@powerstore/client';

const cluster = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const store = await connect({ cluster, identity: await Identity.generate(), timeoutMs: 60_000 });
const value = new Uint8Array(300_000).map((_, i) => (i * 7) % 251);
const key = \`\${store.namespace}packaging/value\`;
await store.put(key, value, { timeoutMs: 60_000 });
const back = await store.get(key, { timeoutMs: 60_000 });
store.close();
const same = back !== undefined && back.length === value.length && back.every((b, i) => b === value[i]);
console.log(same ? \`round trip ok: \${back.length} bytes\` : 'round trip MISMATCH');
process.exitCode = same ? 0 : 1;
`,
      );
      const roundTrip = await ok(process.execPath, ['roundtrip.mjs', join(dir, 'cluster.json')], { cwd: app, timeoutMs: 120_000 });
      expect(roundTrip.stdout).toContain('round trip ok: 300000 bytes');

      // The powerstore command, with an identity of its own and no home directory of the user's.
      const env = userEnv({ XDG_CONFIG_HOME: join(app, 'home') });
      const files = ['--cluster', join(dir, 'cluster.json'), '--identity', join(app, 'me.json')];
      await ok(bin('powerstore'), [...files, 'id'], { cwd: app, env });
      const value = randomBytes(200_000);
      writeFileSync(join(app, 'in.bin'), value);
      await ok(bin('powerstore'), [...files, '--no-progress', 'put', '@/packaging/file', 'in.bin'], { cwd: app, env, timeoutMs: 120_000 });
      await ok(bin('powerstore'), [...files, 'get', '@/packaging/file', 'out.bin'], { cwd: app, env, timeoutMs: 120_000 });
      expect(readFileSync(join(app, 'out.bin')).equals(value)).toBe(true);
    } finally {
      dev.kill('SIGTERM');
      const timer = setTimeout(() => dev.kill('SIGKILL'), 30_000);
      await exited;
      clearTimeout(timer);
    }
  }, 300_000);

  it('type-check an import of @powerstore/client under moduleResolution nodenext, bundler and node', async () => {
    writeFileSync(
      join(app, 'check.ts'),
      `import { connect, Identity, PowerStoreError, type ClusterFile, type KeyStat, type Store } from '@powerstore/client';
import { createCodec, type ErasureCodec } from '@powerstore/erasure';
// @ts-expect-error: a misspelt export must fail, so the types above are real, not any.
import { conect } from '@powerstore/client';

export async function roundTrip(cluster: ClusterFile): Promise<string | undefined> {
  const identity: Identity = await Identity.generate();
  // With an identity, connect's store has a namespace for sure; a reader's may have none.
  const store = await connect({ cluster, identity });
  const ns: string = store.namespace;
  const reader: Store = await connect({ cluster });
  // @ts-expect-error: a store without an identity has no namespace for sure.
  const none: string = reader.namespace;
  void [ns, none];
  reader.close();
  try {
    await store.put(\`\${store.namespace}k\`, 'v');
    const stat: KeyStat = await store.stat(\`\${store.namespace}k\`);
    const bytes: Uint8Array | undefined = await store.get(\`\${store.namespace}k\`);
    return stat.exists && bytes ? new TextDecoder().decode(bytes) : undefined;
  } catch (e) {
    if (e instanceof PowerStoreError && e.code === 'QUORUM_UNREACHABLE') return undefined;
    throw e;
  } finally {
    store.close();
  }
}

export const codec: Promise<ErasureCodec> = createCodec({ k: 2, n: 4 });
export const misspelt: unknown = conect;
`,
    );
    // No @types/node in the project: the packages' types must not need them.
    const common = { target: 'es2022', lib: ['es2022', 'dom'], strict: true, noEmit: true, types: [] as string[] };
    const configs: Record<string, object> = {
      nodenext: { ...common, module: 'nodenext', moduleResolution: 'nodenext', skipLibCheck: false },
      bundler: { ...common, module: 'esnext', moduleResolution: 'bundler', skipLibCheck: false },
      // The legacy resolution reads main/types only. It cannot follow the package's
      // `#identity-store` import inside its declarations (types become any there, an
      // error only skipLibCheck hides), which is why node10 users set skipLibCheck.
      node: { ...common, module: 'esnext', moduleResolution: 'node', skipLibCheck: true },
    };
    const tsc = join(ROOT, 'node_modules/typescript/bin/tsc');
    for (const [name, compilerOptions] of Object.entries(configs)) {
      writeFileSync(join(app, `tsconfig.${name}.json`), JSON.stringify({ compilerOptions, files: ['check.ts'] }, null, 2));
      const r = await run(process.execPath, [tsc, '-p', `tsconfig.${name}.json`], { cwd: app, timeoutMs: 120_000 });
      expect(r.code, `moduleResolution ${name}:\n${r.stdout}${r.stderr}`).toBe(0);
    }
  }, 240_000);

  it('bundle with Vite into a page with no configuration', async () => {
    const web = join(app, 'web');
    mkdirSync(web, { recursive: true });
    writeFileSync(
      join(web, 'index.html'),
      '<!doctype html>\n<html><head><meta charset="utf-8" /><title>loading</title></head>\n<body><script type="module" src="./main.js"></script></body></html>\n',
    );
    writeFileSync(
      join(web, 'main.js'),
      `import { connect, Identity, openBrowserIdentity } from '@powerstore/client';
globalThis.powerstore = { connect, Identity, openBrowserIdentity };
document.title = 'ready';
`,
    );
    const vite = join(ROOT, 'node_modules/vite/bin/vite.js');
    const r = await ok(process.execPath, [vite, 'build', web, '--outDir', join(web, 'dist'), '--emptyOutDir', '--logLevel', 'warn'], {
      cwd: app,
      timeoutMs: 180_000,
    });
    const html = readFileSync(join(web, 'dist', 'index.html'), 'utf8');
    const script = /src="\/(assets\/[^"]+\.js)"/.exec(html)?.[1];
    expect(script, html).toBeDefined();
    const bundle = readFileSync(join(web, 'dist', script!), 'utf8');
    expect(bundle.length).toBeGreaterThan(10_000);
    // The browser build: no Node built-ins, which Vite would stub out (and warn about).
    expect(bundle).not.toContain('__vite-browser-external');
    expect(`${r.stdout}${r.stderr}`).not.toMatch(/externalized for browser compatibility/);
  }, 240_000);
});
