/**
 * The page of `pnpm bench:codec-browser`: the workload of codec-workload.ts with the
 * browser's crypto provider (WebCrypto), driven from Node through `globalThis.benchCodec`.
 */
import type { CodecKernel } from '@powerstore/erasure';
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import { prepareWorkload, sample, type Op, type Workload } from './codec-workload.js';

const crypto = createCryptoProvider();
const workloads = new Map<string, Workload>();

/** What the page exposes to the Node side. */
export interface BenchPage {
  /** Prepares workload `id`; resolves to the kernel its codec runs. */
  prepare(id: string, params: { k: number; n: number; valueBytes: number; kernel?: CodecKernel }): Promise<CodecKernel>;
  /** Operations per second of `op` over `seconds`. */
  sample(id: string, op: Op, seconds: number): Promise<number>;
}

const page: BenchPage = {
  async prepare(id, params) {
    const workload = await prepareWorkload(crypto, params);
    workloads.set(id, workload);
    return workload.kernel;
  },
  sample(id, op, seconds) {
    return sample(workloads.get(id)!.runners[op], seconds);
  },
};
(globalThis as unknown as { benchCodec: BenchPage }).benchCodec = page;
document.title = 'ready';
