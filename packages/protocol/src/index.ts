/**
 * @powerstore/protocol — the sans-IO core of PowerStore (M-PoWerStore with signed write
 * certificates): writer, reader and server state machines, their messages, wire codec
 * and storage records, identities, grants, certificates and the write policy. No
 * sockets, timers, disks or globals: hosts inject crypto, randomness, the clock, the
 * erasure codec and storage, and move the messages.
 *
 * This entry exports what the client, the server and the CLI build on (and what the
 * repository's tests and simulator drive). Crypto providers are on
 * `@powerstore/protocol/crypto`; the storage conformance suite, `MemoryStorage` and the
 * test fixtures on `@powerstore/protocol/testing`. Exports are grouped by layer, lowest
 * first, as the folders are.
 */

// core: bytes, errors, cluster shape, hashing and signing interfaces, cross-checksums, stripes, key order.
export { bytesEqual, toHex } from './core/bytes.js';
export { ERROR_CODES, ProtocolError, type ProtocolErrorCode } from './core/errors.js';
export { clusterConfig, quorum, type ClusterConfig } from './core/config.js';
export { HASH_LENGTH, nonceHash, type CryptoProvider, type Signer } from './core/crypto.js';
export { computeCrossChecksum, crossChecksumDigest, fragmentMatches, type CrossChecksum } from './core/cross-checksum.js';
export { entryCovered, layoutDigest, MAX_STRIPES, MIN_STRIPE_SIZE, stripeMatches, type StripeLayout } from './core/stripes.js';
export { compareKeys } from './core/keys.js';
export { isLoopbackHost, jsonErrorPosition } from './core/hosts.js';

// auth: identities, timestamps, grants, key epochs, certificates and candidates, the write policy, the cluster file.
export {
  decodeBase64url,
  decodePublicKey,
  describeValue,
  encodeBase64urlSeed,
  encodePublicKey,
  identityFromJson,
  identityToJson,
  isOwnerId,
  namespaceOf,
  namespacePrefix,
  ownerIdOf,
  toBase32,
  writerTagOf,
  type IdentityJson,
} from './auth/identity.js';
export {
  compareTimestamps,
  INSTANCE_ID_LENGTH,
  makeWriterId,
  timestampKey,
  timestampsEqual,
  TS0,
  type Timestamp,
} from './auth/timestamp.js';
export {
  CLUSTER_ID_LENGTH,
  grantFromJson,
  grantId,
  grantToJson,
  MAX_EXPIRY,
  signGrant,
  type ClusterIdentity,
  type Grant,
  type GrantJson,
} from './auth/grant.js';
export { currentEpoch, extensionProblem, MAX_EPOCH } from './auth/epochs.js';
export {
  authorityProblem,
  certificateBatcher,
  certificateLeaf,
  certificateRootMessage,
  CertificateVerifier,
  receiptMessage,
  signCertificate,
  storeProof,
  type CertificateCheck,
  type StoreProof,
  type StoreReceipt,
  type ValueEnvelope,
  type WriteCertificate,
} from './auth/certificate.js';
export {
  ackReceipt,
  receiptBatcher,
  receiptLeaf,
  receiptRootMessage,
  type ReceiptBatch,
  type ReceiptSignature,
} from './auth/receipt-batch.js';
export {
  buildBatch,
  MAX_SIGNATURE_BATCH,
  rootOf,
  siblingCount,
  SignatureBatcher,
  type BatchedSignature,
  type SignatureBatch,
} from './core/signature-batch.js';
export { candidateId, candidatesEqual, certificateId, certificatesEqual, type Candidate } from './auth/candidate.js';
export { OPEN_POLICY, type Refusal, type WritePolicy } from './auth/policy.js';
export { TIMESTAMP_WINDOW } from './auth/window.js';
export { ClusterFileError, parseClusterFile, parsePolicy, type Cluster, type ClusterFile, type PolicyJson } from './auth/cluster-file.js';

// wire: messages, frames, the bounds of a LIST.
export {
  isRequest,
  type ClientOperation,
  type ErrorReply,
  type FilterAck,
  type FilterRequest,
  type HistoryEntry,
  type ListAck,
  type ListRequest,
  type Message,
  type Outgoing,
  type Reply,
  type Request,
  type RequestType,
  type Step,
  type StoreAck,
  type StoreRequest,
} from './wire/messages.js';
export { decodeHeader, decodeMessage, encodeMessage, frameType, MAX_KEY_LENGTH, WIRE_VERSION } from './wire/codec.js';
export {
  BundleOutbox,
  decodeBundle,
  encodeBundle,
  framesOf,
  isBundle,
  MAX_BUNDLE_BYTES,
  MAX_BUNDLE_FRAMES,
  MAX_BUNDLED_FRAME_BYTES,
} from './wire/bundle.js';
export { MAX_LIST_LIMIT, MAX_LIST_REPLY_BYTES, MAX_LIST_SCAN } from './wire/list-bounds.js';

// storage: records, the storage interface and the base every backend extends.
export {
  decodeEntryMetaRecord,
  decodeKeyRecord,
  encodeEntryMetaRecord,
  encodeKeyRecord,
  entriesOf,
  historyEntryBytes,
  type EntryMeta,
  type KeyState,
  type WriteInfo,
} from './storage/record.js';
export {
  AbstractStorage,
  entryId,
  StorageError,
  type KeyChanges,
  type KeyRecord,
  type ServerStorage,
  type Usage,
} from './storage/abstract-storage.js';
export { KeyedMutex } from './storage/key-mutex.js';

// operations: the client-side state machines.
export {
  WriteOperation,
  WriterSession,
  type WriterSessionOptions,
  type StripeSource,
  type WriteResult,
  type WriterOptions,
  type WriteValue,
} from './operations/writer.js';
export { ReadOperation, type ReaderOptions, type ReadResult, type ReadTarget } from './operations/reader.js';
export { ListOperation, type ListOperationOptions, type ListPage, type ListPageKey } from './operations/listing.js';
export { serverName, serverNames, whoDidWhat } from './operations/server-names.js';
export { RepairOperation, type RepairOptions, type RepairResult } from './operations/repair.js';
export { mustRepair, PendingListOperation, PendingWrites, type PendingPage, type PendingWrite } from './operations/pending.js';

// server: the server state machine.
export {
  DEFAULT_HISTORY,
  entriesEqual,
  Server,
  type HistoryLimits,
  type RepairOutcome,
  type ScrubOutcome,
  type ServerOptions,
} from './server/server.js';

// crypto: a signer over a WebCrypto key (the providers themselves are on `./crypto`).
export { signerFromCryptoKey } from './crypto/webcrypto-signer.js';
