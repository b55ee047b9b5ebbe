/**
 * Bundles (`bundle.ts`): every bundle decodes to exactly the frames it was made of; any
 * other bytes (cut short, extended, nested, too many or too few frames, too large) decode
 * to nothing and never throw; the outbox sends what one turn queued as one message, alone
 * when it is one frame, splits at the size limit, and keeps the order of frames too large
 * to bundle.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  BundleOutbox,
  decodeBundle,
  encodeBundle,
  encodeMessage,
  isBundle,
  MAX_BUNDLE_BYTES,
  MAX_BUNDLE_FRAMES,
  MAX_BUNDLED_FRAME_BYTES,
  WIRE_VERSION,
} from '../src/index.js';

/** A frame that is not itself a bundle: at least two bytes, not starting with the bundle's type. */
const frame = fc.uint8Array({ minLength: 2, maxLength: 600 }).filter((f) => !isBundle(f));
const frames = fc.array(frame, { minLength: 2, maxLength: 40 });

describe('bundle codec', () => {
  it('decodes every bundle to the frames it was made of, as views into it', () => {
    fc.assert(
      fc.property(frames, (fs) => {
        const bundle = encodeBundle(fs);
        expect(isBundle(bundle)).toBe(true);
        const out = decodeBundle(bundle)!;
        expect(out.map((f) => [...f])).toEqual(fs.map((f) => [...f]));
        for (const f of out) expect(f.buffer).toBe(bundle.buffer);
      }),
    );
  });

  it('refuses a bundle cut short or with bytes after its last frame', () => {
    fc.assert(
      fc.property(frames, fc.nat(), fc.uint8Array({ minLength: 1, maxLength: 8 }), (fs, cut, extra) => {
        const bundle = encodeBundle(fs);
        expect(decodeBundle(bundle.subarray(0, cut % bundle.length))).toBeUndefined();
        expect(decodeBundle(new Uint8Array([...bundle, ...extra]))).toBeUndefined();
      }),
    );
  });

  it('never throws on arbitrary bytes, and whatever it accepts re-encodes to the same bytes', () => {
    const header = fc.tuple(fc.constant(WIRE_VERSION), fc.constant(0x09), fc.uint8Array({ maxLength: 300 }));
    fc.assert(
      fc.property(
        fc.oneof(
          fc.uint8Array({ maxLength: 300 }),
          header.map(([v, t, rest]) => new Uint8Array([v, t, ...rest])),
        ),
        (bytes) => {
          const out = decodeBundle(bytes);
          if (out) expect([...encodeBundle(out)]).toEqual([...bytes]);
        },
      ),
    );
  });

  it('refuses a bundle of one frame, of a bundle, or over the limits, whoever made it', () => {
    const a = encodeMessage({ type: 'CLOCK', key: 'a', opId: 1 });
    const inner = encodeBundle([a, a]);
    const lengthOf = (f: Uint8Array) => [f.length >>> 24, (f.length >>> 16) & 255, (f.length >>> 8) & 255, f.length & 255];
    const raw = (...fs: Uint8Array[]) =>
      new Uint8Array([WIRE_VERSION, 0x09, fs.length >> 8, fs.length & 255, ...fs.flatMap((f) => [...lengthOf(f), ...f])]);
    expect(decodeBundle(raw(a, a))).toHaveLength(2);
    expect(decodeBundle(raw(a))).toBeUndefined();
    expect(decodeBundle(raw(inner, a))).toBeUndefined();
    expect(decodeBundle(raw(a, new Uint8Array([7])))).toBeUndefined();
    expect(() => encodeBundle([a])).toThrow(RangeError);
    expect(() => encodeBundle(Array.from({ length: MAX_BUNDLE_FRAMES + 1 }, () => new Uint8Array(2)))).toThrow(RangeError);
    expect(() => encodeBundle([new Uint8Array(MAX_BUNDLE_BYTES), a])).toThrow(RangeError);
    const tooMany = raw(...Array.from({ length: MAX_BUNDLE_FRAMES + 1 }, () => new Uint8Array(2)));
    expect(decodeBundle(tooMany)).toBeUndefined();
  });
});

describe('BundleOutbox', () => {
  /** An outbox whose turn ends when the test says so. */
  function outbox() {
    const sent: { message: Uint8Array; frames: readonly Uint8Array[] }[] = [];
    let due: (() => void) | undefined;
    const box = new BundleOutbox(
      (message, fs) => sent.push({ message, frames: fs }),
      (run) => (due = run),
    );
    return { box, sent, endTurn: () => (due?.(), (due = undefined)) };
  }
  const f = (n: number, bytes = 10) => new Uint8Array(bytes).fill(n);

  it('sends what one turn queued as one bundle, and a lone frame as itself', () => {
    const { box, sent, endTurn } = outbox();
    box.add(f(1));
    box.add(f(2));
    box.add(f(3));
    expect(sent).toHaveLength(0);
    expect(box.queuedBytes).toBe(30);
    endTurn();
    expect(sent).toHaveLength(1);
    expect(decodeBundle(sent[0]!.message)!.map((x) => x[0])).toEqual([1, 2, 3]);
    box.add(f(4));
    endTurn();
    expect(sent[1]!.message).toEqual(f(4));
    expect(box.queuedBytes).toBe(0);
  });

  it('sends a frame too large to bundle after what was queued before it, and alone', () => {
    const { box, sent, endTurn } = outbox();
    box.add(f(1));
    box.add(f(2));
    box.add(f(3, MAX_BUNDLED_FRAME_BYTES + 1));
    box.add(f(4));
    endTurn();
    expect(sent.map((s) => s.frames.map((x) => x[0]))).toEqual([[1, 2], [3], [4]]);
    expect(sent[1]!.message.length).toBe(MAX_BUNDLED_FRAME_BYTES + 1);
  });

  it('splits a turn that overflows the limit into bundles within it, keeping the order', () => {
    const { box, sent, endTurn } = outbox();
    for (let i = 0; i < 20; i++) box.add(f(i, MAX_BUNDLED_FRAME_BYTES));
    endTurn();
    expect(sent.length).toBeGreaterThan(4);
    for (const s of sent) expect(s.message.length).toBeLessThanOrEqual(MAX_BUNDLE_BYTES);
    expect(sent.flatMap((s) => s.frames.map((x) => x[0]))).toEqual(Array.from({ length: 20 }, (_, i) => i));
  });

  it('forgets what is queued when cleared', () => {
    const { box, sent, endTurn } = outbox();
    box.add(f(1));
    box.clear();
    endTurn();
    expect(sent).toHaveLength(0);
  });
});
