import { ProtocolError } from '@powerstore/protocol';

/**
 * Stable codes, so applications branch on `error.code` while messages say what happened
 * in words ("need 3 of 4 servers, 2 reachable: s2 refused, s4 timed out").
 */
export type PowerStoreErrorCode =
  /** Fewer than `n − t` servers answered in time. */
  | 'QUORUM_UNREACHABLE'
  /** The operation's `AbortSignal` fired. */
  | 'ABORTED'
  /** A write without an identity. */
  | 'NO_IDENTITY'
  /**
   * The identity may not write this key (not its namespace, no grant covering it), or its
   * owner is not admitted; or the store holds no key to encrypt or decrypt the value (not
   * its namespace and no capability covering it, or a capability of another key epoch).
   */
  | 'NOT_AUTHORIZED'
  /**
   * An encrypted value failed authentication under the right key: its ciphertext, header
   * or key name is not what was encrypted (altered, or moved from another key or version).
   * The value is never returned.
   */
  | 'TAMPERED'
  /**
   * A value in a namespace that is not in a format this client reads: written raw (by a
   * client older than encryption, or with `{ raw: true }`), or in a newer format. Read it
   * with `{ raw: true }` to get the stored bytes.
   */
  | 'UNKNOWN_FORMAT'
  /** The grant the write relies on has expired. */
  | 'GRANT_EXPIRED'
  /** The identity, its grant or the grant's issuer is revoked by the cluster. */
  | 'REVOKED'
  /** The key's owner has no room left under its quota; nothing was stored. */
  | 'QUOTA_EXCEEDED'
  /**
   * The servers have moved to a newer cluster file than the one this store was given: a
   * server was replaced and has a new receipt key (a new epoch of server keys). Nothing
   * was done; load `cluster.json` again and `connect` with it.
   */
  | 'CLUSTER_OUTDATED'
  /** More than `t` servers refused the request for another reason (the message lists them). */
  | 'REJECTED'
  /**
   * The value read is larger than this store accepts (`connect`'s `maxValueBytes`):
   * nothing was decoded, and no server is blamed for it. Connect with a larger
   * `maxValueBytes` to read it.
   */
  | 'VALUE_TOO_LARGE'
  /**
   * A streamed read lost its version: the value was overwritten so many times while it was
   * being streamed that the servers collected the version being read. What was delivered
   * is all of that one version; read again for the new value.
   */
  | 'VALUE_CHANGED'
  /** Bad arguments: key, value, options, cluster, identity or grant objects. */
  | 'INVALID_ARGUMENT'
  /** The store was closed. */
  | 'CLOSED';

/**
 * The input to `connect` an `INVALID_ARGUMENT` is about, when it is one a user hands over
 * as a file: the cluster file (including a plaintext URL it lists), the identity, a
 * grant or a capability. Tools tell "fix that file" from "fix the call" by it, not by the message's words.
 */
export type PowerStoreErrorSource = 'cluster' | 'identity' | 'grants' | 'capabilities';

/** Every error the client reports. */
export class PowerStoreError extends Error {
  override readonly name = 'PowerStoreError';
  /** Set on `INVALID_ARGUMENT` errors about the cluster file, the identity, the grants or the capabilities; see {@link PowerStoreErrorSource}. */
  readonly source: PowerStoreErrorSource | undefined;
  constructor(
    readonly code: PowerStoreErrorCode,
    message: string,
    options?: { cause?: unknown; source?: PowerStoreErrorSource },
  ) {
    super(message, options && 'cause' in options ? { cause: options.cause } : undefined);
    this.source = options?.source;
  }
}

export function invalid(message: string, cause?: unknown): PowerStoreError {
  return new PowerStoreError('INVALID_ARGUMENT', message, cause === undefined ? undefined : { cause });
}

/** `NO_IDENTITY`: a write on a store connected without an identity. */
export function noIdentity(): PowerStoreError {
  return new PowerStoreError(
    'NO_IDENTITY',
    'writing needs an identity: connect({ cluster, identity }) (Identity.generate(), an identity file, or openBrowserIdentity())',
  );
}

/** `INVALID_ARGUMENT` about `source`, one of the files a user hands to `connect`. */
export function invalidInput(source: PowerStoreErrorSource, message: string, cause?: unknown): PowerStoreError {
  return new PowerStoreError('INVALID_ARGUMENT', message, cause === undefined ? { source } : { cause, source });
}

/** Protocol codes the client reports as they are; the rest are `REJECTED`. */
const PASSED_THROUGH: ReadonlySet<string> = new Set([
  'NOT_AUTHORIZED',
  'GRANT_EXPIRED',
  'REVOKED',
  'QUOTA_EXCEEDED',
  'VALUE_CHANGED',
  'CLUSTER_OUTDATED',
]);

/**
 * The client's error for what an operation failed with. Whether the servers refused or
 * this side's own check failed is read from `origin`, never from the message: messages
 * may be reworded freely, and the code (hence the CLI's exit status) must not move with them.
 */
export function toClientError(err: unknown): Error {
  if (!(err instanceof ProtocolError)) return err instanceof Error ? err : new Error(String(err));
  const fromServers = err.origin === 'servers';
  if (err.code === 'VALUE_TOO_LARGE') {
    // The reader's own limit is maxValueBytes, so point at it; servers refusing say why in their message.
    return new PowerStoreError('VALUE_TOO_LARGE', fromServers ? err.message : `${err.message} (connect's maxValueBytes)`, {
      cause: err,
    });
  }
  // More than t servers whose disks failed: as good as more than t that did not answer.
  if (err.code === 'UNAVAILABLE' && fromServers) return new PowerStoreError('QUORUM_UNREACHABLE', err.message, { cause: err });
  if (PASSED_THROUGH.has(err.code)) return new PowerStoreError(err.code as PowerStoreErrorCode, err.message, { cause: err });
  // Servers agreeing an argument is invalid is a refusal like any other; only this side's checks are the caller's mistake.
  if (err.code === 'INVALID_ARGUMENT' && !fromServers) return invalid(err.message, err);
  return new PowerStoreError('REJECTED', err.message, { cause: err });
}
