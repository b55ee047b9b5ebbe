import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  decodeEntryMetaRecord,
  decodeHeader,
  frameType,
  decodeKeyRecord,
  decodeMessage,
  encodeEntryMetaRecord,
  encodeKeyRecord,
  encodeMessage,
  MAX_KEY_LENGTH,
  ProtocolError,
  WIRE_VERSION,
  type Message,
} from '../src/index.js';
import { ERROR_CODE_NUMBERS } from '../src/core/errors.js';
import { RECORD_VERSION } from '../src/storage/record.js';
import { candidate, cc, certificate, fragment, message, timestamp } from './arbitraries.js';

const N = 4;

/** Anything but a typed error escaping the decoder is a bug. */
function decodeOrTypedError(frame: Uint8Array, n = N): Message | ProtocolError {
  try {
    return decodeMessage(frame, { n });
  } catch (err) {
    if (err instanceof ProtocolError && ['INVALID_FRAME', 'UNSUPPORTED_VERSION', 'UNKNOWN_TYPE'].includes(err.code)) return err;
    throw err;
  }
}

const ts = { num: 1, writerId: new Uint8Array(32) };
const hashes = () => Array.from({ length: N }, () => new Uint8Array(32));
const cert = {
  nonceHash: new Uint8Array(32),
  ccDigest: new Uint8Array(32),
  signer: new Uint8Array(32),
  signature: new Uint8Array(64),
  tombstone: false,
  grant: undefined,
};

describe('wire codec', () => {
  it('round-trips every message', () => {
    fc.assert(
      fc.property(message(N), (m) => {
        expect(decodeMessage(encodeMessage(m), { n: N })).toEqual(m);
      }),
      { numRuns: 2000 },
    );
  });

  it('round-trips for every cluster size up to t = 3', () => {
    for (const n of [4, 7, 10]) {
      fc.assert(
        fc.property(message(n), (m) => {
          expect(decodeMessage(encodeMessage(m), { n })).toEqual(m);
        }),
        { numRuns: 200 },
      );
    }
  });

  it('returns fragments as views into the frame, not copies', () => {
    const frame = encodeMessage({
      type: 'FILTER_ACK',
      key: 'k',
      opId: 1,
      ts,
      stripe: 0,
      entry: { fragment: Uint8Array.from([1, 2, 3, 4, 5]), cc: { tombstone: false, valueLength: 10, hashes: hashes() }, cert },
    });
    const m = decodeMessage(frame, { n: N });
    if (m.type !== 'FILTER_ACK' || !m.entry) throw new Error('wrong type');
    expect(m.entry.fragment?.buffer).toBe(frame.buffer);
    expect([...(m.entry.fragment ?? [])]).toEqual([1, 2, 3, 4, 5]);
  });

  it('never throws anything but typed errors on random bytes', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), (bytes) => {
        decodeOrTypedError(bytes);
      }),
      { numRuns: 5000 },
    );
  });

  it('never throws anything but typed errors on mutated valid frames', () => {
    const mutation = fc.oneof(
      fc.record({ kind: fc.constant('flip' as const), at: fc.nat(), bit: fc.nat({ max: 7 }) }),
      fc.record({ kind: fc.constant('truncate' as const), at: fc.nat() }),
      fc.record({ kind: fc.constant('extend' as const), extra: fc.uint8Array({ minLength: 1, maxLength: 8 }) }),
      fc.record({ kind: fc.constant('set' as const), at: fc.nat(), value: fc.constantFrom(0, 1, 0x7f, 0x80, 0xff) }),
    );
    fc.assert(
      fc.property(message(N), fc.array(mutation, { minLength: 1, maxLength: 4 }), (m, mutations) => {
        let frame = encodeMessage(m);
        for (const mu of mutations) {
          if (mu.kind === 'flip' && frame.length > 0) {
            frame = frame.slice();
            frame[mu.at % frame.length]! ^= 1 << mu.bit;
          } else if (mu.kind === 'set' && frame.length > 0) {
            frame = frame.slice();
            frame[mu.at % frame.length] = mu.value;
          } else if (mu.kind === 'truncate') {
            frame = frame.subarray(0, mu.at % (frame.length + 1));
          } else if (mu.kind === 'extend') {
            frame = Uint8Array.from([...frame, ...mu.extra]);
          }
        }
        decodeOrTypedError(frame);
      }),
      { numRuns: 3000 },
    );
  });

  it('rejects version 1, an unknown type and trailing bytes with stable codes', () => {
    const frame = encodeMessage({ type: 'CLOCK', key: 'k', opId: 7 });
    const v1 = frame.slice();
    v1[0] = 1;
    expect(() => decodeMessage(v1, { n: N })).toThrow(expect.objectContaining({ code: 'UNSUPPORTED_VERSION' }));
    const badType = frame.slice();
    badType[1] = 0x06; // REPAIR, retired with version 1
    expect(() => decodeMessage(badType, { n: N })).toThrow(expect.objectContaining({ code: 'UNKNOWN_TYPE' }));
    expect(() => decodeMessage(Uint8Array.from([...frame, 0]), { n: N })).toThrow(expect.objectContaining({ code: 'INVALID_FRAME' }));
    expect(() => decodeMessage(frame.subarray(0, frame.length - 1), { n: N })).toThrow(expect.objectContaining({ code: 'INVALID_FRAME' }));
  });

  it('enforces receipt counts and server indices against n', () => {
    const c = { ts, nonce: new Uint8Array(32), cert, proof: [4].map((server) => ({ server, signature: new Uint8Array(64) })) };
    const frame = encodeMessage({ type: 'COMPLETE', key: 'k', opId: 1, candidate: c });
    expect(() => decodeMessage(frame, { n: N })).toThrow(expect.objectContaining({ code: 'INVALID_FRAME' }));
    expect(decodeMessage(frame, { n: 7 }).type).toBe('COMPLETE');
  });

  it("carries a certificate's delete flag in its flags byte and refuses unknown flag bits", () => {
    const grant = { issuer: new Uint8Array(32), grantee: new Uint8Array(32), prefix: '~p/', expiresAt: 1, signature: new Uint8Array(64) };
    for (const g of [undefined, grant]) {
      const complete = (tombstone: boolean) =>
        encodeMessage({
          type: 'COMPLETE',
          key: 'k',
          opId: 1,
          candidate: { ts, nonce: new Uint8Array(32), cert: { ...cert, tombstone, grant: g }, proof: [] },
        });
      const [value, deletion] = [complete(false), complete(true)];
      const m = decodeMessage(deletion, { n: N });
      expect(m.type === 'COMPLETE' && m.candidate.cert).toMatchObject({ tombstone: true, grant: g });
      // The flag costs no byte: the two frames differ in the flags byte alone.
      expect(deletion.length).toBe(value.length);
      const differ = [...value.keys()].filter((i) => value[i] !== deletion[i]);
      expect(differ).toHaveLength(1);
      const at = differ[0]!;
      for (const bit of [4, 8, 0x80]) {
        const unknown = deletion.slice();
        unknown[at]! |= bit;
        expect(() => decodeMessage(unknown, { n: N })).toThrow(expect.objectContaining({ code: 'INVALID_FRAME' }));
      }
    }
  });

  it("names a value's envelope in the certificate's flags byte, at most one of the two", () => {
    const frame = (envelope?: 'encrypted' | 'public') =>
      encodeMessage({
        type: 'COMPLETE',
        key: 'k',
        opId: 1,
        candidate: { ts, nonce: new Uint8Array(32), cert: { ...cert, ...(envelope ? { envelope } : {}) }, proof: [] },
      });
    const [plain, encrypted, open] = [frame(), frame('encrypted'), frame('public')];
    for (const [f, envelope] of [
      [plain, undefined],
      [encrypted, 'encrypted'],
      [open, 'public'],
    ] as const) {
      const m = decodeMessage(f, { n: N });
      expect(m.type === 'COMPLETE' ? m.candidate.cert.envelope : 'not COMPLETE').toBe(envelope);
      expect(f.length).toBe(plain.length);
    }
    const at = [...plain.keys()].find((i) => plain[i] !== encrypted[i])!;
    expect(encrypted[at]! ^ plain[at]!).toBe(16);
    expect(open[at]! ^ plain[at]!).toBe(32);
    const both = plain.slice();
    both[at]! |= 16 | 32;
    expect(() => decodeMessage(both, { n: N })).toThrow(/two envelopes/);
    expect(() => decodeMessage(both, { n: N })).toThrow(expect.objectContaining({ code: 'INVALID_FRAME' }));
  });

  it('FILTER says whether it wants the fragment and the layout, FILTER_ACK whether it carries a fragment; other values are INVALID_FRAME', () => {
    const cc_ = { tombstone: false, valueLength: 10, hashes: hashes() };
    for (const fragment of [true, false]) {
      for (const withoutLayout of [true, false]) {
        const frame = encodeMessage({ type: 'FILTER', key: 'k', opId: 1, stripe: 0, fragment, withoutLayout, candidates: [] });
        const decoded = decodeMessage(frame, { n: N });
        expect(decoded).toMatchObject({ type: 'FILTER', fragment });
        expect(decoded.type === 'FILTER' && decoded.withoutLayout === true).toBe(withoutLayout);
        // The flags byte follows the 4-byte stripe, which is the last field before it that is 0 here.
        const at = frame.length - 2;
        expect(frame[at]).toBe((fragment ? 1 : 0) | (withoutLayout ? 2 : 0));
        for (const bit of [4, 0x80]) {
          const bad = frame.slice();
          bad[at]! |= bit;
          expect(() => decodeMessage(bad, { n: N })).toThrow(expect.objectContaining({ code: 'INVALID_FRAME' }));
        }
      }
    }
    const meta = encodeMessage({ type: 'FILTER_ACK', key: 'k', opId: 1, ts, stripe: 0, entry: { cc: cc_, cert } });
    const decoded = decodeMessage(meta, { n: N });
    expect(decoded.type === 'FILTER_ACK' && decoded.entry).toMatchObject({ cc: cc_ });
    expect(decoded.type === 'FILTER_ACK' && decoded.entry && 'fragment' in decoded.entry).toBe(false);
    const full = encodeMessage({
      type: 'FILTER_ACK',
      key: 'k',
      opId: 1,
      ts,
      stripe: 0,
      entry: { fragment: Uint8Array.of(7), cc: cc_, cert },
    });
    // Same frame but for the entry byte (2 vs 1) and the fragment's 4-byte length and 1 byte.
    expect(full.length - meta.length).toBe(5);
    const entryAt = [...meta.keys()].find((i) => meta[i] !== full[i])!;
    expect([meta[entryAt], full[entryAt]]).toEqual([2, 1]);
    const bad = meta.slice();
    bad[entryAt] = 3;
    expect(() => decodeMessage(bad, { n: N })).toThrow(expect.objectContaining({ code: 'INVALID_FRAME' }));
  });

  it('LIST_ACK says whether the server has more and, with more, the key its reading stopped at; a resume key without more and unknown flags are INVALID_FRAME', () => {
    const base = { type: 'LIST_ACK', key: 'p/', opId: 1, entries: [] } as const;
    const flagsAt = 1 + 1 + 2 + 2 + 8 + 4; // version, type, key (u16 length + "p/"), opId, epoch
    const plain = encodeMessage({ ...base, more: true });
    const resuming = encodeMessage({ ...base, more: true, resumeAfter: 'p/zz' });
    expect(decodeMessage(plain, { n: N })).toEqual({ ...base, more: true });
    expect(decodeMessage(resuming, { n: N })).toEqual({ ...base, more: true, resumeAfter: 'p/zz' });
    expect(decodeMessage(encodeMessage({ ...base, more: false }), { n: N })).toEqual({ ...base, more: false });
    // Flag 2 announces the key (u16 length + UTF-8) right after the flags byte.
    expect([plain[flagsAt], resuming[flagsAt]]).toEqual([1, 3]);
    expect(resuming.length - plain.length).toBe(2 + 4);
    expect(Buffer.from(resuming.subarray(flagsAt + 1, flagsAt + 7)).toString('latin1')).toBe('\x00\x04p/zz');
    // The resume key fits the longest key and no longer one.
    const longest = 'k'.repeat(MAX_KEY_LENGTH);
    expect(decodeMessage(encodeMessage({ ...base, more: true, resumeAfter: longest }), { n: N })).toMatchObject({ resumeAfter: longest });
    expect(() => encodeMessage({ ...base, more: true, resumeAfter: `${longest}k` })).toThrow(ProtocolError);
    // A resume key is meaningless without more: neither side makes or takes one.
    expect(() => encodeMessage({ ...base, more: false, resumeAfter: 'p/zz' })).toThrow(/resumeAfter/);
    for (const flags of [2, 4, 5, 0x80]) {
      const bad = resuming.slice();
      bad[flagsAt] = flags;
      expect(() => decodeMessage(bad, { n: N }), `flags ${flags}`).toThrow(expect.objectContaining({ code: 'INVALID_FRAME' }));
    }
  });

  it('enforces cross-checksum lengths and candidate counts against n', () => {
    fc.assert(
      fc.property(cc(N), candidate(), (sum, c) => {
        const frame = encodeMessage({ type: 'STORE', key: 'k', opId: 1, ts, stripe: 0, fragment: new Uint8Array(0), cc: sum, cert });
        // A cross-checksum of n = 4 entries is not one of a 7-server cluster.
        expect(() => decodeMessage(frame, { n: 7 })).toThrow(expect.objectContaining({ code: 'INVALID_FRAME' }));
        const many = encodeMessage({ type: 'FILTER', key: 'k', opId: 1, stripe: 0, fragment: true, candidates: [c, c, c, c, c] });
        expect(() => decodeMessage(many, { n: N })).toThrow(expect.objectContaining({ code: 'INVALID_FRAME' }));
      }),
      { numRuns: 50 },
    );
  });

  it('bounds keys, fragments, value lengths and timestamps', () => {
    expect(() => encodeMessage({ type: 'CLOCK', key: 'x'.repeat(1025), opId: 1 })).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    );
    const frame = encodeMessage({ type: 'COMPLETE_ACK', key: 'k', opId: 1, ts: { num: 5, writerId: new Uint8Array(32) } });
    const huge = frame.slice();
    huge.set([0xff, 0xff, 0xff, 0xff], 2 + 2 + 1 + 8 + 4); // high word of num (after the epoch): beyond 2^53
    expect(() => decodeMessage(huge, { n: N })).toThrow(expect.objectContaining({ code: 'INVALID_FRAME' }));
    const store = encodeMessage({
      type: 'STORE',
      key: 'k',
      opId: 1,
      ts,
      stripe: 0,
      fragment: new Uint8Array(100),
      cc: { tombstone: false, valueLength: 200, hashes: hashes() },
      cert,
    });
    expect(() => decodeMessage(store, { n: N, maxFragmentLength: 99 })).toThrow(expect.objectContaining({ code: 'INVALID_FRAME' }));
    expect(decodeMessage(store, { n: N, maxFragmentLength: 100 }).type).toBe('STORE');
  });

  it('rejects keys that are not UTF-8', () => {
    const frame = encodeMessage({ type: 'CLOCK', key: 'ab', opId: 1 });
    const bad = frame.slice();
    bad[4] = 0xc3; // a lead byte followed by ASCII
    expect(() => decodeMessage(bad, { n: N })).toThrow(expect.objectContaining({ code: 'INVALID_FRAME' }));
  });

  it('decodeHeader reads key and opId of a frame whose body is broken, and nothing of another version', () => {
    const frame = encodeMessage({ type: 'COMPLETE', key: 'hdr', opId: 77, candidate: { ts, nonce: new Uint8Array(32), cert, proof: [] } });
    expect(decodeHeader(frame.subarray(0, 30))).toEqual({ version: WIRE_VERSION, type: 'COMPLETE', key: 'hdr', opId: 77 });
    const v1 = frame.slice();
    v1[0] = 1;
    expect(decodeHeader(v1)).toBeUndefined();
    expect(decodeHeader(frame.subarray(0, 5))).toBeUndefined();
    const unknown = frame.slice();
    unknown[1] = 0x42;
    expect(decodeHeader(unknown)).toMatchObject({ type: undefined, key: 'hdr', opId: 77 });
  });

  it('frameType reads the announced type from two bytes, and nothing of another version', () => {
    const frame = encodeMessage({ type: 'FILTER', key: 'k', opId: 1, stripe: 0, fragment: true, candidates: [] });
    expect(frameType(frame)).toBe('FILTER');
    expect(frameType(frame.subarray(0, 2))).toBe('FILTER');
    expect(frameType(frame.subarray(0, 1))).toBeUndefined();
    const v1 = frame.slice();
    v1[0] = 1;
    expect(frameType(v1)).toBeUndefined();
    const unknown = frame.slice();
    unknown[1] = 0x42;
    expect(frameType(unknown)).toBeUndefined();
  });

  it('error codes travel as fixed numbers', () => {
    // Pinned: a number once given to a code never changes meaning.
    expect(ERROR_CODE_NUMBERS).toEqual({
      INVALID_FRAME: 1,
      UNSUPPORTED_VERSION: 2,
      UNKNOWN_TYPE: 3,
      UNAUTHENTICATED: 4,
      INVALID_ARGUMENT: 5,
      UNSUPPORTED: 6,
      INTERNAL: 7,
      NOT_AUTHORIZED: 8,
      GRANT_EXPIRED: 9,
      REVOKED: 10,
      QUOTA_EXCEEDED: 11,
      CONFLICT: 12,
      VALUE_TOO_LARGE: 13,
      PENDING_LIMIT: 14,
      SUPERSEDED: 15,
      STRIPES_MISSING: 16,
      VALUE_CHANGED: 17,
      INCONSISTENT_ENCODING: 18,
      CLUSTER_OUTDATED: 19,
      SERVER_OUTDATED: 20,
      UNAVAILABLE: 21,
    });
    const frame = encodeMessage({ type: 'ERROR', key: 'k', opId: 1, code: 'QUOTA_EXCEEDED', message: 'full' });
    // version, type, key (u16 length + 1 byte), opId, epoch.
    expect(frame[2 + 2 + 1 + 8 + 4]).toBe(11);
    const unknown = frame.slice();
    unknown[2 + 2 + 1 + 8 + 4] = 200;
    expect(() => decodeMessage(unknown, { n: N })).toThrow(expect.objectContaining({ code: 'INVALID_FRAME' }));
  });
});

describe('storage records', () => {
  it('round-trip history entries and key states, and name their key', () => {
    fc.assert(
      fc.property(
        fc.string({ maxLength: 30 }),
        timestamp(),
        fragment,
        cc(N),
        certificate(),
        fc.option(candidate(), { nil: undefined }),
        fc.option(timestamp(), { nil: undefined }),
        fc.array(
          fc.record({
            ts: timestamp(),
            head: fc.boolean(),
            tombstone: fc.boolean(),
            stripes: fc.nat({ max: 70_000 }),
            top: fc.nat({ max: 70_000 }),
            short: fc.nat({ max: 70_000 }),
            bytes: fc.maxSafeNat(),
            touched: fc.maxSafeNat(),
          }),
          { maxLength: 5 },
        ),
        (key, t, fr, sum, c, lc, collected, index) => {
          const meta = { ts: t, stripe: 0, cc: sum, cert: c };
          expect(decodeEntryMetaRecord(encodeEntryMetaRecord(key, { ...meta, fragment: fr }), N)).toEqual({
            key,
            meta,
            fragmentLength: fr.length,
          });
          const state = { lc, owner: 'o'.repeat(32), index, collected };
          expect(decodeKeyRecord(encodeKeyRecord(key, state), N)).toEqual({ key, state });
        },
      ),
      { numRuns: 300 },
    );
  });

  it('refuse another record version and truncated records with typed errors', () => {
    const raw = encodeEntryMetaRecord('k', {
      ts,
      stripe: 0,
      fragment: new Uint8Array(3),
      cc: { tombstone: false, valueLength: 6, hashes: hashes() },
      cert,
    });
    expect(raw[0]).toBe(RECORD_VERSION);
    const other = raw.slice();
    other[0] = RECORD_VERSION + 1;
    expect(() => decodeEntryMetaRecord(other, N)).toThrow(expect.objectContaining({ code: 'UNSUPPORTED_VERSION' }));
    expect(() => decodeEntryMetaRecord(raw.subarray(0, raw.length - 1), N)).toThrow(expect.objectContaining({ code: 'INVALID_FRAME' }));
    expect(() => decodeKeyRecord(raw, N)).toThrow(ProtocolError);
  });
});
