/**
 * Every bound a server puts on what clients can make it hold, with defaults chosen so one
 * server stays within a few hundred MiB whatever its clients do (see the server README's
 * table, which lists each limit with its flag and metric).
 */
import { ServerError } from './errors.js';

/** Bytes a frame may carry besides its fragment: key, timestamps, `cc` and `vec` for n ≤ 255. */
export const FRAME_OVERHEAD_BYTES = 64 * 1024;

/**
 * Default frame limit: the largest single fragment at t = 1 for a 64 MiB value (32 MiB)
 * plus {@link FRAME_OVERHEAD_BYTES}.
 */
export const DEFAULT_MAX_FRAME_BYTES = 32 * 1024 * 1024 + FRAME_OVERHEAD_BYTES;

/** Hardening limits of one server. */
export interface ServerLimits {
  /** Largest WebSocket message accepted; larger ones close the connection with 1009. */
  readonly maxFrameBytes: number;
  /** Requests of one connection being handled (decoded, not yet answered) at once; more wait unread. */
  readonly maxInFlightPerConnection: number;
  /**
   * LISTs handled at once over all connections, at most one per client address; others
   * wait their turn, address by address (see `ListSlots`). A LIST costs up to a few hundred
   * milliseconds of CPU that no memory budget sees.
   */
  readonly maxLists: number;
  /**
   * The memory budget: bytes of requests being handled, replies not yet sent and frames
   * partly received, over all connections. A request starts only if its bytes and room for
   * its reply fit; otherwise it waits and its socket is not read (backpressure).
   */
  readonly maxBufferedBytes: number;
  /**
   * The share of `maxBufferedBytes` the requests and replies of one client address may
   * hold, so one address cannot take the whole budget from the others.
   */
  readonly maxBufferedBytesPerAddress: number;
  /** Reply bytes one connection may have waiting to be sent before it is no longer read from. */
  readonly maxSendBufferBytes: number;
  /** A connection whose replies have made no progress for this long is closed. */
  readonly sendTimeoutMs: number;
  /** Open WebSocket connections; further upgrades get HTTP 503. */
  readonly maxConnections: number;
  /** Open WebSocket connections from one address; further upgrades get HTTP 429. */
  readonly maxConnectionsPerAddress: number;
  /** A connection that sends no request for this long is closed (1000, "idle"). 0 disables. */
  readonly idleTimeoutMs: number;
  /** A frame must arrive whole within this long of its first byte, or the connection is closed. */
  readonly frameTimeoutMs: number;
  /** How long shutdown waits for in-flight requests before closing anyway. */
  readonly shutdownTimeoutMs: number;
  /** Ping interval; a connection that missed a whole interval's pong is dropped. 0 disables. */
  readonly heartbeatMs: number;
}

/** The defaults of {@link ServerLimits}. */
export const DEFAULT_LIMITS: ServerLimits = Object.freeze({
  maxFrameBytes: DEFAULT_MAX_FRAME_BYTES,
  maxInFlightPerConnection: 32,
  maxLists: 2,
  maxBufferedBytes: 256 * 1024 * 1024,
  maxBufferedBytesPerAddress: 64 * 1024 * 1024,
  maxSendBufferBytes: 8 * 1024 * 1024,
  sendTimeoutMs: 15_000,
  maxConnections: 1024,
  maxConnectionsPerAddress: 64,
  idleTimeoutMs: 300_000,
  frameTimeoutMs: 60_000,
  shutdownTimeoutMs: 10_000,
  heartbeatMs: 30_000,
});

/** Merges `partial` over the defaults and checks the result; throws `CONFIG_INVALID`. */
export function resolveLimits(partial: Partial<ServerLimits> = {}): ServerLimits {
  const l: ServerLimits = { ...DEFAULT_LIMITS, ...partial };
  const positive = (name: keyof ServerLimits) => {
    const v = l[name];
    if (!Number.isSafeInteger(v) || v < 1) throw new ServerError('CONFIG_INVALID', `${name} must be a positive integer, got ${v}`);
  };
  const nonNegative = (name: keyof ServerLimits) => {
    const v = l[name];
    if (!Number.isSafeInteger(v) || v < 0) throw new ServerError('CONFIG_INVALID', `${name} must be an integer ≥ 0, got ${v}`);
  };
  for (const name of [
    'maxFrameBytes',
    'maxInFlightPerConnection',
    'maxLists',
    'maxBufferedBytes',
    'maxBufferedBytesPerAddress',
    'maxSendBufferBytes',
    'sendTimeoutMs',
    'maxConnections',
    'maxConnectionsPerAddress',
    'frameTimeoutMs',
    'shutdownTimeoutMs',
  ] as const) {
    positive(name);
  }
  nonNegative('idleTimeoutMs');
  nonNegative('heartbeatMs');
  // One request with room for the largest reply must always fit, or it could never start.
  if (l.maxBufferedBytes < 2 * l.maxFrameBytes) {
    throw new ServerError(
      'CONFIG_INVALID',
      `maxBufferedBytes (${l.maxBufferedBytes}) must be at least twice maxFrameBytes (${l.maxFrameBytes}): one request and its reply must fit`,
    );
  }
  return l;
}
