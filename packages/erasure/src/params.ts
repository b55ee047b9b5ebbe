import { ErasureCodecError } from './errors.js';

/** Largest `n`: ISA-L's Cauchy matrix stays MDS while row indices fit in a byte. */
export const MAX_FRAGMENTS = 255;

/**
 * Largest value the codec accepts, in bytes (1 GiB). The codec itself streams values
 * through a fixed buffer; the bound keeps lengths far from typed-array and 32-bit
 * limits on every engine.
 */
export const MAX_VALUE_LENGTH = 1 << 30;

/** Shape of a code: `n` fragments, any `k` of which rebuild the value. */
export interface CodecParams {
  /** Fragments needed to rebuild a value (`t + 1` in PowerStore). */
  readonly k: number;
  /** Fragments produced per value (`3t + 1` in PowerStore). */
  readonly n: number;
}

/** A Reed-Solomon codec; the WebAssembly codec and the TypeScript reference both implement it. */
export interface ErasureCodec extends CodecParams {
  /** Bytes in each fragment of a value of `valueLength` bytes: `ceil(valueLength / k)`. */
  fragmentLength(valueLength: number): number;
  /**
   * Splits `value` into `n` fragments. Systematic: fragments `0..k-1` are the value's
   * consecutive slices, the last zero-padded; fragments `k..n-1` are parity.
   */
  encode(value: Uint8Array): Uint8Array[];
  /**
   * `encode` into caller-provided parity buffers (`n - k` arrays of
   * `fragmentLength(value.length)` bytes, not overlapping `value`), for callers that
   * recycle buffers. Returns the `n` fragments: data views or copies, then `parity`.
   */
  encodeInto(value: Uint8Array, parity: readonly Uint8Array[]): Uint8Array[];
  /**
   * Rebuilds a value from any `k` fragments placed at their indices (absent ones
   * `undefined`). When more than `k` are present, the lowest indices are used, so a
   * value whose data fragments all arrived is copied, not decoded.
   */
  decode(fragments: readonly (Uint8Array | undefined)[], valueLength: number): Uint8Array;
  /**
   * `decode` into `out` (at least `valueLength` bytes, not overlapping the fragments);
   * returns `out.subarray(0, valueLength)`.
   */
  decodeInto(fragments: readonly (Uint8Array | undefined)[], valueLength: number, out: Uint8Array): Uint8Array;
}

export function checkParams(params: unknown): CodecParams {
  if (typeof params !== 'object' || params === null) {
    throw new ErasureCodecError('INVALID_PARAMS', 'expected { k, n }');
  }
  const { k, n } = params as { k: unknown; n: unknown };
  if (!Number.isInteger(n) || (n as number) < 1 || (n as number) > MAX_FRAGMENTS) {
    throw new ErasureCodecError('INVALID_PARAMS', `n must be an integer in 1..${MAX_FRAGMENTS}, got ${String(n)}`);
  }
  if (!Number.isInteger(k) || (k as number) < 1 || (k as number) > (n as number)) {
    throw new ErasureCodecError('INVALID_PARAMS', `k must be an integer in 1..n (n = ${String(n)}), got ${String(k)}`);
  }
  return { k: k as number, n: n as number };
}

export function checkValueLength(valueLength: unknown): number {
  if (!Number.isSafeInteger(valueLength) || (valueLength as number) < 0) {
    throw new ErasureCodecError('INVALID_ARGUMENT', `valueLength must be a non-negative integer, got ${String(valueLength)}`);
  }
  if ((valueLength as number) > MAX_VALUE_LENGTH) {
    throw new ErasureCodecError('VALUE_TOO_LARGE', `value of ${String(valueLength)} bytes exceeds the maximum of ${MAX_VALUE_LENGTH}`);
  }
  return valueLength as number;
}

export function checkValue(value: unknown): Uint8Array {
  if (!(value instanceof Uint8Array)) {
    throw new ErasureCodecError('INVALID_ARGUMENT', `value must be a Uint8Array, got ${describe(value)}`);
  }
  checkValueLength(value.length);
  return value;
}

/** Checks caller-provided parity buffers for `encodeInto`. */
export function checkParity({ k, n }: CodecParams, parity: unknown, fragmentLength: number): readonly Uint8Array[] {
  if (!Array.isArray(parity) || parity.length !== n - k) {
    throw new ErasureCodecError('INVALID_ARGUMENT', `parity must be an array of ${n - k} Uint8Arrays, got ${describe(parity)}`);
  }
  parity.forEach((p: unknown, i) => {
    if (!(p instanceof Uint8Array) || p.length !== fragmentLength) {
      throw new ErasureCodecError(
        'INVALID_ARGUMENT',
        `parity[${i}] must be a Uint8Array of ${fragmentLength} bytes, got ${p instanceof Uint8Array ? `${p.length} bytes` : describe(p)}`,
      );
    }
  });
  return parity as Uint8Array[];
}

/** Checks the caller-provided output of `decodeInto`. */
export function checkOutput(out: unknown, valueLength: number): Uint8Array {
  if (!(out instanceof Uint8Array) || out.length < valueLength) {
    throw new ErasureCodecError(
      'INVALID_ARGUMENT',
      `out must be a Uint8Array of at least ${valueLength} bytes, got ${out instanceof Uint8Array ? `${out.length} bytes` : describe(out)}`,
    );
  }
  return out;
}

/**
 * Validates the fragment slots for a decode and returns the indices to decode from:
 * the `k` lowest present ones.
 */
export function chooseFragments({ k, n }: CodecParams, fragments: unknown, fragmentLength: number): number[] {
  if (!Array.isArray(fragments)) {
    throw new ErasureCodecError('INVALID_ARGUMENT', `fragments must be an array of ${n} slots, got ${describe(fragments)}`);
  }
  if (fragments.length > n) {
    throw new ErasureCodecError('INVALID_ARGUMENT', `fragments has ${fragments.length} slots, the code has ${n}`);
  }
  const chosen: number[] = [];
  for (let i = 0; i < fragments.length; i++) {
    const f: unknown = fragments[i];
    if (f === undefined || f === null) continue;
    if (!(f instanceof Uint8Array)) {
      throw new ErasureCodecError('INVALID_FRAGMENT', `fragment ${i} must be a Uint8Array, got ${describe(f)}`);
    }
    if (f.length !== fragmentLength) {
      throw new ErasureCodecError('INVALID_FRAGMENT', `fragment ${i} has ${f.length} bytes, expected ${fragmentLength}`);
    }
    if (chosen.length < k) chosen.push(i);
  }
  if (chosen.length < k) {
    throw new ErasureCodecError('TOO_FEW_FRAGMENTS', `need ${k} fragments to decode, got ${chosen.length}`);
  }
  return chosen;
}

function describe(x: unknown): string {
  if (x === null) return 'null';
  if (typeof x === 'object') return x.constructor?.name ?? 'object';
  return typeof x;
}
