/**
 * The folders of `src/` are layers, and a module imports only its own folder and lower
 * layers. That keeps the core free of what builds on it (a wire codec that needs no
 * listing operation, storage that needs no client state machine) and keeps crypto
 * providers and test helpers out of everything hosts ship. Each import is read from the
 * text (relative `from '…'`, `import '…'` and `import('…')` specifiers), so the check
 * needs no compiler.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const SRC = fileURLToPath(new URL('../src/', import.meta.url));

/**
 * The layers, lowest first. Folders of one layer are peers: neither imports the other.
 * `.` is the package root, the public entry (`index.ts`), which sits above every layer
 * but `testing`, so nothing from `@powerstore/protocol/testing` reaches the main entry.
 * `crypto` (the providers `./crypto` selects) is a peer of `server` at the top: no part
 * of the sans-IO core picks a provider, hosts inject one.
 */
const LAYERS: readonly (readonly string[])[] = [
  ['core'],
  ['auth'],
  ['wire'],
  ['storage', 'operations'],
  ['server', 'crypto'],
  ['.'],
  ['testing'],
];

/** Relative module specifiers in `text`. */
function relativeImports(text: string): string[] {
  const found: string[] = [];
  for (const m of text.matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)['"](\.{1,2}\/[^'"]+)['"]/g)) found.push(m[1]!);
  return found;
}

/** The folder (first path segment, `.` for the root) of a path relative to `src/`; `undefined` outside `src/`. */
function folderOf(path: string): string | undefined {
  if (path.startsWith('../') || path === '..') return undefined;
  const slash = path.indexOf('/');
  return slash < 0 ? '.' : path.slice(0, slash);
}

/** Rank of each folder in {@link LAYERS}. */
function ranks(layers: readonly (readonly string[])[]): Map<string, number> {
  return new Map(layers.flatMap((folders, rank) => folders.map((f) => [f, rank] as const)));
}

/**
 * Every import of `sources` (path relative to `src/` → text) that breaks the layering:
 * one that goes up a layer, sideways into a peer folder, or out of `src/`, and every
 * module in a folder `layers` does not name. Each problem names the file and the import.
 */
function layerViolations(sources: ReadonlyMap<string, string>, layers: readonly (readonly string[])[] = LAYERS): string[] {
  const rank = ranks(layers);
  const problems: string[] = [];
  for (const [file, text] of sources) {
    const from = folderOf(file)!;
    const own = rank.get(from);
    if (own === undefined) {
      problems.push(`${file}: folder ${from} is in no layer (add it to LAYERS)`);
      continue;
    }
    for (const spec of relativeImports(text)) {
      const target = posix.normalize(posix.join(posix.dirname(file), spec));
      const to = folderOf(target);
      if (to === undefined) {
        problems.push(`${file} imports ${spec}, outside src/`);
        continue;
      }
      if (to === from) continue;
      const theirs = rank.get(to);
      if (theirs === undefined) problems.push(`${file} imports ${spec}, in ${to}, which is in no layer`);
      else if (theirs > own) problems.push(`${file} imports ${spec}: ${to} is a higher layer than ${from}`);
      else if (theirs === own) problems.push(`${file} imports ${spec}: ${to} and ${from} are peers of one layer`);
    }
  }
  return problems;
}

/** Every `.ts` file under `src/`, by its path relative to `src/` (with `/`). */
function readSources(dir = ''): Map<string, string> {
  const sources = new Map<string, string>();
  for (const entry of readdirSync(SRC + dir, { withFileTypes: true })) {
    const path = dir === '' ? entry.name : `${dir}/${entry.name}`;
    if (entry.isDirectory()) for (const [p, text] of readSources(path)) sources.set(p, text);
    else if (entry.name.endsWith('.ts')) sources.set(path, readFileSync(SRC + path, 'utf8'));
  }
  return sources;
}

describe('layers', () => {
  it('no module of src/ imports a higher layer, a peer folder, or outside src/', () => {
    const sources = readSources();
    // A check that read nothing would pass: make sure it sees the package.
    expect(sources.size).toBeGreaterThan(30);
    expect(sources.has('core/bytes.ts') && sources.has('server/server.ts')).toBe(true);
    expect(layerViolations(sources)).toEqual([]);
  });

  it('every layer folder exists, and every folder of src/ is in a layer', () => {
    const folders = new Set([...readSources().keys()].map((p) => folderOf(p)!));
    expect([...folders].sort()).toEqual(LAYERS.flat().sort());
  });

  it('names the file and the import that goes up, sideways or out', () => {
    const sources = new Map([
      ['core/keys.ts', "import { MAX_LIST_LIMIT } from '../operations/listing.js';\nimport { check } from './errors.js';"],
      ['core/errors.ts', ''],
      ['wire/codec.ts', "import type { X } from '../core/keys.js';\nconst m = await import('../storage/record.js');"],
      ['storage/record.ts', "export * from '../operations/reader.js';"],
      ['operations/reader.ts', "import '../../test/cluster.js';"],
      ['index.ts', "export { makeCluster } from './testing/cluster.js';\nexport { Server } from './server/server.js';"],
      ['extra/thing.ts', ''],
    ]);
    expect(layerViolations(sources)).toEqual([
      'core/keys.ts imports ../operations/listing.js: operations is a higher layer than core',
      'wire/codec.ts imports ../storage/record.js: storage is a higher layer than wire',
      'storage/record.ts imports ../operations/reader.js: operations and storage are peers of one layer',
      'operations/reader.ts imports ../../test/cluster.js, outside src/',
      'index.ts imports ./testing/cluster.js: testing is a higher layer than .',
      'extra/thing.ts: folder extra is in no layer (add it to LAYERS)',
    ]);
  });
});
