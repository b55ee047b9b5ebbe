/**
 * One signature for many messages: a Merkle tree over the messages' leaves, whose root is
 * signed once. Each message then carries the root's signature and its *path*: its
 * position, the number of leaves and the sibling hashes from its leaf up. A verifier
 * rebuilds the root from the message and the path and checks the signature once per root
 * (`CertificateVerifier` remembers it), so the rest of a batch costs only hashes.
 *
 * Used for servers' STORE receipts (`receipt-batch.ts`) and writers' certificates
 * (`certificate.ts`). Each use hashes its leaves under its own domain and signs its roots
 * under another, binding what the signer means (cluster, signer, leaf count), so a path
 * cannot be reshaped into another valid one (an inner node presented as a leaf, a tree of
 * another size), and a signature of one kind never passes as the other.
 *
 * The tree: leaves in order; at each level, neighbours `2i` and `2i + 1` are hashed
 * together, and the last node of an odd level moves up unchanged. The leaf count fixes
 * which levels give a leaf a sibling, so a path has exactly one valid length.
 */
import { bytesEqual, toHex } from './bytes.js';
import { DOMAIN, domain, type CryptoProvider, type Signer } from './crypto.js';

/** Where a message sits in the tree whose root was signed. */
export interface SignatureBatch {
  /** The leaf's position, `0 ≤ index < count`. */
  readonly index: number;
  /** Leaves in the tree: 2 to {@link MAX_SIGNATURE_BATCH}. */
  readonly count: number;
  /** Sibling hashes from the leaf's level up; exactly {@link siblingCount}`(index, count)` of them. */
  readonly siblings: readonly Uint8Array[];
}

/** A signature as it travels: of the message itself, or (with `batch`) of a root over many. */
export interface BatchedSignature {
  readonly signature: Uint8Array;
  readonly batch?: SignatureBatch;
}

/** The most messages one root signs (paths of at most 10 hashes). */
export const MAX_SIGNATURE_BATCH = 1024;

/** The length of every hash in a path. */
export const BATCH_HASH_LENGTH = 32;

/** How many siblings the path of leaf `index` of `count` has (the levels where it has a neighbour). */
export function siblingCount(index: number, count: number): number {
  let siblings = 0;
  for (let p = index, w = count; w > 1; p >>= 1, w = (w + 1) >> 1) if ((p ^ 1) < w) siblings++;
  return siblings;
}

/** Whether `(index, count)` can name a leaf of a batch. */
export function batchShapeValid(index: number, count: number): boolean {
  return Number.isInteger(count) && Number.isInteger(index) && count >= 2 && count <= MAX_SIGNATURE_BATCH && index >= 0 && index < count;
}

function node(crypto: CryptoProvider, left: Uint8Array, right: Uint8Array): Uint8Array {
  return crypto.sha256Sync([...domain(DOMAIN.batchNode), left, right]);
}

/** Every level of the tree over `leaves`, leaves first, root last. */
function levels(crypto: CryptoProvider, leaves: readonly Uint8Array[]): Uint8Array[][] {
  const out: Uint8Array[][] = [[...leaves]];
  for (let level = out[0]!; level.length > 1;) {
    const up: Uint8Array[] = [];
    for (let i = 0; i < level.length; i += 2) up.push(i + 1 < level.length ? node(crypto, level[i]!, level[i + 1]!) : level[i]!);
    out.push(up);
    level = up;
  }
  return out;
}

/** The root over `leaves` and every leaf's path (`leaves.length` ≥ 2). */
export function buildBatch(crypto: CryptoProvider, leaves: readonly Uint8Array[]): { root: Uint8Array; paths: SignatureBatch[] } {
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
export function rootOf(crypto: CryptoProvider, leaf: Uint8Array, batch: SignatureBatch): Uint8Array | undefined {
  const { index, count, siblings } = batch;
  if (!batchShapeValid(index, count) || siblings.length !== siblingCount(index, count)) return undefined;
  let hash = leaf;
  let used = 0;
  for (let p = index, w = count; w > 1; p >>= 1, w = (w + 1) >> 1) {
    if ((p ^ 1) >= w) continue;
    const sibling = siblings[used++]!;
    if (sibling.length !== BATCH_HASH_LENGTH) return undefined;
    hash = p & 1 ? node(crypto, sibling, hash) : node(crypto, hash, sibling);
  }
  return hash;
}

/** A node's place in a tree: its level (0: leaves) and position there (below `MAX_SIGNATURE_BATCH`). */
const place = (level: number, position: number) => level * 2 * MAX_SIGNATURE_BATCH + position;

/** A tree whose root's signature was verified: its leaf count, root, and the nodes seen on paths that led to it. */
interface KnownTree {
  readonly count: number;
  readonly root: Uint8Array;
  readonly nodes: Map<number, Uint8Array>;
}

/** What {@link BatchTrees.root} found: the root, and the nodes its path computed or named that the tree did not hold. */
export interface PathRoot {
  readonly root: Uint8Array;
  readonly learned: readonly (readonly [number, Uint8Array])[];
}

/**
 * Trees whose roots' signatures were verified, remembered node by node (a bounded number),
 * so the path of another leaf of the same batch costs hashes only up to where it meets a
 * node the tree holds; from there its remaining siblings are compared with the tree's nodes
 * at their places, and if every one is the same the root is the tree's. A path that differs
 * anywhere above the meeting point is hashed in full. So {@link root} gives exactly what
 * {@link rootOf} gives (a memo of it, not a weaker check): a batch of a thousand leaves
 * has paths of ten hashes, and a reader checks every leaf of it.
 */
export class BatchTrees {
  readonly #crypto: CryptoProvider;
  readonly #maxNodes: number;
  /** By the signature of the root (hex): where to look for a path's tree. */
  readonly #trees = new Map<string, KnownTree>();
  #nodes = 0;

  /** `maxNodes`: nodes kept over all trees (each a 32-byte array), the oldest trees forgotten first; a full batch has 2047. */
  constructor(crypto: CryptoProvider, maxNodes = 1 << 14) {
    this.#crypto = crypto;
    this.#maxNodes = maxNodes;
  }

  /** `rootOf(leaf, batch)` for a leaf whose batch's root `signature` signs; `undefined` when the path is malformed. */
  root(leaf: Uint8Array, batch: SignatureBatch, signature: Uint8Array): PathRoot | undefined {
    const { index, count, siblings } = batch;
    if (!batchShapeValid(index, count) || siblings.length !== siblingCount(index, count)) return undefined;
    const tree = this.#trees.get(toHex(signature));
    const known = tree && tree.count === count ? tree : undefined;
    const learned: [number, Uint8Array][] = [];
    let hash = leaf;
    let used = 0;
    for (let p = index, w = count, level = 0; w > 1; p >>= 1, w = (w + 1) >> 1, level++) {
      if (known) {
        const node = known.nodes.get(place(level, p));
        if (node && bytesEqual(node, hash) && restKnown(known, siblings, used, p, w, level)) return { root: known.root, learned };
      }
      learned.push([place(level, p), hash]);
      if ((p ^ 1) >= w) continue;
      const sibling = siblings[used++]!;
      if (sibling.length !== BATCH_HASH_LENGTH) return undefined;
      learned.push([place(level, p ^ 1), sibling]);
      hash = p & 1 ? node(this.#crypto, sibling, hash) : node(this.#crypto, hash, sibling);
    }
    return { root: hash, learned };
  }

  /** Remembers what {@link root} found for a path, once `signature` was verified over that root's message. */
  learn(signature: Uint8Array, count: number, found: PathRoot): void {
    const id = toHex(signature);
    let tree = this.#trees.get(id);
    if (tree && (tree.count !== count || !bytesEqual(tree.root, found.root))) return;
    if (!tree) this.#trees.set(id, (tree = { count, root: found.root, nodes: new Map() }));
    for (const [at, hash] of found.learned) {
      if (tree.nodes.has(at)) continue;
      // A copy: siblings are views into the frame they came in, which must not be kept alive.
      tree.nodes.set(at, hash.slice());
      this.#nodes++;
    }
    for (const [oldest, t] of this.#trees) {
      if (this.#nodes <= this.#maxNodes || t === tree) break;
      this.#nodes -= t.nodes.size;
      this.#trees.delete(oldest);
    }
  }
}

/** Whether `siblings` from `used` on are the tree's nodes at their places, for the path at position `p` of level `level` (width `w`). */
function restKnown(tree: KnownTree, siblings: readonly Uint8Array[], used: number, p: number, w: number, level: number): boolean {
  for (; w > 1; p >>= 1, w = (w + 1) >> 1, level++) {
    if ((p ^ 1) >= w) continue;
    const node = tree.nodes.get(place(level, p ^ 1));
    if (!node || !bytesEqual(node, siblings[used++]!)) return false;
  }
  return true;
}

/** How one kind of batch hashes its leaves and what its signer signs for a root. */
export interface BatchKind {
  leaf(message: Uint8Array): Uint8Array;
  rootMessage(count: number, root: Uint8Array): Uint8Array;
}

/**
 * Signs messages in batches: every message asked for before `defer` runs its callback is
 * signed under one root (or alone, as the message itself, when it is the only one).
 * `defer` is the host's "after this turn" (`setImmediate` in Node), so requests that
 * become ready together (STOREs one group commit made durable, writes whose CLOCK rounds
 * ended together) share a signature.
 */
export class SignatureBatcher {
  #pending: { message: Uint8Array; resolve(r: BatchedSignature): void; reject(e: unknown): void }[] = [];

  constructor(
    private readonly crypto: CryptoProvider,
    private readonly signer: Signer,
    private readonly kind: BatchKind,
    private readonly defer: (flush: () => void) => void,
    /**
     * Told every message signed (a root's, or a lone message's) and how many messages it
     * covers, so the signer's own verifier need not check it again (and hosts can count).
     */
    private readonly onSigned?: (message: Uint8Array, signature: Uint8Array, messages: number) => void,
  ) {}

  /** The signature for `message`, once its batch is signed. */
  sign(message: Uint8Array): Promise<BatchedSignature> {
    return new Promise((resolve, reject) => {
      this.#pending.push({ message, resolve, reject });
      if (this.#pending.length === 1) this.defer(() => void this.#flush());
      else if (this.#pending.length >= MAX_SIGNATURE_BATCH) void this.#flush();
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
        batch.map((b) => this.kind.leaf(b.message)),
      );
      const message = this.kind.rootMessage(batch.length, root);
      const signature = await this.signer.sign(message);
      this.onSigned?.(message, signature, batch.length);
      batch.forEach((b, i) => b.resolve({ signature, batch: paths[i]! }));
    } catch (err) {
      for (const b of batch) b.reject(err);
    }
  }
}
