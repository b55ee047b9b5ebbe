/** The timing loop both halves of the encryption microbenchmark (Node and the Chromium page) share. */

/** One measured operation. */
export interface Row {
  readonly what: string;
  readonly bytes: number;
  readonly medianMs: number;
  readonly minMs: number;
  readonly maxMs: number;
  readonly mbPerS: number;
}

const BATCHES = 7;
const MIN_BATCH_MS = 200;

/** The median of 7 batches, each of enough runs of `op` to last about 200 ms (calibrated first, which also warms up). */
export async function measure(what: string, bytes: number, op: () => unknown): Promise<Row> {
  let n = 1;
  for (;;) {
    const t0 = performance.now();
    for (let i = 0; i < n; i++) await op();
    if (performance.now() - t0 >= MIN_BATCH_MS / 4) break;
    n *= 2;
  }
  n *= 4;
  const per: number[] = [];
  for (let b = 0; b < BATCHES; b++) {
    const t0 = performance.now();
    for (let i = 0; i < n; i++) await op();
    per.push((performance.now() - t0) / n);
  }
  per.sort((a, b) => a - b);
  const medianMs = per[BATCHES >> 1]!;
  return { what, bytes, medianMs, minMs: per[0]!, maxMs: per[BATCHES - 1]!, mbPerS: bytes / 1e6 / (medianMs / 1000) };
}
