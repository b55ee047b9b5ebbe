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
  readJson,
  serverFileName,
  writeJson,
  type InitOptions,
  type InitResult,
  type LoadedServerConfig,
  type ServerFile,
} from './config.js';
export { ConfigError, ServerError, SERVER_ERROR_CODES, type ServerErrorCode } from './errors.js';
export { GroupCommitter, LevelStorage, STORAGE_FORMAT, type CommitInfo, type LevelStorageOptions, type Put } from './level-storage.js';
export { createMetrics, METRIC_OWNERS, type ServerMetrics, type StorageStats } from './metrics.js';
export {
  DEFAULT_LIMITS,
  DEFAULT_MAX_FRAME_BYTES,
  FRAME_OVERHEAD_BYTES,
  startServer,
  type RunningServer,
  type ServerLimits,
  type StartServerOptions,
  type UsageReport,
} from './server.js';
export { startStaticServer, type StaticServer } from './static.js';
