/**
 * Deliberately broken protocol variants. Each overrides one predicate or step of the
 * production classes; the simulator must report a violation for every one, which is
 * evidence that it can see the failure the corresponding rule prevents.
 */
import {
  authorityProblem,
  receiptRootMessage,
  CertificateVerifier,
  receiptLeaf,
  receiptMessage,
  rootOf,
  toHex,
  historyEntryBytes,
  RepairOperation,
  ProtocolError,
  stripeMatches,
  entryCovered,
  certificateId,
  ListOperation,
  ReadOperation,
  Server,
  WriteOperation,
  TS0,
  compareTimestamps,
  timestampKey,
  timestampsEqual,
  type Candidate,
  type WriteInfo,
  type FilterAck,
  type StripeLayout,
  type CertificateCheck,
  type RepairOutcome,
  type FilterRequest,
  type Reply,
  type HistoryEntry,
  type KeyRecord,
  type Refusal,
  type StoreProof,
  type Timestamp,
  type WriteCertificate,
} from '@powerstore/protocol';
import { RoundBook, type OversizedVerdict, type Round } from '@powerstore/client/host';
import type { Behaviour } from './byzantine.js';
import type { HostFaultOptions } from './options.js';
import { correctProtocol, type ProtocolFactories } from './protocol-factories.js';

/** Merges LIST answers unchecked: invented keys and misstated sizes get through. */
class TrustsListAnswers extends ListOperation {
  protected override problem(): Promise<string | undefined> {
    return Promise.resolve(undefined);
  }
}

/** Merges the first `t + 1` LIST answers: all of them may come from servers that missed a completed write. */
class ListsFromTPlusOne extends ListOperation {
  protected override answersNeeded(): number {
    return this.options.config.t + 1;
  }
}

/** Ends a page where the answer that read furthest stopped: servers cut short before a completed key are outvoted by ones that never had it. */
class ListsToFurthestHorizon extends ListOperation {
  protected override answersSpared(answers: number): number {
    return answers - 1;
  }
}

/** A named broken variant. */
export interface Mutant {
  readonly name: string;
  /** The rule it breaks. */
  readonly description: string;
  readonly protocol: ProtocolFactories;
  /** Runs with readers listing keys (the mutant breaks listing). */
  readonly lists?: boolean;
  /** Runs with many striped writes (the mutant breaks stripes). */
  readonly stripes?: boolean;
  /** Byzantine servers draw only these behaviours (the lie the mutant falls for is rare among all of them). */
  readonly behaviours?: readonly Behaviour[];
  /** Chance an operation is a delete, instead of the usual (a mutant that breaks what deletes do). */
  readonly deleteRate?: number;
  /** Client-host faults, instead of those drawn (the situation the mutant mishandles is rare among all of them). */
  readonly hostFaults?: Partial<HostFaultOptions>;
  /** Runs with a server's key replaced mid-run (the mutant breaks key epochs). */
  readonly rotate?: boolean;
  /** Runs with servers losing their disk and rebuilding (the mutant breaks repair). */
  readonly rebuild?: boolean;
  /**
   * Only a violation matching this counts as catching the mutant: its own symptom, where
   * the mode it runs in has a known failure of the correct protocol too (`--rebuild
   * --hostile`: a repair that never finishes, see the protocol README).
   */
  readonly caughtBy?: RegExp;
}

/** Answers requests of any key epoch, judging them by its own: parties with other keys mix in one operation. */
class AnswersAnyEpoch extends Server {
  protected override checkEpoch(): void {}
}

/** Admits writes whose certificate names a retired key epoch: it signs receipts a retired key can complete. */
class AdmitsRetiredEpoch extends Server {
  protected override refusal(key: string, cert: WriteCertificate): Refusal | undefined {
    return super.refusal(key, { ...cert, epoch: this.epoch });
  }
}

/** FILTER answers without writing the candidate back to `lc`. */
class NoFilterWriteBack extends Server {
  protected override async onFilter(req: FilterRequest): Promise<Reply> {
    const chv = await this.highestValid(req.key, req.candidates);
    const ts = chv?.ts ?? TS0;
    const entry = chv ? await this.storage.withKey(req.key, (r) => r.getEntry(ts)) : undefined;
    return {
      type: 'FILTER_ACK',
      key: req.key,
      opId: req.opId,
      ts,
      stripe: req.stripe,
      entry: entry && { fragment: entry.fragment, cc: entry.cc, cert: entry.cert },
    };
  }
}

/** `lc` is overwritten even by a lower timestamp. */
class WriteBackWithoutCompare extends Server {
  protected override async writeBack(record: KeyRecord, c: Candidate, key: string): Promise<void> {
    await record.setLc(c);
    await this.collect(record, key);
  }
}

/** Certificates are checked for authority only: signatures are never verified. */
class SignatureUnchecked extends Server {
  protected override async checkCertificate(key: string, ts: Timestamp, cert: WriteCertificate): Promise<CertificateCheck> {
    const problem = authorityProblem(this.crypto, this.verifier.cluster, key, ts, cert.signer, cert.grant);
    return problem ? { ok: false, code: 'NOT_AUTHORIZED', reason: problem } : { ok: true };
  }
}

/** Certificates are checked for signatures only: any signer may write any key. */
class NamespaceUnchecked extends Server {
  protected override checkCertificate(key: string, ts: Timestamp, cert: WriteCertificate): Promise<CertificateCheck> {
    return this.verifier.checkSignatures(key, ts, cert);
  }
}

/** Store proofs are not checked: a certificate alone makes a candidate valid, as before issue 9. */
class ProofUnchecked extends Server {
  protected override async checkProof(): Promise<boolean> {
    return true;
  }
}

/**
 * Remembers the signatures of receipts it verified and takes a batched receipt carrying a
 * known signature as valid, without rebuilding the root from the receipt's own leaf and
 * path: any path goes with a signature seen once.
 */
class BatchSignatureCached extends Server {
  readonly #known = new Set<string>();
  protected override async checkProof(key: string, ts: Timestamp, cert: WriteCertificate, proof: StoreProof): Promise<boolean> {
    if (proof.length < this.config.n - this.config.t) return false;
    for (const [i, r] of proof.entries()) {
      if (i > 0 && r.server <= proof[i - 1]!.server) return false;
      const id = toHex(r.signature);
      if (r.batch && this.#known.has(id)) continue;
      if (!(await this.verifier.receiptValid(key, ts, cert, r.server, r))) return false;
      this.#known.add(id);
    }
    return true;
  }
}

/** Takes a batched certificate whose signature it verified before (for any certificate) as signed, whatever its path. */
class CertBatchSignatureCached extends Server {
  readonly #known = new Set<string>();
  protected override async checkCertificate(key: string, ts: Timestamp, cert: WriteCertificate): Promise<CertificateCheck> {
    const id = toHex(cert.signature);
    if (cert.batch && this.#known.has(id) && !authorityProblem(this.crypto, this.cluster, key, ts, cert.signer, cert.grant))
      return { ok: true };
    const checked = await super.checkCertificate(key, ts, cert);
    if (checked.ok) this.#known.add(id);
    return checked;
  }
}

/** Remembers a batch root's signature as verified before checking it: a forgery passes the second time it is shown. */
class BatchRootRememberedFirst extends Server {
  readonly #verified = new Set<string>();
  protected override async checkProof(key: string, ts: Timestamp, cert: WriteCertificate, proof: StoreProof): Promise<boolean> {
    if (proof.length < this.config.n - this.config.t) return false;
    for (const [i, r] of proof.entries()) {
      if (i > 0 && r.server <= proof[i - 1]!.server) return false;
      if (!r.batch) {
        if (!(await this.verifier.receiptValid(key, ts, cert, r.server, r))) return false;
        continue;
      }
      const root = rootOf(
        this.crypto,
        receiptLeaf(this.crypto, receiptMessage(this.crypto, this.cluster.id, key, ts, cert, r.server)),
        r.batch,
      );
      if (!root) return false;
      const message = receiptRootMessage(this.cluster.id, r.server, r.batch.count, root);
      const id = toHex(this.crypto.sha256Sync([message, r.signature]));
      if (this.#verified.has(id)) continue;
      this.#verified.add(id);
      if (!(await this.crypto.verifyEd25519(this.cluster.servers[r.server]!, message, r.signature))) return false;
    }
    return true;
  }
}

/** STORE does not check `H(fr_i) = cc[i]`. */
class FragmentUnchecked extends Server {
  protected override async fragmentMatches(): Promise<boolean> {
    return true;
  }
}

/** STORE overwrites an existing history entry. */
class HistoryOverwritable extends Server {
  protected override async storeEntry(record: KeyRecord, key: string, entry: HistoryEntry): Promise<void> {
    const owner = this.admission.ownerOfKey(key);
    await record.putEntry(entry, { owner, bytes: 0, quota: {} });
  }
}

/** Admission ignores grant expiry (revocation and the rest still apply). */
class GrantExpiryIgnored extends Server {
  protected override refusal(key: string, cert: WriteCertificate): Refusal | undefined {
    return this.admission.refusal(key, cert, 0);
  }
}

/** Garbage collection deletes `lc`'s own entry too. */
class CollectsLc extends Server {
  protected override collectable(index: readonly WriteInfo[], lc: Candidate | undefined, now: number): WriteInfo[] {
    return [...super.collectable(index, lc, now), ...index.filter((e) => lc && timestampsEqual(e.ts, lc.ts))];
  }
}

/** Garbage collection deletes entries above `lc` (writes under way) too. */
class CollectsPending extends Server {
  protected override collectable(index: readonly WriteInfo[], lc: Candidate | undefined, now: number): WriteInfo[] {
    return [...super.collectable(index, lc, now), ...index.filter((e) => lc && compareTimestamps(e.ts, lc.ts) > 0)];
  }
}

/**
 * Garbage collection takes "lc is a delete" from the server's own entry at lc instead of
 * lc's certificate: a server that learned the delete only as a candidate keeps δ older
 * versions, the deleted value among them.
 */
class DeleteByOwnEntry extends Server {
  protected override collectable(index: readonly WriteInfo[], lc: Candidate | undefined, now: number): WriteInfo[] {
    const own = lc && this.#own.get(timestampKey(lc.ts));
    return super.collectable(index, lc && { ...lc, cert: { ...lc.cert, tombstone: own ?? false } }, now);
  }
  readonly #own = new Map<string, boolean>();
  protected override async storeEntry(record: KeyRecord, key: string, entry: HistoryEntry, basis?: Candidate): Promise<void> {
    this.#own.set(timestampKey(entry.ts), entry.cc.tombstone);
    return super.storeEntry(record, key, entry, basis);
  }
}

/**
 * Garbage collection never deletes an upload without its stripe 0: an abandoned or
 * overtaken upload stays charged for good.
 */
class KeepsHeadless extends Server {
  protected override collectable(index: readonly WriteInfo[], lc: Candidate | undefined, now: number): WriteInfo[] {
    return super.collectable(index, lc, now).filter((e) => e.head);
  }
}

/** Stripe 0 of a striped write is stored, and its receipt signed, whether or not the other stripes are held. */
class StripesUnchecked extends Server {
  protected override async checkStripesHeld(_record: KeyRecord, _ts: Timestamp, _layout: StripeLayout): Promise<void> {}
}

/**
 * Stripe 0's layout is checked against the stripes held under any timestamp of the key (by
 * digest), not the write's own: stripes of two writes are accepted as one value, and a
 * receipt is signed for a write whose own stripes no server holds.
 */
class StripesAnyTimestamp extends Server {
  protected override async checkStripesHeld(record: KeyRecord, _ts: Timestamp, layout: StripeLayout): Promise<void> {
    const writes = await record.index();
    for (let s = 1; s < layout.digests.length; s++) {
      let held = false;
      for (const w of writes) {
        const meta = w.top >= s ? await record.getEntryMeta(w.ts, s) : undefined;
        if (meta && stripeMatches(this.crypto, layout, s, meta.cc)) held = true;
      }
      if (!held) throw new ProtocolError('STRIPES_MISSING', `this server does not hold stripe ${s} of this write`);
    }
  }
}

/** The timestamp window is not enforced: a STORE may take any number, up to 2^53 − 1. */
class WindowUnchecked extends Server {
  protected override checkWindow(): void {}
}

/** A reader takes an answer for a stripe if the layout lists its cross-checksum anywhere, not at the stripe asked for. */
class AnyStripe extends ReadOperation {
  protected override entryConsistent(entry: NonNullable<FilterAck['entry']>, stripe: number): boolean {
    const layout = entry.layout;
    if (!layout) return super.entryConsistent(entry, stripe);
    return layout.digests.some((_, j) => entryCovered(this.options.crypto, entry.cert, j, entry.cc, layout));
  }
}

/** A reader moves on to a "newer" candidate a server names without checking it is valid. */
class TrustsNewer extends ReadOperation {
  protected override async acceptNewer(): Promise<boolean> {
    return true;
  }
}

/** Fragments are not checked against the cross-checksum the certificate signs. */
class IgnoresCrossChecksum extends ReadOperation {
  protected override async fragmentVerifies(): Promise<boolean> {
    return true;
  }
}

/**
 * `safe(c)` counts metadata-only FILTER answers (the entry's certificate and
 * cross-checksum, no fragment) as if they carried a matching fragment: a read trusts
 * fewer than `t + 1` fragments.
 */
class CountsMetadata extends ReadOperation {
  protected override safeMembers(c: Candidate): number[] | undefined {
    const id = certificateId(c.cert);
    const members = [...this.answers].filter(
      ([, w]) => w.entry && w.certId === id && timestampsEqual(w.ts, c.ts) && (w.fragmentOk || !w.entry.fragment),
    );
    return members.length >= this.options.config.t + 1 ? members.map(([i]) => i) : undefined;
  }
}

/** CLOCK adopts candidates without checking that they are valid. */
class TrustingClock extends WriteOperation {
  protected override async acceptClockCandidate(): Promise<boolean> {
    return true;
  }
}

/** CLOCK reuses the highest timestamp's `num` instead of incrementing it. */
class NoIncrement extends WriteOperation {
  protected override nextNum(highest: Timestamp, pending: number): number {
    return super.nextNum({ ...highest, num: Math.max(0, highest.num - 1) }, Math.max(0, pending - 1));
  }
}

/** Owners and the admin do not jump over pending writes: they take the number after the highest `lc` seen, as grantees do. */
class NoJump extends WriteOperation {
  protected override jumpTarget(highest: Timestamp): number {
    return highest.num;
  }
}

/** Writers take the highest pending number CLOCK reports, unclamped: a Byzantine server's made-up number included. */
class UnclampedJump extends WriteOperation {
  protected override jumpTarget(highest: Timestamp, pending: number): number {
    return Math.max(super.jumpTarget(highest, pending), pending);
  }
}

/** The session's in-flight bookkeeping is ignored: concurrent writes of one key may share a timestamp. */
class ReusesTimestamp extends WriteOperation {
  protected override nextNum(highest: Timestamp, pending: number): number {
    super.nextNum(highest, pending);
    return this.jumpTarget(highest, pending) + 1;
  }
}

/** A repair that takes the decoded value as the writer's without encoding it again and comparing all `n` hashes. */
class SkipsReencodeCheck extends RepairOperation {
  protected override encodingConsistent(): boolean {
    return true;
  }
}

/** A rebuilding host whose listing and repairs take a candidate's certificate without its store proof. */
class ProoflessVerifier extends CertificateVerifier {
  override async proofValid(): Promise<boolean> {
    return true;
  }
}

/**
 * A server that stores a repaired entry as a fresh write: under the next timestamp number
 * above its `lc`, with the write's certificate (which signs the write's own timestamp).
 */
class RestampsRepair extends Server {
  override async storeRepaired(key: string, candidate: Candidate, entry: HistoryEntry): Promise<RepairOutcome> {
    return this.storage.withKey(key, async (record) => {
      await this.writeBack(record, candidate, key);
      const lc = await record.getLc();
      const restamped = { ...entry, ts: { num: (lc?.ts.num ?? 0) + 1, writerId: entry.ts.writerId } };
      if (await record.getEntryMeta(restamped.ts, entry.stripe)) return 'held';
      const owner = this.admission.ownerOfKey(key);
      await record.putEntry(restamped, { owner, bytes: historyEntryBytes(restamped), quota: {} });
      return 'stored';
    });
  }
}

/** The client's host sends an operation's next round under the wire id of its previous one. */
class ReusesWireId<F> extends RoundBook<F> {
  readonly #last = new Map<F, number>();
  protected override newId(flight: F): number {
    const id = this.#last.get(flight) ?? super.newId(flight);
    this.#last.set(flight, id);
    return id;
  }
}

/** The client's host counts a reply to an operation's ended round for the round it has in progress. */
class CountsEndedRounds<F> extends RoundBook<F> {
  readonly #flightOf = new Map<number, F>();
  readonly #current = new Map<F, Round<F>>();
  override start(...args: Parameters<RoundBook<F>['start']>): Round<F> {
    const round = super.start(...args);
    this.#flightOf.set(round.id, args[0]);
    this.#current.set(args[0], round);
    return round;
  }
  override get(id: number): Round<F> | undefined {
    const round = super.get(id);
    if (!round || round.flight !== undefined) return round;
    const flight = this.#flightOf.get(id);
    const current = flight === undefined ? undefined : this.#current.get(flight);
    return current?.flight !== undefined ? current : round;
  }
}

/** The client's host holds FILTERs back for a server that sent a frame over the limit, and never sends them. */
class NeverReleasesHeld<F> extends RoundBook<F> {
  override nextHeld(): Round<F> | undefined {
    return undefined;
  }
}

/** The client's host excuses every frame over the limit, even where no correct server's answer could be one. */
class ExcusesOversized<F> extends RoundBook<F> {
  override oversized(server: number, opId: number | undefined): OversizedVerdict<F> {
    const verdict = super.oversized(server, opId);
    return verdict.kind === 'misbehaving' ? { kind: 'excused' } : verdict;
  }
}

const withServer = (server: ProtocolFactories['server']): ProtocolFactories => ({ ...correctProtocol, server });
const withRoundBook = (roundBook: <F>() => RoundBook<F>): ProtocolFactories => ({ ...correctProtocol, roundBook });
const withReader = (reader: ProtocolFactories['reader']): ProtocolFactories => ({ ...correctProtocol, reader });
const withWriter = (writer: ProtocolFactories['writer']): ProtocolFactories => ({ ...correctProtocol, writer });

/**
 * Every mutant `pnpm sim:mutants` runs. Not here: the paper's "drop a candidate after
 * `t + 1` lower answers instead of `n − t`" (eager-invalid). With store proofs every correct
 * server finds a valid candidate valid and never answers below it, and readers drop
 * invalid candidates themselves, so only Byzantine servers (at most `t`) answer lower: the
 * two rules behave identically, and no run can tell them apart.
 */
export const MUTANTS: readonly Mutant[] = [
  {
    name: 'signature-unchecked',
    description: 'servers never verify certificate signatures',
    protocol: withServer((o) => new SignatureUnchecked(o)),
  },
  {
    name: 'proof-unchecked',
    description: 'servers take a certificate without its store proof as valid',
    protocol: withServer((o) => new ProofUnchecked(o)),
  },
  {
    name: 'batch-signature-cached',
    description: 'servers take a batched receipt whose signature they verified before as valid, whatever its path',
    protocol: withServer((o) => new BatchSignatureCached(o)),
  },
  {
    name: 'batch-root-remembered-first',
    description: "servers remember a batch root's signature as verified before checking it",
    protocol: withServer((o) => new BatchRootRememberedFirst(o)),
  },
  {
    name: 'cert-batch-signature-cached',
    description: 'servers take a batched certificate whose signature they verified before as signed, whatever its path',
    protocol: withServer((o) => new CertBatchSignatureCached(o)),
  },
  {
    name: 'fragment-unchecked',
    description: 'STORE does not check H(fr_i) = cc[i]',
    protocol: withServer((o) => new FragmentUnchecked(o)),
  },
  {
    name: 'history-overwritable',
    description: 'STORE may overwrite a history entry',
    protocol: withServer((o) => new HistoryOverwritable(o)),
  },
  { name: 'namespace-unchecked', description: 'any signer may write any key', protocol: withServer((o) => new NamespaceUnchecked(o)) },
  {
    name: 'grant-expiry-ignored',
    description: 'STORE admission ignores grant expiry',
    protocol: withServer((o) => new GrantExpiryIgnored(o)),
  },
  {
    name: 'session-reuses-timestamp',
    description: 'one session gives two concurrent writes of a key the same timestamp',
    protocol: withWriter((o, key, value, opId) => new ReusesTimestamp(o, key, value, opId)),
  },
  {
    name: 'filter-no-writeback',
    description: 'FILTER without the metadata write-back',
    protocol: withServer((o) => new NoFilterWriteBack(o)),
  },
  {
    name: 'writeback-no-compare',
    description: 'lc overwritten by lower timestamps',
    protocol: withServer((o) => new WriteBackWithoutCompare(o)),
  },
  {
    name: 'reader-ignores-cc',
    description: 'reader does not check fragments against the cross-checksum',
    protocol: withReader((o, key, opId, target) => new IgnoresCrossChecksum(o, key, opId, target)),
  },
  {
    name: 'clock-trusts-invalid',
    description: 'CLOCK adopts candidates that are not valid',
    protocol: withWriter((o, key, value, opId) => new TrustingClock(o, key, value, opId)),
  },
  {
    name: 'clock-no-increment',
    description: 'a new write reuses the highest timestamp number seen',
    protocol: withWriter((o, key, value, opId) => new NoIncrement(o, key, value, opId)),
  },
  { name: 'gc-collects-lc', description: "garbage collection deletes lc's own entry", protocol: withServer((o) => new CollectsLc(o)) },
  {
    name: 'gc-delete-by-own-entry',
    description: "garbage collection learns that lc is a delete from its own entry, not lc's certificate",
    protocol: withServer((o) => new DeleteByOwnEntry(o)),
    // It shows only when a correct server learns of a delete it never received the STORE of.
    deleteRate: 0.5,
  },
  {
    name: 'gc-collects-pending',
    description: 'garbage collection deletes entries above lc (writes under way)',
    protocol: withServer((o) => new CollectsPending(o)),
  },
  {
    name: 'reader-trusts-newer',
    description: 'a reader moves on to a newer candidate a server names without checking it is valid',
    protocol: withReader((o, key, opId, target) => new TrustsNewer(o, key, opId, target)),
  },
  {
    name: 'lister-trusts-answers',
    description: 'a listing merges every LIST answer without checking its candidates, order or sizes',
    protocol: { ...correctProtocol, lister: (o, prefix, after, limit, opId) => new TrustsListAnswers(o, prefix, after, limit, opId) },
    lists: true,
  },
  {
    name: 'lister-t-plus-one',
    description: 'a listing merges t + 1 LIST answers instead of n − t, so servers that missed a write can hide it',
    protocol: { ...correctProtocol, lister: (o, prefix, after, limit, opId) => new ListsFromTPlusOne(o, prefix, after, limit, opId) },
    lists: true,
    // Caught only when t + 1 answers all miss a write: likeliest past servers that hide every key.
    behaviours: ['stale'],
  },
  {
    name: 'lister-furthest-horizon',
    description:
      'a listing ends its page where the answer that read furthest stopped, instead of where n − t answers all reached, so keys past a correct server’s horizon are left out',
    protocol: { ...correctProtocol, lister: (o, prefix, after, limit, opId) => new ListsToFurthestHorizon(o, prefix, after, limit, opId) },
    lists: true,
    // Caught when the answers that reach furthest all miss a key a correct server cut short before it.
    behaviours: ['stale', 'claim-collected'],
  },
  {
    name: 'reader-counts-metadata',
    description: 'a read counts metadata-only FILTER answers towards safe(c), trusting fewer than t + 1 fragments',
    protocol: withReader((o, key, opId, target) => new CountsMetadata(o, key, opId, target)),
  },
  {
    name: 'stripes-unchecked',
    description: 'a server signs the receipt for stripe 0 of a striped write without checking it holds the other stripes',
    protocol: withServer((o) => new StripesUnchecked(o)),
    stripes: true,
  },
  {
    name: 'gc-keeps-headless',
    description: 'garbage collection never deletes an upload without its stripe 0, not even once idle',
    protocol: withServer((o) => new KeepsHeadless(o)),
    stripes: true,
  },
  {
    name: 'stripes-any-timestamp',
    description: "a server finds stripe 0's listed stripes under any timestamp of the key, so stripes of two writes pass as one value",
    protocol: withServer((o) => new StripesAnyTimestamp(o)),
    stripes: true,
  },
  {
    name: 'window-unchecked',
    description: 'a server stores a write at any timestamp number, however far above lc (the timestamp window not enforced)',
    protocol: withServer((o) => new WindowUnchecked(o)),
  },
  {
    name: 'owner-no-jump',
    description: "an owner's or the admin's write does not jump over pending writes, so a revoked grantee's late COMPLETE lands above it",
    protocol: withWriter((o, key, value, opId) => new NoJump(o, key, value, opId)),
  },
  {
    name: 'jump-unclamped',
    description: "a writer jumps to the highest pending number CLOCK reports, unclamped (a Byzantine server's lie burns the key's numbers)",
    protocol: withWriter((o, key, value, opId) => new UnclampedJump(o, key, value, opId)),
    behaviours: ['lie-pending'],
  },
  {
    name: 'reader-any-stripe',
    description: 'a reader accepts a stripe whose cross-checksum the layout lists at another index than the one asked for',
    protocol: withReader((o, key, opId, target) => new AnyStripe(o, key, opId, target)),
    stripes: true,
    behaviours: ['wrong-stripe'],
  },
  {
    name: 'server-any-epoch',
    description: 'a server answers requests of another key epoch than its own (clients with an older or newer cluster file)',
    protocol: withServer((o) => new AnswersAnyEpoch(o)),
    rotate: true,
  },
  {
    name: 'server-admits-retired-epoch',
    description: 'a server stores, and signs receipts for, writes whose certificate names a retired key epoch',
    protocol: withServer((o) => new AdmitsRetiredEpoch(o)),
    rotate: true,
  },
  {
    name: 'repair-skips-reencode',
    description:
      "a rebuilding server takes the value t + 1 fragments decode to without re-encoding it and checking all n hashes of the writer's cross-checksum",
    protocol: { ...correctProtocol, repairer: (o, key, c, opId, target) => new SkipsReencodeCheck(o, key, c, opId, target) },
    rebuild: true,
    caughtBy: /encoded inconsistently|refused its own repair/,
  },
  {
    name: 'repair-proofless',
    description: "a rebuilding server's listing and repairs accept a candidate without its store proof",
    protocol: { ...correctProtocol, rebuildVerifier: (crypto, cluster) => new ProoflessVerifier(crypto, cluster) },
    rebuild: true,
    caughtBy: /a candidate that is not valid/,
  },
  {
    name: 'repair-restamps',
    description: 'a server stores a repaired entry under a new timestamp (the next number above its lc), as if it were a fresh write',
    protocol: withServer((o) => new RestampsRepair(o)),
    rebuild: true,
    caughtBy: /signed hashes|not signed for it/,
  },
  {
    name: 'host-reuses-wire-id',
    description: "the client's host sends an operation's next round under its previous round's wire id",
    protocol: withRoundBook(() => new ReusesWireId()),
  },
  {
    name: 'host-counts-ended-rounds',
    description: "the client's host counts a reply to an operation's ended round as an answer to the round in progress",
    protocol: withRoundBook(() => new CountsEndedRounds()),
  },
  {
    name: 'host-never-releases-held',
    description: "the client's host holds FILTERs back for a server that sent a frame over its limit, and never sends them",
    protocol: withRoundBook(() => new NeverReleasesHeld()),
    stripes: true,
    // Readers with a small limit, two reads in flight, frames' headers not shown (Node): FILTERs held.
    hostFaults: { smallReaders: 1, readerOverlapRate: 1, headShown: 0 },
  },
  {
    name: 'host-excuses-oversized',
    description: "the client's host blames no server for a frame over its limit, even one no correct server sends",
    protocol: withRoundBook(() => new ExcusesOversized()),
    caughtBy: /did not blame/,
  },
];
