import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { expect, it } from 'vitest';
import { createCodec } from '@powerstore/erasure';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

function retained(): number {
  gc();
  gc();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers + m.external;
}

it('does not grow memory across 100k operations', async () => {
  // (10,4) has 210 erasure patterns, more than the decode-table cache holds, so the
  // cache's eviction is exercised too.
  const codecs = [await createCodec({ k: 2, n: 4 }), await createCodec({ k: 4, n: 10 })];
  const value = new Uint8Array(3000).map((_, i) => (i * 7) & 255);
  let x = 12345;
  const random = () => ((x = (x * 1103515245 + 12345) >>> 0) >>> 8) / (1 << 24);
  const run = (ops: number) => {
    for (let i = 0; i < ops; i++) {
      const codec = codecs[i & 1]!;
      const fragments = codec.encode(value.subarray(0, 1 + (i % value.length)));
      const slots = fragments.map((f) => (random() < 0.5 ? undefined : f));
      // Make sure k fragments are present, choosing the rest at random.
      for (let j = 0; slots.filter(Boolean).length < codec.k; j++) slots[j] = fragments[j];
      const out = codec.decode(slots, 1 + (i % value.length));
      if (out[0] !== value[0]) throw new Error(`wrong decode at op ${i}`);
    }
  };
  run(10_000);
  const before = retained();
  const rssBefore = process.memoryUsage().rss;
  run(100_000);
  const after = retained();
  const rssAfter = process.memoryUsage().rss;
  expect(after - before, `retained ${before} → ${after} bytes`).toBeLessThan(1 << 20);
  // RSS moves with the allocator and GC timing; only a leak of the operations' data would make it climb this far.
  expect(rssAfter - rssBefore, `rss ${rssBefore} → ${rssAfter}`).toBeLessThan(64 << 20);
});
