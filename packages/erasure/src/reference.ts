/**
 * A deliberately plain Reed-Solomon codec in TypeScript, byte for byte the same code as
 * the WebAssembly one (ISA-L's Cauchy matrix). It is the test oracle, and small enough
 * to check by eye; it is far too slow for real values.
 */
import { cauchyMatrix, gfMul, invertMatrix } from './gf256.js';
import {
  checkOutput,
  checkParams,
  checkParity,
  checkValue,
  checkValueLength,
  chooseFragments,
  type CodecParams,
  type ErasureCodec,
} from './params.js';

export function createReferenceCodec(params: CodecParams): ErasureCodec {
  const { k, n } = checkParams(params);
  const matrix = cauchyMatrix(n, k);
  const fragmentLength = (valueLength: number) => Math.ceil(checkValueLength(valueLength) / k);

  const codec: ErasureCodec = {
    k,
    n,
    fragmentLength,
    encodeInto(value, parity) {
      checkParity({ k, n }, parity, fragmentLength(checkValue(value).length));
      const fragments = codec.encode(value);
      parity.forEach((p, r) => p.set(fragments[k + r]!));
      return [...fragments.slice(0, k), ...parity];
    },
    decodeInto(fragments, valueLength, out) {
      checkOutput(out, checkValueLength(valueLength));
      const value = codec.decode(fragments, valueLength);
      out.set(value);
      return out.subarray(0, valueLength);
    },
    encode(value) {
      checkValue(value);
      const len = fragmentLength(value.length);
      const out: Uint8Array[] = [];
      for (let i = 0; i < k; i++) {
        const f = new Uint8Array(len);
        f.set(value.subarray(Math.min(i * len, value.length), Math.min((i + 1) * len, value.length)));
        out.push(f);
      }
      for (let r = k; r < n; r++) {
        const p = new Uint8Array(len);
        for (let j = 0; j < k; j++) {
          const c = matrix[r * k + j]!;
          const src = out[j]!;
          for (let b = 0; b < len; b++) p[b]! ^= gfMul(c, src[b]!);
        }
        out.push(p);
      }
      return out;
    },
    decode(fragments, valueLength) {
      const len = fragmentLength(valueLength);
      const chosen = chooseFragments({ k, n }, fragments, len);
      const sub = new Uint8Array(k * k);
      chosen.forEach((idx, row) => sub.set(matrix.subarray(idx * k, idx * k + k), row * k));
      const inv = invertMatrix(sub, k);
      if (!inv) throw new Error('unreachable: Cauchy submatrix is singular');
      const value = new Uint8Array(valueLength);
      for (let d = 0; d < k; d++) {
        const data = new Uint8Array(len);
        for (let j = 0; j < k; j++) {
          const c = inv[d * k + j]!;
          const src = fragments[chosen[j]!]!;
          for (let b = 0; b < len; b++) data[b]! ^= gfMul(c, src[b]!);
        }
        const start = d * len;
        if (start < valueLength) value.set(data.subarray(0, Math.min(len, valueLength - start)), start);
      }
      return value;
    },
  };
  return codec;
}
