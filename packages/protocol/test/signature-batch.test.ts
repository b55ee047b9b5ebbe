/**
 * Signatures per batch (`signature-batch.ts`): every path leads to its root and no other;
 * one verification covers a batch; a bad root, a path that does not lead to the signed
 * root and a signature borrowed from another write or batch are refused. Servers batch
 * the receipts of STOREs made durable together (`receipt-batch.ts`), writer sessions the
 * certificates of writes signed together; old records and frames still read.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  certificateRootMessage,
  computeCrossChecksum,
  crossChecksumDigest,
  nonceHash,
  signCertificate,
  WriterSession,
  receiptRootMessage,
  buildBatch,
  CertificateVerifier,
  decodeKeyRecord,
  decodeMessage,
  encodeKeyRecord,
  encodeMessage,
  MAX_SIGNATURE_BATCH,
  receiptBatcher,
  receiptLeaf,
  receiptMessage,
  rootOf,
  Server,
  siblingCount,
  storeProof,
  type Candidate,
  type CryptoProvider,
  type ReceiptSignature,
  type StoreReceipt,
} from '../src/index.js';
import { MemoryStorage } from '../src/testing/memory-storage.js';
import { crypto, identity, makeCluster, own, storeFor } from '../src/testing/cluster.js';

const leafOf = (i: number) => receiptLeaf(crypto, Uint8Array.of(i >> 8, i & 0xff));

/** A crypto provider that counts Ed25519 verifications. */
function counting(inner: CryptoProvider): CryptoProvider & { verifications: number } {
  const c = Object.create(inner) as CryptoProvider & { verifications: number };
  c.verifications = 0;
  c.verifyEd25519 = (k, m, s) => {
    c.verifications++;
    return inner.verifyEd25519(k, m, s);
  };
  return c;
}

describe('receipt batch trees', () => {
  it('every leaf’s path leads to the root, with exactly siblingCount hashes', () => {
    fc.assert(
      fc.property(fc.integer({ min: 2, max: 300 }), (count) => {
        const leaves = Array.from({ length: count }, (_, i) => leafOf(i));
        const { root, paths } = buildBatch(crypto, leaves);
        for (const [i, path] of paths.entries()) {
          expect(path).toMatchObject({ index: i, count });
          expect(path.siblings.length).toBe(siblingCount(i, count));
          expect(rootOf(crypto, leaves[i]!, path)).toEqual(root);
        }
      }),
      { numRuns: 60 },
    );
  });

  // The leaf count is not in the tree but in the signed message (`receiptRootMessage`): a path
  // read with another count is refused by the signature (see "a root signed … over a different leaf count").
  it('a path leads nowhere else: another leaf, position or sibling gives another root or none', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 2, max: 64 }).chain((count) => fc.tuple(fc.constant(count), fc.nat(count - 1), fc.nat(count - 1), fc.nat(255))),
        ([count, i, j, byte]) => {
          const leaves = Array.from({ length: count }, (_, k) => leafOf(k));
          const { root, paths } = buildBatch(crypto, leaves);
          const path = paths[i]!;
          if (j !== i) expect(rootOf(crypto, leaves[j]!, path)).not.toEqual(root);
          const moved = rootOf(crypto, leaves[i]!, { ...path, index: j });
          if (j !== i) expect(moved).not.toEqual(root);
          if (path.siblings.length > 0) {
            const bent = path.siblings.map((s, k) => (k === 0 ? Uint8Array.from(s, (x, n) => (n === 0 ? x ^ (byte | 1) : x)) : s));
            expect(rootOf(crypto, leaves[i]!, { ...path, siblings: bent })).not.toEqual(root);
            expect(rootOf(crypto, leaves[i]!, { ...path, siblings: path.siblings.slice(1) })).toBeUndefined();
            expect(rootOf(crypto, leaves[i]!, { ...path, siblings: [...path.siblings, path.siblings[0]!] })).toBeUndefined();
          }
        },
      ),
      { numRuns: 200 },
    );
  });

  it('refuses shapes that name no leaf (fewer than 2 leaves, past the end, over the maximum)', () => {
    const leaf = leafOf(0);
    expect(rootOf(crypto, leaf, { index: 0, count: 1, siblings: [] })).toBeUndefined();
    expect(rootOf(crypto, leaf, { index: 2, count: 2, siblings: [leaf] })).toBeUndefined();
    expect(rootOf(crypto, leaf, { index: -1, count: 2, siblings: [leaf] })).toBeUndefined();
    expect(rootOf(crypto, leaf, { index: 0, count: MAX_SIGNATURE_BATCH + 1, siblings: Array(11).fill(leaf) })).toBeUndefined();
    expect(rootOf(crypto, leaf, { index: 0, count: 2, siblings: [new Uint8Array(31)] })).toBeUndefined();
  });
});

describe('batched receipts: signing and verifying', () => {
  async function signBatch(count: number, prefix = 'k', defer = (f: () => void) => void setTimeout(f, 1)) {
    const { cluster, serverSigners } = await makeCluster(1);
    const signer = serverSigners[2]!;
    const batcher = receiptBatcher(crypto, signer, cluster.id, 2, defer);
    const owner = await identity(1);
    const writes = await Promise.all(
      Array.from({ length: count }, async (_, i) => {
        const c = await makeCluster(1);
        const w = await storeFor(c, owner, own(owner, `${prefix}${i}`), Uint8Array.of(i));
        return { key: own(owner, `${prefix}${i}`), ts: w.candidate.ts, cert: w.candidate.cert };
      }),
    );
    const receipts = await Promise.all(writes.map((w) => batcher.sign(receiptMessage(crypto, cluster.id, w.key, w.ts, w.cert, 2))));
    return { cluster, writes, receipts };
  }

  it('receipts asked for in one turn share one root signature, checked once', async () => {
    const { cluster, writes, receipts } = await signBatch(7);
    expect(new Set(receipts.map((r) => Buffer.from(r.signature).toString('hex'))).size).toBe(1);
    expect(receipts.every((r) => r.batch?.count === 7)).toBe(true);
    const c = counting(crypto);
    const verifier = new CertificateVerifier(c, cluster);
    for (const [i, w] of writes.entries()) expect(await verifier.receiptValid(w.key, w.ts, w.cert, 2, receipts[i]!)).toBe(true);
    expect(c.verifications).toBe(1);
  });

  it('a lone receipt is signed the original way (no path)', async () => {
    const { cluster, writes, receipts } = await signBatch(1);
    expect(receipts[0]!.batch).toBeUndefined();
    const verifier = new CertificateVerifier(crypto, cluster);
    expect(await verifier.receiptValid(writes[0]!.key, writes[0]!.ts, writes[0]!.cert, 2, receipts[0]!)).toBe(true);
  });

  it('refuses a receipt moved to another write of its batch, another server, or another batch', async () => {
    const a = await signBatch(4);
    const verifier = new CertificateVerifier(crypto, a.cluster);
    const [w0, w1] = a.writes;
    // Write 1's receipt presented for write 0: its path leads from write 1's leaf.
    expect(await verifier.receiptValid(w0!.key, w0!.ts, w0!.cert, 2, a.receipts[1]!)).toBe(false);
    // The right path with another server's index.
    expect(await verifier.receiptValid(w0!.key, w0!.ts, w0!.cert, 1, a.receipts[0]!)).toBe(false);
    // A path of another batch under this batch's signature, and the reverse.
    const b = await signBatch(4, 'other');
    const borrowed: ReceiptSignature = { signature: a.receipts[0]!.signature, batch: b.receipts[0]!.batch! };
    expect(await verifier.receiptValid(w0!.key, w0!.ts, w0!.cert, 2, borrowed)).toBe(false);
    expect(await verifier.receiptValid(w1!.key, w1!.ts, w1!.cert, 2, a.receipts[1]!)).toBe(true);
  });

  it('a root signed by a Byzantine server’s wrong key, or garbage, is refused every time (never remembered)', async () => {
    const { cluster, writes } = await signBatch(1);
    const mallory = await identity(0x66);
    const w = writes[0]!;
    const leaves = [receiptLeaf(crypto, receiptMessage(crypto, cluster.id, w.key, w.ts, w.cert, 2)), leafOf(9)];
    const { root, paths } = buildBatch(crypto, leaves);
    const forged: ReceiptSignature = { signature: await mallory.sign(receiptRootMessage(cluster.id, 2, 2, root)), batch: paths[0]! };
    const c = counting(crypto);
    const verifier = new CertificateVerifier(c, cluster);
    expect(await verifier.receiptValid(w.key, w.ts, w.cert, 2, forged)).toBe(false);
    expect(await verifier.receiptValid(w.key, w.ts, w.cert, 2, forged)).toBe(false);
    expect(c.verifications).toBe(2);
    // Signed over a different leaf count than the path claims.
    const { serverSigners } = await makeCluster(1);
    const miscounted: ReceiptSignature = {
      signature: await serverSigners[2]!.sign(receiptRootMessage(cluster.id, 2, 3, root)),
      batch: paths[0]!,
    };
    expect(await verifier.receiptValid(w.key, w.ts, w.cert, 2, miscounted)).toBe(false);
    const honest: ReceiptSignature = {
      signature: await serverSigners[2]!.sign(receiptRootMessage(cluster.id, 2, 2, root)),
      batch: paths[0]!,
    };
    expect(await verifier.receiptValid(w.key, w.ts, w.cert, 2, honest)).toBe(true);
  });
});

describe('servers batch the receipts of STOREs made durable together', () => {
  it('concurrent STOREs earn one signature per server; the proofs complete, travel and are stored', async () => {
    const c = await makeCluster(1);
    const flushes: (() => void)[] = [];
    const servers = c.serverSigners.map(
      (signer, index) =>
        new Server({
          config: c.config,
          index,
          crypto,
          storage: new MemoryStorage(),
          cluster: c.cluster,
          signer,
          now: () => 1_000_000,
          receiptBatching: (flush) => flushes.push(flush),
        }),
    );
    const writes = await Promise.all([0, 1, 2].map((i) => storeFor(c, c.owner, own(c.owner, `b${i}`), Uint8Array.of(i, i))));
    const acks = writes.map((w) => servers.map((s, i) => s.handle({ ...w.store, fragment: w.fragments[i]! })));
    // Every STORE is waiting for its receipt: sign each server's batch.
    while (flushes.length < servers.length) await new Promise((r) => setTimeout(r, 1));
    for (const f of flushes.splice(0)) f();
    const replies = await Promise.all(acks.map((a) => Promise.all(a)));
    for (let s = 0; s < servers.length; s++) {
      const sigs = new Set(replies.map((r) => Buffer.from((r[s] as { receipt: Uint8Array }).receipt).toString('hex')));
      expect(sigs.size, `server ${s} signed one root`).toBe(1);
    }
    for (const [i, w] of writes.entries()) {
      // Through the wire, as a writer gets them.
      const receipts = new Map<number, ReceiptSignature>();
      for (const [s, reply] of replies[i]!.entries()) {
        const decoded = decodeMessage(encodeMessage(reply), { n: c.config.n });
        expect(decoded.type).toBe('STORE_ACK');
        const ack = decoded as { receipt: Uint8Array; batch?: StoreReceipt['batch'] };
        expect(ack.batch?.count).toBe(3);
        if (s < 3) receipts.set(s, ack.batch ? { signature: ack.receipt, batch: ack.batch } : { signature: ack.receipt });
      }
      const candidate: Candidate = { ...w.candidate, proof: storeProof(receipts) };
      expect(await c.verifier.valid(w.store.key, candidate)).toBe(true);
      for (const s of servers)
        expect((await s.handle({ type: 'COMPLETE', key: w.store.key, opId: 9, candidate })).type).toBe('COMPLETE_ACK');
      // Stored in a key record and read back.
      const state = { lc: candidate, owner: 'o', index: [], collected: undefined };
      expect(decodeKeyRecord(encodeKeyRecord(w.store.key, state), c.config.n).state.lc).toEqual(candidate);
    }
  });

  it('a key record of version 6 (receipts without a batch field) reads as before', async () => {
    const c = await makeCluster(1);
    const w = await storeFor(c, c.owner, own(c.owner, 'old'), Uint8Array.of(1));
    const signature = new Uint8Array(64).fill(0xab);
    const candidate: Candidate = { ...w.candidate, proof: [{ server: 1, signature }] };
    const v7 = encodeKeyRecord('k', { lc: candidate, owner: 'o', index: [], collected: undefined });
    const at = Buffer.from(v7).indexOf(Buffer.from(signature)) + signature.length;
    expect([...v7.subarray(at, at + 2)]).toEqual([0, 0]);
    const v6 = Uint8Array.from([6, ...v7.subarray(1, at), ...v7.subarray(at + 2)]);
    expect(decodeKeyRecord(v6, c.config.n)).toEqual(decodeKeyRecord(v7, c.config.n));
  });

  it('frames with a malformed batch path are refused as INVALID_FRAME', async () => {
    const ack = {
      type: 'STORE_ACK' as const,
      key: 'k',
      opId: 1,
      ts: { num: 1, writerId: new Uint8Array(32) },
      stripe: 0,
      receipt: new Uint8Array(64),
      batch: { index: 2, count: 3, siblings: [new Uint8Array(32)] },
    };
    expect(siblingCount(2, 3)).toBe(1);
    const frame = encodeMessage(ack);
    expect(decodeMessage(frame, { n: 4 })).toMatchObject({ batch: { index: 2, count: 3 } });
    const tail = frame.length - 32 - 4; // count u16, index u16, one hash
    const bent = (count: number, index: number) => {
      const f = frame.slice();
      new DataView(f.buffer).setUint16(tail, count);
      new DataView(f.buffer).setUint16(tail + 2, index);
      return f;
    };
    for (const [count, index] of [
      [1, 0],
      [3, 3],
      [MAX_SIGNATURE_BATCH + 1, 0],
    ] as const) {
      expect(() => decodeMessage(bent(count, index), { n: 4 }), `${index} of ${count}`).toThrow(
        expect.objectContaining({ code: 'INVALID_FRAME' }),
      );
    }
    // Index 0 of 4 has two siblings: the frame ends inside the path.
    expect(() => decodeMessage(bent(4, 0), { n: 4 })).toThrow(expect.objectContaining({ code: 'INVALID_FRAME' }));
    expect(() => encodeMessage({ ...ack, batch: { index: 2, count: 3, siblings: [] } })).toThrow();
  });
});

describe('certificates signed per batch by a writer session', () => {
  async function batchedWrites(count: number, prefix = 'c') {
    const c = await makeCluster(1);
    const flushes: (() => void)[] = [];
    const session = new WriterSession({
      crypto,
      cluster: c.cluster,
      signer: c.owner,
      instance: new Uint8Array(16).fill(7),
      certificateBatching: (f) => flushes.push(f),
    });
    const writes = Array.from({ length: count }, async (_, i) => {
      const key = own(c.owner, `${prefix}${i}`);
      const fragments = c.codec.encode(Uint8Array.of(i, 1, 2));
      const cc = await computeCrossChecksum(crypto, fragments, 3, false);
      const ts = { num: 1, writerId: session.writerId };
      const nonce = new Uint8Array(32).fill(i + 1);
      const write = {
        key,
        ts,
        nonceHash: nonceHash(crypto, nonce),
        ccDigest: crossChecksumDigest(crypto, cc),
        tombstone: false,
        grant: undefined,
      };
      const cert = await signCertificate(crypto, c.cluster.id, c.owner, write, session.signCertificate);
      return { key, ts, cert, cc, fragments, nonce };
    });
    while (flushes.length === 0) await new Promise((r) => setTimeout(r, 1));
    for (const f of flushes.splice(0)) f();
    return { c, writes: await Promise.all(writes) };
  }

  it('writes signed in one turn share one signature; servers store them, checking it once', async () => {
    const { c, writes } = await batchedWrites(5);
    expect(new Set(writes.map((w) => toHexOf(w.cert.signature))).size).toBe(1);
    expect(writes.every((w) => w.cert.batch?.count === 5)).toBe(true);
    const counted = counting(crypto);
    const server = new Server({
      config: c.config,
      index: 0,
      crypto: counted,
      storage: new MemoryStorage(),
      cluster: c.cluster,
      signer: c.serverSigners[0]!,
      now: () => 1_000_000,
    });
    for (const w of writes) {
      const store = { type: 'STORE' as const, key: w.key, opId: 1, ts: w.ts, stripe: 0, fragment: w.fragments[0]!, cc: w.cc, cert: w.cert };
      // Through the wire, as servers get it.
      const reply = await server.handle(decodeMessage(encodeMessage(store), { n: c.config.n }) as typeof store);
      expect(reply.type).toBe('STORE_ACK');
    }
    expect(counted.verifications).toBe(1);
  });

  it('refuses a batched certificate whose path was bent, moved to another write, or signed by someone else', async () => {
    const { c, writes } = await batchedWrites(4);
    const other = await batchedWrites(4, 'other');
    const [w0, w1] = writes;
    const bent = w0!.cert.batch!.siblings.map((h, i) => (i === 0 ? Uint8Array.from(h, (x, j) => (j === 0 ? x ^ 1 : x)) : h));
    const mallory = await identity(0x66);
    const certs = [
      { ...w0!.cert, batch: { ...w0!.cert.batch!, siblings: bent } },
      { ...w0!.cert, batch: w1!.cert.batch! },
      { ...w0!.cert, signature: other.writes[0]!.cert.signature },
      { ...w0!.cert, signature: await mallory.sign(certificateRootMessage(c.cluster.id, c.owner.publicKey, 4, new Uint8Array(32))) },
      { ...w0!.cert, batch: { ...w0!.cert.batch!, count: 5 } },
    ];
    for (const [i, cert] of certs.entries()) {
      const server = c.servers[1]!;
      const reply = await server.handle({
        type: 'STORE',
        key: w0!.key,
        opId: 1,
        ts: w0!.ts,
        stripe: 0,
        fragment: w0!.fragments[1]!,
        cc: w0!.cc,
        cert,
      });
      expect(reply.type, `forgery ${i}`).toBe('ERROR');
      // A made-up leaf count gives a path of the wrong length: refused before any signature is checked.
      if (i < 4) expect(reply, `forgery ${i}`).toMatchObject({ code: 'UNAUTHENTICATED' });
    }
    // The genuine one still goes in, and completes like any write.
    const receipts = new Map<number, ReceiptSignature>();
    for (const [i, s] of c.servers.entries()) {
      const ack = await s.handle({
        type: 'STORE',
        key: w0!.key,
        opId: 2,
        ts: w0!.ts,
        stripe: 0,
        fragment: w0!.fragments[i]!,
        cc: w0!.cc,
        cert: w0!.cert,
      });
      expect(ack.type).toBe('STORE_ACK');
      if (i < 3) receipts.set(i, { signature: (ack as { receipt: Uint8Array }).receipt });
    }
    const candidate: Candidate = { ts: w0!.ts, nonce: w0!.nonce, cert: w0!.cert, proof: storeProof(receipts) };
    expect(await c.verifier.valid(w0!.key, candidate)).toBe(true);
    expect((await c.read(w0!.key)).value).toBeUndefined(); // stored, not yet complete
    for (const s of c.servers) expect((await s.handle({ type: 'COMPLETE', key: w0!.key, opId: 3, candidate })).type).toBe('COMPLETE_ACK');
    expect((await c.read(w0!.key))?.value).toEqual(Uint8Array.of(0, 1, 2));
  });

  it('a certificate batch of one is an ordinary signature, encoded as before', async () => {
    const { writes } = await batchedWrites(1);
    expect(writes[0]!.cert.batch).toBeUndefined();
  });
});

function toHexOf(b: Uint8Array): string {
  return Buffer.from(b).toString('hex');
}
