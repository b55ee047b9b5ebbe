/**
 * Stable codes, so applications branch on `error.code` while messages say what happened
 * in words ("need 3 of 4 servers, 2 reachable: s2 refused, s4 timed out").
 */
export type PowerStoreErrorCode =
  /** Fewer than `n − t` servers answered in time. */
  | 'QUORUM_UNREACHABLE'
  /** The operation's `AbortSignal` fired. */
  | 'ABORTED'
  /** A write without writer credentials. */
  | 'NO_CREDENTIALS'
  /** Bad arguments: key, value, options, cluster or credentials objects. */
  | 'INVALID_ARGUMENT'
  /** The store was closed. */
  | 'CLOSED';

/** Every error the client reports. */
export class PowerStoreError extends Error {
  override readonly name = 'PowerStoreError';
  constructor(
    readonly code: PowerStoreErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export function invalid(message: string): PowerStoreError {
  return new PowerStoreError('INVALID_ARGUMENT', message);
}
