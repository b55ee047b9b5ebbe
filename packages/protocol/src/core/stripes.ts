/**
 * Values in stripes: a value too large to hold in memory is cut into stripes of
 * `stripeSize` bytes (the last may be shorter), each erasure-coded on its own with its own
 * cross-checksum. The writer signs, in the write certificate, the digest of the
 * **stripe layout**: the value's length, the stripe size and the digest of every stripe's
 * cross-checksum. So one certificate binds every byte of every stripe, a reader verifies
 * each stripe as it arrives, and a write stays one linearizable operation: its candidate is
 * valid, and so visible, only once `n − t` servers signed receipts, which each signs only
 * when it holds every stripe (see `server.ts`).
 *
 * How the stripes reach the servers: stripes 1 … k−1 first, each STORE carrying a
 * **stripe certificate** (the writer's signature of the key, timestamp, stripe index and
 * that stripe's cross-checksum digest), so a server can check authority and charge the
 * owner before the layout exists; then stripe 0 with the write certificate and the layout.
 * Stripe 0 comes last because the layout needs every stripe, and the writer keeps only
 * that one stripe in memory meanwhile.
 *
 * A value of one stripe has no layout: its certificate signs its cross-checksum, exactly as
 * before stripes existed.
 */
import { bytesEqual, u32, u64 } from './bytes.js';
import { certificateCovers, crossChecksumDigest, type CrossChecksum } from './cross-checksum.js';
import { DOMAIN, HASH_LENGTH, domain, type CryptoProvider } from './crypto.js';

/** Smallest stripe a layout may use (but the last). */
export const MIN_STRIPE_SIZE = 64 * 1024;
/** Largest stripe: what one erasure-coded STORE may carry. */
export const MAX_STRIPE_SIZE = 64 * 1024 * 1024;
/** Most stripes in one value. */
export const MAX_STRIPES = 2 ** 16;
/** Longest striped value: 2^42 bytes (4 TiB). */
export const MAX_STRIPED_LENGTH = MAX_STRIPE_SIZE * MAX_STRIPES;

/** What the certificate of a striped value signs (through {@link layoutDigest}). */
export interface StripeLayout {
  /** Bytes in the whole value. */
  readonly valueLength: number;
  /** Bytes per stripe; the last holds the rest. */
  readonly stripeSize: number;
  /** `crossChecksumDigest` of every stripe's cross-checksum, in order. */
  readonly digests: readonly Uint8Array[];
}

/** A layout without its per-stripe digests: enough to check a certificate covers the length (what LIST sends). */
export interface LayoutSummary {
  readonly valueLength: number;
  readonly stripeSize: number;
  /** Digest of the per-stripe digests. */
  readonly root: Uint8Array;
}

/** Stripes of a value of `valueLength` bytes at `stripeSize` bytes each (at least one). */
export function stripeCount(valueLength: number, stripeSize: number): number {
  return Math.max(1, Math.ceil(valueLength / stripeSize));
}

/** Bytes in stripe `index` of the layout. */
export function stripeLength(layout: { readonly valueLength: number; readonly stripeSize: number }, index: number): number {
  return Math.max(0, Math.min(layout.stripeSize, layout.valueLength - index * layout.stripeSize));
}

/** Why `layout` is not one a correct writer makes (at least two stripes, sizes in bounds), or `undefined`. */
export function layoutProblem(layout: {
  readonly valueLength: number;
  readonly stripeSize: number;
  readonly digests?: readonly Uint8Array[];
}): string | undefined {
  const { valueLength, stripeSize } = layout;
  if (!Number.isSafeInteger(stripeSize) || stripeSize < MIN_STRIPE_SIZE || stripeSize > MAX_STRIPE_SIZE) {
    return `stripe size ${stripeSize} is outside ${MIN_STRIPE_SIZE}..${MAX_STRIPE_SIZE}`;
  }
  if (!Number.isSafeInteger(valueLength) || valueLength <= stripeSize || valueLength > MAX_STRIPED_LENGTH) {
    return `a striped value of ${valueLength} bytes must be longer than one stripe of ${stripeSize} and at most ${MAX_STRIPED_LENGTH}`;
  }
  if (layout.digests && layout.digests.length !== stripeCount(valueLength, stripeSize)) {
    return `the layout lists ${layout.digests.length} stripes, ${valueLength} bytes in stripes of ${stripeSize} make ${stripeCount(valueLength, stripeSize)}`;
  }
  return undefined;
}

/** The summary of a full layout. */
export function summarize(crypto: CryptoProvider, layout: StripeLayout): LayoutSummary {
  return {
    valueLength: layout.valueLength,
    stripeSize: layout.stripeSize,
    root: crypto.sha256Sync([...domain(DOMAIN.stripeDigests), u32(layout.digests.length), ...layout.digests]),
  };
}

/** The digest a striped value's write certificate signs in place of a cross-checksum digest. */
export function layoutDigest(crypto: CryptoProvider, layout: StripeLayout | LayoutSummary): Uint8Array {
  const s = 'root' in layout ? layout : summarize(crypto, layout);
  return crypto.sha256Sync([...domain(DOMAIN.stripeLayout), u64(s.valueLength), u64(s.stripeSize), s.root]);
}

/** Whether `cc` is stripe `index` of `layout`: its digest is listed there, and its length is that stripe's. */
export function stripeMatches(crypto: CryptoProvider, layout: StripeLayout, index: number, cc: CrossChecksum): boolean {
  const expected = layout.digests[index];
  return (
    expected !== undefined &&
    expected.length === HASH_LENGTH &&
    !cc.tombstone &&
    cc.valueLength === stripeLength(layout, index) &&
    bytesEqual(expected, crossChecksumDigest(crypto, cc))
  );
}

/** Layouts equal field by field. */
export function layoutsEqual(a: StripeLayout | undefined, b: StripeLayout | undefined): boolean {
  if (!a || !b) return a === b;
  return (
    a.valueLength === b.valueLength &&
    a.stripeSize === b.stripeSize &&
    a.digests.length === b.digests.length &&
    a.digests.every((d, i) => bytesEqual(d, b.digests[i]!))
  );
}

/**
 * Whether a write certificate signs stripe `index` with cross-checksum `cc`: for a value
 * of one stripe (no layout), the certificate signs `cc` itself; for a striped value it
 * signs the layout, which lists `cc`'s digest at `index`.
 */
export function entryCovered(
  crypto: CryptoProvider,
  cert: { readonly ccDigest: Uint8Array; readonly tombstone: boolean },
  index: number,
  cc: CrossChecksum,
  layout: StripeLayout | undefined,
): boolean {
  if (!layout) return index === 0 && certificateCovers(crypto, cert, cc);
  return layoutCovered(crypto, cert, layout) && stripeMatches(crypto, layout, index, cc);
}

/** Whether a write certificate signs `layout` (whole, or its summary): a value, not a delete, in a layout a writer may make. */
export function layoutCovered(
  crypto: CryptoProvider,
  cert: { readonly ccDigest: Uint8Array; readonly tombstone: boolean },
  layout: StripeLayout | LayoutSummary,
): boolean {
  return !cert.tombstone && layoutProblem(layout) === undefined && bytesEqual(layoutDigest(crypto, layout), cert.ccDigest);
}
