/**
 * Stable error codes. Callers (and the ERROR wire reply) branch on `code`; messages may
 * change freely. Each code has an explicit number: the wire carries the number, so
 * reordering or adding codes never changes what an old number means.
 */
export const ERROR_CODE_NUMBERS = {
  /** A frame that does not decode: bad length, bound or field. */
  INVALID_FRAME: 1,
  /** A wire version this side does not speak. */
  UNSUPPORTED_VERSION: 2,
  /** A message type this side does not know. */
  UNKNOWN_TYPE: 3,
  /** A signature that does not verify, or a candidate that is not valid. */
  UNAUTHENTICATED: 4,
  /** Well-formed but wrong for this cluster: shapes, lengths, a fragment not matching `cc`. */
  INVALID_ARGUMENT: 5,
  /** A feature the other side does not have. */
  UNSUPPORTED: 6,
  /** The server failed (storage); the request may succeed elsewhere or later. */
  INTERNAL: 7,
  /** A correctly signed write its signer may not make: no authority for the key, owner not admitted. */
  NOT_AUTHORIZED: 8,
  /** The grant a write relies on has expired (by the server's clock). */
  GRANT_EXPIRED: 9,
  /** The signer, the grant or its issuer is on the cluster's revocation list. */
  REVOKED: 10,
  /** The key's owner has no room left under its quota on this server; nothing was stored. */
  QUOTA_EXCEEDED: 11,
  /** `Hist[key][ts]` already holds a different entry: history is write-once. */
  CONFLICT: 12,
  /**
   * A value longer than the side that refused it accepts. Readers report it for their own
   * limit (`ReaderOptions.maxValueLength`); servers refuse oversized frames at the
   * WebSocket layer or as `INVALID_FRAME` and do not send it today.
   */
  VALUE_TOO_LARGE: 13,
  /**
   * Too many writes of this key above `lc` (started and not completed) on this server,
   * for the key or for the writer's identity: a writer that STOREs and never COMPLETEs
   * cannot fill the disk. Nothing was stored; it clears as writes complete.
   */
  PENDING_LIMIT: 14,
  /**
   * The STORE's timestamp is at or below history this server has collected: newer writes
   * completed meanwhile. Nothing was stored; the writer takes a fresh timestamp (CLOCK
   * again). Refused rather than acknowledged so a collected timestamp never takes other
   * content.
   */
  SUPERSEDED: 15,
  /**
   * The STORE of stripe 0 of a striped value (the one with the write certificate) came to a
   * server that does not hold every other stripe of the write, or holds one the layout does
   * not list: it signs no receipt for data it does not have. Nothing was stored.
   */
  STRIPES_MISSING: 16,
  /**
   * A reader fetching more stripes of the version it chose found that version collected:
   * newer writes completed meanwhile. Reported by readers; servers do not send it.
   */
  VALUE_CHANGED: 17,
  /**
   * A write's fragments decode to a value whose encoding its certificate does not sign: the
   * writer encoded inconsistently, so no two sets of `t + 1` fragments agree. Reported by a
   * server repairing its fragment (`repair.ts`), which then stores nothing; servers do not
   * send it.
   */
  INCONSISTENT_ENCODING: 18,
  /**
   * The request (or a STORE's certificate) names an older key epoch than the server's: a
   * server was replaced and the cluster file has a new epoch (`epochs.ts`). Load the
   * cluster file again and retry; nothing was done.
   */
  CLUSTER_OUTDATED: 19,
  /**
   * The request names a newer key epoch than the server's: the server still runs an older
   * cluster file (its operator has not reloaded it yet). Nothing was done.
   */
  SERVER_OUTDATED: 20,
  /**
   * The server cannot serve the request now: its storage failed (a disk full, a write or
   * fsync that failed). Nothing was stored. Clients treat it as a server that did not
   * answer: not evidence of misbehaving (a Byzantine server sending it only withholds its
   * answer, which it may always do). See the server's README, "Failing disks".
   */
  UNAVAILABLE: 21,
} as const;

/** One of the stable codes. */
export type ProtocolErrorCode = keyof typeof ERROR_CODE_NUMBERS;

/** Every code, in number order. */
export const ERROR_CODES = Object.keys(ERROR_CODE_NUMBERS) as ProtocolErrorCode[];

const BY_NUMBER = new Map<number, ProtocolErrorCode>(ERROR_CODES.map((c) => [ERROR_CODE_NUMBERS[c], c]));

/** The code a wire number stands for, or `undefined` for a number this side does not know. */
export function errorCodeOf(num: number): ProtocolErrorCode | undefined {
  return BY_NUMBER.get(num);
}

/**
 * Where a {@link ProtocolError} came from, so callers can tell "I got this wrong" from "the
 * cluster said no" by a field rather than by the message, whose words may change:
 * - `'local'`: a check on this side (a bad argument, a value over this side's limit, a
 *   reply that does not add up); the default.
 * - `'servers'`: more than `t` servers refused the request (`Rejections`), so at least one
 *   correct server did; the message lists their replies.
 */
export type ProtocolErrorOrigin = 'local' | 'servers';

/** Every error the protocol core throws on bad input or reports in an ERROR reply. */
export class ProtocolError extends Error {
  override readonly name = 'ProtocolError';
  /** See {@link ProtocolErrorOrigin}. */
  readonly origin: ProtocolErrorOrigin;
  constructor(
    readonly code: ProtocolErrorCode,
    message: string,
    options?: { origin?: ProtocolErrorOrigin },
  ) {
    super(message);
    this.origin = options?.origin ?? 'local';
  }
}

/** Throws `INVALID_ARGUMENT` unless `cond` holds; for checks at the API boundary. */
export function check(cond: boolean, message: string): asserts cond {
  if (!cond) throw new ProtocolError('INVALID_ARGUMENT', message);
}
