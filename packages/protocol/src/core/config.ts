import { check } from './errors.js';

/** Largest cluster the wire format carries: vectors of `n` entries indexed by a byte. */
export const MAX_SERVERS = 255;

/**
 * Largest value, in bytes (1 GiB): the erasure codec's own limit, restated here so the
 * wire decoder needs no runtime import of the codec package.
 */
export const MAX_VALUE_LENGTH = 2 ** 30;

/** A cluster of `n = 3t + 1` servers tolerating `t` Byzantine ones. */
export interface ClusterConfig {
  /** Faulty servers tolerated. */
  readonly t: number;
  /** Servers, `3t + 1`. */
  readonly n: number;
}

/** The cluster for a fault threshold `t`. */
export function clusterConfig(t: number): ClusterConfig {
  check(Number.isInteger(t) && t >= 1 && 3 * t + 1 <= MAX_SERVERS, `t must be an integer in 1..84, got ${t}`);
  return { t, n: 3 * t + 1 };
}

/** Replies every round waits for: `n − t`. */
export function quorum({ n, t }: ClusterConfig): number {
  return n - t;
}
