/**
 * Receipts signed per batch: a server that makes many STOREs durable in one group commit
 * signs one Merkle root over all their receipt messages instead of one signature each,
 * and every verifier checks that root's signature once (`CertificateVerifier` remembers
 * it), so the receipts of a batch cost one signature to make and, after the first, a few
 * hashes to check.
 *
 * A batched receipt is the root's signature plus the leaf's path: its position, the
 * number of leaves and the sibling hashes from the leaf up. The signed message binds the
 * cluster, the server and the leaf count, and leaves and inner nodes are hashed under
 * different domains, so a path cannot be reshaped into another valid path (an inner node
 * presented as a leaf, or a tree of another size). A receipt without a path is the
 * original kind, a signature of the receipt message itself: what a server signs when a
 * batch holds one receipt, and what older servers stored.
 *
 * The tree: leaves in order; at each level, neighbours `2i` and `2i + 1` are hashed
 * together, and the last node of an odd level moves up unchanged. The leaf count fixes
 * which levels give a leaf a sibling, so a path has exactly one valid length.
 */
import { concatBytes, lengthPrefixed, u32 } from '../core/bytes.js';
import { DOMAIN, domain, type CryptoProvider, type Signer } from '../core/crypto.js';

/** Where a receipt's message sits in the tree whose root was signed. */
export interface ReceiptBatch {
  /** The leaf's position, `0 ≤ index < count`. */
  readonly index: number;
  /** Leaves in the tree: 2 to {@link MAX_RECEIPT_BATCH}. */
  readonly count: number;
  /** Sibling hashes from the leaf's level up; exactly {@link siblingCount}`(index, count)` of them. */
  readonly siblings: readonly Uint8Array[];
}

/** A server's receipt as it travels: the signature, and its batch path when one root was signed for many. */
export interface ReceiptSignature {
  readonly signature: Uint8Array;
  readonly batch?: ReceiptBatch;
}

/** The most receipts one root signs (paths of at most 10 hashes). */
export const MAX_RECEIPT_BATCH = 1024;

/** The length of every hash in a path. */
export const RECEIPT_HASH_LENGTH = 32;

/** How many siblings the path of leaf `index` of `count` has (the levels where it has a neighbour). */
export function siblingCount(index: number, count: number): number {
  let siblings = 0;
  for (let p = index, w = count; w > 1; p >>= 1, w = (w + 1) >> 1) if ((p ^ 1) < w) siblings++;
  return siblings;
}

/** Whether `(index, count)` can name a leaf of a batch. */
export function batchShapeValid(index: number, count: number): boolean {
  return Number.isInteger(count) && Number.isInteger(index) && count >= 2 && count <= MAX_RECEIPT_BATCH && index >= 0 && index < count;
}

/** The leaf of a receipt message. */
export function receiptLeaf(crypto: CryptoProvider, message: Uint8Array): Uint8Array {
  return crypto.sha256Sync([...domain(DOMAIN.receiptLeaf), message]);
}

function node(crypto: CryptoProvider, left: Uint8Array, right: Uint8Array): Uint8Array {
  return crypto.sha256Sync([...domain(DOMAIN.receiptNode), left, right]);
}

/** The bytes a server signs for a batch: cluster, server, leaf count and root. */
export function batchRootMessage(clusterId: Uint8Array, server: number, count: number, root: Uint8Array): Uint8Array {
  return concatBytes(...domain(DOMAIN.receiptRoot), ...lengthPrefixed(clusterId), Uint8Array.of(server), u32(count), root);
}

/** Every level of the tree over `leaves`, leaves first, root last. */
function levels(crypto: CryptoProvider, leaves: readonly Uint8Array[]): Uint8Array[][] {
  const out: Uint8Array[][] = [[...leaves]];
  for (let level = out[0]!; level.length > 1; ) {
    const up: Uint8Array[] = [];
    for (let i = 0; i < level.length; i += 2) up.push(i + 1 < level.length ? node(crypto, level[i]!, level[i + 1]!) : level[i]!);
    out.push(up);
    level = up;
  }
  return out;
}

/** The root over `leaves` and every leaf's path (`leaves.length` ≥ 2). */
export function buildBatch(crypto: CryptoProvider, leaves: readonly Uint8Array[]): { root: Uint8Array; paths: ReceiptBatch[] } {
  const tree = levels(crypto, leaves);
  const count = leaves.length;
  const paths = leaves.map((_, index) => {
    const siblings: Uint8Array[] = [];
    for (let l = 0, p = index; l < tree.length - 1; l++, p >>= 1) {
      const sibling = tree[l]![p ^ 1];
      if (sibling) siblings.push(sibling);
    }
    return { index, count, siblings };
  });
  return { root: tree[tree.length - 1]![0]!, paths };
}

/** The root `leaf`'s path leads to, or `undefined` when the path is malformed (shape, length, hash sizes). */
export function rootOf(crypto: CryptoProvider, leaf: Uint8Array, batch: ReceiptBatch): Uint8Array | undefined {
  const { index, count, siblings } = batch;
  if (!batchShapeValid(index, count) || siblings.length !== siblingCount(index, count)) return undefined;
  let hash = leaf;
  let used = 0;
  for (let p = index, w = count; w > 1; p >>= 1, w = (w + 1) >> 1) {
    if ((p ^ 1) >= w) continue;
    const sibling = siblings[used++]!;
    if (sibling.length !== RECEIPT_HASH_LENGTH) return undefined;
    hash = p & 1 ? node(crypto, sibling, hash) : node(crypto, hash, sibling);
  }
  return hash;
}

/**
 * Signs receipt messages in batches: every message asked for before `defer` runs its
 * callback is signed under one root (or alone, the original way, when it is the only one).
 * `defer` is the host's "after this turn" (`setImmediate` in Node), so the STOREs one
 * group commit made durable, whose continuations all run in that turn, share a signature.
 */
export class ReceiptBatcher {
  #pending: { message: Uint8Array; resolve(r: ReceiptSignature): void; reject(e: unknown): void }[] = [];

  constructor(
    private readonly crypto: CryptoProvider,
    private readonly signer: Signer,
    private readonly clusterId: Uint8Array,
    private readonly server: number,
    private readonly defer: (flush: () => void) => void,
    /**
     * Told every message signed (a root's, or a lone receipt's) and how many receipts it
     * covers, so the server's verifier need not check it again (and hosts can count).
     */
    private readonly onSigned?: (message: Uint8Array, signature: Uint8Array, receipts: number) => void,
  ) {}

  /** The receipt for `message`, once its batch is signed. */
  sign(message: Uint8Array): Promise<ReceiptSignature> {
    return new Promise((resolve, reject) => {
      this.#pending.push({ message, resolve, reject });
      if (this.#pending.length === 1) this.defer(() => void this.#flush());
      else if (this.#pending.length >= MAX_RECEIPT_BATCH) void this.#flush();
    });
  }

  async #flush(): Promise<void> {
    const batch = this.#pending;
    this.#pending = [];
    if (batch.length === 0) return;
    try {
      if (batch.length === 1) {
        const only = batch[0]!;
        const signature = await this.signer.sign(only.message);
        this.onSigned?.(only.message, signature, 1);
        only.resolve({ signature });
        return;
      }
      const { root, paths } = buildBatch(
        this.crypto,
        batch.map((b) => receiptLeaf(this.crypto, b.message)),
      );
      const message = batchRootMessage(this.clusterId, this.server, batch.length, root);
      const signature = await this.signer.sign(message);
      this.onSigned?.(message, signature, batch.length);
      batch.forEach((b, i) => b.resolve({ signature, batch: paths[i]! }));
    } catch (err) {
      for (const b of batch) b.reject(err);
    }
  }
}

/** The receipt a STORE acknowledgement carries (its signature, and its batch path if any). */
export function ackReceipt(ack: { readonly receipt: Uint8Array; readonly batch?: ReceiptBatch | undefined }): ReceiptSignature {
  return ack.batch ? { signature: ack.receipt, batch: ack.batch } : { signature: ack.receipt };
}
