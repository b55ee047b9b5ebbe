/**
 * The Node side of `pnpm bench:codec-browser`, in a process of its own (forked by
 * browser.ts, answering over IPC), so that its heap holds the workload and little else,
 * as the page's does. In the orchestrator, next to Playwright, every garbage collection
 * that the fresh value buffers trigger would have more to scan.
 */
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import type { BenchPage } from './codec-browser-page.js';
import { prepareWorkload, sample, type Workload } from './codec-workload.js';

/** A call of a {@link BenchPage} method, by name, with its arguments. */
export interface WorkerRequest {
  readonly id: number;
  readonly method: keyof BenchPage;
  readonly args: unknown[];
}

/** The answer to the request `id`. */
export type WorkerReply = { readonly id: number; readonly result: unknown } | { readonly id: number; readonly error: string };

const crypto = createCryptoProvider();
const workloads = new Map<string, Workload>();
const worker: BenchPage = {
  async prepare(id, params) {
    const workload = await prepareWorkload(crypto, params);
    workloads.set(id, workload);
    return workload.kernel;
  },
  sample(id, op, seconds) {
    return sample(workloads.get(id)!.runners[op], seconds);
  },
};

process.on('message', (request: WorkerRequest) => {
  const { args } = request;
  const call =
    request.method === 'prepare'
      ? worker.prepare(...(args as Parameters<BenchPage['prepare']>))
      : worker.sample(...(args as Parameters<BenchPage['sample']>));
  call.then(
    (result) => process.send!({ id: request.id, result } satisfies WorkerReply),
    (e: unknown) => process.send!({ id: request.id, error: String(e) } satisfies WorkerReply),
  );
});
// The orchestrator gone (finished or killed), nothing is left to do.
process.on('disconnect', () => process.exit(0));
