/** fast-check generators of well-formed protocol messages for a cluster of `n` servers. */
import fc from 'fast-check';
import {
  ERROR_CODES,
  MAX_LIST_LIMIT,
  type Candidate,
  type CrossChecksum,
  type Grant,
  type Message,
  type Timestamp,
  type WriteCertificate,
} from '../src/index.js';

const bytes = (len: number) => fc.uint8Array({ minLength: len, maxLength: len });
const hash = () => bytes(32);
const key = fc.string({ maxLength: 40, unit: 'grapheme' });
const opId = fc.maxSafeNat();

export const timestamp = (): fc.Arbitrary<Timestamp> => fc.record({ num: fc.maxSafeNat(), writerId: bytes(32) });

export const grant = (): fc.Arbitrary<Grant> =>
  fc.record({
    issuer: bytes(32),
    grantee: bytes(32),
    prefix: fc.string({ maxLength: 60 }),
    expiresAt: fc.maxSafeNat(),
    signature: bytes(64),
  });

/** A key epoch as certificates and frames carry it: absent for 0. */
const keyEpoch = fc.option(fc.integer({ min: 1, max: 0xffffffff }), { nil: undefined });

export const certificate = (): fc.Arbitrary<WriteCertificate> =>
  fc.record({
    nonceHash: hash(),
    ccDigest: hash(),
    signer: bytes(32),
    signature: bytes(64),
    tombstone: fc.boolean(),
    envelope: fc.option(fc.constantFrom('encrypted' as const, 'public' as const), { nil: undefined }),
    grant: fc.option(grant(), { nil: undefined }),
    epoch: keyEpoch,
  });

export const proof = (n: number) =>
  fc
    .uniqueArray(fc.nat({ max: n - 1 }), { maxLength: n })
    .map((servers) => servers.sort((a, b) => a - b).map((server) => ({ server, signature: new Uint8Array(64).fill(server) })));

export const candidate = (n = 4): fc.Arbitrary<Candidate> =>
  fc.record({ ts: timestamp(), nonce: hash(), cert: certificate(), proof: proof(n) });

export const cc = (n: number): fc.Arbitrary<CrossChecksum> =>
  fc.record({ tombstone: fc.boolean(), valueLength: fc.nat({ max: 2 ** 30 }), hashes: fc.array(hash(), { minLength: n, maxLength: n }) });

export const fragment = fc.uint8Array({ maxLength: 64 });
const stripe = fc.nat({ max: 0xffffffff });

/** A stripe layout the wire carries (not necessarily one a writer makes). */
export const layout = fc.record({
  valueLength: fc.nat({ max: 2 ** 42 }),
  stripeSize: fc.nat({ max: 0xffffffff }),
  digests: fc.array(hash(), { maxLength: 4 }),
});
const optionalLayout = fc.option(layout, { nil: undefined });
const summary = fc.option(fc.record({ valueLength: fc.nat({ max: 2 ** 42 }), stripeSize: fc.nat({ max: 0xffffffff }), root: hash() }), {
  nil: undefined,
});

/** Any message the wire format can carry, from a sender of any key epoch. */
export function message(n: number): fc.Arbitrary<Message> {
  return fc.tuple(anyMessage(n), keyEpoch).map(([m, epoch]) => (epoch ? { ...m, epoch } : m));
}

function anyMessage(n: number): fc.Arbitrary<Message> {
  const base = { key, opId };
  return fc.oneof(
    fc.record({ type: fc.constantFrom('CLOCK' as const, 'COLLECT' as const), ...base }),
    fc.record({
      type: fc.constant('STORE' as const),
      ...base,
      ts: timestamp(),
      stripe,
      fragment,
      cc: cc(n),
      cert: certificate(),
      layout: optionalLayout,
      basis: fc.option(candidate(n), { nil: undefined }),
    }),
    fc.record({ type: fc.constant('COMPLETE' as const), ...base, candidate: candidate(n) }),
    fc.record({
      type: fc.constant('FILTER' as const),
      ...base,
      stripe,
      fragment: fc.boolean(),
      candidates: fc.array(candidate(n), { maxLength: n }),
    }),
    // A rebuilding server's FILTER for a write under way names exactly one write.
    fc.record({
      type: fc.constant('FILTER' as const),
      ...base,
      stripe,
      fragment: fc.boolean(),
      pending: fc.constant(true),
      candidates: fc.array(candidate(n), { minLength: 1, maxLength: 1 }),
    }),
    fc.record({ type: fc.constant('PENDING' as const), ...base, after: key, limit: fc.integer({ min: 1, max: MAX_LIST_LIMIT }) }),
    fc
      .record({
        type: fc.constant('PENDING_ACK' as const),
        ...base,
        entries: fc.array(fc.record({ key, ts: timestamp(), cc: cc(n), cert: certificate(), layout: optionalLayout }), { maxLength: 3 }),
        more: fc.boolean(),
        resumeAfter: fc.option(key, { nil: undefined }),
      })
      .map(({ resumeAfter, ...m }) => (m.more && resumeAfter !== undefined ? { ...m, resumeAfter } : m)),
    fc.record({ type: fc.constant('STORE_ACK' as const), ...base, ts: timestamp(), stripe, receipt: bytes(64) }),
    fc.record({ type: fc.constant('COMPLETE_ACK' as const), ...base, ts: timestamp() }),
    fc.record({
      type: fc.constant('CLOCK_ACK' as const),
      ...base,
      candidate: fc.option(candidate(n), { nil: undefined }),
      pending: fc.maxSafeNat(),
    }),
    fc.record({ type: fc.constant('COLLECT_ACK' as const), ...base, candidate: fc.option(candidate(n), { nil: undefined }) }),
    fc.record({
      type: fc.constant('FILTER_ACK' as const),
      ...base,
      ts: timestamp(),
      stripe,
      // With its fragment, or metadata only (a FILTER that asked for no fragment).
      entry: fc.option(
        fc.oneof(
          fc.record({ fragment, cc: cc(n), cert: certificate(), layout: optionalLayout }),
          fc.record({ cc: cc(n), cert: certificate(), layout: optionalLayout }),
        ),
        { nil: undefined },
      ),
    }),
    fc.record({ type: fc.constant('LIST' as const), ...base, after: key, limit: fc.integer({ min: 1, max: MAX_LIST_LIMIT }) }),
    fc
      .record({
        type: fc.constant('LIST_ACK' as const),
        ...base,
        entries: fc.array(fc.record({ key, candidate: candidate(n), cc: fc.option(cc(n), { nil: undefined }), layout: summary }), {
          maxLength: 3,
        }),
        more: fc.boolean(),
        resumeAfter: fc.option(key, { nil: undefined }),
      })
      // A key to resume after comes only with more.
      .map(({ resumeAfter, ...m }) => (m.more && resumeAfter !== undefined ? { ...m, resumeAfter } : m)),
    fc.record({
      type: fc.constant('ERROR' as const),
      ...base,
      code: fc.constantFrom(...ERROR_CODES),
      message: fc.string({ maxLength: 100 }),
    }),
  );
}
