/**
 * Binary wire format, version 6: the one module that owns what a frame looks like.
 * `version u8 | type u8 | key (u16 length + UTF-8) | opId u64 | epoch u32 | body`; integers are
 * big-endian, variable fields are length-prefixed, and every length and count is bounded
 * before use (`fields.ts`). The decoder returns fragments as views into the frame.
 */
import { MAX_SERVERS, MAX_VALUE_LENGTH } from '../core/config.js';
import { HASH_LENGTH, SIGNATURE_LENGTH } from '../core/crypto.js';
import { ERROR_CODE_NUMBERS, ProtocolError, errorCodeOf } from '../core/errors.js';
import { MAX_LIST_LIMIT } from './list-bounds.js';
import type { FilterAck, ListEntry, Message, PendingEntry } from './messages.js';
import {
  ByteReader,
  ByteWriter,
  candidateSize,
  ccSize,
  utf8Length,
  readCandidate,
  readSignatureBatch,
  readCc,
  readOptionalLayout,
  readOptionalSummary,
  writeOptionalLayout,
  writeOptionalSummary,
  readCert,
  readFragment,
  readOptionalCandidate,
  readTs,
  writeCandidate,
  writeSignatureBatch,
  writeCc,
  writeCert,
  writeFragment,
  writeOptionalCandidate,
  writeTs,
} from './fields.js';

/**
 * The only version this code speaks. Version 8 lets a certificate name the client envelope
 * its value is in (`WriteCertificate.envelope`), so listings can tell plaintext sizes.
 * Version 7 added bundles (`bundle.ts`: several frames
 * in one message, type 0x09). Version 6 added batch paths to receipts
 * (`receipt-batch.ts`). Version 5 added the sender's key epoch to every
 * frame's header and certificates of epochs ≥ 1 (`epochs.ts`); 4 added the pending number
 * to CLOCK_ACK, the basis to STORE (the timestamp window, `window.ts`) and LIST_ACK's
 * resume key; 7, 6, 5, 4, 3 (stripes), 2 and 1 (MAC vectors) are refused.
 */
export const WIRE_VERSION = 8;
/**
 * FILTER's flags byte: bit 0 asks for the entry's fragment, bit 1 for no layout, bit 2 for
 * the entry of a pending write (`FilterRequest.pending`); other bits are invalid.
 */
const FILTER_WANTS_FRAGMENT = 0x01;
const FILTER_WITHOUT_LAYOUT = 0x02;
const FILTER_PENDING = 0x04;
/** FILTER_ACK's entry byte: no entry, the entry with its fragment, or its metadata only. */
const ENTRY_NONE = 0;
const ENTRY_WITH_FRAGMENT = 1;
const ENTRY_METADATA_ONLY = 2;
/**
 * LIST_ACK's flags byte: bit 0 says the server has more keys; bit 1 (only with bit 0) that
 * the key its reading stopped at follows (`resumeAfter`); other bits are invalid.
 */
const LIST_MORE = 0x01;
const LIST_RESUME = 0x02;
/** Longest key name, in UTF-8 bytes. */
export const MAX_KEY_LENGTH = 1024;
/** Most entries one PENDING_ACK carries (a key may list several writes). */
export const MAX_PENDING_ENTRIES = 4 * MAX_LIST_LIMIT;
/** Longest ERROR message, in UTF-8 bytes. */
export const MAX_ERROR_MESSAGE_LENGTH = 1024;

const TYPE_CODES = {
  CLOCK: 0x01,
  STORE: 0x02,
  COMPLETE: 0x03,
  COLLECT: 0x04,
  FILTER: 0x05,
  // 0x06 was REPAIR (version 1); certificates made it unnecessary.
  LIST: 0x07,
  PENDING: 0x08,
  // 0x09 is a bundle of frames (`bundle.ts`), not a message.
  CLOCK_ACK: 0x81,
  STORE_ACK: 0x82,
  COMPLETE_ACK: 0x83,
  COLLECT_ACK: 0x84,
  FILTER_ACK: 0x85,
  LIST_ACK: 0x87,
  PENDING_ACK: 0x88,
  ERROR: 0xff,
} as const satisfies Record<Message['type'], number>;
const TYPE_NAMES = new Map<number, Message['type']>(Object.entries(TYPE_CODES).map(([name, code]) => [code, name as Message['type']]));

/** Bounds the decoder cannot infer from the frame. */
export interface DecodeOptions {
  /** Servers in the cluster: every cross-checksum has exactly `n` entries. */
  readonly n: number;
  /** Largest fragment accepted; defaults to the largest value the codec handles. */
  readonly maxFragmentLength?: number;
}

/**
 * Encodes a message as one frame; throws `INVALID_ARGUMENT` for a value the format cannot
 * carry. `alloc`: where the frame's bytes go (see {@link ByteWriter.finish}).
 */
export function encodeMessage(m: Message, alloc?: (length: number) => Uint8Array): Uint8Array {
  const w = new ByteWriter();
  w.u8(WIRE_VERSION);
  w.u8(TYPE_CODES[m.type]);
  w.string(m.key, MAX_KEY_LENGTH, 'key');
  w.u64(m.opId, 'opId');
  w.u32(m.epoch ?? 0, 'epoch');
  switch (m.type) {
    case 'CLOCK':
    case 'COLLECT':
      break;
    case 'STORE':
      writeTs(w, m.ts);
      w.u32(m.stripe, 'stripe');
      writeFragment(w, m.fragment);
      writeCc(w, m.cc);
      writeCert(w, m.cert);
      writeOptionalLayout(w, m.layout);
      writeOptionalCandidate(w, m.basis);
      break;
    case 'COMPLETE':
      writeCandidate(w, m.candidate);
      break;
    case 'FILTER':
      w.u32(m.stripe, 'stripe');
      w.u8((m.fragment ? FILTER_WANTS_FRAGMENT : 0) | (m.withoutLayout ? FILTER_WITHOUT_LAYOUT : 0) | (m.pending ? FILTER_PENDING : 0));
      if (m.candidates.length > MAX_SERVERS) throw new ProtocolError('INVALID_ARGUMENT', 'too many candidates');
      w.u8(m.candidates.length);
      for (const c of m.candidates) writeCandidate(w, c);
      break;
    case 'LIST':
    case 'PENDING':
      w.string(m.after, MAX_KEY_LENGTH, 'after');
      if (!Number.isInteger(m.limit) || m.limit < 1 || m.limit > MAX_LIST_LIMIT) {
        throw new ProtocolError('INVALID_ARGUMENT', `limit must be in 1..${MAX_LIST_LIMIT}`);
      }
      w.u16(m.limit);
      break;
    case 'CLOCK_ACK':
      writeOptionalCandidate(w, m.candidate);
      w.u64(m.pending, 'pending timestamp num');
      break;
    case 'COLLECT_ACK':
      writeOptionalCandidate(w, m.candidate);
      break;
    case 'LIST_ACK':
    case 'PENDING_ACK':
      if (m.resumeAfter !== undefined && !m.more) throw new ProtocolError('INVALID_ARGUMENT', 'resumeAfter needs more');
      w.u8((m.more ? LIST_MORE : 0) | (m.resumeAfter !== undefined ? LIST_RESUME : 0));
      if (m.resumeAfter !== undefined) w.string(m.resumeAfter, MAX_KEY_LENGTH, 'resumeAfter');
      if (m.type === 'LIST_ACK') {
        if (m.entries.length > MAX_LIST_LIMIT) throw new ProtocolError('INVALID_ARGUMENT', 'too many list entries');
        w.u16(m.entries.length);
        for (const e of m.entries) writeListEntry(w, e);
      } else {
        if (m.entries.length > MAX_PENDING_ENTRIES) throw new ProtocolError('INVALID_ARGUMENT', 'too many pending entries');
        w.u16(m.entries.length);
        for (const e of m.entries) writePendingEntry(w, e);
      }
      break;
    case 'STORE_ACK':
      writeTs(w, m.ts);
      w.u32(m.stripe, 'stripe');
      w.fixed(m.receipt, SIGNATURE_LENGTH, 'receipt');
      writeSignatureBatch(w, m.batch);
      break;
    case 'COMPLETE_ACK':
      writeTs(w, m.ts);
      break;
    case 'FILTER_ACK':
      writeTs(w, m.ts);
      w.u32(m.stripe, 'stripe');
      w.u8(!m.entry ? ENTRY_NONE : m.entry.fragment ? ENTRY_WITH_FRAGMENT : ENTRY_METADATA_ONLY);
      if (m.entry) {
        if (m.entry.fragment) writeFragment(w, m.entry.fragment);
        writeCc(w, m.entry.cc);
        writeCert(w, m.entry.cert);
        writeOptionalLayout(w, m.entry.layout);
      }
      writeOptionalCandidate(w, m.newer);
      break;
    case 'ERROR':
      w.u8(ERROR_CODE_NUMBERS[m.code]);
      w.string(m.message, MAX_ERROR_MESSAGE_LENGTH, 'error message');
      break;
  }
  return w.finish(alloc);
}

/** The flags byte of a LIST_ACK or PENDING_ACK, and the key to resume after that flag 2 announces. */
function readPaging(r: ByteReader, type: 'LIST_ACK' | 'PENDING_ACK'): { more: boolean; resumeAfter: string | undefined } {
  const flags = r.u8(`${type} flags`);
  if ((flags & ~(LIST_MORE | LIST_RESUME)) !== 0 || flags === LIST_RESUME)
    ByteReader.invalid(`unknown ${type} flags 0x${flags.toString(16)}`);
  const resumeAfter = flags & LIST_RESUME ? r.string(MAX_KEY_LENGTH, 'resumeAfter') : undefined;
  return { more: (flags & LIST_MORE) !== 0, resumeAfter };
}

function writeListEntry(w: ByteWriter, e: ListEntry): void {
  w.string(e.key, MAX_KEY_LENGTH, 'key');
  writeCandidate(w, e.candidate);
  w.u8(e.cc ? 1 : 0);
  if (e.cc) writeCc(w, e.cc);
  writeOptionalSummary(w, e.layout);
}

function writePendingEntry(w: ByteWriter, e: PendingEntry): void {
  w.string(e.key, MAX_KEY_LENGTH, 'key');
  writeTs(w, e.ts);
  writeCc(w, e.cc);
  writeCert(w, e.cert);
  writeOptionalLayout(w, e.layout);
}

/** Bytes `e` takes in a PENDING_ACK frame. */
export function pendingEntryBytes(e: PendingEntry): number {
  const w = new ByteWriter(true);
  writePendingEntry(w, e);
  return w.length;
}

/**
 * Bytes `e` takes in a LIST_ACK frame: what a server counts to keep its answer under
 * `MAX_LIST_REPLY_BYTES`. Counted from the fields' lengths (a server counts every entry it
 * lists, and writing them twice cost as much as the rest of its answer).
 */
export function listEntryBytes(e: ListEntry): number {
  return 2 + utf8Length(e.key) + candidateSize(e.candidate) + 1 + (e.cc ? ccSize(e.cc) : 0) + (e.layout ? 1 + 8 + 4 + HASH_LENGTH : 1);
}

/** What every frame starts with, readable even when the body is not. */
export interface FrameHeader {
  readonly version: number;
  /** `undefined` for a type code this side does not know. */
  readonly type: Message['type'] | undefined;
  readonly key: string;
  readonly opId: number;
}

/**
 * The message type a frame of this wire version announces, from its first two bytes
 * (nothing else is read or checked): for hosts that budget a request before decoding it.
 */
export function frameType(frame: Uint8Array): Message['type'] | undefined {
  return frame.length >= 2 && frame[0] === WIRE_VERSION ? TYPE_NAMES.get(frame[1]!) : undefined;
}

/**
 * The header of a frame of this wire version, or `undefined` when even that cannot be
 * read: what a server echoes in the ERROR reply to a frame whose body is malformed, so
 * the client can match the error to its operation.
 */
export function decodeHeader(frame: Uint8Array): FrameHeader | undefined {
  if (frame.length < 1 || frame[0] !== WIRE_VERSION) return undefined;
  try {
    const r = new ByteReader(frame, 1, 0);
    const version = r.u8('version');
    const type = TYPE_NAMES.get(r.u8('type'));
    const key = r.string(MAX_KEY_LENGTH, 'key');
    return { version, type, key, opId: r.u64('opId') };
  } catch {
    return undefined;
  }
}

/**
 * Decodes one frame. Throws only {@link ProtocolError}: `UNSUPPORTED_VERSION`,
 * `UNKNOWN_TYPE`, or `INVALID_FRAME` for anything malformed or out of bounds.
 */
export function decodeMessage(frame: Uint8Array, options: DecodeOptions): Message {
  if (!Number.isInteger(options.n) || options.n < 1 || options.n > MAX_SERVERS) {
    throw new ProtocolError('INVALID_ARGUMENT', `n must be in 1..${MAX_SERVERS}`);
  }
  const r = new ByteReader(frame, options.n, options.maxFragmentLength ?? MAX_VALUE_LENGTH);
  const version = r.u8('version');
  if (version !== WIRE_VERSION) throw new ProtocolError('UNSUPPORTED_VERSION', `wire version ${version}, this side speaks ${WIRE_VERSION}`);
  const code = r.u8('type');
  const type = TYPE_NAMES.get(code);
  if (!type) throw new ProtocolError('UNKNOWN_TYPE', `unknown message type 0x${code.toString(16)}`);
  const key = r.string(MAX_KEY_LENGTH, 'key');
  const opId = r.u64('opId');
  const epoch = r.u32('epoch');
  const m = decodeBody(r, type, key, opId);
  r.end();
  return epoch ? { ...m, epoch } : m;
}

function decodeBody(r: ByteReader, type: Message['type'], key: string, opId: number): Message {
  switch (type) {
    case 'CLOCK':
    case 'COLLECT':
      return { type, key, opId };
    case 'STORE': {
      const ts = readTs(r);
      const stripe = r.u32('stripe');
      const fragment = readFragment(r);
      const cc = readCc(r);
      const cert = readCert(r);
      const layout = readOptionalLayout(r);
      const basis = readOptionalCandidate(r);
      return { type, key, opId, ts, stripe, fragment, cc, cert, ...(layout ? { layout } : {}), ...(basis ? { basis } : {}) };
    }
    case 'COMPLETE':
      return { type, key, opId, candidate: readCandidate(r) };
    case 'FILTER': {
      const stripe = r.u32('stripe');
      const flags = r.u8('FILTER flags');
      if ((flags & ~(FILTER_WANTS_FRAGMENT | FILTER_WITHOUT_LAYOUT | FILTER_PENDING)) !== 0)
        ByteReader.invalid(`unknown FILTER flags 0x${flags.toString(16)}`);
      const count = r.u8('candidate count');
      if (count > r.n) ByteReader.invalid(`${count} candidates, at most ${r.n}`);
      if (flags & FILTER_PENDING && count !== 1) ByteReader.invalid(`a FILTER for a pending write names one write, not ${count}`);
      const candidates = Array.from({ length: count }, () => readCandidate(r));
      const fragment = (flags & FILTER_WANTS_FRAGMENT) !== 0;
      return {
        type,
        key,
        opId,
        stripe,
        fragment,
        ...(flags & FILTER_WITHOUT_LAYOUT ? { withoutLayout: true } : {}),
        ...(flags & FILTER_PENDING ? { pending: true } : {}),
        candidates,
      };
    }
    case 'LIST':
    case 'PENDING': {
      const after = r.string(MAX_KEY_LENGTH, 'after');
      const limit = r.u16('limit');
      if (limit < 1 || limit > MAX_LIST_LIMIT) ByteReader.invalid(`list limit ${limit}, must be in 1..${MAX_LIST_LIMIT}`);
      return { type, key, opId, after, limit };
    }
    case 'CLOCK_ACK':
      return { type, key, opId, candidate: readOptionalCandidate(r), pending: r.u64('pending timestamp num') };
    case 'COLLECT_ACK':
      return { type, key, opId, candidate: readOptionalCandidate(r) };
    case 'LIST_ACK': {
      const { more, resumeAfter } = readPaging(r, type);
      const count = r.u16('entry count');
      if (count > MAX_LIST_LIMIT) ByteReader.invalid(`${count} list entries, at most ${MAX_LIST_LIMIT}`);
      const entries: ListEntry[] = [];
      for (let i = 0; i < count; i++) {
        const entryKey = r.string(MAX_KEY_LENGTH, 'key');
        const candidate = readCandidate(r);
        const hasCc = r.u8('cross-checksum flag');
        if (hasCc > 1) ByteReader.invalid(`unknown cross-checksum flag ${hasCc}`);
        const cc = hasCc === 1 ? readCc(r) : undefined;
        const layout = readOptionalSummary(r);
        entries.push(layout ? { key: entryKey, candidate, cc, layout } : { key: entryKey, candidate, cc });
      }
      return resumeAfter === undefined ? { type, key, opId, entries, more } : { type, key, opId, entries, more, resumeAfter };
    }
    case 'PENDING_ACK': {
      const { more, resumeAfter } = readPaging(r, type);
      const count = r.u16('entry count');
      if (count > MAX_PENDING_ENTRIES) ByteReader.invalid(`${count} pending entries, at most ${MAX_PENDING_ENTRIES}`);
      const entries: PendingEntry[] = [];
      for (let i = 0; i < count; i++) {
        const entryKey = r.string(MAX_KEY_LENGTH, 'key');
        const ts = readTs(r);
        const cc = readCc(r);
        const cert = readCert(r);
        const layout = readOptionalLayout(r);
        entries.push(layout ? { key: entryKey, ts, cc, cert, layout } : { key: entryKey, ts, cc, cert });
      }
      return resumeAfter === undefined ? { type, key, opId, entries, more } : { type, key, opId, entries, more, resumeAfter };
    }
    case 'STORE_ACK': {
      const ts = readTs(r);
      const stripe = r.u32('stripe');
      const receipt = r.fixed(SIGNATURE_LENGTH, 'receipt');
      const batch = readSignatureBatch(r);
      return batch ? { type, key, opId, ts, stripe, receipt, batch } : { type, key, opId, ts, stripe, receipt };
    }
    case 'COMPLETE_ACK':
      return { type, key, opId, ts: readTs(r) };
    case 'FILTER_ACK': {
      const ts = readTs(r);
      const stripe = r.u32('stripe');
      let entry: FilterAck['entry'];
      const kind = r.u8('entry kind');
      if (kind > ENTRY_METADATA_ONLY) ByteReader.invalid(`unknown FILTER_ACK entry kind ${kind}`);
      if (kind === ENTRY_WITH_FRAGMENT) {
        const fragment = readFragment(r);
        const cc = readCc(r);
        const cert = readCert(r);
        const layout = readOptionalLayout(r);
        entry = layout ? { fragment, cc, cert, layout } : { fragment, cc, cert };
      } else if (kind === ENTRY_METADATA_ONLY) {
        const cc = readCc(r);
        const cert = readCert(r);
        const layout = readOptionalLayout(r);
        entry = layout ? { cc, cert, layout } : { cc, cert };
      }
      const newer = readOptionalCandidate(r);
      return newer ? { type, key, opId, ts, stripe, entry, newer } : { type, key, opId, ts, stripe, entry };
    }
    case 'ERROR': {
      const num = r.u8('error code');
      const code = errorCodeOf(num);
      if (!code) ByteReader.invalid(`unknown error code ${num}`);
      return { type, key, opId, code, message: r.string(MAX_ERROR_MESSAGE_LENGTH, 'error message') };
    }
  }
}
