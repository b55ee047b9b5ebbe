/**
 * Time as the operation host sees it. The host never calls `setTimeout` or
 * `performance.now` itself: the client hands it the real clock, and the simulator a
 * virtual one it advances step by step, so the same host code runs in both (as raft's
 * `RawNode` is driven by `Tick()` instead of owning its timers).
 */

/** Cancels a timer; calling it again, or after the timer fired, does nothing. */
export type CancelTimer = () => void;

export interface Clock {
  /** Milliseconds on a monotonic clock (only differences mean anything). */
  now(): number;
  /** Calls `fire` once, `ms` milliseconds from now, unless cancelled first. */
  setTimer(ms: number, fire: () => void): CancelTimer;
}

/** The platform's clock: `performance.now` and `setTimeout`. */
export const realClock: Clock = {
  now: () => performance.now(),
  setTimer(ms, fire) {
    const timer = setTimeout(fire, ms);
    return () => clearTimeout(timer);
  },
};
