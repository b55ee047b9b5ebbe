/**
 * Output buffers the codec overwrites completely. Browsers have no uninitialised
 * allocation, so this is a plain zeroed array; Node gets `alloc.node.ts` instead.
 */
export function allocOutput(length: number): Uint8Array {
  return new Uint8Array(length);
}
