/**
 * Randomness is injected so simulations replay exactly. Production hosts pass
 * `(n) => crypto.getRandomValues(new Uint8Array(n))`.
 */
export type RandomBytes = (length: number) => Uint8Array;
