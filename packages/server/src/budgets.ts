/**
 * The server's budgets: the one place that decides whether a connection may open and
 * whether a request may start, from how much memory clients already make the server hold
 * ({@link MemoryBudget}) and, for LISTs, how many are being handled ({@link ListSlots}).
 * Which writes a server stores is another matter, the protocol's `WritePolicyCheck`.
 *
 * Every byte a client can make the server keep is counted against one budget
 * (`maxBufferedBytes`) and against its address's share of it (`maxBufferedBytesPerAddress`):
 *
 * - `partial`: frames that have started arriving and not finished;
 * - `requests`: requests being handled, each with room reserved for its reply (a FILTER's
 *   reply carries a fragment, so its room is the longest fragment stored) before it starts;
 * - `replies`: replies handed to a socket and not yet sent.
 *
 * A request that does not fit waits, and its connection is not read, until bytes are given
 * back; no queue grows without bound because nothing is read while the budget is full.
 * Sockets know nothing of the budget's rules and the budget knows nothing of sockets: a
 * {@link BudgetUser} is told to re-check when room is given back.
 */

/** What the budget counts; see the module comment. */
export type BudgetKind = 'partial' | 'requests' | 'replies';

/** Someone waiting for room in the budget (a connection with requests it could not start). */
export interface BudgetUser {
  /** Called when bytes were given back; the user tries to start what it holds. */
  retry(): void;
}

/** Why an upgrade was refused: the server's cap or the address's. */
export type ConnectionRefusal = 'server_full' | 'address_full';

interface AddressState {
  connections: number;
  /** Bytes of requests and replies (not partial frames) held for this address. */
  held: number;
}

/** Counters the budget keeps, read by the metrics at scrape time. */
export interface MemoryBudgetStats {
  readonly buffered: Readonly<Record<BudgetKind, number>>;
  readonly connections: number;
  readonly addresses: number;
  readonly waiting: number;
}

/** Connection slots and buffered bytes, per server and per client address; see the module comment. */
export class MemoryBudget {
  readonly #maxConnections: number;
  readonly #maxPerAddress: number;
  readonly #budget: number;
  readonly #budgetPerAddress: number;
  readonly #buffered: Record<BudgetKind, number> = { partial: 0, requests: 0, replies: 0 };
  readonly #addresses = new Map<string, AddressState>();
  readonly #waiting = new Set<BudgetUser>();
  #connections = 0;
  #waking = false;

  constructor(limits: {
    maxConnections: number;
    maxConnectionsPerAddress: number;
    maxBufferedBytes: number;
    maxBufferedBytesPerAddress: number;
  }) {
    this.#maxConnections = limits.maxConnections;
    this.#maxPerAddress = limits.maxConnectionsPerAddress;
    this.#budget = limits.maxBufferedBytes;
    this.#budgetPerAddress = limits.maxBufferedBytesPerAddress;
  }

  /** Takes a connection slot for `address`, or says why not. */
  openConnection(address: string): ConnectionRefusal | undefined {
    if (this.#connections >= this.#maxConnections) return 'server_full';
    const a = this.#address(address);
    if (a.connections >= this.#maxPerAddress) {
      this.#forget(address, a);
      return 'address_full';
    }
    a.connections++;
    this.#connections++;
    return undefined;
  }

  closeConnection(address: string): void {
    const a = this.#addresses.get(address);
    if (!a) return;
    a.connections--;
    this.#connections--;
    this.#forget(address, a);
  }

  /** Bytes counted over all connections, of every kind. */
  get used(): number {
    return this.#buffered.partial + this.#buffered.requests + this.#buffered.replies;
  }

  /** Whether the budget is spent: connections stop reading until bytes are given back. */
  get full(): boolean {
    return this.used >= this.#budget;
  }

  /**
   * Reserves `bytes` of `kind` for `address` if they fit in both budgets. A request also
   * starts when nothing else of its kind is held (by anyone, or by its address when only
   * the address's share is spent), so one request larger than the rest of the budget
   * still makes progress; that bounds memory by the budget plus one request.
   */
  tryReserve(address: string, kind: BudgetKind, bytes: number): boolean {
    const a = this.#address(address);
    const fitsServer = this.used + bytes <= this.#budget || this.#buffered.requests + this.#buffered.replies === 0;
    const fitsAddress = a.held + bytes <= this.#budgetPerAddress || a.held === 0;
    if (!fitsServer || !fitsAddress) {
      this.#forget(address, a);
      return false;
    }
    this.add(address, kind, bytes);
    return true;
  }

  /** Counts `bytes` of `kind` without checking: bytes the server already holds (partial frames). */
  add(address: string, kind: BudgetKind, bytes: number): void {
    this.#buffered[kind] += bytes;
    if (kind !== 'partial') this.#address(address).held += bytes;
  }

  /** Gives `bytes` of `kind` back and lets waiting users retry. */
  release(address: string, kind: BudgetKind, bytes: number): void {
    if (bytes === 0) return;
    this.#buffered[kind] -= bytes;
    const a = this.#addresses.get(address);
    if (a && kind !== 'partial') {
      a.held -= bytes;
      this.#forget(address, a);
    }
    this.#wake();
  }

  /** Registers `user` to be told when room is given back (first come, first retried). */
  wait(user: BudgetUser): void {
    this.#waiting.add(user);
  }

  /** Stops telling `user` (it started its requests, or closed). */
  stopWaiting(user: BudgetUser): void {
    this.#waiting.delete(user);
  }

  stats(): MemoryBudgetStats {
    return {
      buffered: { ...this.#buffered },
      connections: this.#connections,
      addresses: this.#addresses.size,
      waiting: this.#waiting.size,
    };
  }

  #wake(): void {
    // A retry can release bytes (a reply sent synchronously) and re-enter; one pass at a time.
    if (this.#waking || this.#waiting.size === 0) return;
    this.#waking = true;
    try {
      for (const user of [...this.#waiting]) {
        this.#waiting.delete(user);
        user.retry();
      }
    } finally {
      this.#waking = false;
    }
  }

  #address(address: string): AddressState {
    let a = this.#addresses.get(address);
    if (!a) {
      a = { connections: 0, held: 0 };
      this.#addresses.set(address, a);
    }
    return a;
  }

  #forget(address: string, a: AddressState): void {
    if (a.connections === 0 && a.held === 0) this.#addresses.delete(address);
  }
}

/** Counters of {@link ListSlots}, read by the metrics at scrape time. */
export interface ListSlotStats {
  /** LISTs being handled. */
  readonly running: number;
  /** Connections holding LISTs that wait for a slot. */
  readonly waiting: number;
}

/**
 * The CPU budget of LISTs. A LIST reads up to `MAX_LIST_SCAN` key records and decodes each
 * on the main thread: from a few to a few hundred milliseconds of CPU for a 16-byte
 * request, which no memory budget sees. At most `maxLists` LISTs are handled at once over
 * all connections, and at most one per client address. A LIST that cannot start waits
 * (its connection goes on with its other requests), and when one finishes the slot goes to
 * the next address in turn: addresses take turns in the order they began waiting, and one
 * that still waits after its turn goes to the back. So an address that keeps many LISTs
 * queued, over any number of connections, gets one handled at a time like every other,
 * and another client's LIST waits for at most one LIST of each address ahead of it.
 */
export class ListSlots {
  readonly #max: number;
  /** Addresses with a LIST being handled (one each). */
  readonly #running = new Set<string>();
  /** Users with LISTs waiting, by address; addresses in the order of their turns. */
  readonly #waiting = new Map<string, Set<BudgetUser>>();
  #waking = false;

  constructor(maxLists: number) {
    this.#max = maxLists;
  }

  /** Whether a LIST of `address` may start now. */
  canStart(address: string): boolean {
    return this.#running.size < this.#max && !this.#running.has(address);
  }

  /** Takes the slot {@link canStart} said is free. */
  start(address: string): void {
    this.#running.add(address);
  }

  /** A LIST of `address` was handled: gives its slot to the next address in turn. */
  finish(address: string): void {
    this.#running.delete(address);
    this.#wake();
  }

  /** Registers `user`, holding a LIST of `address` that could not start, to be told when it may. */
  wait(address: string, user: BudgetUser): void {
    let users = this.#waiting.get(address);
    if (!users) this.#waiting.set(address, (users = new Set()));
    users.add(user);
  }

  /** Stops telling `user` (it closed). */
  stopWaiting(address: string, user: BudgetUser): void {
    const users = this.#waiting.get(address);
    if (!users) return;
    users.delete(user);
    if (users.size === 0) this.#waiting.delete(address);
  }

  stats(): ListSlotStats {
    let waiting = 0;
    for (const users of this.#waiting.values()) waiting += users.size;
    return { running: this.#running.size, waiting };
  }

  #wake(): void {
    // A retry can finish nothing synchronously (handling is async), but stay safe.
    if (this.#waking) return;
    this.#waking = true;
    try {
      for (const [address, users] of [...this.#waiting]) {
        if (this.#running.size >= this.#max) break;
        if (this.#running.has(address)) continue;
        // Its turn: out of the line, one LIST started, and back in at the end if more wait.
        this.#waiting.delete(address);
        const rest = [...users];
        while (rest.length > 0 && !this.#running.has(address)) rest.shift()!.retry();
        for (const user of rest) this.wait(address, user);
      }
    } finally {
      this.#waking = false;
    }
  }
}
