/**
 * Wire format of the bench-only baselines (M-ABD and single), in the framing style of the
 * PowerStore codec: one binary WebSocket message per request or reply, a fixed header
 * `type u8 | opId u32 | keyLength u16 | key`, then the type's fields, the value last so it
 * is a view of the frame, never copied on receipt.
 *
 *   QUERY_TS  → TS_ACK     ts                       (M-ABD write, round 1)
 *   QUERY     → VALUE_ACK  ts | present u8 | value  (M-ABD read, round 1; single GET)
 *   STORE ts value → STORE_ACK                      (M-ABD write round 2 / read write-back)
 *   PUT value → STORE_ACK                           (single: unconditional put)
 *   STATS     → STATS_ACK  JSON                     (server-side timings, for the profile)
 *
 * A timestamp is `num u64 | writerId u32`, ordered by (num, writerId).
 */
export const T = {
  QUERY_TS: 1,
  QUERY: 2,
  STORE: 3,
  PUT: 4,
  STATS: 9,
  TS_ACK: 11,
  VALUE_ACK: 12,
  STORE_ACK: 13,
  STATS_ACK: 19,
  ERROR: 20,
} as const;

export interface Ts {
  readonly num: number;
  readonly writerId: number;
}

export const TS0: Ts = { num: 0, writerId: 0 };
export const TS_BYTES = 12;

export function compareTs(a: Ts, b: Ts): number {
  return a.num - b.num || a.writerId - b.writerId;
}

export interface Frame {
  readonly type: number;
  readonly opId: number;
  readonly key: string;
  /** The bytes after the header. */
  readonly body: Uint8Array;
}

const utf8 = new TextEncoder();
const strict = new TextDecoder('utf-8', { fatal: true });

/** Header plus `fixed` bytes of fields; the value (if any) goes in as a second buffer. */
export function encodeFrame(type: number, opId: number, key: string, fixed: Uint8Array | undefined, value?: Uint8Array): Uint8Array {
  const k = utf8.encode(key);
  if (k.length > 0xffff) throw new RangeError('key too long');
  const fixedLength = fixed?.length ?? 0;
  const out = new Uint8Array(7 + k.length + fixedLength + (value?.length ?? 0));
  const view = new DataView(out.buffer);
  out[0] = type;
  view.setUint32(1, opId);
  view.setUint16(5, k.length);
  out.set(k, 7);
  if (fixed) out.set(fixed, 7 + k.length);
  if (value) out.set(value, 7 + k.length + fixedLength);
  return out;
}

export function decodeFrame(frame: Uint8Array): Frame {
  if (frame.length < 7) throw new RangeError('short frame');
  const view = new DataView(frame.buffer, frame.byteOffset, frame.byteLength);
  const keyLength = view.getUint16(5);
  if (frame.length < 7 + keyLength) throw new RangeError('short key');
  return {
    type: frame[0]!,
    opId: view.getUint32(1),
    key: strict.decode(frame.subarray(7, 7 + keyLength)),
    body: frame.subarray(7 + keyLength),
  };
}

export function encodeTs(ts: Ts, extra = 0): Uint8Array {
  const out = new Uint8Array(TS_BYTES + extra);
  const view = new DataView(out.buffer);
  view.setUint32(0, Math.floor(ts.num / 2 ** 32));
  view.setUint32(4, ts.num >>> 0);
  view.setUint32(8, ts.writerId);
  return out;
}

export function decodeTs(bytes: Uint8Array): Ts {
  if (bytes.length < TS_BYTES) throw new RangeError('short timestamp');
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return { num: view.getUint32(0) * 2 ** 32 + view.getUint32(4), writerId: view.getUint32(8) };
}
