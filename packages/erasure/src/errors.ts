/** Stable codes, so callers branch on `error.code` and messages can improve freely. */
export type ErasureErrorCode =
  'INVALID_PARAMS' | 'INVALID_ARGUMENT' | 'INVALID_FRAGMENT' | 'TOO_FEW_FRAGMENTS' | 'VALUE_TOO_LARGE' | 'UNSUPPORTED_PLATFORM';

/** Every error the codec throws on bad input. */
export class ErasureCodecError extends Error {
  override readonly name = 'ErasureCodecError';
  constructor(
    readonly code: ErasureErrorCode,
    message: string,
  ) {
    super(message);
  }
}
