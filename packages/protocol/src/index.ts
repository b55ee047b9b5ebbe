/**
 * @powerstore/protocol — the sans-IO core of PowerStore (M-PoWerStore with signed write
 * certificates): writer, reader and server state machines, their messages, wire codec
 * and storage records, identities, grants, certificates and the write policy. No
 * sockets, timers, disks or globals: hosts inject crypto, randomness, the clock, the
 * erasure codec and storage, and move the messages.
 */
export { bytesEqual, compareBytes, toHex } from './bytes.js';
export {
  candidateId,
  candidatesEqual,
  certificateId,
  certificatesEqual,
  grantsEqual,
  NONCE_LENGTH,
  proofsEqual,
  type Candidate,
} from './candidate.js';
export {
  authorityProblem,
  certificateDigest,
  certificateMessage,
  CertificateVerifier,
  isValidCandidate,
  receiptMessage,
  signCertificate,
  storeProof,
  type CandidateFields,
  type CertificateCheck,
  type StoreProof,
  type StoreReceipt,
  type ValidityChecks,
  type WriteCertificate,
} from './certificate.js';
export {
  CLUSTER_FILE_VERSION,
  ClusterFileError,
  parseClusterFile,
  parsePolicy,
  type Cluster,
  type ClusterFile,
  type ClusterServer,
  type PolicyJson,
  type ServerKeyJson,
} from './cluster-file.js';
export { currentEpoch, epochRefusal, epochsProblem, extensionProblem, MAX_EPOCH, receiptKey, withEpoch, type ServerKey } from './epochs.js';
export {
  decodeHeader,
  decodeMessage,
  encodeMessage,
  frameType,
  MAX_KEY_LENGTH,
  MAX_PENDING_ENTRIES,
  WIRE_VERSION,
  type DecodeOptions,
  type FrameHeader,
} from './codec.js';
export { clusterConfig, MAX_SERVERS, MAX_VALUE_LENGTH, quorum, type ClusterConfig } from './config.js';
export { computeCrossChecksum, crossChecksumDigest, fragmentMatches, type CrossChecksum } from './cross-checksum.js';
export {
  entryCovered,
  layoutDigest,
  layoutProblem,
  MAX_STRIPE_SIZE,
  MAX_STRIPES,
  MIN_STRIPE_SIZE,
  stripeCount,
  stripeLength,
  stripeMatches,
  summarize,
  type LayoutSummary,
  type StripeLayout,
} from './stripes.js';
export {
  DOMAIN,
  fragmentHash,
  HASH_LENGTH,
  nonceHash,
  PUBLIC_KEY_LENGTH,
  SEED_LENGTH,
  SIGNATURE_LENGTH,
  type CryptoProvider,
  type Signer,
} from './crypto.js';
export { ERROR_CODE_NUMBERS, ERROR_CODES, errorCodeOf, ProtocolError, type ProtocolErrorCode, type ProtocolErrorOrigin } from './errors.js';
export {
  CLUSTER_ID_LENGTH,
  grantFromJson,
  grantId,
  grantMessage,
  grantToJson,
  mayGrant,
  MAX_EXPIRY,
  signGrant,
  type ClusterIdentity,
  type Grant,
  type GrantJson,
} from './grant.js';
export { isLoopbackHost, jsonErrorPosition } from './hosts.js';
export {
  decodeBase64url,
  decodePublicKey,
  describeValue,
  encodeBase64urlSeed,
  encodePublicKey,
  fromBase32,
  identityFromJson,
  identityToJson,
  isOwnerId,
  namespaceOf,
  namespacePrefix,
  ownerIdOf,
  toBase32,
  writerTagOf,
  type IdentityJson,
} from './identity.js';
export {
  compareKeys,
  inListRange,
  ListOperation,
  MAX_LIST_LIMIT,
  MAX_LIST_REPLY_BYTES,
  MAX_LIST_SCAN,
  MIN_LIST_PAGE,
  type ListOperationOptions,
  type ListPage,
  type ListPageKey,
} from './listing.js';
export { isRequest, REQUEST_TYPES, type ClientOperation, type HistoryEntry, type Outgoing, type Step } from './messages.js';
export type * from './messages.js';
export { OPEN_POLICY, WritePolicyCheck, type Quota, type Refusal, type WritePolicy } from './policy.js';
export type { RandomBytes } from './random.js';
export { ReadOperation, type FilterAnswer, type ReaderOptions, type ReadResult, type ReadTarget } from './reader.js';
export {
  decodeEntryMetaRecord,
  decodeKeyRecord,
  encodeEntryMetaRecord,
  encodeKeyRecord,
  historyEntryBytes,
  RECORD_VERSION,
  entriesOf,
  type WriteInfo,
  type EntryMeta,
  type KeyState,
} from './record.js';
export {
  DEFAULT_HISTORY,
  entriesEqual,
  Server,
  type FrameResult,
  type HistoryLimits,
  type RepairOutcome,
  type ScrubOutcome,
  type ServerOptions,
} from './server.js';
export { pendingCandidate, RepairOperation, repairFragmentServers, type RepairOptions, type RepairResult } from './repair.js';
export { KeyedMutex } from './key-mutex.js';
export {
  AbstractStorage,
  entryId,
  MemoryStorage,
  StorageError,
  UsageLedger,
  type AbstractStorageOptions,
  type Charge,
  type KeyChanges,
  type KeyRecord,
  type Reservation,
  type ServerStorage,
  type StorageTotals,
  type StoredKey,
  type StoredKeys,
  type StoredPending,
  type Usage,
} from './storage.js';
export { storageConformance, type ConformanceCheck, type StorageHarness, type StorageSupports } from './storage-conformance.js';
export {
  compareTimestamps,
  INSTANCE_ID_LENGTH,
  makeWriterId,
  timestampKey,
  timestampsEqual,
  TS0,
  WRITER_ID_LENGTH,
  type Timestamp,
} from './timestamp.js';
export { signerFromCryptoKey } from './webcrypto-signer.js';
export {
  WriteOperation,
  WriterSession,
  type WriteResult,
  type WriterOptions,
  type WriterSessionOptions,
  type StripeSource,
  type WriteValue,
} from './writer.js';
export { jumpTarget, TIMESTAMP_WINDOW, windowTop, writerRank, type WriterRank } from './window.js';
export {
  mustRepair,
  PendingListOperation,
  PendingWrites,
  type PendingListOptions,
  type PendingPage,
  type PendingWrite,
} from './pending.js';
