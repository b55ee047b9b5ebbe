/**
 * Bundles: several frames to one server in one WebSocket message, so that many keys in
 * flight together (putMany, a busy client) pay one message per server per round instead
 * of one per key. A bundle is transport, not protocol: each frame in it is an ordinary
 * request or reply, handled and answered on its own, exactly as if it had come alone, so
 * nothing a frame means depends on the frames beside it.
 *
 * Format: `version u8 | 0x09 | count u16 | (length u32 | frame) × count`, with
 * `2 ≤ count ≤` {@link MAX_BUNDLE_FRAMES}, every frame at least two bytes, none of them a
 * bundle, and nothing after the last. A bundle is at most {@link MAX_BUNDLE_BYTES}: the
 * room every client and server keeps beyond its largest fragment, so a bundle never trips
 * a size limit that its frames alone would not. Senders bundle only frames of at most
 * {@link MAX_BUNDLED_FRAME_BYTES} (larger ones gain little from sharing a message), and a
 * server bundles only replies to requests that came in a bundle, so a peer that never
 * bundles never receives one.
 */
import { WIRE_VERSION } from './codec.js';

/** The bundle's type code, beside the message types of `codec.ts`. */
export const BUNDLE_TYPE = 0x09;
/** Largest bundle: the 64 KiB every side accepts beyond its largest fragment frame. */
export const MAX_BUNDLE_BYTES = 64 * 1024;
/** Largest frame worth bundling. */
export const MAX_BUNDLED_FRAME_BYTES = 16 * 1024;
/** Most frames in one bundle: bounds the work one message can ask for before any is counted. */
export const MAX_BUNDLE_FRAMES = 1024;

const HEADER_BYTES = 4;
const LENGTH_BYTES = 4;

/** Bytes a bundle of frames totalling `frameBytes` takes, for `count` frames. */
export function bundleLength(count: number, frameBytes: number): number {
  return HEADER_BYTES + count * LENGTH_BYTES + frameBytes;
}

/** Whether `frame` announces itself as a bundle of this wire version (nothing else is checked). */
export function isBundle(frame: Uint8Array): boolean {
  return frame.length >= 2 && frame[0] === WIRE_VERSION && frame[1] === BUNDLE_TYPE;
}

/**
 * One message of `frames` (at least two): throws `RangeError` for a bundle the format or
 * its limits cannot carry, which a sender avoids with {@link bundleLength} and the limits.
 */
export function encodeBundle(frames: readonly Uint8Array[]): Uint8Array {
  if (frames.length < 2 || frames.length > MAX_BUNDLE_FRAMES)
    throw new RangeError(`a bundle carries 2..${MAX_BUNDLE_FRAMES} frames, not ${frames.length}`);
  let total = 0;
  for (const f of frames) total += f.length;
  const length = bundleLength(frames.length, total);
  if (length > MAX_BUNDLE_BYTES) throw new RangeError(`a bundle of ${length} bytes is over ${MAX_BUNDLE_BYTES}`);
  const out = new Uint8Array(length);
  const view = new DataView(out.buffer);
  out[0] = WIRE_VERSION;
  out[1] = BUNDLE_TYPE;
  view.setUint16(2, frames.length);
  let at = HEADER_BYTES;
  for (const f of frames) {
    view.setUint32(at, f.length);
    out.set(f, at + LENGTH_BYTES);
    at += LENGTH_BYTES + f.length;
  }
  return out;
}

/**
 * The frames of a bundle, as views into it (no copies), or `undefined` when `bundle` is not
 * a well-formed bundle within the limits above: a receiver then treats the message as one
 * undecodable frame, as it would any garbage.
 */
export function decodeBundle(bundle: Uint8Array): Uint8Array[] | undefined {
  if (!isBundle(bundle) || bundle.length < HEADER_BYTES || bundle.length > MAX_BUNDLE_BYTES) return undefined;
  const view = new DataView(bundle.buffer, bundle.byteOffset, bundle.byteLength);
  const count = view.getUint16(2);
  if (count < 2 || count > MAX_BUNDLE_FRAMES) return undefined;
  const frames: Uint8Array[] = [];
  let at = HEADER_BYTES;
  for (let i = 0; i < count; i++) {
    if (at + LENGTH_BYTES > bundle.length) return undefined;
    const length = view.getUint32(at);
    at += LENGTH_BYTES;
    if (length < 2 || length > bundle.length - at) return undefined;
    const frame = bundle.subarray(at, at + length);
    if (isBundle(frame)) return undefined;
    frames.push(frame);
    at += length;
  }
  return at === bundle.length ? frames : undefined;
}

/** The frames a message carries: a well-formed bundle's, or else the message itself as one frame. */
export function framesOf(message: Uint8Array): Uint8Array[] {
  return decodeBundle(message) ?? [message];
}

/**
 * Gathers frames for one peer and sends them as one message when several are ready in the
 * same turn: `add` queues a frame (a frame too large to bundle, or one that would overflow
 * the bundle, first flushes what is queued), and the queue is flushed at the next turn
 * `defer` gives: by default once the current microtasks have run, so a lone frame is not
 * delayed and frames sent by operations progressing in step share a message (a client's);
 * a server passes `setImmediate`, so replies finished by the same round of disk callbacks
 * share one. `send` gets either a lone frame or a bundle, with the frames it carries.
 */
export class BundleOutbox {
  readonly #send: (message: Uint8Array, frames: readonly Uint8Array[]) => void;
  #frames: Uint8Array[] = [];
  #bytes = 0;
  #scheduled = false;
  readonly #defer: (run: () => void) => void;

  constructor(
    send: (message: Uint8Array, frames: readonly Uint8Array[]) => void,
    defer: (run: () => void) => void = (run) => queueMicrotask(run),
  ) {
    // (A wrapper: browsers refuse queueMicrotask called with another `this`.)
    this.#send = send;
    this.#defer = defer;
  }

  /** Bytes queued and not yet handed to `send`. */
  get queuedBytes(): number {
    return this.#bytes;
  }

  add(frame: Uint8Array): void {
    if (frame.length > MAX_BUNDLED_FRAME_BYTES) {
      this.flush();
      this.#send(frame, [frame]);
      return;
    }
    if (this.#frames.length >= MAX_BUNDLE_FRAMES || bundleLength(this.#frames.length + 1, this.#bytes + frame.length) > MAX_BUNDLE_BYTES)
      this.flush();
    this.#frames.push(frame);
    this.#bytes += frame.length;
    if (!this.#scheduled) {
      this.#scheduled = true;
      this.#defer(() => {
        this.#scheduled = false;
        this.flush();
      });
    }
  }

  /** Sends what is queued now. */
  flush(): void {
    const frames = this.#frames;
    if (frames.length === 0) return;
    this.#frames = [];
    this.#bytes = 0;
    this.#send(frames.length === 1 ? frames[0]! : encodeBundle(frames), frames);
  }

  /** Forgets what is queued (the connection closed). */
  clear(): void {
    this.#frames = [];
    this.#bytes = 0;
  }
}
