#!/usr/bin/env node
/** The `powerstore` bin; see main.ts. */
import module from 'node:module';

// Node 22.1 and later keep the modules' compiled code between runs (in the system's
// temporary directory), which cuts start-up; Node 20 has no such cache and skips it.
(module as { enableCompileCache?: () => unknown }).enableCompileCache?.();
// Imported after the cache is on, so that main.js and what it imports are cached too.
const { main } = await import('./main.js');

// `powerstore get big | head` closes the pipe early: that is the reader's choice, not an error.
process.stdout.on('error', (e: NodeJS.ErrnoException) => {
  if (e.code === 'EPIPE') process.exit(0);
  throw e;
});

process.exitCode = await main(process.argv.slice(2));
