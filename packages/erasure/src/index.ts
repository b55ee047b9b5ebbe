/**
 * @powerstore/erasure — Reed-Solomon erasure coding for PowerStore.
 *
 * ```ts
 * const codec = await createCodec({ k: 2, n: 4 });
 * const fragments = codec.encode(value);             // 4 fragments
 * const back = codec.decode([undefined, fragments[1], undefined, fragments[3]], value.length);
 * ```
 */
export { ErasureCodecError, type ErasureErrorCode } from './errors.js';
export { MAX_FRAGMENTS, MAX_VALUE_LENGTH, type CodecParams, type ErasureCodec } from './params.js';
export { createCodec, createCodecFromModule } from './wasm-codec.js';
