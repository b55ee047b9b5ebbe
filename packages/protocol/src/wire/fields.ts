/**
 * Field encoders shared by the frame codec (`codec.ts`) and the storage records
 * (`record.ts`): big-endian integers, length-prefixed strings and bytes, and the
 * protocol's structures. Every length and count is bounded before use; readers return
 * views into the input, not copies.
 */
import type { Candidate } from '../auth/candidate.js';
import type { StoreProof, StoreReceipt, WriteCertificate } from '../auth/certificate.js';
import { batchShapeValid, BATCH_HASH_LENGTH, siblingCount, type SignatureBatch } from '../core/signature-batch.js';
import { MAX_SERVERS, MAX_VALUE_LENGTH } from '../core/config.js';
import type { CrossChecksum } from '../core/cross-checksum.js';
import { HASH_LENGTH, PUBLIC_KEY_LENGTH, SIGNATURE_LENGTH } from '../core/crypto.js';
import { ProtocolError } from '../core/errors.js';
import { MAX_PREFIX_LENGTH, type Grant } from '../auth/grant.js';
import { WRITER_ID_LENGTH, type Timestamp } from '../auth/timestamp.js';
import { NONCE_LENGTH } from '../auth/candidate.js';
import { MAX_STRIPED_LENGTH, MAX_STRIPES, type LayoutSummary, type StripeLayout } from '../core/stripes.js';

const textEncoder = new TextEncoder();
const textDecoder = new TextDecoder('utf-8', { fatal: true });

function bad(message: string): never {
  throw new ProtocolError('INVALID_ARGUMENT', message);
}

/** Fields up to this long are copied into the writer's current chunk; longer ones (fragments) are kept by reference until `finish`. */
const COPY_BELOW = 512;
/** The first chunk's size; each next one doubles, up to {@link MAX_CHUNK}. */
const FIRST_CHUNK = 256;
const MAX_CHUNK = 64 * 1024;
/** Where a measuring writer's integers go (nowhere anyone reads). */
const SCRATCH = new Uint8Array(8);

/**
 * Appends fields; `finish` joins them once. Throws `INVALID_ARGUMENT` for values the format
 * cannot carry. Small fields are written straight into chunks of memory (a frame of a
 * thousand candidates has tens of thousands of them: one allocation each was most of what
 * encoding cost); large byte arrays are kept as they are and copied once, by `finish`.
 */
export class ByteWriter {
  /** What is written before the current chunk's unfinished part: views of filled chunks and large fields. */
  readonly #parts: Uint8Array[] = [];
  #chunk = new Uint8Array(FIRST_CHUNK);
  /** Where the current chunk's bytes not yet in `#parts` start, and where the next byte goes. */
  #start = 0;
  #pos = 0;
  #length = 0;
  readonly #measuring: boolean;

  /** `measuring`: the writer only counts what is written (see `length`); it cannot `finish`. */
  constructor(measuring = false) {
    this.#measuring = measuring;
    if (measuring) this.#chunk = SCRATCH;
  }

  /** Room for `len` more bytes in the current chunk, moving to a new one if needed. */
  #room(len: number): Uint8Array {
    if (this.#measuring) {
      this.#length += len;
      this.#pos = 0;
      return SCRATCH;
    }
    if (this.#chunk.length - this.#pos < len) {
      if (this.#pos > this.#start) this.#parts.push(this.#chunk.subarray(this.#start, this.#pos));
      this.#chunk = new Uint8Array(Math.max(len, Math.min(MAX_CHUNK, 2 * this.#chunk.length)));
      this.#start = this.#pos = 0;
    }
    this.#length += len;
    return this.#chunk;
  }
  #push(b: Uint8Array) {
    if (this.#measuring) {
      this.#length += b.length;
      return;
    }
    if (b.length < COPY_BELOW) {
      this.#room(b.length).set(b, this.#pos);
      this.#pos += b.length;
      return;
    }
    if (this.#pos > this.#start) this.#parts.push(this.#chunk.subarray(this.#start, this.#pos));
    this.#start = this.#pos;
    this.#parts.push(b);
    this.#length += b.length;
  }
  u8(x: number) {
    this.#room(1)[this.#pos++] = x;
  }
  u16(x: number) {
    const c = this.#room(2);
    c[this.#pos++] = x >>> 8;
    c[this.#pos++] = x;
  }
  u32(x: number, what = 'u32') {
    if (!Number.isInteger(x) || x < 0 || x > 0xffffffff) bad(`${what} out of range: ${x}`);
    this.#u32(x);
  }
  #u32(x: number) {
    const c = this.#room(4);
    c[this.#pos++] = x >>> 24;
    c[this.#pos++] = x >>> 16;
    c[this.#pos++] = x >>> 8;
    c[this.#pos++] = x;
  }
  u64(x: number, what: string, max = Number.MAX_SAFE_INTEGER) {
    if (!Number.isSafeInteger(x) || x < 0 || x > max) bad(`${what} out of range: ${x}`);
    this.#u32(Math.floor(x / 2 ** 32));
    this.#u32(x >>> 0);
  }
  fixed(b: Uint8Array, len: number, what: string) {
    if (b.length !== len) bad(`${what} must be ${len} bytes, got ${b.length}`);
    this.#push(b);
  }
  bytes(b: Uint8Array) {
    this.u32(b.length, 'length');
    this.#push(b);
  }
  string(s: string, max: number, what: string) {
    const b = textEncoder.encode(s);
    if (b.length > max) bad(`${what} longer than ${max} bytes`);
    this.u16(b.length);
    this.#push(b);
  }
  /** Bytes appended so far. */
  get length(): number {
    return this.#length;
  }
  /**
   * The fields joined. `alloc` supplies the memory (at least `length` bytes; what is
   * returned is its first `length`, every one written here), for a host that recycles
   * the buffers of large frames.
   */
  finish(alloc?: (length: number) => Uint8Array): Uint8Array {
    if (this.#measuring) throw new Error('a measuring ByteWriter has nothing to finish');
    const out = alloc ? alloc(this.#length).subarray(0, this.#length) : new Uint8Array(this.#length);
    let off = 0;
    for (const p of this.#parts) {
      out.set(p, off);
      off += p.length;
    }
    out.set(this.#chunk.subarray(this.#start, this.#pos), off);
    return out;
  }
}

/** Reads fields in order; throws {@link ProtocolError} `INVALID_FRAME` for anything malformed. */
export class ByteReader {
  #off = 0;
  readonly #view: DataView;
  constructor(
    readonly buf: Uint8Array,
    /** Servers in the cluster: every cross-checksum has exactly `n` entries. */
    readonly n: number,
    /** Largest fragment accepted. */
    readonly maxFragmentLength: number,
    /** Whether receipts carry a batch field (records of version 7 on, every frame); older records' do not. */
    readonly receiptBatches = true,
  ) {
    this.#view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  }
  static invalid(message: string): never {
    throw new ProtocolError('INVALID_FRAME', message);
  }
  /** Bytes not read yet. */
  get remaining(): number {
    return this.buf.length - this.#off;
  }
  #need(len: number, what: string) {
    if (this.buf.length - this.#off < len) ByteReader.invalid(`frame ends inside ${what}`);
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
  u64(what: string, max = Number.MAX_SAFE_INTEGER): number {
    this.#need(8, what);
    const hi = this.#view.getUint32(this.#off);
    const lo = this.#view.getUint32(this.#off + 4);
    this.#off += 8;
    if (hi >= 2 ** 21) ByteReader.invalid(`${what} exceeds 2^53`);
    const x = hi * 2 ** 32 + lo;
    if (x > max) ByteReader.invalid(`${what} out of range: ${x}`);
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
    if (b > 1) ByteReader.invalid(`${what} must be 0 or 1`);
    return b === 1;
  }
  string(max: number, what: string): string {
    const len = this.u16(what);
    if (len > max) ByteReader.invalid(`${what} longer than ${max} bytes`);
    try {
      return textDecoder.decode(this.fixed(len, what));
    } catch (err) {
      if (err instanceof ProtocolError) throw err;
      return ByteReader.invalid(`${what} is not valid UTF-8`);
    }
  }
  /** Fails unless every byte was read. */
  end() {
    if (this.#off !== this.buf.length) ByteReader.invalid(`${this.buf.length - this.#off} trailing bytes`);
  }
}

// ----------------------------------------------------------------- protocol structures

export function writeTs(w: ByteWriter, ts: Timestamp) {
  w.u64(ts.num, 'timestamp num');
  w.fixed(ts.writerId, WRITER_ID_LENGTH, 'writerId');
}

export function readTs(r: ByteReader): Timestamp {
  const num = r.u64('timestamp num');
  return { num, writerId: r.fixed(WRITER_ID_LENGTH, 'writerId') };
}

export function writeGrant(w: ByteWriter, g: Grant) {
  w.fixed(g.issuer, PUBLIC_KEY_LENGTH, 'grant issuer');
  w.fixed(g.grantee, PUBLIC_KEY_LENGTH, 'grant grantee');
  w.string(g.prefix, MAX_PREFIX_LENGTH, 'grant prefix');
  w.u64(g.expiresAt, 'grant expiry');
  w.fixed(g.signature, SIGNATURE_LENGTH, 'grant signature');
}

export function readGrant(r: ByteReader): Grant {
  const issuer = r.fixed(PUBLIC_KEY_LENGTH, 'grant issuer');
  const grantee = r.fixed(PUBLIC_KEY_LENGTH, 'grant grantee');
  const prefix = r.string(MAX_PREFIX_LENGTH, 'grant prefix');
  const expiresAt = r.u64('grant expiry');
  return { issuer, grantee, prefix, expiresAt, signature: r.fixed(SIGNATURE_LENGTH, 'grant signature') };
}

/**
 * Bits of a certificate's flags byte: a grant follows; the write is a delete; its key epoch
 * follows (a `u32` ≥ 1, after the grant; epoch 0 is the bit unset, so such a certificate is
 * encoded exactly as before key epochs existed); a batch path follows; the value is in an
 * encrypted or a public envelope (at most one of the two).
 */
const CERT_GRANT = 1;
const CERT_TOMBSTONE = 2;
const CERT_EPOCH = 4;
const CERT_BATCH = 8;
const CERT_ENCRYPTED = 16;
const CERT_PUBLIC = 32;
const CERT_FLAGS = CERT_GRANT | CERT_TOMBSTONE | CERT_EPOCH | CERT_BATCH | CERT_ENCRYPTED | CERT_PUBLIC;

export function writeCert(w: ByteWriter, c: WriteCertificate) {
  w.fixed(c.nonceHash, HASH_LENGTH, 'nonce hash');
  w.fixed(c.ccDigest, HASH_LENGTH, 'cross-checksum digest');
  w.fixed(c.signer, PUBLIC_KEY_LENGTH, 'signer');
  w.fixed(c.signature, SIGNATURE_LENGTH, 'signature');
  w.u8(
    (c.grant ? CERT_GRANT : 0) |
      (c.tombstone ? CERT_TOMBSTONE : 0) |
      (c.epoch ? CERT_EPOCH : 0) |
      (c.batch ? CERT_BATCH : 0) |
      (c.envelope === 'encrypted' ? CERT_ENCRYPTED : c.envelope === 'public' ? CERT_PUBLIC : 0),
  );
  if (c.grant) writeGrant(w, c.grant);
  if (c.epoch) w.u32(c.epoch, 'certificate epoch');
  if (c.batch) writeSignatureBatch(w, c.batch);
}

export function readCert(r: ByteReader): WriteCertificate {
  const nonceHash = r.fixed(HASH_LENGTH, 'nonce hash');
  const ccDigest = r.fixed(HASH_LENGTH, 'cross-checksum digest');
  const signer = r.fixed(PUBLIC_KEY_LENGTH, 'signer');
  const signature = r.fixed(SIGNATURE_LENGTH, 'signature');
  const flags = r.u8('certificate flags');
  if (flags & ~CERT_FLAGS) ByteReader.invalid(`unknown certificate flags ${flags}`);
  if (flags & CERT_ENCRYPTED && flags & CERT_PUBLIC) ByteReader.invalid('a certificate names two envelopes');
  const envelope = flags & CERT_ENCRYPTED ? 'encrypted' : flags & CERT_PUBLIC ? 'public' : undefined;
  const grant = flags & CERT_GRANT ? readGrant(r) : undefined;
  const tombstone = (flags & CERT_TOMBSTONE) !== 0;
  const epoch = flags & CERT_EPOCH ? r.u32('certificate epoch') : undefined;
  // One encoding per certificate: epoch 0 is the bit unset.
  if (epoch === 0) ByteReader.invalid('a certificate epoch of 0 is encoded without the epoch flag');
  const batch = flags & CERT_BATCH ? readSignatureBatch(r) : undefined;
  // The same for a batch: no path is the bit unset.
  if (flags & CERT_BATCH && !batch) ByteReader.invalid('a certificate batch of 0 is encoded without the batch flag');
  return {
    nonceHash,
    ccDigest,
    signer,
    signature,
    grant,
    tombstone,
    ...(envelope ? { envelope } : {}),
    ...(epoch ? { epoch } : {}),
    ...(batch ? { batch } : {}),
  };
}

export function writeProof(w: ByteWriter, proof: StoreProof) {
  if (proof.length > MAX_SERVERS) bad('too many receipts');
  w.u8(proof.length);
  for (const r of proof) {
    if (!Number.isInteger(r.server) || r.server < 0 || r.server >= MAX_SERVERS) bad(`receipt server index out of range: ${r.server}`);
    w.u8(r.server);
    w.fixed(r.signature, SIGNATURE_LENGTH, 'receipt');
    writeSignatureBatch(w, r.batch);
  }
}

/** A batch path (a receipt's, a certificate's): `count u16` (0: none), then `index u16` and the sibling hashes. */
export function writeSignatureBatch(w: ByteWriter, b: SignatureBatch | undefined) {
  if (!b) return w.u16(0);
  if (!batchShapeValid(b.index, b.count)) bad(`batch position ${b.index} of ${b.count}`);
  if (b.siblings.length !== siblingCount(b.index, b.count)) bad('batch path of the wrong length');
  w.u16(b.count);
  w.u16(b.index);
  for (const h of b.siblings) w.fixed(h, BATCH_HASH_LENGTH, 'batch hash');
}

export function readSignatureBatch(r: ByteReader): SignatureBatch | undefined {
  const count = r.u16('batch size');
  if (count === 0) return undefined;
  const index = r.u16('batch position');
  if (!batchShapeValid(index, count)) ByteReader.invalid(`batch position ${index} of ${count}`);
  const siblings: Uint8Array[] = [];
  for (let i = siblingCount(index, count); i > 0; i--) siblings.push(r.fixed(BATCH_HASH_LENGTH, 'batch hash'));
  return { index, count, siblings };
}

export function readProof(r: ByteReader): StoreProof {
  const count = r.u8('receipt count');
  if (count > r.n) ByteReader.invalid(`${count} receipts, at most ${r.n}`);
  const proof: StoreReceipt[] = [];
  for (let i = 0; i < count; i++) {
    const server = r.u8('receipt server');
    if (server >= r.n) ByteReader.invalid(`receipt of server ${server}, the cluster has ${r.n}`);
    const signature = r.fixed(SIGNATURE_LENGTH, 'receipt');
    const batch = r.receiptBatches ? readSignatureBatch(r) : undefined;
    proof.push(batch ? { server, signature, batch } : { server, signature });
  }
  return proof;
}

export function writeCandidate(w: ByteWriter, c: Candidate) {
  writeTs(w, c.ts);
  w.fixed(c.nonce, NONCE_LENGTH, 'nonce');
  writeCert(w, c.cert);
  writeProof(w, c.proof);
}

export function readCandidate(r: ByteReader): Candidate {
  const ts = readTs(r);
  const nonce = r.fixed(NONCE_LENGTH, 'nonce');
  const cert = readCert(r);
  return { ts, nonce, cert, proof: readProof(r) };
}

export function writeOptionalCandidate(w: ByteWriter, c: Candidate | undefined) {
  w.u8(c ? 1 : 0);
  if (c) writeCandidate(w, c);
}

export function readOptionalCandidate(r: ByteReader): Candidate | undefined {
  return r.bool('candidate flag') ? readCandidate(r) : undefined;
}

export function writeCc(w: ByteWriter, cc: CrossChecksum) {
  w.u8(cc.tombstone ? 1 : 0);
  w.u64(cc.valueLength, 'value length', MAX_VALUE_LENGTH);
  if (cc.hashes.length < 1 || cc.hashes.length > MAX_SERVERS) bad(`cross-checksum needs 1..${MAX_SERVERS} entries`);
  w.u8(cc.hashes.length);
  for (const h of cc.hashes) w.fixed(h, HASH_LENGTH, 'cross-checksum');
}

export function readCc(r: ByteReader): CrossChecksum {
  const flags = r.u8('cross-checksum flags');
  if (flags > 1) ByteReader.invalid('unknown cross-checksum flags');
  const valueLength = r.u64('value length', MAX_VALUE_LENGTH);
  const count = r.u8('cross-checksum count');
  if (count !== r.n) ByteReader.invalid(`cross-checksum has ${count} entries, expected ${r.n}`);
  const hashes: Uint8Array[] = [];
  for (let i = 0; i < count; i++) hashes.push(r.fixed(HASH_LENGTH, 'cross-checksum'));
  return { tombstone: flags === 1, valueLength, hashes };
}

/** An optional stripe layout: a flag, then length, stripe size and the per-stripe digests. */
export function writeOptionalLayout(w: ByteWriter, layout: StripeLayout | undefined) {
  w.u8(layout ? 1 : 0);
  if (!layout) return;
  w.u64(layout.valueLength, 'striped value length', MAX_STRIPED_LENGTH);
  w.u32(layout.stripeSize, 'stripe size');
  if (layout.digests.length > MAX_STRIPES) bad(`more than ${MAX_STRIPES} stripes`);
  w.u32(layout.digests.length, 'stripe count');
  for (const d of layout.digests) w.fixed(d, HASH_LENGTH, 'stripe digest');
}

export function readOptionalLayout(r: ByteReader): StripeLayout | undefined {
  if (!r.bool('layout flag')) return undefined;
  const valueLength = r.u64('striped value length', MAX_STRIPED_LENGTH);
  const stripeSize = r.u32('stripe size');
  const count = r.u32('stripe count');
  if (count > MAX_STRIPES || count > r.remaining / HASH_LENGTH) ByteReader.invalid(`layout claims ${count} stripes`);
  const digests: Uint8Array[] = [];
  for (let i = 0; i < count; i++) digests.push(r.fixed(HASH_LENGTH, 'stripe digest'));
  return { valueLength, stripeSize, digests };
}

/** An optional layout summary (LIST). */
export function writeOptionalSummary(w: ByteWriter, s: LayoutSummary | undefined) {
  w.u8(s ? 1 : 0);
  if (!s) return;
  w.u64(s.valueLength, 'striped value length', MAX_STRIPED_LENGTH);
  w.u32(s.stripeSize, 'stripe size');
  w.fixed(s.root, HASH_LENGTH, 'layout root');
}

export function readOptionalSummary(r: ByteReader): LayoutSummary | undefined {
  if (!r.bool('layout flag')) return undefined;
  const valueLength = r.u64('striped value length', MAX_STRIPED_LENGTH);
  const stripeSize = r.u32('stripe size');
  return { valueLength, stripeSize, root: r.fixed(HASH_LENGTH, 'layout root') };
}

export function writeFragment(w: ByteWriter, fragment: Uint8Array) {
  w.bytes(fragment);
}

export function readFragment(r: ByteReader): Uint8Array {
  const len = r.u32('fragment length');
  if (len > r.maxFragmentLength) ByteReader.invalid(`fragment of ${len} bytes exceeds ${r.maxFragmentLength}`);
  return r.fixed(len, 'fragment');
}

/** Bytes of `s` in UTF-8, as `TextEncoder` encodes it (a lone surrogate as U+FFFD), without encoding it. */
export function utf8Length(s: string): number {
  let n = s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) continue;
    if (c < 0x800) n += 1;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n += 2; // a pair: 4 bytes for 2 units
      i++;
    } else n += 2;
  }
  return n;
}

/** Encoded size of a batch path field (`writeSignatureBatch`). */
function signatureBatchSize(b: SignatureBatch | undefined): number {
  return b ? 4 + BATCH_HASH_LENGTH * b.siblings.length : 2;
}

/** Encoded size of a candidate (`writeCandidate`). */
export function candidateSize(c: Candidate): number {
  let proof = 1;
  for (const r of c.proof) proof += 1 + SIGNATURE_LENGTH + signatureBatchSize(r.batch);
  return 8 + WRITER_ID_LENGTH + NONCE_LENGTH + certificateSize(c.cert) + proof;
}

/** Encoded size of a cross-checksum (`writeCc`). */
export function ccSize(cc: CrossChecksum): number {
  return 1 + 8 + 1 + HASH_LENGTH * cc.hashes.length;
}

/** Encoded size of a certificate: what it adds to a stored entry. */
export function certificateSize(c: WriteCertificate): number {
  const grant = c.grant ? 2 * PUBLIC_KEY_LENGTH + 2 + utf8Length(c.grant.prefix) + 8 + SIGNATURE_LENGTH : 0;
  const batch = c.batch ? 4 + BATCH_HASH_LENGTH * c.batch.siblings.length : 0;
  return 2 * HASH_LENGTH + PUBLIC_KEY_LENGTH + SIGNATURE_LENGTH + 1 + grant + (c.epoch ? 4 : 0) + batch;
}
