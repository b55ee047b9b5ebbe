/** Hand-made register histories with known verdicts, shared by the checker tests. */
import type { RegisterOp } from './lincheck.js';

const w = (client: string, value: string | null, call: number, ret?: number, key = 'k'): RegisterOp => ({
  key,
  client,
  kind: 'write',
  value,
  call,
  ret,
});
const r = (client: string, value: string | null, call: number, ret: number, key = 'k'): RegisterOp => ({
  key,
  client,
  kind: 'read',
  value,
  call,
  ret,
});

/** Histories that are linearizable. */
export const LINEARIZABLE: Record<string, RegisterOp[]> = {
  empty: [],
  'read of nothing': [r('r', null, 1, 2)],
  'sequential write then read': [w('w', 'x', 1, 2), r('r', 'x', 3, 4)],
  'read concurrent with a write sees the old value': [w('w', 'x', 1, 10), r('r', null, 2, 3)],
  'read concurrent with a write sees the new value': [w('w', 'x', 1, 10), r('r', 'x', 2, 3)],
  'crashed write never observed': [w('w', 'x', 1), r('r', null, 5, 6), r('r', null, 7, 8)],
  'crashed write observed later': [w('w', 'x', 1), r('r', null, 5, 6), r('r', 'x', 7, 8), r('q', 'x', 9, 10)],
  'concurrent writes, reads agree on an order': [
    w('a', 'x', 1, 10),
    w('b', 'y', 2, 11),
    r('r', 'y', 3, 4),
    r('r', 'x', 5, 6),
    r('q', 'x', 12, 13),
  ],
  'delete then read absent': [w('w', 'x', 1, 2), w('w', null, 3, 4), r('r', null, 5, 6)],
  'keys are independent': [w('w', 'x', 1, 2, 'a'), r('r', null, 3, 4, 'b'), r('r', 'x', 5, 6, 'a')],
};

/** Histories that are not. */
export const NOT_LINEARIZABLE: Record<string, RegisterOp[]> = {
  'stale read after a completed write': [w('w', 'x', 1, 2), r('r', null, 3, 4)],
  'read of a value never written': [w('w', 'x', 1, 2), r('r', 'y', 3, 4)],
  'new-old inversion between reads': [w('w', 'x', 1, 10), r('r', 'x', 2, 3), r('q', null, 4, 5)],
  'sequential writes read out of order': [w('w', 'x', 1, 2), w('w', 'y', 3, 4), r('r', 'x', 5, 6)],
  'crashed write observed then lost': [w('w', 'x', 1), r('r', 'x', 2, 3), r('q', null, 4, 5)],
  'concurrent writes, reads disagree on the order': [w('a', 'x', 1, 10), w('b', 'y', 2, 11), r('r', 'x', 12, 13), r('q', 'y', 14, 15)],
  'one bad key among good ones': [w('w', 'x', 1, 2, 'a'), r('r', 'x', 3, 4, 'a'), w('w', 'z', 5, 6, 'b'), r('r', null, 7, 8, 'b')],
  'deleted value comes back': [w('w', 'x', 1, 2), w('w', null, 3, 4), r('r', 'x', 5, 6)],
};
