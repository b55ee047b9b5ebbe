/**
 * Reply frames' memory, recycled. A FILTER answer carrying a fragment is a frame of
 * megabytes: allocated afresh for every answer (and zero-filled), they were what a server
 * serving a rebuild allocated most outside its heap, and every ~64 MiB of that makes V8
 * run a full garbage collection. A reply's buffer comes back once `ws` has handed the
 * frame to the socket (its send callback), and serves a later reply.
 *
 * Only buffers this pool lent are taken back, each once: a buffer given back twice would
 * otherwise serve two replies at the same time.
 */
import { Buffer } from 'node:buffer';

/** Frames below this are allocated as usual: recycling them saves nothing. */
const MIN_POOLED = 64 * 1024;
/** Frames above this are allocated as usual and dropped after they are sent. */
const MAX_POOLED = 16 * 1024 * 1024;
/** Free buffers kept (the largest ones). */
const MAX_FREE = 8;
/** Free buffers are dropped after this long without a large reply. */
const IDLE_MS = 10_000;
const MIB = 1024 * 1024;

export class FramePool {
  readonly #free: ArrayBuffer[] = [];
  /** Buffers lent out and not yet given back. */
  readonly #lent = new WeakSet<ArrayBuffer>();
  #timer: ReturnType<typeof setTimeout> | undefined;

  /** Memory for a frame of `length` bytes (at least that many; contents unspecified, the encoder writes every byte it returns). */
  readonly take = (length: number): Uint8Array => {
    if (length < MIN_POOLED || length > MAX_POOLED) return new Uint8Array(length);
    let best = -1;
    for (let i = 0; i < this.#free.length; i++) {
      const size = this.#free[i]!.byteLength;
      if (size >= length && (best < 0 || size < this.#free[best]!.byteLength)) best = i;
    }
    // Rounded up to 1 MiB, so a buffer serves frames of other sizes later; not zero-filled.
    const buffer = best >= 0 ? this.#free.splice(best, 1)[0]! : Buffer.allocUnsafeSlow(Math.ceil(length / MIB) * MIB).buffer;
    this.#lent.add(buffer);
    return new Uint8Array(buffer);
  };

  /** Takes back the memory of `frame` once nothing uses it (the socket has it); frames it did not lend are ignored. */
  give(frame: Uint8Array): void {
    const buffer = frame.buffer;
    if (!(buffer instanceof ArrayBuffer) || !this.#lent.has(buffer)) return;
    this.#lent.delete(buffer);
    this.#free.push(buffer);
    if (this.#free.length > MAX_FREE) {
      let smallest = 0;
      for (let i = 1; i < this.#free.length; i++) if (this.#free[i]!.byteLength < this.#free[smallest]!.byteLength) smallest = i;
      this.#free.splice(smallest, 1);
    }
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => (this.#free.length = 0), IDLE_MS);
    this.#timer.unref();
  }
}
