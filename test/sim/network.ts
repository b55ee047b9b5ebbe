/**
 * The simulated network: every message gets a delivery time from a heavy-tailed delay
 * times a per-link factor (some links are far, so whole rounds lag behind others); the
 * network may duplicate messages and partition processes for a while, but eventually
 * delivers every message between correct processes.
 */
import type { NetworkOptions } from './options.js';
import type { Prng } from './prng.js';

/** A message on its way. */
export interface InFlight {
  readonly from: string;
  readonly to: string;
  readonly frame: Uint8Array;
  /** Virtual delivery time. */
  at: number;
  /** Which connection of a client's link it went out on (a request), or is answered on (a reply). */
  readonly connection?: number | undefined;
  duplicates: number;
}

export class Network {
  /** Virtual time of the scheduler. */
  now = 0;
  /** Messages sent so far. */
  sent = 0;
  readonly #pool: InFlight[] = [];
  readonly #linkFactor = new Map<string, number>();
  #partition: { a: Set<string>; b: Set<string>; until: number } | undefined;
  #nextPartition: number;
  /** Processes that stand where another does (a server's own host: `rb3` where `s3` is), for partitions. */
  readonly #aliases = new Map<string, string>();

  constructor(
    private readonly prng: Prng,
    private readonly options: NetworkOptions,
  ) {
    this.#nextPartition = options.partitionEvery ? prng.range(0, options.partitionEvery) : Infinity;
  }

  /** Queues `frame`; `slow` multiplies its delay by 30 (a slow server); `connection`: see {@link InFlight}. */
  send(from: string, to: string, frame: Uint8Array, slow = false, connection?: number): void {
    this.#pool.push({ from, to, frame, at: this.now + this.#delay(from, to, slow), duplicates: 0, connection });
    this.sent++;
  }

  /** `name` is cut off by partitions exactly as `as` is (it runs on the same machine). */
  alias(name: string, as: string): void {
    this.#aliases.set(name, as);
  }

  /** The partition in force, if any: its two sides. */
  get partition(): { readonly a: ReadonlySet<string>; readonly b: ReadonlySet<string> } | undefined {
    return this.#partition;
  }

  /** When the partition in force ends, if one is. */
  get partitionEnds(): number | undefined {
    return this.#partition?.until;
  }

  /** Messages not yet delivered (partitioned ones included). */
  get pending(): number {
    return this.#pool.length;
  }

  /** Starts or ends a partition of `names` when its time has come. */
  updatePartition(names: readonly string[]): void {
    if (this.#partition && this.now >= this.#partition.until) this.#partition = undefined;
    if (!this.#partition && this.now >= this.#nextPartition) {
      const a = new Set(this.prng.subset(names));
      this.#partition = { a, b: new Set(names.filter((x) => !a.has(x))), until: this.now + this.prng.range(50, 1500) };
      this.#nextPartition = this.#partition.until + this.prng.range(0, this.options.partitionEvery);
    }
  }

  /** The earliest message the partition lets through. */
  next(): InFlight | undefined {
    let best: InFlight | undefined;
    for (const m of this.#pool) if (!this.#blocked(m) && (!best || m.at < best.at)) best = m;
    return best;
  }

  /** Only partitioned messages are left: heal the partition (eventual delivery). Returns whether it did. */
  heal(): boolean {
    if (!this.#partition || this.#pool.length === 0) return false;
    this.#partition = undefined;
    return true;
  }

  /**
   * Takes `m` out for delivery (or, sometimes, delivers a copy and keeps it for later). Not
   * on an honest client's connection, a WebSocket over TCP: it never delivers a frame twice
   * (its host resends a request only on a new connection, or asking again on purpose).
   */
  take(m: InFlight): void {
    if (m.connection === undefined && m.duplicates < 2 && this.prng.chance(this.options.duplicateRate)) {
      m.duplicates++;
      m.at = this.now + this.#delay(m.from, m.to, false);
    } else {
      this.#pool.splice(this.#pool.indexOf(m), 1);
    }
  }

  /**
   * Sometimes, up to two more server-bound messages due about now, taken out with `m` so
   * the host handles them concurrently (exercises per-key exclusion in storage).
   */
  concurrentWith(m: InFlight, isServer: (name: string) => boolean): InFlight[] {
    if (!isServer(m.to) || !this.prng.chance(this.options.concurrentDeliveryRate)) return [];
    const batch = this.#pool.filter((o) => o !== m && isServer(o.to) && !this.#blocked(o) && o.at <= this.now + 3).slice(0, 2);
    for (const o of batch) this.#pool.splice(this.#pool.indexOf(o), 1);
    return batch;
  }

  #blocked(m: InFlight): boolean {
    const p = this.#partition;
    if (p === undefined) return false;
    const from = this.#aliases.get(m.from) ?? m.from;
    const to = this.#aliases.get(m.to) ?? m.to;
    return (p.a.has(from) && p.b.has(to)) || (p.b.has(from) && p.a.has(to));
  }

  #delay(from: string, to: string, slow: boolean): number {
    const link = `${from}>${to}`;
    let f = this.#linkFactor.get(link);
    if (f === undefined) {
      f = this.prng.chance(this.options.farLinkRate) ? this.prng.range(...this.options.farFactor) : 1;
      this.#linkFactor.set(link, f);
    }
    const r = this.prng.float();
    const base = r < 0.8 ? this.prng.range(1, 10) : r < 0.97 ? this.prng.range(10, 100) : this.prng.range(100, 1500);
    return base * f * (slow ? 30 : 1);
  }
}
