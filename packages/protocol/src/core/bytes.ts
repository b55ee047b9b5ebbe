/** Byte helpers shared by the codec, the crypto helpers and the state machines. */
import { bytesToHex, concatBytes, hexToBytes } from '@noble/hashes/utils.js';

export { bytesToHex as toHex, concatBytes, hexToBytes };

const encoder = new TextEncoder();

/** UTF-8 bytes of `s`. */
export function utf8(s: string): Uint8Array {
  return encoder.encode(s);
}

/**
 * A deep copy of decoded data (plain objects, arrays, byte arrays) whose byte arrays have
 * buffers of their own. Decoded messages hold views into the frame they came from, so a
 * field kept in long-lived state would keep the whole frame, fragment included, alive.
 * (`slice()` is not enough: on a Node `Buffer` it returns a view; `structuredClone`
 * copies a view's whole buffer.)
 */
export function detached<T>(value: T): T {
  if (value instanceof Uint8Array) return new Uint8Array(value) as T;
  if (Array.isArray(value)) return value.map(detached) as T;
  if (typeof value === 'object' && value !== null) {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[k] = detached(v);
    return out as T;
  }
  return value;
}

/** Constant-structure equality of two byte arrays (length first, then every byte). */
export function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}

/** Lexicographic order of two byte arrays: negative, zero or positive. */
export function compareBytes(a: Uint8Array, b: Uint8Array): number {
  const len = Math.min(a.length, b.length);
  for (let i = 0; i < len; i++) {
    if (a[i] !== b[i]) return a[i]! - b[i]!;
  }
  return a.length - b.length;
}

/** Big-endian u32. */
export function u32(x: number): Uint8Array {
  // Byte by byte: a DataView per call cost more than the rest of it (this is hashed per field, per candidate).
  const out = new Uint8Array(4);
  out[0] = x >>> 24;
  out[1] = x >>> 16;
  out[2] = x >>> 8;
  out[3] = x;
  return out;
}

/** Big-endian u64 of a safe non-negative integer. */
export function u64(x: number): Uint8Array {
  const hi = Math.floor(x / 2 ** 32);
  const out = new Uint8Array(8);
  out[0] = hi >>> 24;
  out[1] = hi >>> 16;
  out[2] = hi >>> 8;
  out[3] = hi;
  out[4] = x >>> 24;
  out[5] = x >>> 16;
  out[6] = x >>> 8;
  out[7] = x;
  return out;
}

/** `bytes` preceded by its u32 length, so concatenated fields cannot be re-split differently. */
export function lengthPrefixed(bytes: Uint8Array): Uint8Array[] {
  return [u32(bytes.length), bytes];
}
