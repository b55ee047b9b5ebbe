/**
 * The timestamp window: how far above a key's last completed write a new write may take
 * its timestamp, by the writer's rank over the key. It is what makes revocation and expiry
 * take effect, and what keeps anyone from burning a key's timestamps.
 *
 * The problem it solves: validity is timeless (`certificate.ts`), so a write whose STORE
 * quorum signed receipts while its writer was authorized stays completable forever. A
 * grantee could STORE at timestamp numbers it chooses, keep the receipts, and COMPLETE
 * after its grant was revoked or expired: if the owner's writes since then took lower
 * numbers (CLOCK used to report only `lc`), the late COMPLETE would put the grantee's
 * value back on top, and a number near 2^53 would leave the key unwritable.
 *
 * The rules:
 * - **Window.** A correct server stores a write at `ts` only if `ts.num ≤ base.num + rank ·
 *   W`, where `base` is the higher of its `lc` and the *basis* the STORE carries (the valid
 *   candidate the writer's CLOCK saw, written back like a FILTER's), `W` is
 *   {@link TIMESTAMP_WINDOW} and `rank` the signer's {@link WriterRank} over the key:
 *   1 for a grantee, 2 for the key's owner, 3 for the cluster's admin.
 * - **Jump.** CLOCK answers carry, besides `lc`, the highest number of a write stored above
 *   `lc` (only one with its stripe 0 can have receipts, but an abandoned upload's stripes
 *   count too, so the owner's next write frees them). A writer takes
 *   its number above `max(L, min(P, L + (rank − 1) · W))`, where `L` is the highest valid
 *   `lc` its CLOCK saw and `P` the highest such number reported. A grantee (rank 1) does
 *   not jump; an owner jumps over every grantee's pending write, the admin over every
 *   owner's too.
 *
 * Why the owner's write lands above a revoked grantee's pending write `p`: `p` can complete
 * only with `n − t` receipts, so `t + 1` correct servers stored it, each with
 * `p.num ≤ lc.num + W` at the time (its `lc` after the basis); one of them is in the
 * owner's CLOCK quorum and reports either an `lc` at least as high as `p` or `p` as pending,
 * with its `lc ≤ L`. So `p.num ≤ L + W`, the clamp keeps `p`, and the owner's number is
 * above it; the owner's own number is at most `L + W + 1 ≤ L + 2W`, inside its window at
 * every correct server that takes the basis. Once the owner's write completes, `p` is
 * below `lc`: its late COMPLETE changes nothing and garbage collection deletes it.
 * The same argument, one rank up, lets the admin recover a key from its owner.
 *
 * What Byzantine servers can do: report a made-up pending number, which the clamp bounds,
 * so each write jumps at most `(rank − 1) · W`; `lc` itself must be a valid candidate.
 * Every completed write raises a key's number by at most `3 · W`, so exhausting `2^53`
 * takes more than `2^53 / 3W ≈ 4.6 · 10^10` writes.
 */
import type { WriteCertificate } from './certificate.js';
import { bytesEqual } from '../core/bytes.js';

/** `W`: the numbers a grantee's write may take above the key's `lc` (2^16). */
export const TIMESTAMP_WINDOW = 2 ** 16;

/** A signer's rank over a key: 1 a grantee, 2 the key's owner, 3 the cluster's admin. */
export type WriterRank = 1 | 2 | 3;

/**
 * The rank of a certificate's signer, given that its authority over the key checked out
 * (`authorityProblem`): the admin signs without a grant, an owner writes its namespace
 * without one, anyone else needs a grant.
 */
export function writerRank(cert: Pick<WriteCertificate, 'signer' | 'grant'>, admin: Uint8Array): WriterRank {
  if (bytesEqual(cert.signer, admin)) return 3;
  return cert.grant ? 1 : 2;
}

/** The highest number a correct server stores for a writer of `rank` when its base is `base`. */
export function windowTop(base: number, rank: WriterRank): number {
  return base + rank * TIMESTAMP_WINDOW;
}

/**
 * The number a writer of `rank` must take its timestamp above: the highest valid `lc`
 * number its CLOCK saw (`highest`), or the highest pending number reported (`pending`),
 * clamped so that Byzantine servers gain nothing beyond the window.
 */
export function jumpTarget(highest: number, pending: number, rank: WriterRank): number {
  return Math.max(highest, Math.min(pending, highest + (rank - 1) * TIMESTAMP_WINDOW));
}
