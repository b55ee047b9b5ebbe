/**
 * Stable error codes. Callers (and the ERROR wire reply) branch on `code`; messages may
 * change freely.
 */
export const ERROR_CODES = [
  'INVALID_FRAME',
  'UNSUPPORTED_VERSION',
  'UNKNOWN_TYPE',
  'UNAUTHENTICATED',
  'INVALID_ARGUMENT',
  'UNSUPPORTED',
  'INTERNAL',
] as const;

/** One of {@link ERROR_CODES}. */
export type ProtocolErrorCode = (typeof ERROR_CODES)[number];

/** Every error the protocol core throws on bad input or reports in an ERROR reply. */
export class ProtocolError extends Error {
  override readonly name = 'ProtocolError';
  constructor(
    readonly code: ProtocolErrorCode,
    message: string,
  ) {
    super(message);
  }
}

/** Throws `INVALID_ARGUMENT` unless `cond` holds; for checks at the API boundary. */
export function check(cond: boolean, message: string): asserts cond {
  if (!cond) throw new ProtocolError('INVALID_ARGUMENT', message);
}
