/**
 * @powerstore/erasure — Reed-Solomon erasure coding for PowerStore.
 *
 * ```ts
 * const codec = await createCodec({ k: 2, n: 4 });   // codec.kernel: 'relaxed-simd' or 'simd128'
 * const fragments = codec.encode(value);             // 4 fragments
 * const back = codec.decode([undefined, fragments[1], undefined, fragments[3]], value.length);
 * ```
 */
export { ErasureCodecError, type ErasureErrorCode } from './errors.js';
export { MAX_FRAGMENTS, MAX_VALUE_LENGTH, type CodecParams, type ErasureCodec } from './params.js';
export {
  createCodec,
  createCodecFromModule,
  preferredKernel,
  type CodecKernel,
  type CodecOptions,
  type WasmErasureCodec,
} from './wasm-codec.js';
