/**
 * Replacing a server's receipt key (key epochs, `epochs.ts`): what was valid stays valid,
 * the retired key completes nothing new, and no party judges validity by other keys than
 * the servers it talks to (stale clients and stale servers are refused with typed errors).
 */
import { describe, expect, it } from 'vitest';
import {
  CertificateVerifier,
  computeCrossChecksum,
  crossChecksumDigest,
  decodeEntryMetaRecord,
  decodeMessage,
  encodeEntryMetaRecord,
  encodeMessage,
  encodePublicKey,
  extensionProblem,
  ListOperation,
  nonceHash,
  parseClusterFile,
  ReadOperation,
  receiptMessage,
  Server,
  signCertificate,
  toBase32,
  WIRE_VERSION,
  WriteOperation,
  WriterSession,
  type Candidate,
  type ClusterIdentity,
  type Reply,
  type Request,
  type Signer,
  type StoreReceipt,
  type Timestamp,
} from '../src/index.js';
import { certificateDigest, certificateMessage } from '../src/auth/certificate.js';
import { MemoryStorage } from '../src/testing/memory-storage.js';
import { receiptKey } from '../src/auth/epochs.js';
import { RECORD_VERSION } from '../src/storage/record.js';
import { crypto, identity, makeCluster, own, random } from '../src/testing/cluster.js';

type Cluster = Awaited<ReturnType<typeof makeCluster>>;
const text = (s: string) => new TextEncoder().encode(s);
const decode = (b: Uint8Array | undefined) => (b ? new TextDecoder().decode(b) : undefined);
const sha = (b: Uint8Array) => Buffer.from(crypto.sha256Sync([b])).toString('hex');
const NOW = () => 1_000_000;

/** `cluster` with server `index`'s key replaced by a new one: one more epoch, every other key carried over. */
async function rotated(cluster: ClusterIdentity, index: number, seed: number): Promise<{ next: ClusterIdentity; signer: Signer }> {
  const signer = await identity(seed);
  const epoch = (cluster.epoch ?? 0) + 1;
  const history = cluster.servers.map((key, i) => [...(cluster.history?.[i] ?? [{ from: 0, key }])]);
  history[index]!.push({ from: epoch, key: signer.publicKey });
  const servers = cluster.servers.map((k, i) => (i === index ? signer.publicKey : k));
  return { next: { ...cluster, epoch, servers, history }, signer };
}

/**
 * The rotation procedure on an in-memory cluster: server `index`'s machine is lost and
 * replaced by one with the new key and empty storage; the servers in `reload` (default:
 * all others) get the new cluster file (SIGHUP).
 */
async function replaceServer(c: Cluster, index: number, options: { reload?: number[]; seed?: number } = {}) {
  const retired = c.serverSigners[index]!;
  const from = c.servers.find((_, i) => i !== index)!.cluster;
  const { next, signer } = await rotated(from, index, options.seed ?? 0xe0 + index);
  c.servers[index] = new Server({ config: c.config, index, crypto, storage: new MemoryStorage(), cluster: next, signer, now: NOW });
  for (const i of options.reload ?? c.servers.keys()) if (i !== index) c.servers[i]!.setCluster(next);
  return { next, signer, retired };
}

let opId = 10_000;

/** A client given the cluster file of `cluster` (its epoch): writes as `signer`, reads and lists. */
function client(c: Cluster, cluster: ClusterIdentity, signer: Signer = c.owner) {
  const session = new WriterSession({ crypto, cluster, signer, instance: random(16) });
  const verifier = new CertificateVerifier(crypto, cluster);
  const { config, codec } = c;
  return {
    verifier,
    write: (key: string, value: string) =>
      c.drive(new WriteOperation({ config, crypto, codec, random, session, now: NOW }, key, { kind: 'value', value: text(value) }, opId++)),
    read: (key: string) => c.drive(new ReadOperation({ config, crypto, codec, verifier }, key, opId++)),
    list: (prefix: string) => c.drive(new ListOperation({ config, crypto, verifier }, prefix, '', 100, opId++)),
  };
}

/** `lc` of `key` at server `i`, as COLLECT answers it. */
async function lcAt(c: Cluster, i: number, key: string, epoch = 0): Promise<Candidate | undefined> {
  const ack = await c.servers[i]!.handle({ type: 'COLLECT', key, opId: 1, ...(epoch ? { epoch } : {}) });
  if (ack.type !== 'COLLECT_ACK') throw new Error(`COLLECT refused: ${JSON.stringify(ack)}`);
  return ack.candidate;
}

/**
 * A write certificate of `epoch` by `signer` for `key` at number `num`, and the STORE each
 * server would get (naming `requestEpoch`), for tests that build writes by hand.
 */
async function handWrite(c: Cluster, signer: Signer, key: string, value: string, num: number, epoch: number, requestEpoch = epoch) {
  const ts: Timestamp = { num, writerId: new WriterSession({ crypto, cluster: c.cluster, signer, instance: random(16) }).writerId };
  const bytes = text(value);
  const fragments = c.codec.encode(bytes);
  const cc = await computeCrossChecksum(crypto, fragments, bytes.length, false);
  const nonce = random(32);
  const cert = await signCertificate(crypto, c.cluster.id, signer, {
    key,
    ts,
    nonceHash: nonceHash(crypto, nonce),
    ccDigest: crossChecksumDigest(crypto, cc),
    tombstone: false,
    grant: undefined,
    epoch,
  });
  const store = (i: number): Request => ({
    type: 'STORE',
    key,
    opId: 1,
    ts,
    stripe: 0,
    fragment: fragments[i]!,
    cc,
    cert,
    ...(requestEpoch ? { epoch: requestEpoch } : {}),
  });
  /** A receipt as `server`'s key `by` signs it (a genuine one, a Byzantine server's, or a thief's). */
  const receipt = async (server: number, by: Signer): Promise<StoreReceipt> => ({
    server,
    signature: await by.sign(receiptMessage(crypto, c.cluster.id, key, ts, cert, server)),
  });
  return { ts, nonce, cert, store, receipt };
}

describe('key epochs: replacing a server', () => {
  it('epoch 0 signs, hashes and encodes exactly what it did before key epochs existed', async () => {
    // Pinned from the code before key epochs (wire version 4): existing certificates, receipts
    // and stored records keep verifying and decoding.
    const b = (n: number, len = 32) => new Uint8Array(len).fill(n);
    const ts = { num: 7, writerId: b(3) };
    const unsigned = { nonceHash: b(1), ccDigest: b(2), tombstone: false, signer: b(9), grant: undefined };
    const cert = { ...unsigned, signature: b(4, 64) };
    const id = b(0x11, 16);
    expect(sha(certificateMessage(crypto, id, 'k', ts, unsigned))).toBe('6286e2aba1abe5b49a5e54b38f32e2c12c8b3cb855084addb1f751e3c928bc04');
    expect(sha(certificateMessage(crypto, id, 'k', ts, unsigned, 2))).toBe(
      'd354bd5bfcbb14932589584b7e2a014b1e862183135bd9b0420029f591b4a396',
    );
    expect(Buffer.from(certificateDigest(crypto, cert)).toString('hex')).toBe(
      'cb9b5f631ce3784ebdb176ac149e3b3b0e0a0212e7af3b60ca6188aa52129b1c',
    );
    expect(sha(receiptMessage(crypto, id, 'k', ts, cert, 1))).toBe('b7cafc5d20a82f815e9d82bd2ab6bebd8f1db25b24d939ed770b70239e561156');
    const candidate = { ts, nonce: b(5), cert, proof: [{ server: 1, signature: b(6, 64) }] };
    const frame = encodeMessage({ type: 'COMPLETE', key: 'k', opId: 1, candidate });
    expect(WIRE_VERSION).toBe(8);
    // The body after the header (which gained the epoch in version 5) is unchanged but for
    // the receipt's empty batch field (version 6): two zero bytes at its end.
    expect(sha(frame.subarray(1 + 1 + 2 + 1 + 8 + 4, -2))).toBe('5fcea496ecd7cc6be2a92b0d57dffd5e8c3b81b1aba491f38789fda06f66500b');
    expect([...frame.subarray(-2)]).toEqual([0, 0]);

    // Another epoch is signed, hashed and encoded: nobody can move a write between epochs.
    const later = { ...cert, epoch: 3 };
    expect(certificateMessage(crypto, id, 'k', ts, later)).not.toEqual(certificateMessage(crypto, id, 'k', ts, cert));
    expect(certificateDigest(crypto, later)).not.toEqual(certificateDigest(crypto, cert));
    const again = decodeMessage(
      encodeMessage({ type: 'COMPLETE', key: 'k', opId: 1, candidate: { ...candidate, cert: later }, epoch: 3 }),
      { n: 4 },
    );
    expect(again).toMatchObject({ epoch: 3, candidate: { cert: { epoch: 3 } } });
    // Epoch 0 is the flag unset: setting it with a zero epoch is not a second encoding.
    const bent = encodeMessage({ type: 'COMPLETE', key: 'k', opId: 1, candidate });
    const flags = 1 + 1 + 2 + 1 + 8 + 4 + (8 + 32) + 32 + (32 + 32 + 32 + 64);
    expect(bent[flags]).toBe(0);
    const withZero = Uint8Array.from([...bent.subarray(0, flags), 4, 0, 0, 0, 0, ...bent.subarray(flags + 1)]);
    expect(() => decodeMessage(withZero, { n: 4 })).toThrow(expect.objectContaining({ code: 'INVALID_FRAME' }));

    // The envelope a certificate names is signed and hashed, and changes nothing when absent.
    for (const envelope of ['encrypted', 'public'] as const) {
      const named = { ...cert, envelope };
      expect(certificateMessage(crypto, id, 'k', ts, named)).not.toEqual(certificateMessage(crypto, id, 'k', ts, cert));
      expect(certificateDigest(crypto, named)).not.toEqual(certificateDigest(crypto, cert));
    }
    expect(certificateMessage(crypto, id, 'k', ts, { ...cert, envelope: 'public' })).not.toEqual(
      certificateMessage(crypto, id, 'k', ts, { ...cert, envelope: 'encrypted' }),
    );

    // Records: version 6 may hold an epoch; a version-5 record (epoch 0) reads as before
    // (version 7 changed only key records' receipts: receipt-batch.test.ts; 8 only lets
    // certificates name an envelope: codec.test.ts).
    const entry = { ts, stripe: 0, fragment: b(1, 3), cc: { tombstone: false, valueLength: 5, hashes: [b(1), b(2), b(3), b(4)] } };
    const record = encodeEntryMetaRecord('k', { ...entry, cert });
    expect(RECORD_VERSION).toBe(8);
    const v5 = record.slice();
    v5[0] = 5;
    expect(decodeEntryMetaRecord(v5, 4).meta).toEqual(decodeEntryMetaRecord(record, 4).meta);
    expect(decodeEntryMetaRecord(encodeEntryMetaRecord('k', { ...entry, cert: later }), 4).meta.cert.epoch).toBe(3);
  });

  it('the cluster file keeps every key each server had; an epoch never changes once published', async () => {
    const k = (byte: number) => encodePublicKey(new Uint8Array(32).fill(byte));
    const servers = [1, 2, 3, 4].map((id) => ({ id, url: `ws://127.0.0.1:${7000 + id}`, publicKey: k(0xc0 + id) }));
    const base = {
      version: 2,
      id: toBase32(new Uint8Array(16).fill(0x11)),
      admin: k(0xad),
      t: 1,
      n: 4,
      servers,
      policy: { writers: 'open' },
    };
    const before = parseClusterFile(base);
    expect(before.identity.epoch).toBeUndefined();
    expect(before.file).not.toHaveProperty('epoch');
    const replaced = {
      ...base,
      epoch: 2,
      servers: servers.map((s, i) =>
        i === 1
          ? {
              ...s,
              publicKey: k(0xe2),
              keys: [
                { epoch: 0, publicKey: k(0xc2) },
                { epoch: 2, publicKey: k(0xe2) },
              ],
            }
          : s,
      ),
    };
    const after = parseClusterFile(replaced);
    expect(after.identity.epoch).toBe(2);
    expect(parseClusterFile(JSON.parse(JSON.stringify(after.file))).file).toEqual(after.file);
    const key = (e: number, i: number) => encodePublicKey(receiptKey(after.identity, e, i)!);
    expect([key(0, 1), key(1, 1), key(2, 1), key(2, 0)]).toEqual([k(0xc2), k(0xc2), k(0xe2), k(0xc1)]);
    expect(receiptKey(after.identity, 3, 1)).toBeUndefined();
    expect(receiptKey(before.identity, 1, 1)).toBeUndefined();
    expect(extensionProblem(before.identity, after.identity)).toBeUndefined();
    expect(extensionProblem(after.identity, after.identity)).toBeUndefined();
    expect(extensionProblem(after.identity, before.identity)).toMatch(/older than the current epoch 2/);
    // Rewriting history: server 2 had another key in epoch 1.
    const rewritten = parseClusterFile({
      ...replaced,
      epoch: 3,
      servers: replaced.servers.map((s, i) =>
        i === 1
          ? {
              ...s,
              publicKey: k(0xf2),
              keys: [
                { epoch: 0, publicKey: k(0xc2) },
                { epoch: 1, publicKey: k(0xd2) },
                { epoch: 3, publicKey: k(0xf2) },
              ],
            }
          : s,
      ),
    });
    expect(extensionProblem(after.identity, rewritten.identity)).toMatch(/server 2 in epoch 1 changed/);
    expect(extensionProblem(before.identity, parseClusterFile({ ...base, admin: k(0xae) }).identity)).toMatch(/admin/);
  });

  it('old-epoch candidates stay valid after the rotation: a new-epoch client reads them, and writes under the new key', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'doc');
    await c.write(key, { kind: 'value', value: text('v1') });
    const old = (await lcAt(c, 0, key))!;
    expect(old.cert.epoch).toBeUndefined();
    const { next, signer } = await replaceServer(c, 1);
    const fresh = client(c, next);
    // Validity is timeless: the epoch-0 proof still counts, for old and new clients alike.
    expect(await fresh.verifier.valid(key, old)).toBe(true);
    expect(await c.verifier.valid(key, old)).toBe(true);
    // Server 1 is empty; the others serve the value, and server 1 learns the candidate by write-back.
    expect(decode((await fresh.read(key)).value)).toBe('v1');
    expect((await lcAt(c, 1, key, 1))?.ts).toEqual(old.ts);
    expect((await fresh.list(own(c.owner, ''))).keys.map((k) => k.key)).toEqual([key]);

    await fresh.write(key, 'v2');
    const v2 = (await lcAt(c, 2, key, 1))!;
    expect(v2.cert.epoch).toBe(1);
    expect(v2.proof.map((r) => r.server)).toEqual([0, 1, 2]);
    expect(decode((await fresh.read(key)).value)).toBe('v2');
    // Server 1's receipt is by its new key: the epoch-0 key does not verify it.
    const r1 = v2.proof.find((r) => r.server === 1)!.signature;
    const message = receiptMessage(crypto, c.cluster.id, key, v2.ts, v2.cert, 1);
    expect(await crypto.verifyEd25519(signer.publicKey, message, r1)).toBe(true);
    expect(await crypto.verifyEd25519(c.serverSigners[1]!.publicKey, message, r1)).toBe(false);
  });

  it('receipts by the retired key do not count for a certificate of the new epoch', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'doc');
    const { next, retired } = await replaceServer(c, 1);
    const fresh = client(c, next);
    await fresh.write(key, 'v2');
    const v2 = (await lcAt(c, 0, key, 1))!;
    const stolen = { server: 1, signature: await retired.sign(receiptMessage(crypto, c.cluster.id, key, v2.ts, v2.cert, 1)) };
    const forged: Candidate = { ...v2, proof: v2.proof.map((r) => (r.server === 1 ? stolen : r)) };
    expect(await fresh.verifier.receiptValid(key, v2.ts, v2.cert, 1, stolen)).toBe(false);
    expect(await fresh.verifier.valid(key, forged)).toBe(false);
    for (const [i, s] of c.servers.entries()) {
      expect(await s.handle({ type: 'COMPLETE', key, opId: 1, epoch: 1, candidate: forged }), `server ${i}`).toMatchObject({
        type: 'ERROR',
        code: 'UNAUTHENTICATED',
      });
    }
  });

  it.each([1, 2])(
    'a stolen retired key and t = %i Byzantine servers cannot make a certificate valid that correct servers did not sign before the rotation',
    async (t) => {
      const c = await makeCluster(t);
      const { n } = c.config;
      const byzantine = Array.from({ length: t }, (_, k) => n - 1 - k);
      const { next, retired } = await replaceServer(c, 1);
      const correct = [...c.servers.keys()].filter((i) => !byzantine.includes(i));
      const mallory = await identity(0x77);
      const key = own(mallory, 'x');
      const fresh = client(c, next, mallory);
      for (const [epoch, requestEpoch] of [
        [0, 0],
        [0, 1],
        [1, 1],
      ] as const) {
        const w = await handWrite(c, mallory, key, `forged ${epoch}/${requestEpoch}`, 10 + epoch + requestEpoch, epoch, requestEpoch);
        // Correct servers admit only the current epoch: none signs a receipt for an epoch-0 certificate.
        for (const i of correct) {
          const reply = await c.servers[i]!.handle(w.store(i));
          if (epoch === 0) expect(reply, `server ${i}`).toMatchObject({ type: 'ERROR', code: 'CLUSTER_OUTDATED' });
          else expect(reply, `server ${i}`).toMatchObject({ type: 'STORE_ACK' });
        }
        // All the adversary has: the thief's receipt and the Byzantine servers' genuine ones.
        const proof = [await w.receipt(1, retired), ...(await Promise.all(byzantine.map((i) => w.receipt(i, c.serverSigners[i]!))))].sort(
          (a, b) => a.server - b.server,
        );
        expect(proof.length).toBe(t + 1);
        expect(t + 1).toBeLessThan(n - t);
        const candidate: Candidate = { ts: w.ts, nonce: w.nonce, cert: w.cert, proof };
        expect(await fresh.verifier.valid(key, candidate)).toBe(false);
        expect(await c.verifier.valid(key, candidate)).toBe(false);
        for (const i of correct) {
          expect(await c.servers[i]!.handle({ type: 'COMPLETE', key, opId: 1, epoch: 1, candidate })).toMatchObject({
            type: 'ERROR',
            code: 'UNAUTHENTICATED',
          });
        }
      }
    },
  );

  it('what a retired key can still do: complete an old-epoch write that t correct servers signed before they switched', async () => {
    // The documented limit (protocol README, trust model). A stolen key is a faulty server of
    // its epoch: with t Byzantine servers too, epoch 0 had t + 1 faulty servers, more than
    // the protocol tolerates. Rotation stops that from growing — correct servers sign no
    // epoch-0 receipt after they switch — but a certificate t correct servers signed before
    // can still be completed with t Byzantine receipts and the thief's.
    const c = await makeCluster(1);
    const mallory = await identity(0x77);
    const key = own(mallory, 'x');
    const w = await handWrite(c, mallory, key, 'prepared', 5, 0);
    const early = await c.servers[0]!.handle(w.store(0));
    expect(early).toMatchObject({ type: 'STORE_ACK' });
    const { next, retired } = await replaceServer(c, 1);
    const proof = [
      { server: 0, signature: (early as Extract<Reply, { type: 'STORE_ACK' }>).receipt },
      await w.receipt(1, retired),
      await w.receipt(3, c.serverSigners[3]!),
    ];
    expect(await new CertificateVerifier(crypto, next).valid(key, { ts: w.ts, nonce: w.nonce, cert: w.cert, proof })).toBe(true);
    // Without the correct server's receipt from before the switch it is not.
    expect(await new CertificateVerifier(crypto, next).valid(key, { ts: w.ts, nonce: w.nonce, cert: w.cert, proof: proof.slice(1) })).toBe(
      false,
    );
  });

  it('a writer or reader with the old cluster file is told CLUSTER_OUTDATED, and nothing is stored', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'doc');
    await c.write(key, { kind: 'value', value: text('v1') });
    await replaceServer(c, 1);
    const stale = client(c, c.cluster);
    for (const op of [stale.write(key, 'stale'), stale.read(key), stale.list(own(c.owner, ''))]) {
      const err: unknown = await op.catch((e: unknown) => e);
      expect(err).toMatchObject({ code: 'CLUSTER_OUTDATED' });
      expect((err as Error).message).toMatch(/load the cluster file again/);
    }
    for (const s of c.storages) {
      const index = await s.withKey(key, (r) => r.index());
      expect(index.length).toBeLessThanOrEqual(1);
    }
    // A STORE naming the current epoch but carrying an old-epoch certificate is refused as well.
    const w = await handWrite(c, c.owner, key, 'sneaky', 9, 0, 1);
    expect(await c.servers[0]!.handle(w.store(0))).toMatchObject({ type: 'ERROR', code: 'CLUSTER_OUTDATED' });
  });

  it('servers not yet reloaded refuse new-epoch clients with SERVER_OUTDATED, until n − t are at the new epoch', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'doc');
    // Server 1 replaced; only server 0 reloaded so far.
    const { next } = await replaceServer(c, 1, { reload: [0] });
    const fresh = client(c, next);
    await expect(fresh.write(key, 'v2')).rejects.toMatchObject({ code: 'SERVER_OUTDATED' });
    await expect(client(c, c.cluster).write(key, 'v1')).rejects.toMatchObject({ code: 'CLUSTER_OUTDATED' });
    c.servers[2]!.setCluster(next);
    await fresh.write(key, 'v2');
    expect(decode((await fresh.read(key)).value)).toBe('v2');
    const behind = await c.servers[3]!.handle({ type: 'COLLECT', key, opId: 1, epoch: 1 });
    expect(behind).toMatchObject({ type: 'ERROR', code: 'SERVER_OUTDATED' });
    expect(behind).not.toHaveProperty('epoch');
    expect(await c.servers[0]!.handle({ type: 'COLLECT', key, opId: 1, epoch: 1 })).toMatchObject({ type: 'COLLECT_ACK', epoch: 1 });
  });

  it('why servers answer only their own epoch: otherwise a reader with the old file returns a value older than a completed write', async () => {
    class AnyEpoch extends Server {
      protected override checkEpoch(): void {}
    }
    for (const guarded of [true, false]) {
      const c = await makeCluster(1);
      if (!guarded) {
        c.servers.forEach((_, index) => {
          c.servers[index] = new AnyEpoch({
            config: c.config,
            index,
            crypto,
            storage: c.storages[index]!,
            cluster: c.cluster,
            signer: c.serverSigners[index]!,
            now: NOW,
          });
        });
      }
      const key = own(c.owner, 'doc');
      await c.write(key, { kind: 'value', value: text('v1') });
      // Server 1 replaced (as the same class), servers 0 and 2 reloaded, server 3 not yet.
      const { next, signer } = await replaceServer(c, 1, { reload: [0, 2] });
      if (!guarded)
        c.servers[1] = new AnyEpoch({ config: c.config, index: 1, crypto, storage: new MemoryStorage(), cluster: next, signer, now: NOW });
      await client(c, next).write(key, 'v2');
      const stale = client(c, c.cluster).read(key);
      if (guarded) await expect(stale).rejects.toMatchObject({ code: 'CLUSTER_OUTDATED' });
      // The old file's reader cannot verify v2's epoch-1 proof and drops it (blaming the
      // servers that sent it): it returns what is older than a write that completed before
      // it started — v1, or here, with n − t answers all naming v2, nothing at all.
      else expect(decode((await stale).value)).not.toBe('v2');
    }
  });

  it('a server moves only to an identity that adds epochs, and not once its own key was replaced', async () => {
    const c = await makeCluster(1);
    const { next } = await rotated(c.cluster, 1, 0xe1);
    const other = await identity(0xee);
    const bad = (cluster: ClusterIdentity) => () => c.servers[0]!.setCluster(cluster);
    expect(
      bad({
        ...next,
        history: next.history!.map((h, i) => (i === 2 ? [{ from: 0, key: other.publicKey }] : h)),
        servers: next.servers.map((k, i) => (i === 2 ? other.publicKey : k)),
      }),
    ).toThrow(/key of server 3 in epoch 0 changed/);
    expect(bad({ ...next, id: new Uint8Array(16).fill(0x22) })).toThrow(/cluster id/);
    expect(bad({ ...next, history: next.history!.map((h, i) => (i === 1 ? h.slice(0, 1) : h)) })).toThrow(
      /last key must be its current one/,
    );
    // The server whose key was replaced refuses the new file: it must stop.
    expect(() => c.servers[1]!.setCluster(next)).toThrow(/server 2's key is not its key in epoch 1/);
    expect(c.servers[1]!.epoch).toBe(0);
    c.servers[0]!.setCluster(next);
    expect(c.servers[0]!.epoch).toBe(1);
    expect(() => c.servers[0]!.setCluster(c.cluster)).toThrow(/older than the current epoch 1/);
    // Rotating again: epoch 2 keeps epoch 1 as it was.
    const { next: third } = await rotated(next, 3, 0xe3);
    c.servers[0]!.setCluster(third);
    expect(receiptKey(third, 1, 1)).toEqual(next.servers[1]);
    expect(receiptKey(third, 1, 3)).toEqual(c.cluster.servers[3]);
  });
});
