/**
 * @powerstore/erasure — Reed-Solomon erasure coding for PowerStore.
 */
export { ErasureCodecError, type ErasureErrorCode } from './errors.js';
export { MAX_FRAGMENTS, MAX_VALUE_LENGTH, type CodecParams, type ErasureCodec } from './params.js';
export { createReferenceCodec } from './reference.js';
