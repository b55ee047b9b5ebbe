/**
 * `@powerstore/client/host`: the operation host and what it is built from, for drivers
 * other than `connect` (the simulator runs the host on its seeded network and virtual
 * clock). Not part of the client's stable API: applications use `connect`.
 */
export { realClock, type CancelTimer, type Clock } from './clock.js';
export type { Link, ServerState, ServerStatus } from './link.js';
export {
  FRAGMENT_WAIT_MIN_MS,
  LIST_WAIT_MIN_MS,
  OperationHost,
  SEND_HIGH_WATER_BYTES,
  type HostOptions,
  type RunOptions,
} from './operation-host.js';
export { Owed, Round, RoundBook, type OversizedVerdict } from './rounds.js';
