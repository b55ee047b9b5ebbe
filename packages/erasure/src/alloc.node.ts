import { Buffer } from 'node:buffer';

/**
 * Output buffers the codec overwrites completely. In Node, zero-filling a fresh large
 * array costs more than the erasure coding itself (the kernel faults in new zeroed
 * pages), so the memory comes uninitialised: every byte is written before it is
 * returned. The result is a plain `Uint8Array` over its own, unpooled ArrayBuffer.
 */
export function allocOutput(length: number): Uint8Array {
  const b = Buffer.allocUnsafeSlow(length);
  return new Uint8Array(b.buffer, b.byteOffset, b.length);
}
