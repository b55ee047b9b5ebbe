/**
 * Write certificates: the writer signs, once per write, the cluster, the key, the
 * timestamp, `Nbar = H(N)`, the cross-checksum's digest and the grant it relies on.
 * Servers keep certificates with the fragments and in `lc`; a candidate is `(ts, N, cert)`.
 *
 * **Validity is timeless.** Whether a certificate is valid for a key depends only on its
 * bytes, the key and the cluster's fixed identity (id and admin key): the signatures and
 * the *structure* of the signer's authority (own namespace, admin, or a grant from the
 * namespace owner or the admin). Expiry, revocation, admission and quotas are checked on
 * STORE only (`policy.ts`), so no clock and no later policy change can turn a completed
 * write invalid, and a certificate verifies at every correct server or at none.
 */
import { bytesEqual, concatBytes, lengthPrefixed, toHex, u64 } from './bytes.js';
import { DOMAIN, HASH_LENGTH, domain, keyField, nonceHash, type CryptoProvider, type Signer } from './crypto.js';
import { grantDigest, grantMessage, mayGrant, type ClusterIdentity, type Grant } from './grant.js';
import { namespaceOf, ownerIdOf, writerTagOf } from './identity.js';
import type { ProtocolErrorCode } from './errors.js';
import { writerTagPart, type Timestamp } from './timestamp.js';

/** What a writer signs for one write, and the signature. */
export interface WriteCertificate {
  /** `Nbar = H(N)`: the commitment revealed by COMPLETE. */
  readonly nonceHash: Uint8Array;
  /** Digest of the cross-checksum (value length, tombstone flag, every fragment hash). */
  readonly ccDigest: Uint8Array;
  /** The writer's public key. */
  readonly signer: Uint8Array;
  /** The grant the signer relies on, if the key is not its own (or it is not the admin). */
  readonly grant: Grant | undefined;
  /** Ed25519 signature of {@link certificateMessage}. */
  readonly signature: Uint8Array;
}

const NO_GRANT = new Uint8Array(HASH_LENGTH);

/** The bytes a writer signs. */
export function certificateMessage(
  crypto: CryptoProvider,
  clusterId: Uint8Array,
  key: string,
  ts: Timestamp,
  cert: Omit<WriteCertificate, 'signature'>,
): Uint8Array {
  return concatBytes(
    ...domain(DOMAIN.certificate),
    ...lengthPrefixed(clusterId),
    ...keyField(key),
    u64(ts.num),
    ts.writerId,
    cert.nonceHash,
    cert.ccDigest,
    cert.signer,
    cert.grant ? grantDigest(crypto, cert.grant) : NO_GRANT,
  );
}

/** Signs a write certificate. */
export async function signCertificate(
  crypto: CryptoProvider,
  clusterId: Uint8Array,
  signer: Signer,
  write: { readonly key: string; readonly ts: Timestamp; readonly nonceHash: Uint8Array; readonly ccDigest: Uint8Array; readonly grant: Grant | undefined },
): Promise<WriteCertificate> {
  const unsigned = { nonceHash: write.nonceHash, ccDigest: write.ccDigest, signer: signer.publicKey, grant: write.grant };
  return { ...unsigned, signature: await signer.sign(certificateMessage(crypto, clusterId, write.key, write.ts, unsigned)) };
}

/**
 * Why `signer` (with `grant`) has no authority over `key` at timestamp `ts`, or
 * `undefined` when it has: the structural half of validity, no signature involved.
 */
export function authorityProblem(
  crypto: CryptoProvider,
  cluster: ClusterIdentity,
  key: string,
  ts: Timestamp,
  signer: Uint8Array,
  grant: Grant | undefined,
): string | undefined {
  if (!bytesEqual(writerTagPart(ts.writerId), writerTagOf(crypto, signer))) return "the timestamp's writer id does not belong to the signer";
  if (bytesEqual(signer, cluster.admin)) return undefined;
  if (!grant) {
    const owner = ownerIdOf(crypto, signer);
    return namespaceOf(key) === owner ? undefined : `the key is outside the signer's namespace ~${owner}/ and no grant was given`;
  }
  if (!bytesEqual(grant.grantee, signer)) return 'the grant names another identity';
  if (!key.startsWith(grant.prefix)) return `the grant covers keys starting with ${JSON.stringify(grant.prefix)}, not this key`;
  if (!mayGrant(crypto, cluster, grant.issuer, grant.prefix)) return 'the grant was issued by an identity that does not own its prefix';
  return undefined;
}

/** The outcome of checking a certificate. */
export type CertificateCheck =
  | { readonly ok: true }
  | { readonly ok: false; readonly code: Extract<ProtocolErrorCode, 'UNAUTHENTICATED' | 'NOT_AUTHORIZED'>; readonly reason: string };

const OK: CertificateCheck = Object.freeze({ ok: true });

/** A candidate's fields (`candidate.ts` names the type; this module must not import it). */
export interface CandidateFields {
  readonly ts: Timestamp;
  readonly nonce: Uint8Array;
  readonly cert: WriteCertificate;
}

/**
 * `valid(c)` ≜ `c.ts > ts0 ∧ H(c.N) = c.cert.Nbar ∧ check(c.ts, c.cert)`, where `check` is
 * the certificate check for the candidate's key: one definition for servers, readers and
 * writers (CLOCK).
 */
export async function isValidCandidate(
  crypto: CryptoProvider,
  c: CandidateFields,
  check: (ts: Timestamp, cert: WriteCertificate) => Promise<CertificateCheck>,
): Promise<boolean> {
  if (c.ts.num === 0 || !bytesEqual(nonceHash(crypto, c.nonce), c.cert.nonceHash)) return false;
  return (await check(c.ts, c.cert)).ok;
}

/**
 * Checks certificates for one cluster, remembering signatures already verified (a
 * bounded set), so one write costs a server one Ed25519 verification however many times
 * its candidate comes back in COMPLETE and FILTER.
 */
export class CertificateVerifier {
  readonly #crypto: CryptoProvider;
  readonly #cluster: ClusterIdentity;
  readonly #verified = new Set<string>();
  readonly #cacheSize: number;

  constructor(crypto: CryptoProvider, cluster: ClusterIdentity, cacheSize = 16_384) {
    this.#crypto = crypto;
    this.#cluster = cluster;
    this.#cacheSize = cacheSize;
  }

  /** The cluster this verifier checks for. */
  get cluster(): ClusterIdentity {
    return this.#cluster;
  }

  /** Signatures and authority of `cert` for `key` at `ts`. */
  async check(key: string, ts: Timestamp, cert: WriteCertificate): Promise<CertificateCheck> {
    const crypto = this.#crypto;
    const problem = authorityProblem(crypto, this.#cluster, key, ts, cert.signer, cert.grant);
    if (problem) return { ok: false, code: 'NOT_AUTHORIZED', reason: problem };
    if (cert.grant && !(await this.#verify(cert.grant.issuer, grantMessage(this.#cluster.id, cert.grant), cert.grant.signature))) {
      return { ok: false, code: 'UNAUTHENTICATED', reason: "the grant's signature does not verify" };
    }
    if (!(await this.#verify(cert.signer, certificateMessage(crypto, this.#cluster.id, key, ts, cert), cert.signature))) {
      return { ok: false, code: 'UNAUTHENTICATED', reason: "the certificate's signature does not verify" };
    }
    return OK;
  }

  /**
   * `valid(c)`: `c.ts > ts0`, `H(c.N) = c.cert.Nbar`, and the certificate is valid for
   * `key` at `c.ts`. The same predicate at servers, readers and writers (CLOCK).
   */
  valid(key: string, c: CandidateFields): Promise<boolean> {
    return isValidCandidate(this.#crypto, c, (ts, cert) => this.check(key, ts, cert));
  }

  async #verify(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): Promise<boolean> {
    const id = toHex(this.#crypto.sha256Sync([publicKey, signature, message]));
    if (this.#verified.has(id)) return true;
    if (!(await this.#crypto.verifyEd25519(publicKey, message, signature))) return false;
    if (this.#verified.size >= this.#cacheSize) this.#verified.delete(this.#verified.values().next().value!);
    this.#verified.add(id);
    return true;
  }
}
