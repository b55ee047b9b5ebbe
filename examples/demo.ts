/**
 * The PowerStore demo, as far as the project goes today: erasure-codes a value the way
 * a client does for a t = 1 cluster (n = 3t + 1 = 4 fragments, any t + 1 = 2 rebuild
 * it), loses fragments, and rebuilds it.
 */
import { createCodec } from '@powerstore/erasure';

const t = 1;
const codec = await createCodec({ k: t + 1, n: 3 * t + 1 });
const value = new TextEncoder().encode('Hello from PowerStore: any t+1 of 3t+1 fragments rebuild this value.');
const fragments = codec.encode(value);
console.log(`value: ${value.length} bytes -> ${fragments.length} fragments of ${codec.fragmentLength(value.length)} bytes`);
for (const lost of [[0, 1], [0, 2], [1, 3], [2, 3]]) {
  const slots = fragments.map((f, i) => (lost.includes(i) ? undefined : f));
  const back = codec.decode(slots, value.length);
  console.log(`lost fragments ${lost.join(' and ')}: rebuilt ${JSON.stringify(new TextDecoder().decode(back))}`);
}
