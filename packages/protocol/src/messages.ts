/**
 * The six requests of M-PoWerStore, their acknowledgements and an error reply. Every
 * message names its key and the client's `opId`, so a client drops replies that belong
 * to another operation (late or replayed acks).
 */
import type { Candidate } from './candidate.js';
import type { CrossChecksum } from './cross-checksum.js';
import type { ProtocolErrorCode } from './errors.js';
import type { Timestamp } from './timestamp.js';

interface Base {
  /** The register this message is about. */
  readonly key: string;
  /** Client-chosen operation id; replies echo it. */
  readonly opId: number;
}

/** What server `i` stores for a timestamp: `Hist[ts] = (fr_i, cc, Nbar, vec)`. */
export interface HistoryEntry {
  readonly ts: Timestamp;
  /** Reserved for values carried in several stripes; always 0 today. */
  readonly stripe: number;
  readonly fragment: Uint8Array;
  readonly cc: CrossChecksum;
  readonly nonceHash: Uint8Array;
  readonly vec: readonly Uint8Array[];
}

/** Writer round 1: ask for `lc.ts`. */
export interface ClockRequest extends Base {
  readonly type: 'CLOCK';
}
/** Writer round 2: store fragment `i` and its metadata. */
export interface StoreRequest extends Base, HistoryEntry {
  readonly type: 'STORE';
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
/** Reader round 2: the candidate set, to validate, write back and answer with fragments. */
export interface FilterRequest extends Base {
  readonly type: 'FILTER';
  readonly stripe: number;
  readonly candidates: readonly Candidate[];
}
/**
 * Reader round 3 (under attack only): repaired candidates to write back. The paper sends
 * one; several (all sharing the selected timestamp, one per distinct nonce) let a reader
 * repair without trusting a nonce it cannot check.
 */
export interface RepairRequest extends Base {
  readonly type: 'REPAIR';
  readonly candidates: readonly Candidate[];
}

/** `lc.ts` of the server. */
export interface ClockAck extends Base {
  readonly type: 'CLOCK_ACK';
  readonly ts: Timestamp;
}
/** The STORE for `ts` is durable. */
export interface StoreAck extends Base {
  readonly type: 'STORE_ACK';
  readonly ts: Timestamp;
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
  readonly entry: { readonly fragment: Uint8Array; readonly cc: CrossChecksum; readonly vec: readonly Uint8Array[] } | undefined;
}
/** The REPAIR was processed. */
export interface RepairAck extends Base {
  readonly type: 'REPAIR_ACK';
}
/** The request was rejected; `code` says why. */
export interface ErrorReply extends Base {
  readonly type: 'ERROR';
  readonly code: ProtocolErrorCode;
  readonly message: string;
}

/** Client → server. */
export type Request = ClockRequest | StoreRequest | CompleteRequest | CollectRequest | FilterRequest | RepairRequest;
/** Server → client. */
export type Reply = ClockAck | StoreAck | CompleteAck | CollectAck | FilterAck | RepairAck | ErrorReply;
/** Anything on the wire. */
export type Message = Request | Reply;

/** A message addressed to server `to` (0-based). */
export interface Outgoing {
  readonly to: number;
  readonly message: Request;
}

/** What a client operation asks of its host after an input. */
export interface Step<R> {
  /** Messages to send now. */
  readonly send?: readonly Outgoing[];
  /** Set once, when the operation has finished. */
  readonly result?: R;
}

/** A client operation: a small state machine the host drives with replies. */
export interface ClientOperation<R> {
  /** First round's messages, one per server. */
  start(): Promise<Step<R>>;
  /** Feed one reply from server `from`; replies after the result are ignored. */
  onReply(from: number, reply: Reply): Promise<Step<R>>;
}
