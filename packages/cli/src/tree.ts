/**
 * The files under a directory, for `powerstore put --recursive`: every regular file at any
 * depth (symbolic links to files included), each with its path relative to the directory
 * in `/`-separated segments, which becomes the rest of its key. Depth first, each
 * directory's entries in name order, so the same tree always gives the same order.
 */
import type { Dirent } from 'node:fs';
import { access, constants, readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';

/** A regular file found: its path relative to the directory (`a/b.txt`) and on disk. */
export interface TreeFile {
  readonly path: string;
  readonly file: string;
}

/** Something under the directory that is not stored, and why. */
export interface TreeEntryNote {
  /** Relative path, `/`-separated; a directory's ends with `/`. */
  readonly path: string;
  readonly reason: string;
}

export interface Tree {
  readonly files: TreeFile[];
  /** Files and directories that could not be read: failures, like a file whose put failed. */
  readonly failed: TreeEntryNote[];
  /**
   * What is deliberately left out: symbolic links to directories (they may lead back up the
   * tree, or out of it) and what is not a regular file (FIFOs, sockets, devices).
   */
  readonly skipped: TreeEntryNote[];
}

/** Walks `root` (a directory). */
export async function walkTree(root: string): Promise<Tree> {
  const tree: Tree = { files: [], failed: [], skipped: [] };
  await walk(root, '', tree);
  return tree;
}

async function walk(dir: string, relative: string, tree: Tree): Promise<void> {
  let entries: Dirent[];
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch (e) {
    tree.failed.push({ path: relative || './', reason: `cannot read the directory ${dir}: ${codeOf(e)}` });
    return;
  }
  entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const entry of entries) {
    const file = join(dir, entry.name);
    const path = relative + entry.name;
    if (entry.isDirectory()) {
      await walk(file, `${path}/`, tree);
      continue;
    }
    let regular = entry.isFile();
    if (entry.isSymbolicLink()) {
      try {
        const target = await stat(file);
        if (target.isDirectory()) {
          tree.skipped.push({ path: `${path}/`, reason: 'a symbolic link to a directory (not followed)' });
          continue;
        }
        regular = target.isFile();
      } catch (e) {
        tree.failed.push({ path, reason: `cannot read ${file}: ${codeOf(e)} (a symbolic link)` });
        continue;
      }
    }
    if (!regular) {
      tree.skipped.push({ path, reason: 'not a regular file' });
      continue;
    }
    try {
      await access(file, constants.R_OK);
    } catch (e) {
      tree.failed.push({ path, reason: `cannot read ${file}: ${codeOf(e)}` });
      continue;
    }
    tree.files.push({ path, file });
  }
}

function codeOf(e: unknown): string {
  return (e as NodeJS.ErrnoException).code ?? (e as Error).message;
}
