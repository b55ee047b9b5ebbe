/**
 * Writing a value stripe by stripe: a {@link ByteSource} cut into stripes of the store's
 * stripe size, each sealed as it is read, as the protocol's writer pulls them.
 */
import type { StripeSource } from '@powerstore/protocol';
import { invalid } from '../errors.js';
import type { ByteSource } from '../types.js';
import { writeNonce } from './encryption.js';
import type { Sealer } from './envelopes.js';
import { chunksOf, stripesOf } from './streams.js';

/** Bytes `source` will yield as announced (`size`, or a `Blob`'s own), checked; `undefined` when nothing says. */
export function announcedSize(source: ByteSource, size: number | undefined): number | undefined {
  const blobSize = typeof Blob !== 'undefined' && source instanceof Blob ? source.size : undefined;
  const expected = size ?? blobSize;
  if (expected !== undefined && !(Number.isSafeInteger(expected) && expected >= 0)) throw invalid('putStream: size must be an integer ≥ 0');
  return expected;
}

/**
 * The sealed stripes of a source, for a write of kind `stripes`. All stripes of one value
 * are sealed under one write nonce, and the last says it is the last. Call {@link close}
 * once the write is over, whatever its outcome, to release the source.
 */
export class SealedStripes implements StripeSource {
  /** Bytes of every stored stripe but the last: the plaintext stripe plus its envelope. */
  readonly stripeSize: number;
  readonly #sealer: Sealer;
  readonly #plain: AsyncIterator<Uint8Array>;
  readonly #expected: number | undefined;
  readonly #nonce = writeNonce();
  /** One stripe of lookahead: whether a stripe is the last goes into its envelope. */
  #ahead: IteratorResult<Uint8Array> | undefined;
  #index = 0;
  #total = 0;

  /** `expected` is the size announced (see {@link announcedSize}): a source yielding another count fails the write. */
  constructor(source: ByteSource, sealer: Sealer, stripeBytes: number, expected: number | undefined) {
    this.#sealer = sealer;
    this.#expected = expected;
    this.stripeSize = stripeBytes + sealer.overhead;
    this.#plain = stripesOf(chunksOf(source), stripeBytes)[Symbol.asyncIterator]();
  }

  /** Plaintext bytes read from the source so far: the value's size once the write is done. */
  get bytesRead(): number {
    return this.#total;
  }

  async next(): Promise<Uint8Array | undefined> {
    this.#ahead ??= await this.#plain.next();
    if (this.#ahead.done) return undefined;
    const current = this.#ahead.value;
    this.#ahead = await this.#plain.next();
    this.#total += current.length;
    const expected = this.#expected;
    if (expected !== undefined && (this.#total > expected || (this.#ahead.done && this.#total !== expected))) {
      throw invalid(`putStream: the source yielded ${this.#total > expected ? 'more' : 'fewer'} than the ${expected} bytes announced`);
    }
    return this.#sealer.seal(current, { nonce: this.#nonce, index: this.#index++, last: !!this.#ahead.done });
  }

  /** Plaintext bytes in `bytesStored` bytes of stored stripes: less the envelopes of the stripes they hold. */
  plaintextOf(bytesStored: number): number {
    return Math.max(0, bytesStored - this.#sealer.overhead * Math.ceil(bytesStored / this.stripeSize));
  }

  /** Releases the source (a reader's lock, an iterator's resources). */
  close(): void {
    void this.#plain.return?.(undefined);
  }
}
