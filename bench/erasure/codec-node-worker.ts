/**
 * The Node side of `pnpm bench:codec-browser`, in a process of its own (forked by
 * browser.ts, answering over IPC), so that its heap holds the workload and little else,
 * as the page's does. In the orchestrator, next to Playwright, every garbage collection
 * that the fresh value buffers trigger would have more to scan.
 */
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import { benchPage, type BenchPage } from './codec-workload.js';

/** A call of a {@link BenchPage} method, by name, with its arguments. */
export interface WorkerRequest {
  readonly id: number;
  readonly method: keyof BenchPage;
  readonly args: unknown[];
}

/** The answer to the request `id`. */
export type WorkerReply = { readonly id: number; readonly result: unknown } | { readonly id: number; readonly error: string };

const worker = benchPage(createCryptoProvider());

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
