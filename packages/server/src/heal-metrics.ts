/**
 * Prometheus metrics of self-healing (`heal.ts`: catch-up and rebuild; `scrub.ts`), on the
 * server's own registry.
 */
import { Counter, Gauge, type Registry } from 'prom-client';

/** Every metric catch-up and scrub update. */
export interface HealMetrics {
  /** Keys a catch-up pass compared with the cluster's catalog. */
  readonly keysChecked: Counter;
  /** Writes (every stripe of one version of one key) this server stored from its peers, by cause: `catch_up` (a pass), `complete` (a COMPLETE without its STORE), `pending` (a write under way, while rebuilding), `scrub`. */
  readonly writesRepaired: Counter<'cause'>;
  /** Fragment bytes stored (or rewritten) by repairs, by cause. */
  readonly bytesRepaired: Counter<'cause'>;
  /** Bytes of peers' answers read for repairs. */
  readonly bytesFetched: Counter;
  /** Keys whose entry this server held but whose newer `lc` it had missed (written back, nothing fetched). */
  readonly lcUpdated: Counter;
  /** Keys or fragments a repair could not fix, by reason. */
  readonly failures: Counter<'reason'>;
  /** Catch-up passes ended, by result: `complete`, `incomplete` (some key failed), `failed` (the listing failed). */
  readonly passes: Counter<'result'>;
  /** Keys the running pass has checked so far (0 between passes). */
  readonly passKeys: Gauge;
  /** 1 while a catch-up pass runs. */
  readonly passRunning: Gauge;
  /** Wall time of the last pass. */
  readonly lastPassSeconds: Gauge;
  /** When the last complete pass ended (Unix seconds; 0 before the first). */
  readonly lastCompletePass: Gauge;
  /** 1 while this server rebuilds: its data directory started empty and no complete pass has ended since. */
  readonly rebuilding: Gauge;
  /** Answers from peers that no correct server gives, by peer id. */
  readonly peerMisbehaving: Counter<'peer'>;
  /** Stored fragments scrub re-hashed. */
  readonly scrubbed: Counter;
  readonly scrubBytes: Counter;
  /** Fragments scrub found damaged, by what became of them: `lc` (repaired or to be), `dropped` (an older version, deleted), `pending` (a write under way, kept), `unreadable` (the storage failed to read it). */
  readonly scrubDamaged: Counter<'kind'>;
  /** Damaged fragments scrub repaired from the peers (checked again afterwards). */
  readonly scrubRepaired: Counter;
  /** Scrub passes over every stored fragment completed. */
  readonly scrubPasses: Counter;
  /** Fragments the running scrub pass has checked. */
  readonly scrubPassFragments: Gauge;
  /** Fragments the start check (`Scrubber.checkAtStart`) re-hashed at this start. */
  readonly startCheckFragments: Gauge;
  /** 1 when the start check covered every stored entry, 0 when its budget ended it first. */
  readonly startCheckComplete: Gauge;
  /** What the start check found damaged, by kind: `lc`, `dropped`, `pending`, `unreadable`, `log` (bytes LevelDB dropped from its write-ahead log at open). */
  readonly startCheckDamaged: Gauge<'kind'>;
  /** Damage found at start not repaired yet (`lc` fragments still to repair, unreadable records): 0 when the storage is whole again. */
  readonly storageDamaged: Gauge;
}

/** Registers the self-healing metrics on `registry`. */
export function createHealMetrics(registry: Registry): HealMetrics {
  const registers = [registry];
  return {
    keysChecked: new Counter({
      name: 'powerstore_heal_keys_checked_total',
      help: "Keys catch-up compared with the cluster's catalog of completed writes",
      registers,
    }),
    writesRepaired: new Counter({
      name: 'powerstore_heal_writes_repaired_total',
      help: "Writes (one version of one key, every stripe) this server rebuilt from its peers' fragments, by cause: catch_up, scrub",
      labelNames: ['cause'],
      registers,
    }),
    bytesRepaired: new Counter({
      name: 'powerstore_heal_bytes_repaired_total',
      help: 'Fragment bytes this server stored or rewrote through repairs, by cause: catch_up, complete, pending, scrub',
      labelNames: ['cause'],
      registers,
    }),
    bytesFetched: new Counter({
      name: 'powerstore_heal_bytes_fetched_total',
      help: "Bytes of peers' answers read by repairs (about t + 1 times the fragment bytes stored)",
      registers,
    }),
    lcUpdated: new Counter({
      name: 'powerstore_heal_lc_updated_total',
      help: 'Keys whose newer completed write catch-up wrote back to this server, which held its entry but had missed its COMPLETE',
      registers,
    }),
    failures: new Counter({
      name: 'powerstore_heal_failures_total',
      help: 'Keys or fragments a repair could not fix, by reason: inconsistent_encoding (the writer encoded inconsistently; never stored), value_changed, timeout, unreachable, storage, or a protocol error code',
      labelNames: ['reason'],
      registers,
    }),
    passes: new Counter({
      name: 'powerstore_heal_passes_total',
      help: 'Catch-up passes ended, by result: complete, incomplete (some keys failed; retried soon), failed (the listing failed)',
      labelNames: ['result'],
      registers,
    }),
    passKeys: new Gauge({ name: 'powerstore_heal_pass_keys_checked', help: 'Keys the running catch-up pass has checked', registers }),
    passRunning: new Gauge({ name: 'powerstore_heal_pass_running', help: '1 while a catch-up pass runs', registers }),
    lastPassSeconds: new Gauge({
      name: 'powerstore_heal_last_pass_duration_seconds',
      help: 'Wall time of the last catch-up pass',
      registers,
    }),
    lastCompletePass: new Gauge({
      name: 'powerstore_heal_last_complete_pass_timestamp_seconds',
      help: 'When the last complete catch-up pass ended (Unix time; 0 before the first)',
      registers,
    }),
    rebuilding: new Gauge({
      name: 'powerstore_heal_rebuilding',
      help: '1 while this server rebuilds: it started on an empty data directory and no complete catch-up pass has ended since; it counts against t until then',
      registers,
    }),
    peerMisbehaving: new Counter({
      name: 'powerstore_heal_peer_misbehaving_total',
      help: 'Answers from peers (to catch-up and scrub) that no correct server gives, by peer id',
      labelNames: ['peer'],
      registers,
    }),
    scrubbed: new Counter({ name: 'powerstore_scrub_fragments_total', help: 'Stored fragments scrub re-hashed', registers }),
    scrubBytes: new Counter({ name: 'powerstore_scrub_bytes_total', help: 'Fragment bytes scrub read', registers }),
    scrubDamaged: new Counter({
      name: 'powerstore_scrub_damaged_total',
      help: "Fragments scrub found not matching their hash, or unreadable, by kind: lc (the key's latest write: repaired from the peers), dropped (an older version: deleted, as garbage collection could have), pending (a write under way: kept), unreadable (the storage failed to read it)",
      labelNames: ['kind'],
      registers,
    }),
    scrubRepaired: new Counter({
      name: 'powerstore_scrub_repaired_total',
      help: 'Damaged fragments scrub rebuilt from the peers and rewrote (checked again afterwards)',
      registers,
    }),
    scrubPasses: new Counter({
      name: 'powerstore_scrub_passes_total',
      help: 'Scrub passes over every stored fragment completed',
      registers,
    }),
    startCheckFragments: new Gauge({
      name: 'powerstore_start_check_fragments',
      help: 'Stored fragments the start check re-hashed against their checksum at this start',
      registers,
    }),
    startCheckComplete: new Gauge({
      name: 'powerstore_start_check_complete',
      help: 'Whether the start check covered every stored entry (1) or its budget ended it first (0)',
      registers,
    }),
    startCheckDamaged: new Gauge({
      name: 'powerstore_start_check_damaged',
      help: 'What the start check found damaged, by kind: lc (latest write of a key: repaired from the peers), dropped (older version, deleted), pending (write under way, kept), unreadable (records LevelDB cannot read), log (bytes LevelDB dropped from its write-ahead log at open)',
      labelNames: ['kind'],
      registers,
    }),
    storageDamaged: new Gauge({
      name: 'powerstore_storage_damaged',
      help: 'Damage the start check found that is not repaired yet (fragments still to rebuild from the peers, unreadable records); 0 when the storage is whole again',
      registers,
    }),
    scrubPassFragments: new Gauge({
      name: 'powerstore_scrub_pass_fragments',
      help: 'Fragments the running scrub pass has checked',
      registers,
    }),
  };
}
