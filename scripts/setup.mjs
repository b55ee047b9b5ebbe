#!/usr/bin/env node
/**
 * Brings a fresh machine (Node 20, npm, apt) to a built workspace, and is a quick no-op
 * on one that is already set up. Run by `npm start` and `npm test`; safe to run again.
 *
 *   node scripts/setup.mjs [--build-only] [--for-tests] [--with-demo]
 *
 * 1. pnpm, at the version pinned in package.json's `packageManager` (corepack cannot
 *    verify signatures here, so npm installs it);
 * 2. Emscripten from Debian's packages, when `emcc` is missing, and with `--for-tests`
 *    Debian's Chromium for the browser tests, when `/usr/bin/chromium` is missing, and
 *    iproute2 (`ip`, `tc`) for the bench network test, when either is missing, and libfiu
 *    (`libfiu0`, `fiu-utils`) for the failing-disk tests, when missing;
 * 3. workspace dependencies from the committed lockfile;
 * 4. the WebAssembly codec, from wasm/src and ISA-L's Debian source, when its inputs changed;
 * 5. the TypeScript packages (`tsc -b`);
 * 6. with `--for-tests`, lazyfs (test/nemesis/lazyfs, the nemesis's power losses: `go build`,
 *    its module from the Go proxy, pinned by go.sum), when Go is there and its sources changed;
 * 7. with `--with-demo`, the demo web app (`vite build examples/web`), which `npm start` serves.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const buildOnly = process.argv.includes('--build-only');
const forTests = process.argv.includes('--for-tests');
const withDemo = process.argv.includes('--with-demo');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const pnpmVersion = pkg.packageManager.replace(/^pnpm@/, '');

function step(message) {
  console.error(`\x1b[36m[setup]\x1b[0m ${message}`);
}

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { stdio: 'inherit', cwd: root, ...opts });
  if (r.status !== 0) {
    console.error(`[setup] failed: ${cmd} ${args.join(' ')} (exit ${r.status ?? r.signal})`);
    process.exit(1);
  }
}

function output(cmd, args) {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return undefined;
  }
}

function asRoot(cmd, args) {
  if (process.getuid?.() === 0) return run(cmd, args);
  if (output('sudo', ['-n', 'true']) !== undefined) return run('sudo', ['-n', cmd, ...args]);
  console.error(`[setup] need root to run: ${cmd} ${args.join(' ')}\n        run it yourself (or as root), then run this again.`);
  process.exit(1);
}

const [major] = process.versions.node.split('.').map(Number);
if (major < 20) {
  console.error(`[setup] Node ${process.versions.node} is too old: PowerStore needs Node 20 or newer.`);
  process.exit(1);
}

if (!buildOnly) {
  if (output('pnpm', ['--version']) !== pnpmVersion) {
    step(`installing pnpm ${pnpmVersion} with npm`);
    run('npm', ['install', '--global', '--no-fund', '--no-audit', `pnpm@${pnpmVersion}`]);
  }

  const debianPackages = [];
  if (!output('sh', ['-c', 'command -v emcc'])) debianPackages.push('emscripten');
  if (forTests && !existsSync('/usr/bin/chromium')) debianPackages.push('chromium');
  // `ip` and `tc` for the bench's emulated networks and their test (test/bench/netns.test.ts).
  const sbin = (name) => ['/usr/sbin', '/sbin', '/usr/bin', '/bin'].some((d) => existsSync(join(d, name)));
  if (forTests && !(sbin('ip') && sbin('tc'))) debianPackages.push('iproute2');
  // libfiu (`fiu-run`, `fiu-ctrl` and the POSIX preload library) for the failing-disk tests
  // and the nemesis's `disk` faults (test/fiu.ts).
  if (forTests && !(existsSync('/usr/lib/fiu/fiu_posix_preload.so') || existsSync('/usr/lib/x86_64-linux-gnu/fiu/fiu_posix_preload.so')))
    debianPackages.push('libfiu0');
  if (forTests && !sbin('fiu-run')) debianPackages.push('fiu-utils');
  if (debianPackages.length > 0) {
    step(`installing ${debianPackages.join(', ')} from Debian's packages (apt-get, a few minutes)`);
    asRoot('apt-get', ['update', '-qq']);
    asRoot('env', ['DEBIAN_FRONTEND=noninteractive', 'apt-get', 'install', '-y', '-qq', ...debianPackages]);
  }

  step('installing workspace dependencies (pnpm install --frozen-lockfile)');
  run('pnpm', ['install', '--frozen-lockfile', '--reporter=silent']);
}

// Rebuild the WebAssembly only when an input changed: sources, the ISA-L pin, the scripts.
const wasmInputs = [
  'wasm/build.sh',
  'wasm/fetch-isal.sh',
  'wasm/isal.lock',
  'wasm/relaxed-opcodes.mjs',
  ...readdirSync(join(root, 'wasm/src')).map((f) => `wasm/src/${f}`),
];
const hash = createHash('sha256');
for (const f of wasmInputs.sort()) hash.update(f).update(readFileSync(join(root, f)));
const digest = hash.digest('hex');
const stampFile = join(root, 'wasm/.cache/inputs.sha256');
const outputs = [
  'packages/erasure/src/wasm/powerstore-rs.ts',
  'packages/erasure/src/wasm/powerstore-rs-relaxed.ts',
  'wasm/generated/isal-portable.ts',
];
const fresh = existsSync(stampFile) && readFileSync(stampFile, 'utf8') === digest && outputs.every((f) => existsSync(join(root, f)));
if (fresh) {
  step('WebAssembly codec is up to date');
} else {
  step('building the WebAssembly codec (wasm/build.sh)');
  run('bash', ['wasm/build.sh']);
  writeFileSync(stampFile, digest);
}

step('building TypeScript packages (tsc -b)');
run('pnpm', ['exec', 'tsc', '-b']);
if (forTests) {
  // lazyfs: a FUSE file system for the nemesis's power losses (no libfuse: it mounts
  // /dev/fuse itself, as root). Without Go its tests are skipped, and say so.
  const go = existsSync('/usr/local/go/bin/go') ? '/usr/local/go/bin/go' : 'go';
  const dir = join(root, 'test/nemesis/lazyfs');
  const bin = join(dir, 'lazyfs');
  const sources = ['main.go', 'go.mod', 'go.sum'].map((f) => join(dir, f));
  const stale = !existsSync(bin) || sources.some((f) => statSync(f).mtimeMs > statSync(bin).mtimeMs);
  if (stale && output(go, ['version']) !== undefined) {
    step('building lazyfs (go build in test/nemesis/lazyfs)');
    run(go, ['build', '-o', 'lazyfs', '.'], { cwd: dir, env: { ...process.env, GOFLAGS: '-mod=readonly' } });
  }
}
if (withDemo) {
  step('building the demo web app (vite build examples/web)');
  run('pnpm', ['exec', 'vite', 'build', 'examples/web', '--logLevel', 'warn']);
}
step('ready');
