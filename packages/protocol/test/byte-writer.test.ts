import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { u32, u64 } from '../src/core/bytes.js';
import { encodeMessage, listEntryBytes, pendingEntryBytes } from '../src/wire/codec.js';
import { ByteWriter, utf8Length } from '../src/wire/fields.js';
import type { ListAck, PendingAck } from '../src/wire/messages.js';
import { message } from './arbitraries.js';

/** One field as written, and the bytes it must come out as (big-endian, as before chunks). */
type Field =
  | { kind: 'u8' | 'u16' | 'u32'; x: number }
  | { kind: 'u64'; x: number }
  | { kind: 'fixed' | 'bytes'; b: Uint8Array }
  | { kind: 'string'; s: string };

function expected(f: Field): Uint8Array {
  const be = (x: number, len: number) => {
    const out = new Uint8Array(len);
    for (let i = len - 1; i >= 0; i--, x = Math.floor(x / 256)) out[i] = x % 256;
    return out;
  };
  switch (f.kind) {
    case 'u8':
      return be(f.x, 1);
    case 'u16':
      return be(f.x, 2);
    case 'u32':
      return be(f.x, 4);
    case 'u64':
      return be(f.x, 8);
    case 'fixed':
      return f.b;
    case 'bytes':
      return Uint8Array.from([...be(f.b.length, 4), ...f.b]);
    case 'string': {
      const b = new TextEncoder().encode(f.s);
      return Uint8Array.from([...be(b.length, 2), ...b]);
    }
  }
}

function write(w: ByteWriter, f: Field): void {
  switch (f.kind) {
    case 'u8':
      return w.u8(f.x);
    case 'u16':
      return w.u16(f.x);
    case 'u32':
      return w.u32(f.x);
    case 'u64':
      return w.u64(f.x, 'u64');
    case 'fixed':
      return w.fixed(f.b, f.b.length, 'fixed');
    case 'bytes':
      return w.bytes(f.b);
    case 'string':
      return w.string(f.s, 1 << 16, 'string');
  }
}

const field: fc.Arbitrary<Field> = fc.oneof(
  fc.record({ kind: fc.constant('u8' as const), x: fc.integer({ min: 0, max: 0xff }) }),
  fc.record({ kind: fc.constant('u16' as const), x: fc.integer({ min: 0, max: 0xffff }) }),
  fc.record({ kind: fc.constant('u32' as const), x: fc.integer({ min: 0, max: 0xffffffff }) }),
  fc.record({ kind: fc.constant('u64' as const), x: fc.maxSafeNat() }),
  // Short fields are copied into chunks, long ones (fragments) kept until `finish`: both, and chunk-sized ones.
  fc.record({ kind: fc.constantFrom('fixed' as const, 'bytes' as const), b: fc.uint8Array({ maxLength: 40 }) }),
  fc.record({ kind: fc.constantFrom('fixed' as const, 'bytes' as const), b: fc.uint8Array({ minLength: 200, maxLength: 3000 }) }),
  fc.record({ kind: fc.constant('string' as const), s: fc.string({ unit: 'grapheme', maxLength: 30 }) }),
);

describe('ByteWriter', () => {
  it('writes every field as its big-endian bytes, across chunks, and a measuring writer counts the same length', () => {
    fc.assert(
      fc.property(fc.array(field, { maxLength: 300 }), fc.boolean(), (fields, pooled) => {
        const w = new ByteWriter();
        const m = new ByteWriter(true);
        for (const f of fields) {
          write(w, f);
          write(m, f);
        }
        const want = Uint8Array.from(fields.flatMap((f) => [...expected(f)]));
        expect(w.length).toBe(want.length);
        expect(m.length).toBe(want.length);
        // `alloc`: memory larger than the frame, filled with junk that must not show through.
        const out = pooled ? w.finish((n) => new Uint8Array(n + 17).fill(0xee)) : w.finish();
        expect(out).toEqual(want);
      }),
      { numRuns: 200 },
    );
  });

  it('copies a short field when it is written: changing the caller’s array afterwards changes nothing', () => {
    const w = new ByteWriter();
    const b = Uint8Array.of(1, 2, 3);
    w.fixed(b, 3, 'b');
    b[0] = 9;
    expect(w.finish()).toEqual(Uint8Array.of(1, 2, 3));
  });

  it('still refuses values the format cannot carry, and a measuring writer cannot finish', () => {
    expect(() => new ByteWriter().u32(2 ** 32)).toThrow(/out of range/);
    expect(() => new ByteWriter().u64(-1, 'num')).toThrow(/num out of range/);
    expect(() => new ByteWriter().fixed(new Uint8Array(3), 4, 'hash')).toThrow(/hash must be 4 bytes/);
    expect(() => new ByteWriter(true).finish()).toThrow();
  });
});

describe('u32 and u64 (core/bytes)', () => {
  it('are the big-endian bytes DataView writes', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 0xffffffff }), fc.maxSafeNat(), (x, y) => {
        const a = new Uint8Array(4);
        new DataView(a.buffer).setUint32(0, x);
        expect(u32(x)).toEqual(a);
        const b = new Uint8Array(8);
        new DataView(b.buffer).setBigUint64(0, BigInt(y));
        expect(u64(y)).toEqual(b);
      }),
    );
  });
});

describe('entry sizes (what a server counts to bound its answer)', () => {
  const lists = message(4).filter((m): m is ListAck | PendingAck => m.type === 'LIST_ACK' || m.type === 'PENDING_ACK');
  it('listEntryBytes and pendingEntryBytes are the bytes each entry adds to its frame', () => {
    fc.assert(
      fc.property(lists, (m) => {
        const empty = encodeMessage({ ...m, entries: [] }).length;
        const counted = m.type === 'LIST_ACK' ? m.entries.map(listEntryBytes) : m.entries.map(pendingEntryBytes);
        expect(encodeMessage(m).length).toBe(empty + counted.reduce((a, b) => a + b, 0));
      }),
      { numRuns: 500 },
    );
  });

  it('utf8Length is the length TextEncoder gives, lone surrogates included', () => {
    const encoder = new TextEncoder();
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string({ unit: 'binary' }),
          fc.string({ unit: fc.integer({ min: 0xd7f0, max: 0xe010 }).map((c) => String.fromCharCode(c)) }),
        ),
        (s) => {
          expect(utf8Length(s)).toBe(encoder.encode(s).length);
        },
      ),
      { numRuns: 1000 },
    );
  });
});
