#!/usr/bin/env node
/** The `powerstore` bin; see main.ts. */
import { main } from './main.js';

process.exitCode = await main(process.argv.slice(2));
