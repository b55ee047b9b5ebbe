/**
 * Reading a value stripe by stripe: the {@link ValueStream} of a range of what a read
 * returned, each stripe read (pinned to that read's version), verified and opened as the
 * consumer pulls, with the next one fetched meanwhile.
 */
import { namespaceOf, type ReadResult, type ReadTarget } from '@powerstore/protocol';
import { toClientError } from '../errors.js';
import type { KeyRing } from '../identity/keyring.js';
import type { GetStreamOptions, ValueStream } from '../types.js';
import { parseEnvelope, writeOrigin, type WriteOrigin } from './encryption.js';
import { openStripe, overheadOf, stripedSize } from './envelopes.js';
import { clampRange } from './streams.js';

/** Where a value's further stripes come from: the keys that open them, and a read of the same key. */
export interface StripeReader {
  readonly keys: KeyRing;
  /** Reads `target` of the key streamed (under the stream's signal and timeout). */
  read(target: ReadTarget): Promise<ReadResult>;
}

/**
 * The bytes of `options.range` of the value `result` read for `key`: the stripes they lie
 * in, each read (pinned to `result`'s version), verified and decrypted as the consumer
 * pulls, with the next one fetched meanwhile.
 *
 * One value, one write: the writer's certificate binds the stripes' order and number, but a
 * grantee without the key may sign one over stripes of the owner's earlier versions, each
 * of which authenticates on its own. So every stripe delivered must come from the write of
 * the value's stripe 0 (`stripeMismatch`). For an encrypted value (as the stripe `result`
 * holds says) that is stripe 0's key epoch and write nonce, and stripe 0 is read and
 * authenticated first even when the range starts later: checking a range's stripes only
 * against one another would let a range of stripe 1 alone return another version's bytes.
 * For a public value every stripe delivered must be public: public bytes are whatever the
 * key's writer chose anyway, so they need no stripe 0 and a public range costs none.
 * A read that reaches the value's end (even an empty range there) reads its last stripe,
 * sealed as the last of its write: a value cut short or extended fails there.
 */
export async function valueStream(
  key: string,
  result: ReadResult,
  options: Pick<GetStreamOptions, 'range' | 'onProgress'>,
  reader: StripeReader,
): Promise<ValueStream> {
  const stored = result.value!;
  const report = options.onProgress;
  const layout = result.layout;
  if (!layout) {
    const value = await openStripe(reader.keys, key, stored, result, { index: 0, count: 1 });
    const { start, end } = clampRange(options.range, value.length);
    const bytes = value.subarray(start, end);
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        if (bytes.length > 0) controller.enqueue(bytes);
        report?.({ bytesDone: bytes.length, bytesTotal: bytes.length });
        controller.close();
      },
    });
    return { size: value.length, start, end, stream };
  }
  const count = layout.digests.length;
  const overhead = overheadOf(key, stored);
  const perStripe = layout.stripeSize - overhead;
  const size = stripedSize(layout, overhead);
  const { start, end } = clampRange(options.range, size);
  const firstStripe = Math.min(Math.floor(start / perStripe), count - 1);
  const lastStripe = end === size ? count - 1 : end > start ? Math.floor((end - 1) / perStripe) : firstStripe - 1;
  // The envelope of the stripe in hand: it says whether stripes must match stripe 0's write.
  const held = namespaceOf(key) === undefined ? undefined : parseEnvelope(stored);
  const encrypted = held?.kind === 'encrypted';
  /** Stripe `s`, verified and opened, and the write its envelope names. */
  const open = async (s: number): Promise<{ plain: Uint8Array; origin: WriteOrigin | undefined }> => {
    const reference = held === undefined || (encrypted && s === 0) ? undefined : originOf();
    let [bytes, from] = [stored, result];
    if (s !== result.stripe) {
      const r = await reader.read({ stripe: s, pinned: result.candidate!, layout });
      if (r.stripe !== s || r.value === undefined) throw new Error(`stripe ${s} came back as stripe ${String(r.stripe)}`);
      [bytes, from] = [r.value, r];
    }
    const plain = await openStripe(reader.keys, key, bytes, from, { index: s, count }, await reference);
    const envelope = held && parseEnvelope(bytes);
    return { plain, origin: envelope && envelope.kind !== 'unknown' ? writeOrigin(envelope) : undefined };
  };
  /** The write every stripe delivered must come from: stripe 0's (authenticated) for an encrypted value, public for a public one. */
  let origin: Promise<WriteOrigin | undefined> | undefined;
  const originOf = (): Promise<WriteOrigin | undefined> => {
    if (!origin) {
      // A range from stripe 0 delivers it first (see fetch); one starting later reads and authenticates it without delivering it.
      origin = encrypted
        ? (fetched.get(0) ?? open(0)).then((o) => o.origin)
        : Promise.resolve(held?.kind === 'public' ? writeOrigin(held) : undefined);
      // Awaited by every later stripe, which reports a failure when it is pulled.
      origin.catch(() => {});
    }
    return origin;
  };
  const fetched = new Map<number, Promise<{ plain: Uint8Array; origin: WriteOrigin | undefined }>>();
  const fetch = (s: number) => {
    let p = fetched.get(s);
    if (!p) {
      p = open(s);
      // A prefetched stripe that fails is reported when it is pulled, not as an unhandled rejection.
      p.catch(() => {});
      fetched.set(s, p);
      // Stripe 0 is dropped from `fetched` once delivered: take its write now.
      if (s === 0 && encrypted) void originOf();
    }
    return p;
  };
  let next = firstStripe;
  let delivered = 0;
  const stream = new ReadableStream<Uint8Array>(
    {
      pull: async (controller) => {
        if (next > lastStripe) {
          controller.close();
          return;
        }
        const s = next++;
        let plain: Uint8Array;
        try {
          ({ plain } = await fetch(s));
        } catch (err) {
          throw toClientError(err);
        }
        fetched.delete(s);
        if (next <= lastStripe) void fetch(next);
        const from = s === firstStripe ? start - s * perStripe : 0;
        const to = s === lastStripe ? end - s * perStripe : plain.length;
        if (to > from) controller.enqueue(plain.subarray(from, to));
        delivered += to - from;
        report?.({ bytesDone: delivered, bytesTotal: end - start });
        if (next > lastStripe) controller.close();
      },
      cancel: () => {
        fetched.clear();
      },
    },
    { highWaterMark: 0 },
  );
  return { size, start, end, stream };
}

/** The `length` bytes `stream` yields, in one array. */
export async function readAll(stream: ReadableStream<Uint8Array>, length: number): Promise<Uint8Array> {
  const out = new Uint8Array(length);
  // A reader rather than `for await`: not every browser iterates a ReadableStream.
  const reader = stream.getReader();
  for (let off = 0; ;) {
    const { done, value } = await reader.read();
    if (done) break;
    out.set(value, off);
    off += value.length;
  }
  return out;
}
