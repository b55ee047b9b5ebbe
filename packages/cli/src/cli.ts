#!/usr/bin/env node
/** The `powerstore` bin; see main.ts. */
import { main } from './main.js';

// `powerstore get big | head` closes the pipe early: that is the reader's choice, not an error.
process.stdout.on('error', (e: NodeJS.ErrnoException) => {
  if (e.code === 'EPIPE') process.exit(0);
  throw e;
});

process.exitCode = await main(process.argv.slice(2));
