/**
 * powerstore-server: the M-PoWerStore storage server as a library. The CLI (`cli.ts`) is a
 * thin layer over these exports; tests and embedders use them directly.
 */
export {
  CONFIG_VERSION,
  DEFAULT_QUOTA,
  initCluster,
  loadClusterFile,
  loadPolicy,
  loadServerConfig,
  openWritersWarning,
  readJson,
  reloadClusterFile,
  rotateServerKey,
  secretFileWarning,
  serverFileName,
  writeJson,
  type InitOptions,
  type InitResult,
  type LoadedServerConfig,
  type RotateKeyOptions,
  type RotateKeyResult,
  type SecretFileWarning,
  type ServerFile,
} from './config.js';
export { Eraser, mergeRanges, pastPrefix, type EraserOptions, type ErasePass, type KeyRange } from './eraser.js';
export { ConfigError, ServerError, SERVER_ERROR_CODES, type ServerErrorCode } from './errors.js';
export {
  DEFAULT_ERASE_WITHIN_MS,
  GroupCommitter,
  LEVELDB_TUNING,
  diskFailureOf,
  isLevelCorruption,
  LevelStorage,
  parseEntryName,
  STORAGE_FORMAT,
  type CommitGuard,
  type CommitInfo,
  type DiskHealth,
  type LevelStorageOptions,
  type LevelTuning,
  type OpenRecovery,
  type Put,
  type StoredEntryRef,
  type ValueLogSettings,
} from './level-storage.js';
export { DEFAULT_VALUE_LOG_MIN_BYTES, FragmentLog, type SpaceChange, type ValueLogPass } from './fragment-log.js';
export {
  DEFAULT_SEGMENT_BYTES,
  decodePointer,
  encodePointer,
  recordBytes,
  ValueLog,
  ValueLogDamage,
  type SegmentRecord,
  type ValueLogOptions,
  type ValueLogPointer,
} from './value-log.js';
export { MemoryBudget, type BudgetKind, type MemoryBudgetStats } from './budgets.js';
export { DEFAULT_LIMITS, DEFAULT_MAX_FRAME_BYTES, FRAME_OVERHEAD_BYTES, resolveLimits, type ServerLimits } from './limits.js';
export { createMetrics, METRIC_OWNERS, type MetricSources, type ServerMetrics, type StorageStats } from './metrics.js';
export type { UsageReport } from './routes.js';
export { Catalog, KnownVerifier, mergeWithDeletes, type CatalogEntry, type CatalogPage } from './catalog.js';
export { CatchUp, DEFAULT_CATCH_UP, RateLimiter, Repairer, type CatchUpSettings, type CatchUpStatus, type PassReport } from './heal.js';
export { createHealMetrics, type HealMetrics } from './heal-metrics.js';
export { startHealing, statusReport, type Healing, type HealingOptions, type HealingStatus, type StatusReport } from './healing.js';
export { PeerSet, PeerTimeout, type PeerSetOptions, type PeerStatus, type RunOptions } from './peers.js';
export {
  DEFAULT_SCRUB,
  DEFAULT_START_CHECK,
  Scrubber,
  type ScrubSettings,
  type ScrubStatus,
  type StartCheckSettings,
  type StartCheckStatus,
} from './scrub.js';
export { fetchStatuses, formatStatuses, type ServerStatusLine } from './status.js';
export {
  canonicalJson,
  MAX_POLICY_BYTES,
  POLICY_FILE,
  POLICY_SIGNATURE_DOMAIN,
  PolicyKeeper,
  PolicyRefusal,
  policyDigest,
  policySigningBytes,
  SIGNED_POLICY_KIND,
  signPolicy,
  verifySignedPolicy,
  type PolicyInForce,
  type PolicyKeeperOptions,
  type PolicyOffer,
  type PolicyRefusalCode,
  type PolicyReport,
  type SignedPolicy,
} from './policy.js';
export { fetchPolicies, policyBase, pushPolicy, type PolicyBase, type PolicyView, type PushResult } from './policy-admin.js';
export { startServer, type RunningServer, type StartServerOptions } from './server.js';
export { startStaticServer, type StaticServer } from './static.js';
