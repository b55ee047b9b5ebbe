/**
 * `@powerstore/protocol/testing`: what tests of the protocol, of storage backends and of
 * hosts share, kept off the main entry (in the manner of `abstract-level/test`). The
 * storage conformance suite every backend passes, the in-memory backend, a cluster
 * harness that delivers every message at once, and the `cluster.json` cases every reader
 * of the file must judge alike. Nothing here is meant for production code.
 */
export { MemoryStorage } from './memory-storage.js';
export { storageConformance, type ConformanceCheck, type StorageHarness, type StorageSupports } from './storage-conformance.js';
export { crypto, identity, makeCluster, own, random, storeEverywhere, storeFor, testCluster } from './cluster.js';
export { acceptedClusterFiles, refusedClusterFiles, validClusterFile } from './cluster-file-cases.js';
