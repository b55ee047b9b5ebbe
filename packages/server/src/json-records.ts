/** The storage's small JSON records (markers, totals, usage, live bytes): encoding and reading back. */

/** `v` as a record's bytes. */
export const encodeJson = (v: unknown): Uint8Array => new TextEncoder().encode(JSON.stringify(v));

/** A record's JSON value; `undefined` when its bytes do not parse (JSON itself has no `undefined`). */
export function decodeJson(raw: Uint8Array): unknown {
  try {
    return JSON.parse(new TextDecoder().decode(raw)) as unknown;
  } catch {
    return undefined;
  }
}

/** Whether `v` is a count or size a record may hold: a safe integer, 0 or more. */
export const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
