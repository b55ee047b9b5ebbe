/**
 * Keys. Server `i` holds `k_i`; writers hold every `k_i` and derive `kW` from them, so a
 * cluster file needs no extra secret and a server never learns `kW`. Readers hold nothing.
 */
import { lengthPrefixed } from './bytes.js';
import { DOMAIN, HASH_LENGTH, domain, type CryptoProvider } from './crypto.js';
import { check } from './errors.js';
import { WRITER_ID_LENGTH } from './timestamp.js';

/** What a writer needs: every server key, its derived `kW` and its own id. */
export interface WriterCredentials {
  /** `k_1 … k_n`, indexed by server. */
  readonly serverKeys: readonly Uint8Array[];
  /** `kW`, from {@link deriveWriterKey}. */
  readonly writerKey: Uint8Array;
  /** This writer's timestamp tie-breaker; distinct writers need distinct ids. */
  readonly writerId: Uint8Array;
}

/**
 * `kW = HMAC(label, |k_1| k_1 | … | |k_n| k_n)`: the paper's `H(k_1 || k_2 || …)`,
 * domain-separated and length-prefixed so different key lists never collide.
 */
export function deriveWriterKey(crypto: CryptoProvider, serverKeys: readonly Uint8Array[]): Uint8Array {
  check(serverKeys.length > 0, 'need at least one server key');
  return crypto.hmacSha256(domain(DOMAIN.writerKey)[1]!, serverKeys.flatMap(lengthPrefixed));
}

/** Bundles credentials after checking their shapes. */
export function writerCredentials(
  crypto: CryptoProvider,
  serverKeys: readonly Uint8Array[],
  writerId: Uint8Array,
): WriterCredentials {
  check(serverKeys.every((k) => k.length >= 16), 'server keys must be at least 16 bytes');
  check(writerId.length === WRITER_ID_LENGTH, `writerId must be ${WRITER_ID_LENGTH} bytes`);
  check(!writerId.every((b) => b === 0), 'writerId must not be all zeros (that is ts0)');
  return { serverKeys, writerKey: deriveWriterKey(crypto, serverKeys), writerId };
}

/** Key length the cluster tooling should generate. */
export const SERVER_KEY_LENGTH = HASH_LENGTH;
