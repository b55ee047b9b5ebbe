/**
 * Prometheus metrics of one server, on a registry of its own so several servers in one
 * process (tests) do not collide. Names follow Prometheus conventions: `_total` for
 * counters, base units (seconds, bytes).
 */
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { ListSlotStats, MemoryBudgetStats } from './budgets.js';
import { freeBytes } from './level-storage.js';

/** Where the gauges of stored data come from. */
export interface StorageStats {
  readonly keyCount: number;
  readonly historyEntryCount: number;
  owners(): ReadonlyMap<string, { readonly bytes: number; readonly keys: number }>;
}

/** What the gauges read at scrape time. */
export interface MetricSources {
  /** Key, history and owner gauges; undefined before the storage is open. */
  readonly storage: () => StorageStats | undefined;
  /** The memory budget's counters. */
  readonly budget?: () => MemoryBudgetStats;
  /** The LIST slots' counters. */
  readonly lists?: () => ListSlotStats;
  /** Requests started and not yet answered, over all connections. */
  readonly inFlight?: () => number;
  /** Connections not being read, by reason. */
  readonly paused?: () => ReadonlyMap<string, number>;
  /** The storage's disk state (LevelDB's): `ok`, `full` or `failed`. */
  readonly disk?: () => 'ok' | 'full' | 'failed';
  /** The data directory: its bytes on disk and its filesystem's free space. */
  readonly dataDir?: string;
  /** The server's version, for `powerstore_build_info`. */
  readonly version?: string;
}

/** Owners exported with their own label, largest first: labels per identity would be unbounded in an open cluster. */
export const METRIC_OWNERS = 100;

/** Every metric the server updates. */
export interface ServerMetrics {
  readonly registry: Registry;
  /** Decoded requests, by type (`CLOCK`, `STORE`, …). */
  readonly requests: Counter<'type'>;
  /** Rejected or failed input, by kind (an ERROR code in lower case, or a transport kind). */
  readonly errors: Counter<'kind'>;
  /** Changes of the disk's state (`full`, `failed`, back to `ok`); refusals meanwhile count in `errors` as `unavailable`. */
  readonly diskFailures: Counter<'state'>;
  /** Requests rejected as UNAUTHENTICATED (bad MAC or invalid candidate), by type. */
  readonly authRejected: Counter<'type'>;
  /** Candidates (in COMPLETE or FILTER) that failed `valid()`: forged or replayed. */
  readonly invalidCandidates: Counter;
  /** STOREs that tried to change a history entry (write-once history). */
  readonly conflicts: Counter;
  /** Receipts signed, and the signatures made for them (one per batch): their ratio is the mean batch. */
  readonly receiptsSigned: Counter;
  readonly receiptSignatures: Counter;
  readonly bundles: Counter<'direction'>;
  readonly bundledFrames: Counter<'direction'>;
  /** History entries deleted by garbage collection. */
  readonly collected: Counter;
  readonly bytesIn: Counter;
  readonly bytesOut: Counter;
  readonly connections: Gauge;
  /** Upgrades refused, by reason (`server_full`, `address_full`, `shutting_down`). */
  readonly connectionsRejected: Counter<'reason'>;
  /** Connections the server closed on its own, by reason (a time limit, a missed heartbeat). */
  readonly connectionsClosed: Counter<'reason'>;
  /** Request handling time (decode to reply queued), by type. */
  readonly latency: Histogram<'type'>;
  readonly commitSeconds: Histogram;
  /** Requests whose writes shared one synced batch. */
  readonly commitGroup: Histogram;
  /** Erase passes (compactions of what garbage collection deleted), by scope (`keys`, `all`) and result (`ok`, `failed`). */
  readonly compactions: Counter<'scope' | 'result'>;
  /** Wall time of one erase pass. */
  readonly compactionSeconds: Histogram;
  /** Value-log maintenance: records zeroed, segments removed, records moved by collection; failed passes. */
  readonly valueLog: Counter<'event'>;
}

/** Creates the metrics; `sources` feed the gauges at scrape time. */
export function createMetrics(sources: MetricSources): ServerMetrics {
  const stats = sources.storage;
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'powerstore_' });
  const registers = [registry];
  const owners = () => [...(stats()?.owners() ?? [])].sort((a, b) => b[1].bytes - a[1].bytes).slice(0, METRIC_OWNERS);
  new Gauge({
    name: 'powerstore_owners',
    help: 'Owners with something stored on this server',
    registers,
    collect() {
      this.set(stats()?.owners().size ?? 0);
    },
  });
  new Gauge({
    name: 'powerstore_owner_bytes',
    help: `Bytes of history entries stored per owner (the ${METRIC_OWNERS} largest owners)`,
    labelNames: ['owner'],
    registers,
    collect() {
      this.reset();
      for (const [owner, u] of owners()) this.set({ owner }, u.bytes);
    },
  });
  new Gauge({
    name: 'powerstore_owner_keys',
    help: `Keys stored per owner (the ${METRIC_OWNERS} largest owners by bytes)`,
    labelNames: ['owner'],
    registers,
    collect() {
      this.reset();
      for (const [owner, u] of owners()) this.set({ owner }, u.keys);
    },
  });
  new Gauge({
    name: 'powerstore_stored_bytes',
    help: 'Bytes of history entries (fragments and their metadata) stored, over all owners: what quotas count',
    registers,
    collect() {
      let bytes = 0;
      for (const u of stats()?.owners().values() ?? []) bytes += u.bytes;
      this.set(bytes);
    },
  });
  if (sources.version !== undefined)
    new Gauge({
      name: 'powerstore_build_info',
      help: 'Always 1; the version label is the server package version',
      labelNames: ['version'],
      registers,
    }).set({ version: sources.version }, 1);
  if (sources.disk) {
    const disk = sources.disk;
    new Gauge({
      name: 'powerstore_disk_state',
      help: "1 for the storage's disk state now (ok; full: writes refused until there is room; failed: the server exits), 0 for the others",
      labelNames: ['state'],
      registers,
      collect() {
        const now = disk();
        for (const state of ['ok', 'full', 'failed']) this.set({ state }, state === now ? 1 : 0);
      },
    });
  }
  if (sources.dataDir !== undefined) {
    const dir = sources.dataDir;
    new Gauge({
      name: 'powerstore_data_dir_bytes',
      help: 'Bytes of the files in the data directory (LevelDB tables, logs, manifest): what the server takes on disk',
      registers,
      collect() {
        const bytes = directoryBytes(dir);
        if (bytes !== undefined) this.set(bytes);
      },
    });
    new Gauge({
      name: 'powerstore_data_dir_free_bytes',
      help: "Bytes free for the server on its data directory's filesystem",
      registers,
      collect() {
        const free = freeBytes(dir);
        if (free !== undefined) this.set(free);
      },
    });
  }
  new Gauge({
    name: 'powerstore_keys',
    help: 'Keys holding at least one history entry',
    registers,
    collect() {
      this.set(stats()?.keyCount ?? 0);
    },
  });
  new Gauge({
    name: 'powerstore_history_entries',
    help: 'History entries (stored fragments) over all keys',
    registers,
    collect() {
      this.set(stats()?.historyEntryCount ?? 0);
    },
  });
  new Gauge({
    name: 'powerstore_buffered_bytes',
    help: 'Bytes clients make the server hold, by kind: partial (frames arriving), requests (being handled, with room for their replies), replies (not yet sent); bounded by --max-buffered-bytes',
    labelNames: ['kind'],
    registers,
    collect() {
      const s = sources.budget?.();
      if (!s) return;
      for (const [kind, bytes] of Object.entries(s.buffered)) this.set({ kind }, bytes);
    },
  });
  new Gauge({
    name: 'powerstore_budget_waiting_connections',
    help: 'Connections not read because the memory budget (server or address share) is spent',
    registers,
    collect() {
      this.set(sources.budget?.().waiting ?? 0);
    },
  });
  new Gauge({
    name: 'powerstore_paused_connections',
    help: 'Connections not being read, by reason: in_flight (--max-inflight-per-connection), send_buffer (--max-send-buffer-bytes), budget (--max-buffered-bytes or the address share), shutdown',
    labelNames: ['reason'],
    registers,
    collect() {
      this.reset();
      for (const [reason, n] of sources.paused?.() ?? []) this.set({ reason }, n);
    },
  });
  new Gauge({
    name: 'powerstore_lists_running',
    help: 'LISTs being handled (at most --max-lists, one per client address)',
    registers,
    collect() {
      this.set(sources.lists?.().running ?? 0);
    },
  });
  new Gauge({
    name: 'powerstore_lists_waiting_connections',
    help: 'Connections holding LISTs that wait for their turn (--max-lists, one per client address)',
    registers,
    collect() {
      this.set(sources.lists?.().waiting ?? 0);
    },
  });
  new Gauge({
    name: 'powerstore_inflight_requests',
    help: 'Requests started and not yet answered (reply not yet sent)',
    registers,
    collect() {
      this.set(sources.inFlight?.() ?? 0);
    },
  });
  return {
    registry,
    requests: new Counter({ name: 'powerstore_requests_total', help: 'Requests decoded, by type', labelNames: ['type'], registers }),
    errors: new Counter({ name: 'powerstore_errors_total', help: 'Rejected or failed input, by kind', labelNames: ['kind'], registers }),
    diskFailures: new Counter({
      name: 'powerstore_disk_state_changes_total',
      help: 'Changes of the storage disk state: full (ENOSPC/EDQUOT), failed (EIO…, the server exits), ok (recovered from full)',
      labelNames: ['state'],
      registers,
    }),
    authRejected: new Counter({
      name: 'powerstore_auth_rejected_total',
      help: 'Requests rejected as UNAUTHENTICATED or NOT_AUTHORIZED, by type',
      labelNames: ['type'],
      registers,
    }),
    invalidCandidates: new Counter({
      name: 'powerstore_invalid_candidates_total',
      help: 'Candidates in COMPLETE or FILTER that failed validation (forged or replayed)',
      registers,
    }),
    receiptsSigned: new Counter({
      name: 'powerstore_receipts_signed_total',
      help: 'STORE receipts signed (a batch of receipts shares one signature: see powerstore_receipt_signatures_total)',
      registers,
    }),
    receiptSignatures: new Counter({
      name: 'powerstore_receipt_signatures_total',
      help: 'Ed25519 signatures made for STORE receipts: one per batch of STOREs made durable together',
      registers,
    }),
    bundles: new Counter({
      name: 'powerstore_bundles_total',
      help: 'WebSocket messages carrying several frames (bundles), received from clients and sent to them',
      labelNames: ['direction'],
      registers,
    }),
    bundledFrames: new Counter({
      name: 'powerstore_bundled_frames_total',
      help: 'Frames carried in bundles (their ratio to powerstore_bundles_total is the mean bundle)',
      labelNames: ['direction'],
      registers,
    }),
    conflicts: new Counter({
      name: 'powerstore_history_conflicts_total',
      help: 'STOREs refused because the history entry already holds another write (write-once history)',
      registers,
    }),
    collected: new Counter({
      name: 'powerstore_history_collected_total',
      help: 'History entries deleted by garbage collection (superseded by newer completed writes, or below a completed delete)',
      registers,
    }),
    bytesIn: new Counter({ name: 'powerstore_bytes_received_total', help: 'WebSocket payload bytes received', registers }),
    bytesOut: new Counter({ name: 'powerstore_bytes_sent_total', help: 'WebSocket payload bytes sent', registers }),
    connections: new Gauge({ name: 'powerstore_connections', help: 'Open WebSocket connections', registers }),
    connectionsRejected: new Counter({
      name: 'powerstore_connections_rejected_total',
      help: 'WebSocket upgrades refused, by reason: server_full (--max-connections, HTTP 503), address_full (--max-connections-per-address, HTTP 429), shutting_down',
      labelNames: ['reason'],
      registers,
    }),
    connectionsClosed: new Counter({
      name: 'powerstore_connections_closed_total',
      help: 'Connections the server closed on its own, by reason: send_timeout, frame_timeout, idle, heartbeat_timeout',
      labelNames: ['reason'],
      registers,
    }),
    latency: new Histogram({
      name: 'powerstore_request_duration_seconds',
      help: 'Time from a decoded request to its reply, by type',
      labelNames: ['type'],
      buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers,
    }),
    commitSeconds: new Histogram({
      name: 'powerstore_storage_commit_duration_seconds',
      help: 'Wall time of one synced LevelDB batch',
      buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1],
      registers,
    }),
    commitGroup: new Histogram({
      name: 'powerstore_storage_commit_group_size',
      help: 'Requests made durable by one synced batch (group commit)',
      buckets: [1, 2, 4, 8, 16, 32, 64, 128],
      registers,
    }),
    compactions: new Counter({
      name: 'powerstore_storage_compactions_total',
      help: 'Erase passes: LevelDB compactions of the key ranges garbage collection deleted records from (--erase-within), by scope (keys: the ranges of up to 64 keys; all: every history record) and result (ok, failed: retried by the next pass)',
      labelNames: ['scope', 'result'],
      registers,
    }),
    compactionSeconds: new Histogram({
      name: 'powerstore_storage_compaction_duration_seconds',
      help: 'Wall time of one erase pass (--erase-within holds while passes take at most a quarter of it)',
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
      registers,
    }),
    valueLog: new Counter({
      name: 'powerstore_value_log_total',
      help: 'Value-log maintenance (--value-log-min-bytes), by event: erased (records of collected fragments zeroed), removed (segment files no pointer named), moved (live records copied out of mostly dead segments), failed_passes (retried by the next pass)',
      labelNames: ['event'],
      registers,
    }),
  };
}

/**
 * The bytes of the regular files in `dir` and its subdirectories (LevelDB's files, and the
 * value log's segments in `vlog/`), or `undefined` if it cannot be read.
 */
function directoryBytes(dir: string, depth = 0): number | undefined {
  try {
    let bytes = 0;
    for (const name of readdirSync(dir)) {
      try {
        const st = statSync(join(dir, name));
        if (st.isFile()) bytes += st.size;
        else if (st.isDirectory() && depth < 1) bytes += directoryBytes(join(dir, name), depth + 1) ?? 0;
      } catch {
        // deleted meanwhile (a compaction, a collected segment)
      }
    }
    return bytes;
  } catch {
    return undefined;
  }
}
