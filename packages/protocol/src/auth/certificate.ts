/**
 * Write certificates and store proofs: what makes a candidate valid.
 *
 * - The **write certificate**: the writer signs, once per write, the cluster, the key,
 *   the timestamp, `Nbar = H(N)`, the cross-checksum's digest, whether the write is a
 *   delete, and the grant it relies on.
 * - The **store proof**: `n − t` *receipts*, each a server's signature that it admitted
 *   the write and made `Hist[key][ts]` durable with that certificate. A server signs
 *   only after every STORE check passed (signatures, authority, policy, quota,
 *   write-once), so a proof shows that at least `t + 1` correct servers hold the write.
 *
 * `valid(c)` ≜ `c.ts > ts0 ∧ H(c.N) = c.cert.Nbar ∧` the certificate is valid for the key
 * and timestamp `∧` the proof holds `n − t` receipts of distinct servers, each checked
 * against the server's key in the certificate's key epoch (`epochs.ts`).
 *
 * **Validity is timeless.** It depends only on the candidate's bytes, the key and the
 * cluster's identity (id, admin key, and the server keys of the certificate's epoch, which
 * never change once published): signatures and the *structure* of the signer's authority
 * (own namespace, admin, or a grant from the namespace owner or the admin). Expiry,
 * revocation, admission, quotas and the current epoch are checked on STORE only, so no
 * clock, no later policy change and no key rotation can turn a completed write invalid,
 * and a candidate is valid at every correct party that knows its epoch or at none.
 *
 * The proof is what makes "valid" imply "stored", whatever the writer does: the paper's
 * writers were trusted to reveal `N` only after their STORE round, but a writer here may
 * be any identity. Without proofs, a grantee whose grant expired (or was revoked) could
 * sign a certificate that no correct server would store, reveal its nonce, and stall
 * every reader of the grantor's keys on a candidate with no data. With write-once
 * history, two proofs for one `(key, ts)` would need a correct server to store two
 * entries, so a timestamp has at most one valid content.
 */
import { bytesEqual, concatBytes, lengthPrefixed, u32, u64 } from '../core/bytes.js';
import { DOMAIN, HASH_LENGTH, domain, keyField, nonceHash, sha256Hex, type CryptoProvider, type Signer } from '../core/crypto.js';
import { grantDigest, grantMessage, mayGrant, type ClusterIdentity, type Grant } from './grant.js';
import { namespaceOf, ownerIdOf, writerTagOf } from './identity.js';
import { epochsProblem, extensionProblem, receiptKey } from './epochs.js';
import { receiptKind, type ReceiptSignature } from './receipt-batch.js';
import { BatchTrees, SignatureBatcher, type BatchedSignature, type BatchKind, type SignatureBatch } from '../core/signature-batch.js';
import { ProtocolError, type ProtocolErrorCode } from '../core/errors.js';
import { writerTagPart, type Timestamp } from './timestamp.js';

/** The client envelope a value is stored in, as a certificate names it (see {@link WriteCertificate.envelope}). */
export type ValueEnvelope = 'encrypted' | 'public';

/**
 * The byte that signs a certificate's delete flag and envelope: bit 0 the delete, bit 1 an
 * encrypted envelope, bit 2 a public one; a value stored as given signs exactly the byte
 * it did before envelopes were named.
 */
function kindFlags(cert: { readonly tombstone: boolean; readonly envelope?: ValueEnvelope }): number {
  return (cert.tombstone ? 1 : 0) | (cert.envelope === 'encrypted' ? 2 : cert.envelope === 'public' ? 4 : 0);
}

function kindByte(cert: { readonly tombstone: boolean; readonly envelope?: ValueEnvelope }): Uint8Array {
  return Uint8Array.of(kindFlags(cert));
}

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
  /**
   * The write is a delete. Also inside `ccDigest`, but a server that learns a write only as
   * a candidate (COMPLETE, a FILTER write-back) has no cross-checksum: this is how it knows
   * a completed delete lets it collect everything below. Servers refuse a STORE whose
   * cross-checksum says otherwise, so every valid candidate's flag tells the truth.
   */
  readonly tombstone: boolean;
  /**
   * How the writer's client wrapped the value before erasure coding it (the client's
   * envelope: `'encrypted'` or `'public'`); absent for a value stored as given. Servers do
   * not interpret it: it is the writer's signed word, so that a listing can tell the
   * plaintext's size without reading the value. Readers open the value itself and never
   * rely on it.
   */
  readonly envelope?: ValueEnvelope;
  /**
   * The key epoch the writer wrote under (`epochs.ts`); absent is 0. Receipts for the write
   * are checked against this epoch's server keys, and correct servers admit only their
   * current epoch. Signed, so nobody can move a write to another epoch's keys.
   */
  readonly epoch?: number;
  /**
   * Ed25519 signature of {@link certificateMessage}, or (with `batch`) of a root over the
   * certificate messages of many writes the signer signed at once (`signature-batch.ts`,
   * {@link certificateRootMessage}).
   */
  readonly signature: Uint8Array;
  /** Where this certificate's message sits in the batch whose root `signature` signs. */
  readonly batch?: SignatureBatch;
}

/**
 * Server `server`'s signature that it stored the write: of {@link receiptMessage} itself,
 * or (with `batch`) of a root over many receipt messages (`receipt-batch.ts`).
 */
export interface StoreReceipt extends ReceiptSignature {
  /** Protocol index (0-based) of the server. */
  readonly server: number;
}

/** `n − t` receipts of distinct servers, in increasing server order. */
export type StoreProof = readonly StoreReceipt[];

/** The store proof of `receipts` (by server index), in increasing server order. */
export function storeProof(receipts: ReadonlyMap<number, ReceiptSignature>): StoreProof {
  return [...receipts]
    .sort(([a], [b]) => a - b)
    .map(([server, r]) => (r.batch ? { server, signature: r.signature, batch: r.batch } : { server, signature: r.signature }));
}

const NO_GRANT = new Uint8Array(HASH_LENGTH);

/**
 * The bytes a writer signs: the write certificate's, or with `stripe` ≥ 1 the **stripe
 * certificate** of that stripe of a striped write, sent before the write certificate
 * exists: the same fields under another domain, with the stripe index, and `ccDigest` the
 * stripe's own cross-checksum digest. A stripe certificate lets a server check the
 * stripe's authority and charge its owner; it never makes a candidate valid.
 *
 * A certificate of epoch 0 signs exactly what it did before key epochs existed; one of a
 * later epoch appends the epoch (`u32`) to the same bytes.
 */
export function certificateMessage(
  crypto: CryptoProvider,
  clusterId: Uint8Array,
  key: string,
  ts: Timestamp,
  cert: Omit<WriteCertificate, 'signature'>,
  stripe = 0,
): Uint8Array {
  return concatBytes(
    ...domain(stripe > 0 ? DOMAIN.stripeCertificate : DOMAIN.certificate),
    ...lengthPrefixed(clusterId),
    ...keyField(key),
    u64(ts.num),
    ts.writerId,
    ...(stripe > 0 ? [u32(stripe)] : []),
    cert.nonceHash,
    cert.ccDigest,
    kindByte(cert),
    cert.signer,
    cert.grant ? grantDigest(crypto, cert.grant) : NO_GRANT,
    ...epochField(cert.epoch),
  );
}

/** The epoch's bytes in what is signed and hashed: nothing for epoch 0, so those bytes stay as they were. */
function epochField(epoch: number | undefined): Uint8Array[] {
  return epoch ? [u32(epoch)] : [];
}

/** A digest of every field of a certificate: what receipts sign. */
export function certificateDigest(crypto: CryptoProvider, cert: WriteCertificate): Uint8Array {
  return crypto.sha256Sync([
    ...domain(DOMAIN.certificateDigest),
    cert.nonceHash,
    cert.ccDigest,
    kindByte(cert),
    cert.signer,
    cert.signature,
    cert.grant ? grantDigest(crypto, cert.grant) : NO_GRANT,
    ...epochField(cert.epoch),
    ...batchField(cert.batch),
  ]);
}

/** A certificate's batch path in what is hashed: nothing without one, so unbatched digests stay as they were. */
function batchField(batch: SignatureBatch | undefined): Uint8Array[] {
  return batch ? [BATCH_TAG, u32(batch.index), u32(batch.count), ...batch.siblings] : [];
}
const BATCH_TAG = Uint8Array.of(0xba);

/** The leaf of a certificate message in a batch. */
export function certificateLeaf(crypto: CryptoProvider, message: Uint8Array): Uint8Array {
  return crypto.sha256Sync([...domain(DOMAIN.certificateLeaf), message]);
}

/** The bytes a writer signs for a batch of certificates: cluster, its own key, leaf count and root. */
export function certificateRootMessage(clusterId: Uint8Array, signer: Uint8Array, count: number, root: Uint8Array): Uint8Array {
  return concatBytes(...domain(DOMAIN.certificateRoot), ...lengthPrefixed(clusterId), signer, u32(count), root);
}

/**
 * A writer's {@link SignatureBatcher} for its certificates: writes of one session that
 * sign in the same turn (a `putMany`, concurrent puts) share one signature, and every
 * server checks it once for all of them.
 */
export function certificateBatcher(
  crypto: CryptoProvider,
  signer: Signer,
  clusterId: Uint8Array,
  defer: (flush: () => void) => void,
  onSigned?: (message: Uint8Array, signature: Uint8Array, certificates: number) => void,
): SignatureBatcher {
  return new SignatureBatcher(crypto, signer, certificateKind(crypto, clusterId, signer.publicKey), defer, onSigned);
}

/** How `signer`'s certificates are batched: their leaves and root message. */
function certificateKind(crypto: CryptoProvider, clusterId: Uint8Array, signer: Uint8Array): BatchKind {
  return {
    leaf: (message) => certificateLeaf(crypto, message),
    rootMessage: (count, root) => certificateRootMessage(clusterId, signer, count, root),
  };
}

/** The bytes server `server` signs when it has stored `cert`'s write of `key` at `ts`. */
export function receiptMessage(
  crypto: CryptoProvider,
  clusterId: Uint8Array,
  key: string,
  ts: Timestamp,
  cert: WriteCertificate,
  server: number,
  /** `certificateDigest(crypto, cert)`, when the caller has it (a proof's receipts all sign the same one). */
  digest: Uint8Array = certificateDigest(crypto, cert),
): Uint8Array {
  return concatBytes(
    ...domain(DOMAIN.receipt),
    ...lengthPrefixed(clusterId),
    ...keyField(key),
    u64(ts.num),
    ts.writerId,
    digest,
    Uint8Array.of(server),
  );
}

/** Signs a write certificate (`stripe` ≥ 1: a stripe certificate, see {@link certificateMessage}). */
export async function signCertificate(
  crypto: CryptoProvider,
  clusterId: Uint8Array,
  signer: Signer,
  write: {
    readonly key: string;
    readonly ts: Timestamp;
    readonly nonceHash: Uint8Array;
    readonly ccDigest: Uint8Array;
    readonly tombstone: boolean;
    /** The client envelope the value is stored in (see {@link WriteCertificate.envelope}). */
    readonly envelope?: ValueEnvelope;
    readonly grant: Grant | undefined;
    readonly stripe?: number;
    /** The key epoch written under (the cluster file's current one); absent or 0 for epoch 0. */
    readonly epoch?: number;
  },
  /** Signs the certificate message (a session's {@link certificateBatcher}); by default `signer` signs it alone. */
  sign?: (message: Uint8Array) => Promise<BatchedSignature>,
): Promise<WriteCertificate> {
  const unsigned = {
    nonceHash: write.nonceHash,
    ccDigest: write.ccDigest,
    tombstone: write.tombstone,
    signer: signer.publicKey,
    grant: write.grant,
    ...(write.envelope ? { envelope: write.envelope } : {}),
    ...(write.epoch ? { epoch: write.epoch } : {}),
  };
  const message = certificateMessage(crypto, clusterId, write.key, write.ts, unsigned, write.stripe);
  if (!sign) return { ...unsigned, signature: await signer.sign(message) };
  const { signature, batch } = await sign(message);
  return batch ? { ...unsigned, signature, batch } : { ...unsigned, signature };
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
  if (!bytesEqual(writerTagPart(ts.writerId), writerTagOf(crypto, signer)))
    return "the timestamp's writer id does not belong to the signer";
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
  readonly proof: StoreProof;
}

/** The two halves of `valid(c)` a host may check its own way (the simulator's mutants do). */
export interface ValidityChecks {
  certificate(ts: Timestamp, cert: WriteCertificate): Promise<CertificateCheck>;
  proof(ts: Timestamp, cert: WriteCertificate, proof: StoreProof): Promise<boolean>;
}

/**
 * `valid(c)` ≜ `c.ts > ts0 ∧ H(c.N) = c.cert.Nbar ∧` the certificate and the proof check
 * out for the candidate's key: one definition for servers, readers and writers (CLOCK).
 */
export async function isValidCandidate(crypto: CryptoProvider, c: CandidateFields, checks: ValidityChecks): Promise<boolean> {
  if (c.ts.num === 0 || !bytesEqual(nonceHash(crypto, c.nonce), c.cert.nonceHash)) return false;
  return (await checks.certificate(c.ts, c.cert)).ok && (await checks.proof(c.ts, c.cert, c.proof));
}

/**
 * Checks certificates, receipts and candidates for one cluster, remembering signatures
 * already verified (a bounded set), so a write costs a server one verification per
 * signature however many times its candidate comes back in COMPLETE, CLOCK and FILTER.
 */
export class CertificateVerifier {
  readonly #crypto: CryptoProvider;
  #cluster: ClusterIdentity;
  readonly #quorum: number;
  readonly #verified = new Set<string>();
  /** Verifications under way, by the same id: one per signature however many ask at once. */
  readonly #inFlight = new Map<string, Promise<boolean>>();
  /** Fingerprints of whole candidates found valid, so a repeated one costs one hash. */
  readonly #validCandidates = new Set<string>();
  readonly #cacheSize: number;
  /** Nodes of batches whose roots' signatures verified. */
  readonly #trees: BatchTrees;

  constructor(crypto: CryptoProvider, cluster: ClusterIdentity, cacheSize = 16_384) {
    const problem = epochsProblem(cluster);
    if (problem) throw new ProtocolError('INVALID_ARGUMENT', `cluster identity: ${problem}`);
    this.#crypto = crypto;
    this.#cluster = cluster;
    // n = 3t + 1 servers; a proof needs n − t receipts.
    const n = cluster.servers.length;
    this.#quorum = n - (n - 1) / 3;
    this.#cacheSize = cacheSize;
    this.#trees = new BatchTrees(crypto);
  }

  /** The cluster this verifier checks for. */
  get cluster(): ClusterIdentity {
    return this.#cluster;
  }

  /**
   * Moves to a newer identity of the same cluster that only adds key epochs (a replaced
   * server's key, see `epochs.ts`); throws `INVALID_ARGUMENT` for anything else. What was
   * verified stays verified: no epoch already known changes.
   */
  update(next: ClusterIdentity): void {
    const problem = extensionProblem(this.#cluster, next);
    if (problem) throw new ProtocolError('INVALID_ARGUMENT', `not a newer identity of this cluster: ${problem}`);
    this.#cluster = next;
  }

  /** Signatures and authority of `cert` for `key` at `ts`. */
  async check(key: string, ts: Timestamp, cert: WriteCertificate): Promise<CertificateCheck> {
    const problem = authorityProblem(this.#crypto, this.#cluster, key, ts, cert.signer, cert.grant);
    if (problem) return { ok: false, code: 'NOT_AUTHORIZED', reason: problem };
    return this.checkSignatures(key, ts, cert);
  }

  /**
   * The certificate's own signature and its grant's, without the authority rules; with
   * `stripe` ≥ 1, as the stripe certificate of that stripe.
   */
  async checkSignatures(key: string, ts: Timestamp, cert: WriteCertificate, stripe = 0): Promise<CertificateCheck> {
    const crypto = this.#crypto;
    if (cert.grant && !(await this.#verify(cert.grant.issuer, grantMessage(this.#cluster.id, cert.grant), cert.grant.signature))) {
      return { ok: false, code: 'UNAUTHENTICATED', reason: "the grant's signature does not verify" };
    }
    const message = certificateMessage(crypto, this.#cluster.id, key, ts, cert, stripe);
    const kind = certificateKind(crypto, this.#cluster.id, cert.signer);
    if (!(await this.#verifySigned(kind, message, cert.batch, cert.signer, cert.signature))) {
      return { ok: false, code: 'UNAUTHENTICATED', reason: `the ${stripe > 0 ? 'stripe ' : ''}certificate's signature does not verify` };
    }
    return OK;
  }

  /** Signatures and authority of the stripe certificate of stripe `stripe` (≥ 1) for `key` at `ts`. */
  async checkStripe(key: string, ts: Timestamp, stripe: number, cert: WriteCertificate): Promise<CertificateCheck> {
    const problem = authorityProblem(this.#crypto, this.#cluster, key, ts, cert.signer, cert.grant);
    if (problem) return { ok: false, code: 'NOT_AUTHORIZED', reason: problem };
    return this.checkSignatures(key, ts, cert, stripe);
  }

  /**
   * Whether `receipt` is server `server`'s receipt for this write, by the server's key in
   * the certificate's epoch (never valid for an epoch this verifier does not know). A
   * batched receipt's path must lead to the root the signature signs; the root's signature
   * is then remembered like any other, so the rest of its batch costs only hashes.
   */
  receiptValid(
    key: string,
    ts: Timestamp,
    cert: WriteCertificate,
    server: number,
    receipt: ReceiptSignature,
    /** `certificateDigest` of `cert`, if the caller has it. */
    digest?: Uint8Array,
  ): Promise<boolean> {
    const publicKey = receiptKey(this.#cluster, cert.epoch ?? 0, server);
    if (!publicKey) return Promise.resolve(false);
    const message = receiptMessage(this.#crypto, this.#cluster.id, key, ts, cert, server, digest);
    return this.#verifySigned(receiptKind(this.#crypto, this.#cluster.id, server), message, receipt.batch, publicKey, receipt.signature);
  }

  /** At least `n − t` receipts, of distinct servers in increasing order, every one valid. */
  async proofValid(key: string, ts: Timestamp, cert: WriteCertificate, proof: StoreProof): Promise<boolean> {
    if (proof.length < this.#quorum) return false;
    // Every receipt signs the same certificate digest: computed once.
    const digest = certificateDigest(this.#crypto, cert);
    for (let i = 0; i < proof.length; i++) {
      const r = proof[i]!;
      if (i > 0 && r.server <= proof[i - 1]!.server) return false;
      if (!(await this.receiptValid(key, ts, cert, r.server, r, digest))) return false;
    }
    return true;
  }

  /**
   * `valid(c)` for `key`. A candidate found valid is remembered by a digest of all its
   * fields and the key, so the same candidate coming back (every COLLECT answer, every
   * FILTER) costs one hash instead of a dozen. `checks` replaces the two halves of the
   * check (the server passes its own, so each rule stays one overridable method).
   */
  async valid(key: string, c: CandidateFields, checks?: ValidityChecks): Promise<boolean> {
    const fingerprint = sha256Hex(this.#crypto, [candidateFields(key, c)]);
    if (this.#validCandidates.has(fingerprint)) return true;
    const ok = await isValidCandidate(
      this.#crypto,
      c,
      checks ?? {
        certificate: (ts, cert) => this.check(key, ts, cert),
        proof: (ts, cert, proof) => this.proofValid(key, ts, cert, proof),
      },
    );
    if (ok) remember(this.#validCandidates, fingerprint, this.#cacheSize);
    return ok;
  }

  /**
   * Records a signature this process made itself (a writer's certificate, a server's
   * receipt) as verified: it will come back in candidates, and checking it again would
   * only spend time.
   */
  signed(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): void {
    this.#remember(this.#id(publicKey, message, signature));
  }

  /**
   * Whether `signature` by `publicKey` signs `message`, or with `batch` the root message its
   * path leads to (`signature-batch.ts`). The nodes of paths to verified roots are
   * remembered ({@link BatchTrees}), so the rest of a batch costs a few hashes a leaf.
   */
  #verifySigned(
    kind: BatchKind,
    message: Uint8Array,
    batch: SignatureBatch | undefined,
    publicKey: Uint8Array,
    signature: Uint8Array,
  ): Promise<boolean> {
    if (!batch) return this.#verify(publicKey, message, signature);
    const found = this.#trees.root(kind.leaf(message), batch, signature);
    if (!found) return Promise.resolve(false);
    return this.#verify(publicKey, kind.rootMessage(batch.count, found.root), signature).then((ok) => {
      if (ok && found.learned.length > 0) this.#trees.learn(signature, batch.count, found);
      return ok;
    });
  }

  #verify(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): Promise<boolean> {
    const id = this.#id(publicKey, message, signature);
    if (this.#verified.has(id)) return Promise.resolve(true);
    // The receipts (or certificates) of one batch arrive together: the first check of
    // their root is shared by all, instead of each verifying it before any finished.
    let pending = this.#inFlight.get(id);
    if (!pending) {
      pending = this.#crypto
        .verifyEd25519(publicKey, message, signature)
        .then((ok) => {
          if (ok) this.#remember(id);
          return ok;
        })
        .finally(() => this.#inFlight.delete(id));
      this.#inFlight.set(id, pending);
    }
    return pending;
  }

  #id(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): string {
    return sha256Hex(this.#crypto, [publicKey, signature, message]);
  }

  #remember(id: string): void {
    remember(this.#verified, id, this.#cacheSize);
  }
}

/** Adds `id` to a bounded set, forgetting the oldest entry when full. */
function remember(set: Set<string>, id: string, size: number): void {
  if (set.size >= size) set.delete(set.values().next().value!);
  set.add(id);
}

/**
 * Every field of a candidate, and its key, length-unambiguous, written into one reused
 * buffer for one digest (a listing fingerprints every key of every answer: building them
 * as dozens of small arrays made most of its garbage). Valid until the next call.
 */
function candidateFields(key: string, c: CandidateFields): Uint8Array {
  const w = fingerprintWriter;
  w.reset(key.length * 3 + 4);
  w.utf8Prefixed(key);
  w.u64(c.ts.num);
  w.bytes(c.ts.writerId);
  w.bytes(c.nonce);
  w.bytes(c.cert.nonceHash);
  w.bytes(c.cert.ccDigest);
  // The signature covers the flag (and the envelope): without it here, a candidate with
  // the flag flipped would pass as the valid one it was copied from.
  w.u8(kindFlags(c.cert));
  w.bytes(c.cert.signer);
  w.bytes(c.cert.signature);
  const g = c.cert.grant;
  w.u8(g ? 1 : 0);
  // Fixed-length fields above; the grant's prefix is length-prefixed.
  if (g) {
    w.bytes(g.issuer);
    w.bytes(g.grantee);
    w.utf8Prefixed(g.prefix);
    w.u64(g.expiresAt);
    w.bytes(g.signature);
  }
  // The signature covers the epoch too: a candidate moved to another epoch must not pass.
  w.u32(c.cert.epoch ?? 0);
  // Batch paths too: the same signature with another path must be checked again.
  w.path(c.cert.batch);
  w.u32(c.proof.length);
  for (const r of c.proof) {
    w.u8(r.server);
    w.bytes(r.signature);
    w.path(r.batch);
  }
  return w.written();
}

/** Writes a candidate's fingerprint input: what `[u32(…), bytes, …]` concatenated would hold, in one buffer that grows. */
class FingerprintWriter {
  #buf = new Uint8Array(2048);
  #pos = 0;
  static readonly #encoder = new TextEncoder();

  reset(atLeast: number): void {
    this.#pos = 0;
    this.#room(atLeast);
  }
  #room(len: number): void {
    if (this.#buf.length - this.#pos >= len) return;
    const grown = new Uint8Array(Math.max(2 * this.#buf.length, this.#pos + len));
    grown.set(this.#buf.subarray(0, this.#pos));
    this.#buf = grown;
  }
  u8(x: number): void {
    this.#room(1);
    this.#buf[this.#pos++] = x;
  }
  u32(x: number): void {
    this.#room(4);
    const b = this.#buf;
    b[this.#pos++] = x >>> 24;
    b[this.#pos++] = x >>> 16;
    b[this.#pos++] = x >>> 8;
    b[this.#pos++] = x;
  }
  u64(x: number): void {
    this.u32(Math.floor(x / 2 ** 32));
    this.u32(x >>> 0);
  }
  bytes(b: Uint8Array): void {
    this.#room(b.length);
    this.#buf.set(b, this.#pos);
    this.#pos += b.length;
  }
  /** `s` in UTF-8 after its u32 length (`lengthPrefixed(utf8(s))`). */
  utf8Prefixed(s: string): void {
    this.#room(4 + 3 * s.length);
    const at = this.#pos;
    this.#pos += 4;
    const { written } = FingerprintWriter.#encoder.encodeInto(s, this.#buf.subarray(this.#pos));
    this.#pos = at;
    this.u32(written);
    this.#pos += written;
  }
  /** A batch path (or none), as before: a flag, then index, count and the sibling hashes. */
  path(batch: SignatureBatch | undefined): void {
    if (!batch) return this.u8(0);
    this.u8(1);
    this.u32(batch.index);
    this.u32(batch.count);
    for (const h of batch.siblings) this.bytes(h);
  }
  written(): Uint8Array {
    return this.#buf.subarray(0, this.#pos);
  }
}
const fingerprintWriter = new FingerprintWriter();
