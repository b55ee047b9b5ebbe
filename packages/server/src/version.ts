/** This package's version, read at run time so `--version` and `/status` cannot drift from package.json. */
import { readFileSync } from 'node:fs';

let version: string | undefined;

/** The `version` of `@powerstore/server`'s package.json. */
export function packageVersion(): string {
  // ../package.json from dist/version.js (installed) and from src/version.ts (tsx) alike.
  version ??= (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;
  return version;
}
