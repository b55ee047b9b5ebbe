/**
 * @powerstore/protocol — the sans-IO core of M-PoWerStore: writer, reader and server
 * state machines, their messages and wire codec, and the hashing/MAC helpers. No
 * sockets, timers, disks or globals: hosts inject crypto, randomness, the erasure codec
 * and storage, and move the messages.
 */
export { bytesEqual, compareBytes, toHex } from './bytes.js';
export { candidateId, candidateMac, candidatesEqual, initialCandidate, NONCE_LENGTH, type Candidate } from './candidate.js';
export { decodeMessage, encodeMessage, WIRE_VERSION, MAX_KEY_LENGTH, type DecodeOptions } from './codec.js';
export { clusterConfig, quorum, MAX_SERVERS, MAX_VALUE_LENGTH, type ClusterConfig } from './config.js';
export { deriveWriterKey, writerCredentials, SERVER_KEY_LENGTH, type WriterCredentials } from './credentials.js';
export { computeCrossChecksum, crossChecksumDigest, fragmentMatches, type CrossChecksum } from './cross-checksum.js';
export { DOMAIN, HASH_LENGTH, fragmentHash, nonceHash, type CryptoProvider } from './crypto.js';
export { ERROR_CODES, ProtocolError, type ProtocolErrorCode } from './errors.js';
export type * from './messages.js';
export type { RandomBytes } from './random.js';
export { ReadOperation, type FilterAnswer, type ReaderOptions, type ReadResult, type SafeGroup } from './reader.js';
export { Server, type ServerOptions } from './server.js';
export { MemoryStorage, type KeyRecord, type ServerStorage } from './storage.js';
export { storageConformance, type ConformanceCheck } from './storage-conformance.js';
export {
  TS0,
  WRITER_ID_LENGTH,
  compareTimestamps,
  makeTimestamp,
  timestampKey,
  timestampsEqual,
  verifyTimestamp,
  type Timestamp,
} from './timestamp.js';
export { WriteOperation, type WriteResult, type WriterOptions, type WriteValue } from './writer.js';
