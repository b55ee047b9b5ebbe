/**
 * Grants: an owner (or the cluster's admin) lets another identity write under a key
 * prefix until an expiry. `(issuer, grantee, prefix, expiresAt)` signed by the issuer,
 * bound to one cluster. A grant's *signature and shape* are part of a certificate's
 * validity (timeless); its *expiry* and revocation are admission checks on STORE only.
 */
import { bytesEqual, concatBytes, lengthPrefixed, u64, utf8 } from '../core/bytes.js';
import { DOMAIN, PUBLIC_KEY_LENGTH, SIGNATURE_LENGTH, domain, type CryptoProvider, type Signer } from '../core/crypto.js';
import type { ServerKey } from './epochs.js';
import { check } from '../core/errors.js';
import {
  decodeBase64url,
  decodePublicKey,
  encodeBase64url,
  encodePublicKey,
  fromBase32,
  namespacePrefix,
  ownerIdOf,
  toBase32,
} from './identity.js';

/** Bytes in a cluster id. */
export const CLUSTER_ID_LENGTH = 16;
/** Longest grant prefix, in UTF-8 bytes (a key is at most this long too). */
export const MAX_PREFIX_LENGTH = 1024;
/** Latest expiry a grant can carry: the year 9999 ("never", in practice). */
export const MAX_EXPIRY = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

/**
 * What binds certificates, grants and store receipts to one cluster. The id and the admin
 * key are fixed for the cluster's life; the servers' receipt keys are fixed per **key
 * epoch** (`epochs.ts`): a newer identity may only add epochs, never change one.
 */
export interface ClusterIdentity {
  /** Random, fixed at `init`; signed into every certificate, grant and receipt. */
  readonly id: Uint8Array;
  /** The admin public key: may write any key and grant any prefix. */
  readonly admin: Uint8Array;
  /**
   * Each server's receipt key in the current epoch, by protocol index: what receipts for
   * certificates of that epoch are checked against.
   */
  readonly servers: readonly Uint8Array[];
  /**
   * The current key epoch (absent: 0): writers sign it into their certificates, correct
   * servers admit writes of it only, and answer only requests that name it.
   */
  readonly epoch?: number;
  /**
   * Each server's receipt keys over the epochs, by protocol index, oldest first: the first
   * from epoch 0, the last {@link servers}`[i]`. Absent: no server's key was ever replaced.
   */
  readonly history?: readonly (readonly ServerKey[])[];
}

/** A signed permission to write keys starting with `prefix`. */
export interface Grant {
  /** Public key of the issuer: the prefix's namespace owner, or the cluster admin. */
  readonly issuer: Uint8Array;
  /** Public key of the identity allowed to write. */
  readonly grantee: Uint8Array;
  /** Keys starting with this string; inside the issuer's namespace unless the issuer is the admin. */
  readonly prefix: string;
  /** Milliseconds since the epoch after which servers refuse new writes relying on it. */
  readonly expiresAt: number;
  /** The issuer's Ed25519 signature of {@link grantMessage}. */
  readonly signature: Uint8Array;
}

/** The bytes the issuer signs. */
export function grantMessage(clusterId: Uint8Array, g: Omit<Grant, 'signature'>): Uint8Array {
  return concatBytes(
    ...domain(DOMAIN.grant),
    ...lengthPrefixed(clusterId),
    g.issuer,
    g.grantee,
    ...lengthPrefixed(utf8(g.prefix)),
    u64(g.expiresAt),
  );
}

/** A digest of every field of the grant, signature included: what a certificate binds. */
export function grantDigest(crypto: CryptoProvider, g: Grant): Uint8Array {
  return crypto.sha256Sync([
    ...domain(DOMAIN.grantId),
    g.issuer,
    g.grantee,
    ...lengthPrefixed(utf8(g.prefix)),
    u64(g.expiresAt),
    g.signature,
  ]);
}

/** The grant's id (base32), for revocation lists and messages. */
export function grantId(crypto: CryptoProvider, g: Grant): string {
  return toBase32(grantDigest(crypto, g).subarray(0, 20));
}

/** Checks a grant's fields before signing or after parsing. */
export function checkGrantShape(g: Omit<Grant, 'signature'>): void {
  check(g.issuer.length === PUBLIC_KEY_LENGTH && g.grantee.length === PUBLIC_KEY_LENGTH, 'grant keys must be 32-byte public keys');
  check(typeof g.prefix === 'string' && utf8(g.prefix).length <= MAX_PREFIX_LENGTH, `a grant prefix is at most ${MAX_PREFIX_LENGTH} bytes`);
  check(
    Number.isSafeInteger(g.expiresAt) && g.expiresAt > 0 && g.expiresAt <= MAX_EXPIRY,
    'grant expiry must be a time between 1970 and 9999',
  );
}

/**
 * Whether `issuer` may grant `prefix`: the admin any prefix, an owner only prefixes that
 * start with its own namespace `~<ownerId>/`.
 */
export function mayGrant(crypto: CryptoProvider, cluster: ClusterIdentity, issuer: Uint8Array, prefix: string): boolean {
  return bytesEqual(issuer, cluster.admin) || prefix.startsWith(namespacePrefix(ownerIdOf(crypto, issuer)));
}

/** Signs a grant with `issuer`; throws `INVALID_ARGUMENT` for a prefix the issuer cannot grant. */
export async function signGrant(
  crypto: CryptoProvider,
  cluster: ClusterIdentity,
  issuer: Signer,
  grant: { readonly grantee: Uint8Array; readonly prefix: string; readonly expiresAt: number },
): Promise<Grant> {
  const unsigned = { issuer: issuer.publicKey, grantee: grant.grantee, prefix: grant.prefix, expiresAt: grant.expiresAt };
  checkGrantShape(unsigned);
  check(
    mayGrant(crypto, cluster, issuer.publicKey, grant.prefix),
    `this identity may only grant prefixes inside its namespace ${namespacePrefix(ownerIdOf(crypto, issuer.publicKey))}`,
  );
  return { ...unsigned, signature: await issuer.sign(grantMessage(cluster.id, unsigned)) };
}

/** The JSON form of a grant (a grant file): what `powerstore grant` prints and `connect` takes. */
export interface GrantJson {
  readonly kind: 'powerstore-grant';
  readonly version: 2;
  /** Cluster id, base32. */
  readonly cluster: string;
  readonly id: string;
  readonly issuer: string;
  readonly grantee: string;
  readonly prefix: string;
  /** ISO 8601. */
  readonly expiresAt: string;
  readonly signature: string;
}

/** A grant as JSON. */
export function grantToJson(crypto: CryptoProvider, clusterId: Uint8Array, g: Grant): GrantJson {
  return {
    kind: 'powerstore-grant',
    version: 2,
    cluster: toBase32(clusterId),
    id: grantId(crypto, g),
    issuer: encodePublicKey(g.issuer),
    grantee: encodePublicKey(g.grantee),
    prefix: g.prefix,
    expiresAt: new Date(g.expiresAt).toISOString(),
    signature: encodeBase64url(g.signature),
  };
}

/**
 * Parses a grant file's JSON; throws `INVALID_ARGUMENT` naming the bad field. Returns the
 * cluster id it names, so the caller can refuse a grant of another cluster.
 */
export function grantFromJson(crypto: CryptoProvider, json: unknown): { grant: Grant; clusterId: Uint8Array } {
  check(typeof json === 'object' && json !== null && !Array.isArray(json), 'a grant must be a JSON object');
  const o = json as Record<string, unknown>;
  check(o.kind === 'powerstore-grant', 'not a grant: field "kind" must be "powerstore-grant"');
  check(o.version === 2, `grant version ${String(o.version)} is not supported (this client reads version 2)`);
  check(typeof o.cluster === 'string', 'grant field "cluster" must be a string');
  const clusterId = fromBase32(o.cluster, 'grant field "cluster"');
  check(clusterId.length === CLUSTER_ID_LENGTH, `grant field "cluster" must name a ${CLUSTER_ID_LENGTH}-byte cluster id`);
  check(typeof o.prefix === 'string', 'grant field "prefix" must be a string');
  const expiresAt = typeof o.expiresAt === 'string' ? Date.parse(o.expiresAt) : NaN;
  check(Number.isSafeInteger(expiresAt), 'grant field "expiresAt" must be an ISO 8601 date');
  const grant: Grant = {
    issuer: decodePublicKey(o.issuer, 'grant field "issuer"'),
    grantee: decodePublicKey(o.grantee, 'grant field "grantee"'),
    prefix: o.prefix,
    expiresAt,
    signature: decodeBase64url(o.signature, SIGNATURE_LENGTH, 'grant field "signature"'),
  };
  checkGrantShape(grant);
  if (o.id !== undefined) check(o.id === grantId(crypto, grant), 'grant field "id" does not match the grant (edited?)');
  return { grant, clusterId };
}
