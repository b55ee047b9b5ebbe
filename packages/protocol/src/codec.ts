/**
 * Binary wire format, version 1. A frame is `version u8 | type u8 | body`; integers are
 * big-endian, variable fields are length-prefixed, and every length and count is bounded
 * before use. The decoder returns fragments as views into the frame (no copies).
 *
 * Body fields, in order (see `encodeBody`): key (u16 length + UTF-8), opId (u64), then
 * per type. A stripe index (u32) travels with fragments so values split into several
 * stripes will not need a format change.
 */
import { NONCE_LENGTH, type Candidate } from './candidate.js';
import { MAX_SERVERS, MAX_VALUE_LENGTH } from './config.js';
import type { CrossChecksum } from './cross-checksum.js';
import { HASH_LENGTH } from './crypto.js';
import { ERROR_CODES, ProtocolError, type ProtocolErrorCode } from './errors.js';
import type { Message } from './messages.js';
import { WRITER_ID_LENGTH, type Timestamp } from './timestamp.js';

/** The only version this code speaks. */
export const WIRE_VERSION = 1;
/** Longest key name, in UTF-8 bytes. */
export const MAX_KEY_LENGTH = 1024;
/** Longest ERROR message, in UTF-8 bytes. */
export const MAX_ERROR_MESSAGE_LENGTH = 1024;

const TYPE_CODES = {
  CLOCK: 0x01,
  STORE: 0x02,
  COMPLETE: 0x03,
  COLLECT: 0x04,
  FILTER: 0x05,
  REPAIR: 0x06,
  CLOCK_ACK: 0x81,
  STORE_ACK: 0x82,
  COMPLETE_ACK: 0x83,
  COLLECT_ACK: 0x84,
  FILTER_ACK: 0x85,
  REPAIR_ACK: 0x86,
  ERROR: 0xff,
} as const satisfies Record<Message['type'], number>;
const TYPE_NAMES = new Map<number, Message['type']>(
  Object.entries(TYPE_CODES).map(([name, code]) => [code, name as Message['type']]),
);

/** Bounds the decoder cannot infer from the frame. */
export interface DecodeOptions {
  /** Servers in the cluster: every MAC vector and cross-checksum has exactly `n` entries. */
  readonly n: number;
  /** Largest fragment accepted; defaults to the largest value the codec handles. */
  readonly maxFragmentLength?: number;
}

const textEncoder = new TextEncoder();
const textDecoder = new TextDecoder('utf-8', { fatal: true });

class Writer {
  readonly parts: Uint8Array[] = [];
  length = 0;
  #push(b: Uint8Array) {
    this.parts.push(b);
    this.length += b.length;
  }
  u8(x: number) {
    this.#push(Uint8Array.of(x));
  }
  u16(x: number) {
    this.#push(Uint8Array.of(x >>> 8, x & 0xff));
  }
  u32(x: number) {
    const b = new Uint8Array(4);
    new DataView(b.buffer).setUint32(0, x);
    this.#push(b);
  }
  u64(x: number) {
    const b = new Uint8Array(8);
    const v = new DataView(b.buffer);
    v.setUint32(0, Math.floor(x / 2 ** 32));
    v.setUint32(4, x >>> 0);
    this.#push(b);
  }
  fixed(b: Uint8Array, len: number, what: string) {
    if (b.length !== len) throw new ProtocolError('INVALID_ARGUMENT', `${what} must be ${len} bytes, got ${b.length}`);
    this.#push(b);
  }
  bytes(b: Uint8Array) {
    this.u32(b.length);
    this.#push(b);
  }
  string(s: string, max: number, what: string) {
    const b = textEncoder.encode(s);
    if (b.length > max) throw new ProtocolError('INVALID_ARGUMENT', `${what} longer than ${max} bytes`);
    this.u16(b.length);
    this.#push(b);
  }
  finish(): Uint8Array {
    const out = new Uint8Array(this.length);
    let off = 0;
    for (const p of this.parts) {
      out.set(p, off);
      off += p.length;
    }
    return out;
  }
}

function checkInt(x: number, max: number, what: string) {
  if (!Number.isSafeInteger(x) || x < 0 || x > max) throw new ProtocolError('INVALID_ARGUMENT', `${what} out of range: ${x}`);
}

function writeTs(w: Writer, ts: Timestamp) {
  checkInt(ts.num, Number.MAX_SAFE_INTEGER, 'timestamp num');
  w.u64(ts.num);
  w.fixed(ts.writerId, WRITER_ID_LENGTH, 'writerId');
  w.fixed(ts.mac, HASH_LENGTH, 'timestamp MAC');
}

function writeHashes(w: Writer, hashes: readonly Uint8Array[], what: string) {
  if (hashes.length < 1 || hashes.length > MAX_SERVERS) throw new ProtocolError('INVALID_ARGUMENT', `${what} needs 1..${MAX_SERVERS} entries`);
  w.u8(hashes.length);
  for (const h of hashes) w.fixed(h, HASH_LENGTH, what);
}

function writeCandidate(w: Writer, c: Candidate) {
  writeTs(w, c.ts);
  w.fixed(c.nonce, NONCE_LENGTH, 'nonce');
  writeHashes(w, c.vec, 'vec');
}

function writeCandidates(w: Writer, cs: readonly Candidate[]) {
  if (cs.length > MAX_SERVERS) throw new ProtocolError('INVALID_ARGUMENT', 'too many candidates');
  w.u8(cs.length);
  for (const c of cs) writeCandidate(w, c);
}

function writeCc(w: Writer, cc: CrossChecksum) {
  checkInt(cc.valueLength, MAX_VALUE_LENGTH, 'value length');
  w.u8(cc.tombstone ? 1 : 0);
  w.u64(cc.valueLength);
  writeHashes(w, cc.hashes, 'cross-checksum');
}

/** Encodes a message as one frame; throws `INVALID_ARGUMENT` for a value the format cannot carry. */
export function encodeMessage(m: Message): Uint8Array {
  const w = new Writer();
  w.u8(WIRE_VERSION);
  w.u8(TYPE_CODES[m.type]);
  w.string(m.key, MAX_KEY_LENGTH, 'key');
  checkInt(m.opId, Number.MAX_SAFE_INTEGER, 'opId');
  w.u64(m.opId);
  switch (m.type) {
    case 'CLOCK':
    case 'COLLECT':
    case 'REPAIR_ACK':
      break;
    case 'STORE':
      writeTs(w, m.ts);
      checkInt(m.stripe, 0xffffffff, 'stripe');
      w.u32(m.stripe);
      w.bytes(m.fragment);
      writeCc(w, m.cc);
      w.fixed(m.nonceHash, HASH_LENGTH, 'nonce hash');
      writeHashes(w, m.vec, 'vec');
      break;
    case 'COMPLETE':
      writeCandidate(w, m.candidate);
      break;
    case 'FILTER':
      checkInt(m.stripe, 0xffffffff, 'stripe');
      w.u32(m.stripe);
      writeCandidates(w, m.candidates);
      break;
    case 'REPAIR':
      writeCandidates(w, m.candidates);
      break;
    case 'CLOCK_ACK':
    case 'STORE_ACK':
    case 'COMPLETE_ACK':
      writeTs(w, m.ts);
      break;
    case 'COLLECT_ACK':
      w.u8(m.candidate ? 1 : 0);
      if (m.candidate) writeCandidate(w, m.candidate);
      break;
    case 'FILTER_ACK':
      writeTs(w, m.ts);
      checkInt(m.stripe, 0xffffffff, 'stripe');
      w.u32(m.stripe);
      w.u8(m.entry ? 1 : 0);
      if (m.entry) {
        w.bytes(m.entry.fragment);
        writeCc(w, m.entry.cc);
        writeHashes(w, m.entry.vec, 'vec');
      }
      break;
    case 'ERROR':
      w.u8(ERROR_CODES.indexOf(m.code));
      w.string(m.message, MAX_ERROR_MESSAGE_LENGTH, 'error message');
      break;
  }
  return w.finish();
}

function invalid(message: string): never {
  throw new ProtocolError('INVALID_FRAME', message);
}

class Reader {
  #off = 0;
  readonly #view: DataView;
  constructor(
    readonly buf: Uint8Array,
    readonly options: Required<DecodeOptions>,
  ) {
    this.#view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  }
  #need(len: number, what: string) {
    if (this.buf.length - this.#off < len) invalid(`frame ends inside ${what}`);
  }
  u8(what: string): number {
    this.#need(1, what);
    return this.#view.getUint8(this.#off++);
  }
  u16(what: string): number {
    this.#need(2, what);
    const x = this.#view.getUint16(this.#off);
    this.#off += 2;
    return x;
  }
  u32(what: string): number {
    this.#need(4, what);
    const x = this.#view.getUint32(this.#off);
    this.#off += 4;
    return x;
  }
  u64(what: string, max: number): number {
    this.#need(8, what);
    const hi = this.#view.getUint32(this.#off);
    const lo = this.#view.getUint32(this.#off + 4);
    this.#off += 8;
    if (hi >= 2 ** 21) invalid(`${what} exceeds 2^53`);
    const x = hi * 2 ** 32 + lo;
    if (x > max) invalid(`${what} out of range: ${x}`);
    return x;
  }
  /** A view, not a copy. */
  fixed(len: number, what: string): Uint8Array {
    this.#need(len, what);
    const b = this.buf.subarray(this.#off, this.#off + len);
    this.#off += len;
    return b;
  }
  bool(what: string): boolean {
    const b = this.u8(what);
    if (b > 1) invalid(`${what} must be 0 or 1`);
    return b === 1;
  }
  string(max: number, what: string): string {
    const len = this.u16(what);
    if (len > max) invalid(`${what} longer than ${max} bytes`);
    try {
      return textDecoder.decode(this.fixed(len, what));
    } catch (err) {
      if (err instanceof ProtocolError) throw err;
      return invalid(`${what} is not valid UTF-8`);
    }
  }
  end() {
    if (this.#off !== this.buf.length) invalid(`${this.buf.length - this.#off} trailing bytes`);
  }
}

function readTs(r: Reader): Timestamp {
  const num = r.u64('timestamp num', Number.MAX_SAFE_INTEGER);
  return { num, writerId: r.fixed(WRITER_ID_LENGTH, 'writerId'), mac: r.fixed(HASH_LENGTH, 'timestamp MAC') };
}

function readHashes(r: Reader, what: string): Uint8Array[] {
  const count = r.u8(`${what} count`);
  if (count !== r.options.n) invalid(`${what} has ${count} entries, expected ${r.options.n}`);
  const out: Uint8Array[] = [];
  for (let i = 0; i < count; i++) out.push(r.fixed(HASH_LENGTH, what));
  return out;
}

function readCandidate(r: Reader): Candidate {
  const ts = readTs(r);
  return { ts, nonce: r.fixed(NONCE_LENGTH, 'nonce'), vec: readHashes(r, 'vec') };
}

function readCandidates(r: Reader): Candidate[] {
  const count = r.u8('candidate count');
  if (count > r.options.n) invalid(`${count} candidates, at most ${r.options.n}`);
  const out: Candidate[] = [];
  for (let i = 0; i < count; i++) out.push(readCandidate(r));
  return out;
}

function readCc(r: Reader): CrossChecksum {
  const flags = r.u8('cross-checksum flags');
  if (flags > 1) invalid('unknown cross-checksum flags');
  const valueLength = r.u64('value length', MAX_VALUE_LENGTH);
  return { tombstone: flags === 1, valueLength, hashes: readHashes(r, 'cross-checksum') };
}

function readFragment(r: Reader): Uint8Array {
  const len = r.u32('fragment length');
  if (len > r.options.maxFragmentLength) invalid(`fragment of ${len} bytes exceeds ${r.options.maxFragmentLength}`);
  return r.fixed(len, 'fragment');
}

/**
 * Decodes one frame. Throws only {@link ProtocolError}: `UNSUPPORTED_VERSION`,
 * `UNKNOWN_TYPE`, or `INVALID_FRAME` for anything malformed or out of bounds.
 */
export function decodeMessage(frame: Uint8Array, options: DecodeOptions): Message {
  if (!Number.isInteger(options.n) || options.n < 1 || options.n > MAX_SERVERS) {
    throw new ProtocolError('INVALID_ARGUMENT', `n must be in 1..${MAX_SERVERS}`);
  }
  const r = new Reader(frame, { n: options.n, maxFragmentLength: options.maxFragmentLength ?? MAX_VALUE_LENGTH });
  const version = r.u8('version');
  if (version !== WIRE_VERSION) throw new ProtocolError('UNSUPPORTED_VERSION', `wire version ${version}, this side speaks ${WIRE_VERSION}`);
  const code = r.u8('type');
  const type = TYPE_NAMES.get(code);
  if (!type) throw new ProtocolError('UNKNOWN_TYPE', `unknown message type 0x${code.toString(16)}`);
  const key = r.string(MAX_KEY_LENGTH, 'key');
  const opId = r.u64('opId', Number.MAX_SAFE_INTEGER);
  const m = decodeBody(r, type, key, opId);
  r.end();
  return m;
}

function decodeBody(r: Reader, type: Message['type'], key: string, opId: number): Message {
  switch (type) {
    case 'CLOCK':
    case 'COLLECT':
    case 'REPAIR_ACK':
      return { type, key, opId };
    case 'STORE': {
      const ts = readTs(r);
      const stripe = r.u32('stripe');
      const fragment = readFragment(r);
      const cc = readCc(r);
      const nonceHash = r.fixed(HASH_LENGTH, 'nonce hash');
      return { type, key, opId, ts, stripe, fragment, cc, nonceHash, vec: readHashes(r, 'vec') };
    }
    case 'COMPLETE':
      return { type, key, opId, candidate: readCandidate(r) };
    case 'FILTER': {
      const stripe = r.u32('stripe');
      return { type, key, opId, stripe, candidates: readCandidates(r) };
    }
    case 'REPAIR':
      return { type, key, opId, candidates: readCandidates(r) };
    case 'CLOCK_ACK':
    case 'STORE_ACK':
    case 'COMPLETE_ACK':
      return { type, key, opId, ts: readTs(r) };
    case 'COLLECT_ACK':
      return { type, key, opId, candidate: r.bool('candidate flag') ? readCandidate(r) : undefined };
    case 'FILTER_ACK': {
      const ts = readTs(r);
      const stripe = r.u32('stripe');
      if (!r.bool('entry flag')) return { type, key, opId, ts, stripe, entry: undefined };
      const fragment = readFragment(r);
      const cc = readCc(r);
      return { type, key, opId, ts, stripe, entry: { fragment, cc, vec: readHashes(r, 'vec') } };
    }
    case 'ERROR': {
      const index = r.u8('error code');
      const code: ProtocolErrorCode | undefined = ERROR_CODES[index];
      if (!code) invalid(`unknown error code ${index}`);
      return { type, key, opId, code, message: r.string(MAX_ERROR_MESSAGE_LENGTH, 'error message') };
    }
  }
}
