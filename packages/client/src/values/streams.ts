/**
 * Streaming helpers of the client: reading any {@link ByteSource} as chunks, cutting
 * chunks into fixed-size stripes without copying more than one stripe, and checking byte
 * ranges. No protocol here.
 */
import { invalid } from '../errors.js';
import type { ByteRange, ByteSource } from '../types.js';

/** The chunks of `source`, as they come. */
export async function* chunksOf(source: ByteSource): AsyncGenerator<Uint8Array> {
  if (typeof Blob !== 'undefined' && source instanceof Blob) {
    yield* chunksOf(source.stream());
    return;
  }
  if (isReadableStream(source)) {
    const reader = source.getReader();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        yield checkChunk(value);
      }
    } finally {
      reader.releaseLock();
    }
  }
  if (typeof (source as AsyncIterable<Uint8Array>)[Symbol.asyncIterator] !== 'function') {
    throw invalid('putStream: the source must be a ReadableStream, an async iterable of Uint8Array or a Blob');
  }
  for await (const chunk of source as AsyncIterable<Uint8Array>) yield checkChunk(chunk);
}

function isReadableStream(x: unknown): x is ReadableStream<Uint8Array> {
  return typeof (x as ReadableStream | undefined)?.getReader === 'function';
}

function checkChunk(chunk: unknown): Uint8Array {
  if (!(chunk instanceof Uint8Array)) throw invalid('putStream: the source yielded something other than a Uint8Array');
  return chunk;
}

/**
 * Cuts the chunks of `source` into pieces of exactly `size` bytes (the last may be
 * shorter, and there is always at least one, possibly empty). A piece is a fresh array
 * unless a chunk held it whole.
 */
export async function* stripesOf(chunks: AsyncIterable<Uint8Array>, size: number): AsyncGenerator<Uint8Array> {
  let buffer = new Uint8Array(size);
  let filled = 0;
  let any = false;
  for await (let chunk of chunks) {
    while (chunk.length > 0) {
      if (filled === 0 && chunk.length >= size) {
        yield chunk.subarray(0, size);
        any = true;
        chunk = chunk.subarray(size);
        continue;
      }
      const take = Math.min(size - filled, chunk.length);
      buffer.set(chunk.subarray(0, take), filled);
      filled += take;
      chunk = chunk.subarray(take);
      if (filled === size) {
        yield buffer;
        any = true;
        buffer = new Uint8Array(size);
        filled = 0;
      }
    }
  }
  if (filled > 0 || !any) yield buffer.subarray(0, filled);
}

/** `range` clamped to a value of `size` bytes, as `[start, end)`; `INVALID_ARGUMENT` when it is not a range. */
export function clampRange(range: ByteRange | undefined, size: number): { start: number; end: number } {
  if (range === undefined) return { start: 0, end: size };
  const { start } = range;
  if (!Number.isSafeInteger(start) || start < 0) throw invalid(`range.start must be an integer ≥ 0, got ${String(start)}`);
  // Without an end, a start past the value's end is an empty range there, as `Blob.slice` has it.
  const end = range.end === undefined ? Math.max(start, size) : range.end;
  if (!Number.isSafeInteger(end) || end < start) throw invalid(`range.end must be an integer ≥ range.start, got ${String(end)}`);
  return { start: Math.min(start, size), end: Math.min(end, size) };
}

/**
 * The stripe a read of `range` asks for first, after checking `range` is one: the stripe its
 * start lies in if the value has stripes of `stripeBytes` (the default: readers learn a
 * value's real stripe size only from its first answer).
 */
export function firstStripe(range: ByteRange | undefined, stripeBytes: number): number {
  if (range === undefined) return 0;
  clampRange(range, Number.MAX_SAFE_INTEGER);
  return Math.floor(range.start / stripeBytes);
}
