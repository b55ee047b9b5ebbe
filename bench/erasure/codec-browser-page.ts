/**
 * The page of `pnpm bench:codec-browser`: the workload of codec-workload.ts with the
 * browser's crypto provider (WebCrypto), driven from Node through `globalThis.benchCodec`.
 */
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import { benchPage, type BenchPage } from './codec-workload.js';

export type { BenchPage };

(globalThis as unknown as { benchCodec: BenchPage }).benchCodec = benchPage(createCryptoProvider());
document.title = 'ready';
