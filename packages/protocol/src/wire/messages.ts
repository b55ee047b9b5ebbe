/**
 * The requests of PowerStore, their acknowledgements and an error reply. Every message
 * names its key and the client's `opId`, so a client drops replies that belong to another
 * operation (late or replayed acks).
 */
import type { ReceiptBatch } from '../auth/receipt-batch.js';
import type { Candidate } from '../auth/candidate.js';
import type { WriteCertificate } from '../auth/certificate.js';
import type { CrossChecksum } from '../core/cross-checksum.js';
import type { ProtocolError, ProtocolErrorCode } from '../core/errors.js';
import type { LayoutSummary, StripeLayout } from '../core/stripes.js';
import type { Timestamp } from '../auth/timestamp.js';

interface Base {
  /** The register this message is about. */
  readonly key: string;
  /** Client-chosen operation id; replies echo it. */
  readonly opId: number;
  /**
   * The sender's key epoch (`epochs.ts`); absent is 0. A client sends its cluster file's
   * current epoch, and a correct server answers only requests of its own current epoch
   * (`CLUSTER_OUTDATED` / `SERVER_OUTDATED` otherwise); replies carry the server's.
   */
  readonly epoch?: number;
}

/**
 * What server `i` stores for a timestamp: `Hist[ts] = (fr_i, cc, cert)` (`cert` carries
 * `Nbar`), one per stripe of a striped value (`stripes.ts`). Stripe 0 holds the write
 * certificate and, for a striped value, the layout; stripes 1 … k−1 hold their own
 * cross-checksum and stripe certificate.
 */
export interface HistoryEntry {
  readonly ts: Timestamp;
  /** The stripe: 0 for a value of one stripe. */
  readonly stripe: number;
  readonly fragment: Uint8Array;
  /** The stripe's cross-checksum. */
  readonly cc: CrossChecksum;
  /** Stripe 0: the write certificate; stripes ≥ 1: their stripe certificate. */
  readonly cert: WriteCertificate;
  /** Stripe 0 of a striped value: the layout its certificate signs. */
  readonly layout?: StripeLayout;
}

/** Writer round 1: ask for `lc`, whose certificate proves its timestamp. */
export interface ClockRequest extends Base {
  readonly type: 'CLOCK';
}
/** Writer round 2: store fragment `i`, the cross-checksum and the signed certificate. */
export interface StoreRequest extends Base, HistoryEntry {
  readonly type: 'STORE';
  /**
   * The valid candidate the writer's timestamp is based on (the highest its CLOCK saw),
   * for a server whose CLOCK answer was lower or missing: it is written back before the
   * timestamp window is checked (`window.ts`), so a server that missed completed writes
   * does not refuse a timestamp that is in the window of everyone else.
   */
  readonly basis?: Candidate;
}
/** Writer round 3: reveal the nonce. */
export interface CompleteRequest extends Base {
  readonly type: 'COMPLETE';
  readonly candidate: Candidate;
}
/** Reader round 1: ask for `lc`. */
export interface CollectRequest extends Base {
  readonly type: 'COLLECT';
}
/** Reader round 2: the candidate set, to validate, write back and answer with the entry. */
export interface FilterRequest extends Base {
  readonly type: 'FILTER';
  readonly stripe: number;
  /**
   * Whether to send the entry's fragment. Readers ask `t + 1` servers for fragments and the
   * others for the entry's metadata only (timestamp, cross-checksum, certificate).
   */
  readonly fragment: boolean;
  /**
   * Whether to leave the layout out of the answer: the reader already holds the layout of
   * the version it asks for (a pinned read of a further stripe), so sending it again (32
   * bytes per stripe) would be wasted.
   */
  readonly withoutLayout?: boolean;
  /**
   * Set by a server rebuilding a write still under way (`repair.ts`): `candidates` is one
   * candidate without nonce or proof, naming the write by timestamp and certificate, and
   * the server answers with its entry of exactly that write if it holds it, without
   * checking validity and without writing anything back (nothing here is proven complete).
   */
  readonly pending?: boolean;
  readonly candidates: readonly Candidate[];
}

/**
 * Listing: the keys starting with `key` (the prefix; empty for every key) and greater than
 * `after` (in code point order; empty to start at the first), at most `limit` of them.
 */
export interface ListRequest extends Base {
  readonly type: 'LIST';
  readonly after: string;
  readonly limit: number;
}

/**
 * The writes this server holds above `lc` (under way, or never finished), for keys starting
 * with `key` and after `after`, at most `limit` keys: what a server rebuilding after a lost
 * disk asks its peers, since it may have signed receipts for some of them before the loss.
 */
export interface PendingRequest extends Base {
  readonly type: 'PENDING';
  readonly after: string;
  readonly limit: number;
}

/** The server's `lc`; `undefined` stands for `c0`. The writer believes it only if it is valid. */
export interface ClockAck extends Base {
  readonly type: 'CLOCK_ACK';
  readonly candidate: Candidate | undefined;
  /**
   * The highest timestamp number of a write this server holds above `lc` (a write under way,
   * or stripes of an upload), 0 if none: what an owner's or the admin's write jumps over
   * (`window.ts`). Unverifiable, so writers clamp it.
   */
  readonly pending: number;
}
/** The STORE for `ts` is durable; `receipt` is the server's signature saying so (see `receiptMessage`). */
export interface StoreAck extends Base {
  readonly type: 'STORE_ACK';
  readonly ts: Timestamp;
  /** The stripe stored; a stripe ≥ 1 earns no receipt (its `receipt` is zeros). */
  readonly stripe: number;
  readonly receipt: Uint8Array;
  /** With `receipt` a batch root's signature: where this write's receipt sits in the batch (`receipt-batch.ts`). */
  readonly batch?: ReceiptBatch;
}
/** The COMPLETE for `ts` was processed. */
export interface CompleteAck extends Base {
  readonly type: 'COMPLETE_ACK';
  readonly ts: Timestamp;
}
/** The server's `lc`; `undefined` stands for `c0`. */
export interface CollectAck extends Base {
  readonly type: 'COLLECT_ACK';
  readonly candidate: Candidate | undefined;
}
/** The highest valid candidate's timestamp and the server's history entry for it, if any. */
export interface FilterAck extends Base {
  readonly type: 'FILTER_ACK';
  readonly ts: Timestamp;
  readonly stripe: number;
  /**
   * `fragment` is absent when the FILTER asked for metadata only. `stripe` says which
   * stripe it is (the one asked for, or the last when the value has fewer); `cc` is that
   * stripe's, `cert` the write certificate, `layout` set for a striped value.
   */
  readonly entry:
    | {
        readonly fragment?: Uint8Array;
        readonly cc: CrossChecksum;
        readonly cert: WriteCertificate;
        readonly layout?: StripeLayout;
      }
    | undefined;
  /**
   * Set when the server no longer holds `ts`'s entry because its history was collected up
   * to a newer completed write: the server's `lc`, which the reader may move on to (it
   * checks `valid()` like any candidate).
   */
  readonly newer?: Candidate;
}
/** One key in a LIST answer: its `lc`, and `lc`'s cross-checksum when the server holds its entry. */
export interface ListEntry {
  readonly key: string;
  /** Valid like every `lc` (a certificate and a proof of `n − t` receipts); a delete's when the key was deleted. */
  readonly candidate: Candidate;
  /** What the certificate's digest covers (the value's length), when the server stored `lc`'s entry. */
  readonly cc: CrossChecksum | undefined;
  /** For a striped value, what its certificate signs in place of `cc` (the value's length). */
  readonly layout?: LayoutSummary;
}
/** The keys with a completed write (`lc`) this server holds, in code point order of their names. */
export interface ListAck extends Base {
  readonly type: 'LIST_ACK';
  readonly entries: readonly ListEntry[];
  /** Set when the server has more keys after the last entry (the limit, the reply's size or the records it may read cut it short). */
  readonly more: boolean;
  /**
   * Set only with `more`, when the server stopped at its bound on key records read in one
   * LIST (`MAX_LIST_SCAN`): it has read every key up to and including this one (at or after
   * the last entry) and listed each of them that has an `lc`, so the listing goes on after
   * it. Without it, an answer with `more` speaks for the keys up to its last entry.
   */
  readonly resumeAfter?: string;
}
/**
 * One write a PENDING answer lists: its timestamp, certificate and (stripe 0's) cross-checksum
 * and layout, which the certificate signs. Not proven complete: only the writer's signature
 * vouches for it.
 */
export interface PendingEntry {
  readonly key: string;
  readonly ts: Timestamp;
  readonly cc: CrossChecksum;
  readonly cert: WriteCertificate;
  readonly layout?: StripeLayout;
}
/** The writes with their stripe 0 this server holds above `lc`, key by key in code point order (several per key, oldest first). */
export interface PendingAck extends Base {
  readonly type: 'PENDING_ACK';
  readonly entries: readonly PendingEntry[];
  /** As in {@link ListAck}: the server has more keys after the last entry's. */
  readonly more: boolean;
  /** As in {@link ListAck}: where its reading stopped, when the bound on records read stopped it. */
  readonly resumeAfter?: string;
}
/** The request was rejected; `code` says why. */
export interface ErrorReply extends Base {
  readonly type: 'ERROR';
  readonly code: ProtocolErrorCode;
  readonly message: string;
}

/** Client → server. */
export type Request = ClockRequest | StoreRequest | CompleteRequest | CollectRequest | FilterRequest | ListRequest | PendingRequest;
/** Server → client. */
export type Reply = ClockAck | StoreAck | CompleteAck | CollectAck | FilterAck | ListAck | PendingAck | ErrorReply;
/** Anything on the wire. */
export type Message = Request | Reply;
/** The request types. */
export type RequestType = Request['type'];

/** Every request type, for hosts that label metrics by type. */
export const REQUEST_TYPES: readonly RequestType[] = ['CLOCK', 'STORE', 'COMPLETE', 'COLLECT', 'FILTER', 'LIST', 'PENDING'];

/** Whether `m` is a request (rather than a reply). */
export function isRequest(m: Message): m is Request {
  return (REQUEST_TYPES as readonly string[]).includes(m.type);
}

/** A message addressed to server `to` (0-based). */
export interface Outgoing {
  readonly to: number;
  readonly message: Request;
}

/** What a client operation asks of its host after an input. */
export interface Step<R> {
  /** Messages to send now. */
  readonly send?: readonly Outgoing[];
  /**
   * The messages extend the round in progress instead of starting a new one (a read asking
   * more servers for fragments): answers to the round's earlier messages still count.
   */
  readonly supplement?: boolean;
  /** Set once, when the operation has finished. */
  readonly result?: R;
  /**
   * Set once, when the operation cannot finish: more than `t` servers rejected a round,
   * so `n − t` acknowledgements are out of reach. The code is the one at least `t + 1`
   * servers gave (one of them correct), or `INTERNAL` when they disagree.
   */
  readonly error?: ProtocolError;
}

/** A client operation: a small state machine the host drives with replies. */
export interface ClientOperation<R> {
  /** First round's messages, one per server. */
  start(): Promise<Step<R>>;
  /** Feed one reply (ERROR replies included) from server `from`; replies after the end are ignored. */
  onReply(from: number, reply: Reply): Promise<Step<R>>;
  /** Why it has not finished, beyond which servers have not answered (for the error of one that times out). */
  waiting?(): string | undefined;
  /**
   * Servers whose answer to the current round came and cannot count towards its quorum (a
   * listing's answers that fail verification): the host fails the operation at once when
   * too few others can still answer, as when connections are refused.
   */
  unusable?(): ReadonlySet<number>;
}
