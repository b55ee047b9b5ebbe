/**
 * What `stat` and `list` report: a read's result as a {@link KeyStat}, a listing's page as
 * a {@link ListResult}, and `list`'s argument checks.
 */
import {
  encodePublicKey,
  grantId,
  MAX_LIST_LIMIT,
  namespaceOf,
  ownerIdOf,
  toHex,
  type CryptoProvider,
  type ListPage,
  type ListPageKey,
  type ReadOperation,
  type ReadResult,
} from '@powerstore/protocol';
import { invalid } from './errors.js';
import { checkKeyText } from './key-names.js';
import type { KeyStat, ListOptions, ListResult } from './types.js';
import { parseEnvelope, plaintextSize } from './values/encryption.js';
import { envelopeOverhead, overheadOf, stripedSize } from './values/envelopes.js';

/** What `stat` reports of the read `read` of `key`: the operation, what it returned, and the evidence it found. */
export function keyStatOf(
  key: string,
  read: { readonly op: ReadOperation; readonly result: ReadResult; readonly evidence: ReadonlyMap<number, string> },
  crypto: CryptoProvider,
): KeyStat {
  const { op, result, evidence } = read;
  const cert = result.cert;
  // Values in namespaces carry an envelope (`values/encryption.ts`); values elsewhere are stored as given.
  const envelope = result.value !== undefined && namespaceOf(key) !== undefined ? parseEnvelope(result.value) : undefined;
  return {
    key,
    exists: result.value !== undefined,
    deleted: result.value === undefined && result.ts.num > 0,
    size:
      result.value === undefined
        ? 0
        : result.layout
          ? stripedSize(result.layout, overheadOf(key, result.value))
          : envelope
            ? plaintextSize(result.value, envelope)
            : result.value.length,
    encrypted: envelope?.kind === 'encrypted',
    timestamp: { num: result.ts.num, writerId: toHex(result.ts.writerId) },
    ...(cert
      ? {
          writer: {
            publicKey: encodePublicKey(cert.signer),
            ownerId: ownerIdOf(crypto, cert.signer),
            ...(cert.grant ? { grant: grantId(crypto, cert.grant) } : {}),
          },
        }
      : {}),
    rounds: result.rounds,
    answered: op.answered().map((i) => i + 1),
    misbehaving: [...evidence].map(([index, reason]) => ({ id: index + 1, reason })),
  };
}

/** `list`'s arguments checked: the page's size, and the key it starts after (`''` from the first). */
export function listArguments(prefix: unknown, options: ListOptions): { readonly limit: number; readonly after: string } {
  if (typeof prefix !== 'string') throw invalid('prefix must be a string');
  checkKeyText(prefix, 'prefix');
  const limit = options.limit ?? MAX_LIST_LIMIT;
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIST_LIMIT) throw invalid(`limit must be an integer in 1..${MAX_LIST_LIMIT}`);
  const after = options.cursor ?? '';
  if (typeof after !== 'string' || (after !== '' && !after.startsWith(prefix))) {
    throw invalid('cursor must be a cursor that list returned for this prefix');
  }
  return { limit, after };
}

/** A listing's page as `list` returns it. */
export function listResultOf(page: ListPage): ListResult {
  return {
    keys: page.keys.map((k) => ({
      key: k.key,
      size: listedPlaintextSize(k),
      storedSize: k.size,
      encrypted: k.candidate.cert.envelope === 'encrypted',
      timestamp: { num: k.candidate.ts.num, writerId: toHex(k.candidate.ts.writerId) },
    })),
    cursor: page.cursor,
  };
}

/**
 * The plaintext size of a listed value: its stored size less the envelope its write
 * certificate names, once per stripe. The writer signed the envelope; one whose value is
 * too short for it (only a writer of the key could sign that) has no plaintext size.
 */
function listedPlaintextSize(k: ListPageKey): number | undefined {
  if (k.size === undefined || k.stripes === undefined) return undefined;
  const size = k.size - k.stripes * envelopeOverhead(k.candidate.cert.envelope);
  return size >= 0 ? size : undefined;
}
