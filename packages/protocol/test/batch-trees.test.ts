/**
 * BatchTrees, the verifier's memo of verified batches' nodes, gives exactly what `rootOf`
 * gives for every path: the genuine ones of remembered trees (from a few hashes), and any
 * path changed anywhere (a leaf, a sibling at any level, the position, the leaf count),
 * which must lead where `rootOf` leads it, not to the remembered root.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { BatchTrees, buildBatch, rootOf, type SignatureBatch } from '../src/core/signature-batch.js';
import { crypto } from '../src/testing/cluster.js';

const hash32 = fc.uint8Array({ minLength: 32, maxLength: 32 });
const flip = (b: Uint8Array, i: number) => Uint8Array.from(b, (x, j) => (j === i ? x ^ 1 : x));

describe('BatchTrees', () => {
  it('gives rootOf for genuine and changed paths, whatever it has learned', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 2, max: 300 }),
        fc.array(fc.nat(), { minLength: 1, maxLength: 40 }),
        fc.array(fc.tuple(fc.nat(), fc.nat(), fc.nat(), fc.integer({ min: 0, max: 4 })), { maxLength: 40 }),
        hash32,
        (count, learnOrder, probes, signature) => {
          const leaves = Array.from({ length: count }, (_, i) => crypto.sha256Sync([Uint8Array.of(i, count & 0xff, count >> 8)]));
          const { root, paths } = buildBatch(crypto, leaves);
          const trees = new BatchTrees(crypto);
          // Learned as the verifier learns: the paths whose root was found, in any order.
          for (const n of learnOrder) {
            const i = n % count;
            const found = trees.root(leaves[i]!, paths[i]!, signature)!;
            expect(found.root).toEqual(root);
            trees.learn(signature, count, found);
          }
          for (const [a, b, c, how] of probes) {
            const i = a % count;
            let leaf = leaves[i]!;
            let path: SignatureBatch = paths[i]!;
            if (how === 1) leaf = flip(leaf, b % 32);
            if (how === 2 && path.siblings.length > 0) {
              const s = b % path.siblings.length;
              path = { ...path, siblings: path.siblings.map((h, j) => (j === s ? flip(h, c % 32) : h)) };
            }
            if (how === 3) path = { ...path, index: b % count, siblings: paths[b % count]!.siblings };
            if (how === 4) path = { ...path, count: Math.max(2, (b % 600) + 1) };
            const want = rootOf(crypto, leaf, path);
            const got = trees.root(leaf, path, signature);
            expect(got?.root).toEqual(want);
            if (how === 0) expect(got?.root).toEqual(root);
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  it('forgets the oldest trees beyond its bound of nodes, and still gives rootOf', () => {
    const trees = new BatchTrees(crypto, 64);
    for (let t = 0; t < 20; t++) {
      const leaves = Array.from({ length: 16 }, (_, i) => crypto.sha256Sync([Uint8Array.of(t, i)]));
      const { root, paths } = buildBatch(crypto, leaves);
      const signature = Uint8Array.of(t);
      for (let i = 0; i < 16; i++) {
        const found = trees.root(leaves[i]!, paths[i]!, signature)!;
        expect(found.root).toEqual(root);
        trees.learn(signature, 16, found);
      }
    }
  });
});
