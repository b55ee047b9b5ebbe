/**
 * Receipts signed per batch: a server that makes many STOREs durable in one group commit
 * signs one root over their receipt messages instead of one signature each
 * (`signature-batch.ts`), so a busy server signs once per commit, and every verifier checks
 * each root once. A receipt without a path is the original kind, a signature of the
 * receipt message itself: what a server signs when a batch holds one receipt, and what
 * older servers stored.
 */
import { concatBytes, lengthPrefixed, u32 } from '../core/bytes.js';
import { DOMAIN, domain, type CryptoProvider, type Signer } from '../core/crypto.js';
import { SignatureBatcher, type BatchedSignature, type BatchKind, type SignatureBatch } from '../core/signature-batch.js';

/** Where a receipt's message sits in the batch whose root its server signed. */
export type ReceiptBatch = SignatureBatch;

/** A server's receipt as it travels: the signature, and its batch path when one root was signed for many. */
export type ReceiptSignature = BatchedSignature;

/** The leaf of a receipt message. */
export function receiptLeaf(crypto: CryptoProvider, message: Uint8Array): Uint8Array {
  return crypto.sha256Sync([...domain(DOMAIN.receiptLeaf), message]);
}

/** The bytes a server signs for a batch of receipts: cluster, server, leaf count and root. */
export function receiptRootMessage(clusterId: Uint8Array, server: number, count: number, root: Uint8Array): Uint8Array {
  return concatBytes(...domain(DOMAIN.receiptRoot), ...lengthPrefixed(clusterId), Uint8Array.of(server), u32(count), root);
}

/** How server `server`'s receipts are batched: their leaves and root message. */
export function receiptKind(crypto: CryptoProvider, clusterId: Uint8Array, server: number): BatchKind {
  return {
    leaf: (message) => receiptLeaf(crypto, message),
    rootMessage: (count, root) => receiptRootMessage(clusterId, server, count, root),
  };
}

/** A server's {@link SignatureBatcher} for its receipts. */
export function receiptBatcher(
  crypto: CryptoProvider,
  signer: Signer,
  clusterId: Uint8Array,
  server: number,
  defer: (flush: () => void) => void,
  onSigned?: (message: Uint8Array, signature: Uint8Array, receipts: number) => void,
): SignatureBatcher {
  return new SignatureBatcher(crypto, signer, receiptKind(crypto, clusterId, server), defer, onSigned);
}

/** The receipt a STORE acknowledgement carries (its signature, and its batch path if any). */
export function ackReceipt(ack: { readonly receipt: Uint8Array; readonly batch?: ReceiptBatch | undefined }): ReceiptSignature {
  return ack.batch ? { signature: ack.receipt, batch: ack.batch } : { signature: ack.receipt };
}
