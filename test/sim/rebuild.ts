/**
 * A server's host rebuilding or catching up (issue 24's self-healing, as `powerstore-server`
 * does it): it pages through the cluster's catalog of completed writes (the protocol's
 * `ListOperation` to every server, the answers it accepted kept so deletes are seen too),
 * and for each key whose latest completed write this server does not hold, runs
 * `RepairOperation` against the other servers over the simulated network and stores the
 * result with `Server.storeRepaired`: every stripe ≥ 1 of a striped value first, stripe 0
 * last. The same procedure serves a server that lost its disk (`rebuild`: it counts against
 * `t` until it finishes) and one that only missed writes (`catch-up`, once the network heals).
 * A rebuild then asks every peer for its writes under way (PENDING, `PendingListOperation`)
 * and repairs each one `mustRepair` names by its certificate (`pending`), as the server does:
 * it may have signed receipts for them before its disk was lost.
 *
 * It is a state machine driven by the simulator's loop, one operation at a time: each reply,
 * and each timer, is handled to the end before the loop goes on, so a seed replays exactly.
 */
import {
  compareKeys,
  compareTimestamps,
  ListOperation,
  mustRepair,
  PendingListOperation,
  PendingWrites,
  ProtocolError,
  type Candidate,
  type CertificateVerifier,
  type ClusterConfig,
  type CryptoProvider,
  type HistoryEntry,
  type ListAck,
  type ListPage,
  type PendingPage,
  type PendingWrite,
  type Reply,
  type Request,
  type RepairOutcome,
  type RepairOperation,
  type RepairResult,
  type Server,
  type Step,
  type StripeLayout,
} from '@powerstore/protocol';
import type { MemoryStorage } from '@powerstore/protocol/testing';
import type { ErasureCodec } from '@powerstore/erasure';
import type { ProtocolFactories } from './protocol-factories.js';

/** A `ListOperation` that keeps the answers it accepted, so a page can be read with its deletes (which it leaves out). */
export class CatalogListOperation extends ListOperation {
  readonly accepted: ListAck[] = [];

  protected override async problem(reply: ListAck): Promise<string | undefined> {
    const problem = await super.problem(reply);
    if (problem === undefined) this.accepted.push(reply);
    return problem;
  }

  /** Every key of the page (deletes included) with its highest candidate, from the answers merged: those up to the page's cursor. */
  catalog(page: ListPage): Map<string, Candidate> {
    const best = new Map<string, Candidate>();
    for (const a of this.accepted)
      for (const e of a.entries) {
        if (page.cursor !== undefined && compareKeys(e.key, page.cursor) > 0) continue;
        const b = best.get(e.key);
        if (!b || compareTimestamps(e.candidate.ts, b.ts) > 0) best.set(e.key, e.candidate);
      }
    return best;
  }
}

/** What a rebuild reports to the checker as it goes. */
export interface RebuildReports {
  /** A repair of `candidate` starts: the host judged it valid (the checker judges again, honestly). */
  repairStarted(server: string, key: string, candidate: Candidate): Promise<void>;
  /** A repair of a write under way starts: the host judged its certificate good (the checker judges again). */
  pendingRepairStarted(server: string, key: string, candidate: Candidate): Promise<void>;
  /** A repair operation of `candidate` ended: with an entry, or an error. */
  repairEnded(server: string, key: string, candidate: Candidate, error: ProtocolError | undefined): void;
  /** A repair was given up after waiting {@link REPAIR_TIMEOUT}. */
  repairTimedOut(server: string, key: string, candidate: Candidate): void;
  /** `Server.storeRepaired` did this with a repaired entry. */
  repairStored(server: string, key: string, candidate: Candidate, stripe: number, outcome: RepairOutcome): void;
  /** What no correct host may meet: a repaired entry refused, a repair failing for a reason it cannot have. */
  violation(message: string): void;
}

/** Everything a rebuild host needs from the simulation. */
export interface RebuildContext {
  readonly config: ClusterConfig;
  readonly crypto: CryptoProvider;
  readonly codec: ErasureCodec;
  readonly protocol: ProtocolFactories;
  readonly verifier: CertificateVerifier;
  /** The server's index, and its protocol server and storage now. */
  readonly index: number;
  server(): Server;
  storage(): MemoryStorage;
  /** Sends `request` to server `to` from this host. */
  send(to: number, request: Request): void;
  now(): number;
  /** Keys per LIST page. */
  readonly pageLimit: number;
  /** A fresh opId (unique across hosts: a late reply to an earlier host of the same name is dropped). */
  nextOpId(): number;
  readonly reports: RebuildReports;
}

/** How long the host waits on fragments or answers it asked for before asking the others (as a reader does). */
const STALL_TIMEOUT = 300;
/**
 * How long (virtual time) a host waits for a repair before giving it up, as
 * `powerstore-server`'s does: far beyond any delay between correct processes, so only a
 * write that cannot be repaired reaches it (one its writer encoded inconsistently, whose
 * holders lost their disks one after another: no repair restores it, so fewer than
 * `t + 1` servers may be left to answer for it).
 */
const REPAIR_TIMEOUT = 200_000;
/** Passes over the catalog before a rebuild that keeps meeting newer versions gives up. */
const MAX_PASSES = 12;

interface Repairing {
  readonly key: string;
  readonly candidate: Candidate;
  /** A write under way (`pendingCandidate`), repaired by its certificate. */
  readonly pending?: boolean;
  /** The stripe the operation in flight repairs. */
  stripe: number;
  layout?: StripeLayout;
  /** Stripe 0's entry, stored last. */
  head?: HistoryEntry;
  /** Stripes ≥ 1 still to repair. */
  readonly queue: number[];
}

/** One rebuild (or catch-up) of one server; see the module comment. */
export class Rebuild {
  /** Virtual time the operation in flight's fragment (or answer) timer fires, if armed. */
  #stallAt: number | undefined;
  /** When the repair in flight is given up. */
  #giveUpAt: number | undefined;
  done = false;
  /** Passes over the catalog, keys repaired (stored), and repairs that found the writer's encoding inconsistent. */
  passes = 0;
  repaired = 0;
  inconsistent = 0;
  /** Writes under way stored, and those whose repair never finished (maybe nowhere to decode from: no violation). */
  pendingRepaired = 0;
  pendingUnfinished = 0;
  #op: CatalogListOperation | RepairOperation | PendingListOperation | undefined;
  /** A rebuild's second part: peers still to list, the one listing now, where, and what they listed. */
  #pendingPeers: number[] | undefined;
  #pendingPeer = -1;
  #pendingAfter = '';
  #pendingListed = 0;
  #pendingWrites = new PendingWrites();
  #pendingTargets: PendingWrite[] = [];
  #after = '';
  #listed = new Map<string, Candidate>();
  #targets: string[] = [];
  /** Keys met at a newer version meanwhile: looked at again in the next pass. */
  readonly #retry = new Set<string>();
  #repairing: Repairing | undefined;

  constructor(
    readonly name: string,
    readonly kind: 'rebuild' | 'catch-up',
    readonly ctx: RebuildContext,
    readonly onDone: (r: Rebuild) => void,
  ) {}

  /** Virtual time the host's next timer fires, if any. */
  get timerAt(): number | undefined {
    if (this.#stallAt === undefined) return this.#giveUpAt;
    return this.#giveUpAt === undefined ? this.#stallAt : Math.min(this.#stallAt, this.#giveUpAt);
  }

  /** What it is doing, for a report of a host that never finished. */
  get state(): string {
    const op = this.#op;
    const r = this.#repairing;
    if (!op) return 'idle';
    if (op instanceof CatalogListOperation) return `listing after ${JSON.stringify(this.#after)}`;
    if (op instanceof PendingListOperation)
      return `listing s${this.#pendingPeer}'s writes under way after ${JSON.stringify(this.#pendingAfter)}`;
    return `repairing ${r?.key} at ${r?.candidate.ts.num} stripe ${r?.stripe}`;
  }

  get server(): string {
    return `s${this.ctx.index}`;
  }

  async start(): Promise<void> {
    this.passes++;
    this.#after = '';
    this.#listed = new Map();
    this.#retry.clear();
    this.#pendingPeers = undefined;
    await this.#list();
  }

  /** A reply to this host. */
  async receive(from: number, reply: Reply): Promise<void> {
    const op = this.#op;
    if (!op || reply.opId !== op.opId) return;
    await this.#step(op, await this.#guard(() => op.onReply(from, reply)));
  }

  /** The timer fired: more servers are asked (a repair), or the page is taken as it is (a listing). */
  async fire(): Promise<void> {
    const op = this.#op;
    const r = this.#repairing;
    if (this.#giveUpAt !== undefined && this.ctx.now() >= this.#giveUpAt && op instanceof PendingListOperation) {
      // A peer that never answers lists nothing: the others decide (`mustRepair`).
      this.#op = undefined;
      this.#stallAt = this.#giveUpAt = undefined;
      return this.#listPending();
    }
    if (this.#giveUpAt !== undefined && this.ctx.now() >= this.#giveUpAt && r) {
      this.#op = undefined;
      this.#stallAt = this.#giveUpAt = undefined;
      this.#repairing = undefined;
      // A write under way may be on too few correct servers to decode, and then can never complete either.
      if (r.pending) this.pendingUnfinished++;
      else this.ctx.reports.repairTimedOut(this.server, r.key, r.candidate);
      return this.#next();
    }
    this.#stallAt = undefined;
    if (op && !(op instanceof PendingListOperation)) await this.#step(op, op.stalled());
  }

  async #guard(f: () => Promise<Step<unknown>>): Promise<Step<unknown>> {
    try {
      return await f();
    } catch (err) {
      // An operation that throws is a bug of the host or the protocol, never an allowed end.
      const message = err instanceof Error ? err.message : String(err);
      this.ctx.reports.violation(`${this.kind}: ${this.server}'s operation threw: ${message}`);
      return { error: new ProtocolError('INTERNAL', message) };
    }
  }

  async #begin(op: CatalogListOperation | RepairOperation | PendingListOperation): Promise<void> {
    this.#op = op;
    this.#stallAt = undefined;
    this.#giveUpAt = op instanceof CatalogListOperation ? undefined : this.ctx.now() + REPAIR_TIMEOUT;
    await this.#step(op, await this.#guard(() => op.start()));
  }

  async #step(op: CatalogListOperation | RepairOperation | PendingListOperation, s: Step<unknown>): Promise<void> {
    if (op !== this.#op) return;
    for (const o of s.send ?? []) this.ctx.send(o.to, o.message);
    if (op instanceof PendingListOperation) return this.#pendingStep(s as Step<PendingPage>);
    const awaiting = op instanceof CatalogListOperation ? op.awaitingAnswers : op.awaitingFragments;
    if (awaiting && this.#stallAt === undefined) this.#stallAt = this.ctx.now() + STALL_TIMEOUT;
    if (s.error) {
      this.#op = undefined;
      this.#stallAt = this.#giveUpAt = undefined;
      await this.#failed(s.error);
    } else if (s.result) {
      this.#op = undefined;
      this.#stallAt = this.#giveUpAt = undefined;
      if (op instanceof CatalogListOperation) await this.#paged(op, s.result as ListPage);
      else await this.#repairedStripe(s.result as RepairResult);
    }
  }

  async #list(): Promise<void> {
    const { config, crypto, verifier } = this.ctx;
    await this.#begin(new CatalogListOperation({ config, crypto, verifier }, '', this.#after, this.ctx.pageLimit, this.ctx.nextOpId()));
  }

  async #paged(op: CatalogListOperation, page: ListPage): Promise<void> {
    for (const [key, c] of op.catalog(page)) this.#listed.set(key, c);
    if (page.cursor !== undefined) {
      this.#after = page.cursor;
      return this.#list();
    }
    // Keys this server holds an lc of are looked at too: its own lc may be newer than the
    // catalog's (it learned of a write the answers merged had not), and is repaired then.
    const own = this.ctx.storage().keys();
    this.#targets = [...new Set([...this.#listed.keys(), ...own])].sort(compareKeys);
    return this.#next();
  }

  /** The next key to look at, or the end of the pass. */
  async #next(): Promise<void> {
    while (this.#targets.length > 0) {
      const key = this.#targets.shift()!;
      const own = await this.ctx.storage().withKey(key, (r) => r.getLc());
      const listed = this.#listed.get(key);
      const candidate = !own ? listed : !listed || compareTimestamps(own.ts, listed.ts) >= 0 ? own : listed;
      if (!candidate) continue;
      if (await this.ctx.server().holds(key, candidate.ts)) {
        if (own && compareTimestamps(own.ts, candidate.ts) >= 0) continue;
        // The entry is here; only its COMPLETE was missed: as `powerstore-server`'s catch-up does.
        await this.ctx.server().handle({ type: 'COMPLETE', key, opId: 0, candidate });
        continue;
      }
      this.#repairing = { key, candidate, stripe: 0, queue: [] };
      await this.ctx.reports.repairStarted(this.server, key, candidate);
      return this.#repair();
    }
    if (this.#retry.size > 0 && this.passes < MAX_PASSES) return this.start();
    if (this.#retry.size > 0)
      this.ctx.reports.violation(
        `${this.kind}: ${this.server} gave up after ${this.passes} passes with ${[...this.#retry].join(', ')} still changing`,
      );
    if (this.kind === 'rebuild') {
      if (this.#pendingPeers === undefined) {
        this.#pendingPeers = Array.from({ length: this.ctx.config.n }, (_, i) => i).filter((i) => i !== this.ctx.index);
        this.#pendingListed = 0;
        this.#pendingWrites = new PendingWrites();
        this.#pendingTargets = [];
        return this.#listPending();
      }
      while (this.#pendingTargets.length > 0) {
        const { key, candidate } = this.#pendingTargets.shift()!;
        const own = await this.ctx.storage().withKey(key, (r) => r.getLc());
        if ((own && compareTimestamps(own.ts, candidate.ts) > 0) || (await this.ctx.server().holds(key, candidate.ts))) continue;
        this.#repairing = { key, candidate, pending: true, stripe: 0, queue: [] };
        await this.ctx.reports.pendingRepairStarted(this.server, key, candidate);
        return this.#repair();
      }
    }
    this.done = true;
    this.onDone(this);
  }

  /** Lists the next peer's writes under way, or, all peers asked, picks the ones to repair. */
  async #listPending(): Promise<void> {
    const peers = this.#pendingPeers!;
    if (peers.length === 0) {
      const { config } = this.ctx;
      if (mustRepair(config, 0, this.#pendingListed) === undefined) {
        // At most t − 1 Byzantine peers beside a rebuilding server: 2t correct ones always list everything.
        this.ctx.reports.violation(`rebuild: ${this.server} got complete lists of writes under way from only ${this.#pendingListed} peers`);
      } else {
        this.#pendingTargets = this.#pendingWrites.all().filter((w) => mustRepair(config, w.listedBy.size, this.#pendingListed));
      }
      return this.#next();
    }
    this.#pendingPeer = peers.shift()!;
    this.#pendingAfter = '';
    return this.#pendingPage();
  }

  async #pendingPage(): Promise<void> {
    const { config, crypto, verifier } = this.ctx;
    await this.#begin(
      new PendingListOperation(
        { config, crypto, verifier },
        this.#pendingPeer,
        this.#pendingAfter,
        this.ctx.nextOpId(),
        this.ctx.pageLimit,
      ),
    );
  }

  async #pendingStep(s: Step<PendingPage>): Promise<void> {
    if (!s.error && !s.result) return;
    this.#op = undefined;
    this.#stallAt = this.#giveUpAt = undefined;
    if (s.result) {
      this.#pendingWrites.add(this.#pendingPeer, s.result.entries);
      if (s.result.cursor !== undefined) {
        this.#pendingAfter = s.result.cursor;
        return this.#pendingPage();
      }
      this.#pendingListed++;
    }
    return this.#listPending();
  }

  async #repair(): Promise<void> {
    const r = this.#repairing!;
    const { config, crypto, codec, verifier, index } = this.ctx;
    const op = this.ctx.protocol.repairer({ config, crypto, codec, verifier, index }, r.key, r.candidate, this.ctx.nextOpId(), {
      ...(r.stripe === 0 ? {} : { stripe: r.stripe, layout: r.layout! }),
      ...(r.pending ? { pending: true } : {}),
    });
    await this.#begin(op);
  }

  async #failed(error: ProtocolError): Promise<void> {
    const r = this.#repairing;
    if (!r) {
      // A listing fails only with t + 1 refusals, which correct servers never give it.
      this.ctx.reports.violation(`${this.kind}: ${this.server}'s listing failed: ${error.code}: ${error.message}`);
      this.done = true;
      this.onDone(this);
      return;
    }
    this.#repairing = undefined;
    this.ctx.reports.repairEnded(this.server, r.key, r.candidate, error);
    // A write under way that completed or was collected meanwhile: the next rebuild or catch-up has it, or nothing does.
    if (r.pending && error.code === 'VALUE_CHANGED') return this.#next();
    if (error.code === 'VALUE_CHANGED') this.#retry.add(r.key);
    else if (error.code === 'INCONSISTENT_ENCODING') this.inconsistent++;
    else
      this.ctx.reports.violation(
        `${this.kind}: ${this.server}'s repair of ${r.key} at ${r.candidate.ts.num} failed: ${error.code}: ${error.message}`,
      );
    return this.#next();
  }

  async #repairedStripe(result: RepairResult): Promise<void> {
    const r = this.#repairing!;
    this.ctx.reports.repairEnded(this.server, r.key, r.candidate, undefined);
    if (r.stripe === 0) {
      r.head = result.entry;
      if (result.layout) {
        r.layout = result.layout;
        for (let s = 1; s < result.layout.digests.length; s++) r.queue.push(s);
      }
    } else if (!(await this.#store(r, result.entry))) {
      return this.#next();
    }
    const next = r.queue.shift();
    if (next !== undefined) {
      r.stripe = next;
      return this.#repair();
    }
    await this.#store(r, r.head!);
    return this.#next();
  }

  /** Stores one repaired stripe; whether the repair of this write goes on. */
  async #store(r: Repairing, entry: HistoryEntry): Promise<boolean> {
    let outcome: RepairOutcome;
    try {
      outcome = await this.ctx.server().storeRepaired(r.key, r.candidate, entry, {
        ...(r.layout && entry.stripe > 0 ? { layout: r.layout } : {}),
        ...(r.pending ? { pending: true } : {}),
      });
    } catch (err) {
      this.#repairing = undefined;
      const message = err instanceof Error ? err.message : String(err);
      this.ctx.reports.violation(
        `${this.kind}: ${this.server} refused its own repair of ${r.key} at ${r.candidate.ts.num} stripe ${entry.stripe}: ${message}`,
      );
      return false;
    }
    this.ctx.reports.repairStored(this.server, r.key, r.candidate, entry.stripe, outcome);
    if (entry.stripe === 0) {
      this.#repairing = undefined;
      if (outcome === 'stored') this.repaired++;
      if (outcome === 'stored' && r.pending) this.pendingRepaired++;
    }
    if (outcome === 'superseded' && r.pending) {
      this.#repairing = undefined;
      return false;
    }
    if (outcome === 'superseded') {
      // A newer write of the key is here (or this version was collected): the next pass repairs that one.
      this.#repairing = undefined;
      this.#retry.add(r.key);
      return false;
    }
    return true;
  }
}
