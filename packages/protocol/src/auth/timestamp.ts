/**
 * Timestamps `(num, writerId)`, ordered by `num`, then by `writerId`. A writer id is the
 * writer's tag (16 bytes derived from its public key, see `identity.ts`) followed by 16
 * random bytes drawn per client instance, so two identities never share a timestamp
 * and two instances of one identity practically never do. Timestamps carry no MAC: a
 * timestamp is believed only inside a candidate whose write certificate verifies, which
 * is what keeps a Byzantine server from inflating them (non-skipping timestamps).
 */
import { bytesEqual, compareBytes, toHex } from '../core/bytes.js';
import { check } from '../core/errors.js';
import { WRITER_TAG_LENGTH } from './identity.js';

/** Bytes in a writer id: the writer tag, then the instance id. */
export const WRITER_ID_LENGTH = 32;
/** Bytes of a writer id drawn per client instance. */
export const INSTANCE_ID_LENGTH = WRITER_ID_LENGTH - WRITER_TAG_LENGTH;

/** A write's timestamp; `ts0` is `num = 0`. */
export interface Timestamp {
  /** Logical clock; a new write takes the highest valid `num` seen plus one. */
  readonly num: number;
  /** Breaks ties between concurrent writers: writer tag then instance id. */
  readonly writerId: Uint8Array;
}

/** The initial timestamp, lower than every written one. */
export const TS0: Timestamp = Object.freeze({ num: 0, writerId: new Uint8Array(WRITER_ID_LENGTH) });

/** Order by `(num, writerId)`. */
export function compareTimestamps(a: Timestamp, b: Timestamp): number {
  if (a.num !== b.num) return a.num < b.num ? -1 : 1;
  return compareBytes(a.writerId, b.writerId);
}

/** Same `num` and writer id. */
export function timestampsEqual(a: Timestamp, b: Timestamp): boolean {
  return a.num === b.num && bytesEqual(a.writerId, b.writerId);
}

/** `num:writerIdHex`, for map keys and storage keys. */
export function timestampKey(ts: Timestamp): string {
  return `${ts.num}:${toHex(ts.writerId)}`;
}

/** The writer id of an instance: `tag | instance`. */
export function makeWriterId(tag: Uint8Array, instance: Uint8Array): Uint8Array {
  check(tag.length === WRITER_TAG_LENGTH, `a writer tag is ${WRITER_TAG_LENGTH} bytes`);
  check(instance.length === INSTANCE_ID_LENGTH, `an instance id is ${INSTANCE_ID_LENGTH} bytes`);
  const id = new Uint8Array(WRITER_ID_LENGTH);
  id.set(tag);
  id.set(instance, WRITER_TAG_LENGTH);
  return id;
}

/** The writer tag part of a writer id. */
export function writerTagPart(writerId: Uint8Array): Uint8Array {
  return writerId.subarray(0, WRITER_TAG_LENGTH);
}
