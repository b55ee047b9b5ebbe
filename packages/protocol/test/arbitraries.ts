/** fast-check generators of well-formed protocol messages for a cluster of `n` servers. */
import fc from 'fast-check';
import { ERROR_CODES, type Candidate, type CrossChecksum, type Message, type Timestamp } from '../src/index.js';

const hash = () => fc.uint8Array({ minLength: 32, maxLength: 32 });
const key = fc.string({ maxLength: 40, unit: 'grapheme' });
const opId = fc.maxSafeNat();

export const timestamp = (): fc.Arbitrary<Timestamp> =>
  fc.record({ num: fc.maxSafeNat(), writerId: fc.uint8Array({ minLength: 16, maxLength: 16 }), mac: hash() });

export const candidate = (n: number): fc.Arbitrary<Candidate> =>
  fc.record({ ts: timestamp(), nonce: hash(), vec: fc.array(hash(), { minLength: n, maxLength: n }) });

const cc = (n: number): fc.Arbitrary<CrossChecksum> =>
  fc.record({ tombstone: fc.boolean(), valueLength: fc.nat({ max: 2 ** 30 }), hashes: fc.array(hash(), { minLength: n, maxLength: n }) });

const fragment = fc.uint8Array({ maxLength: 64 });
const stripe = fc.nat({ max: 0xffffffff });

/** Any message the wire format can carry. */
export function message(n: number): fc.Arbitrary<Message> {
  const base = { key, opId };
  return fc.oneof(
    fc.record({ type: fc.constant('CLOCK' as const), ...base }),
    fc.record({ type: fc.constant('COLLECT' as const), ...base }),
    fc.record({ type: fc.constant('REPAIR_ACK' as const), ...base }),
    fc.record({
      type: fc.constant('STORE' as const),
      ...base,
      ts: timestamp(),
      stripe,
      fragment,
      cc: cc(n),
      nonceHash: hash(),
      vec: fc.array(hash(), { minLength: n, maxLength: n }),
    }),
    fc.record({ type: fc.constant('COMPLETE' as const), ...base, candidate: candidate(n) }),
    fc.record({ type: fc.constant('FILTER' as const), ...base, stripe, candidates: fc.array(candidate(n), { maxLength: n }) }),
    fc.record({ type: fc.constant('REPAIR' as const), ...base, candidates: fc.array(candidate(n), { maxLength: n }) }),
    fc.record({ type: fc.constantFrom('CLOCK_ACK' as const, 'STORE_ACK' as const, 'COMPLETE_ACK' as const), ...base, ts: timestamp() }),
    fc.record({ type: fc.constant('COLLECT_ACK' as const), ...base, candidate: fc.option(candidate(n), { nil: undefined }) }),
    fc.record({
      type: fc.constant('FILTER_ACK' as const),
      ...base,
      ts: timestamp(),
      stripe,
      entry: fc.option(fc.record({ fragment, cc: cc(n), vec: fc.array(hash(), { minLength: n, maxLength: n }) }), { nil: undefined }),
    }),
    fc.record({ type: fc.constant('ERROR' as const), ...base, code: fc.constantFrom(...ERROR_CODES), message: fc.string({ maxLength: 100 }) }),
  ) as fc.Arbitrary<Message>;
}
