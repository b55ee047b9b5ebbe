/**
 * Hashing and signatures of PowerStore behind an injected provider.
 *
 * Every hash and signed input starts with its own domain label (length-prefixed), so a
 * fragment hash can never be confused with a nonce hash, a cross-checksum digest or a
 * signed message, and every signed message binds the cluster and the key name, so
 * nothing signed for one key or cluster replays on another.
 */
import { lengthPrefixed, toHex, u32, u64, utf8 } from './bytes.js';

/** Bytes in every hash and nonce (SHA-256). */
export const HASH_LENGTH = 32;
/** Bytes in an Ed25519 public key. */
export const PUBLIC_KEY_LENGTH = 32;
/** Bytes in an Ed25519 signature. */
export const SIGNATURE_LENGTH = 64;
/** Bytes in an Ed25519 seed (RFC 8032's private key). */
export const SEED_LENGTH = 32;

/**
 * An Ed25519 key pair that can sign: a writer's identity. The private half may be a
 * non-extractable WebCrypto key, so it is never exposed, only used.
 */
export interface Signer {
  /** The 32-byte Ed25519 public key. */
  readonly publicKey: Uint8Array;
  /** The 64-byte Ed25519 signature of `message` (deterministic, RFC 8032). */
  sign(message: Uint8Array): Promise<Uint8Array>;
}

/**
 * SHA-256 and Ed25519. Bulk fragment hashing and signatures are async so WebCrypto can
 * serve them; small inputs that must be hashed synchronously go through `sha256Sync`.
 * Every hash method treats `parts` as their concatenation. All providers give identical
 * bytes (the test suite checks it).
 */
export interface CryptoProvider {
  /** For diagnostics and test names. */
  readonly name: string;
  /** SHA-256 of large inputs (fragments); may use a native asynchronous path. */
  sha256(parts: readonly Uint8Array[]): Promise<Uint8Array>;
  /** SHA-256 of small inputs. */
  sha256Sync(parts: readonly Uint8Array[]): Uint8Array;
  /**
   * `toHex(sha256Sync(parts))`, for digests used only as names (the verifier's caches), where
   * a provider can give the hex without a byte array (see {@link sha256Hex}).
   */
  sha256HexSync?(parts: readonly Uint8Array[]): string;
  /**
   * Whether `signature` is `publicKey`'s Ed25519 signature of `message` (RFC 8032,
   * canonical encodings only). Malformed keys or signatures give `false`, never a throw.
   */
  verifyEd25519(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): Promise<boolean>;
  /** The signer for a 32-byte seed. */
  signerFromSeed(seed: Uint8Array): Promise<Signer>;
}

/** Domain-separation labels; changing one is a protocol version change. */
export const DOMAIN = {
  fragment: 'powerstore/v2/fragment',
  nonce: 'powerstore/v2/nonce',
  crossChecksum: 'powerstore/v2/cross-checksum',
  certificate: 'powerstore/v2/write-certificate',
  certificateDigest: 'powerstore/v2/certificate-digest',
  receipt: 'powerstore/v2/store-receipt',
  receiptLeaf: 'powerstore/v2/store-receipt-leaf',
  receiptRoot: 'powerstore/v2/store-receipt-root',
  certificateLeaf: 'powerstore/v2/write-certificate-leaf',
  certificateRoot: 'powerstore/v2/write-certificate-root',
  batchNode: 'powerstore/v2/signature-batch-node',
  grant: 'powerstore/v2/grant',
  grantId: 'powerstore/v2/grant-id',
  identity: 'powerstore/v2/identity',
  digest: 'powerstore/v2/digest',
  stripeLayout: 'powerstore/v2/stripe-layout',
  stripeDigests: 'powerstore/v2/stripe-digests',
  stripeCertificate: 'powerstore/v2/stripe-certificate',
} as const;

const labels = new Map<string, Uint8Array[]>();
/** Length-prefixed label bytes, computed once per label. */
export function domain(label: (typeof DOMAIN)[keyof typeof DOMAIN]): Uint8Array[] {
  let parts = labels.get(label);
  if (!parts) {
    parts = lengthPrefixed(utf8(label));
    labels.set(label, parts);
  }
  return parts;
}

/** `H(fragment)` as cross-checksum entry `index`; binding the index stops entries moving. */
export function fragmentHash(crypto: CryptoProvider, index: number, fragment: Uint8Array): Promise<Uint8Array> {
  return crypto.sha256([...domain(DOMAIN.fragment), u32(index), u64(fragment.length), fragment]);
}

/** The lowercase hex of SHA-256 of `parts`: the provider's own if it has one. */
export function sha256Hex(crypto: CryptoProvider, parts: readonly Uint8Array[]): string {
  return crypto.sha256HexSync ? crypto.sha256HexSync(parts) : toHex(crypto.sha256Sync(parts));
}

/** `Nbar = H(N)`, the commitment a writer stores before revealing `N`. */
export function nonceHash(crypto: CryptoProvider, nonce: Uint8Array): Uint8Array {
  return crypto.sha256Sync([...domain(DOMAIN.nonce), nonce]);
}

/** The key name as signed input, length-prefixed so `("ab", …)` and `("a", "b…")` differ. */
export function keyField(key: string): Uint8Array[] {
  return lengthPrefixed(utf8(key));
}
