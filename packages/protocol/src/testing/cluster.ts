/**
 * A tiny synchronous-delivery harness: a cluster of `3t + 1` servers on `MemoryStorage`,
 * fixed identities, and every message delivered at once, in order. Framework-free (a
 * failed expectation throws), so any test runner can use it.
 */
import { createReferenceCodec } from '@powerstore/erasure/reference';
// The package's own `./crypto` export, not a provider file: it picks node:crypto in Node
// (fast enough for suites that sign thousands of writes) and WebCrypto in browsers.
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import { ownerIdOf } from '../auth/identity.js';
import type { Timestamp } from '../auth/timestamp.js';
import type { ClusterIdentity, Grant } from '../auth/grant.js';
import { CertificateVerifier, signCertificate } from '../auth/certificate.js';
import type { Candidate } from '../auth/candidate.js';
import type { WritePolicy } from '../auth/policy.js';
import { clusterConfig } from '../core/config.js';
import { nonceHash, type Signer } from '../core/crypto.js';
import { computeCrossChecksum, crossChecksumDigest } from '../core/cross-checksum.js';
import type { ClientOperation, Outgoing, Step, StoreRequest } from '../wire/messages.js';
import { ListOperation } from '../operations/listing.js';
import { ReadOperation } from '../operations/reader.js';
import { WriteOperation, WriterSession, type WriteValue } from '../operations/writer.js';
import { Server, type HistoryLimits } from '../server/server.js';
import { MemoryStorage } from './memory-storage.js';

/** The crypto provider every fixture signs and verifies with. */
export const crypto = createCryptoProvider();

/** A deterministic identity: the seed is `byte` repeated. */
export function identity(byte: number): Promise<Signer> {
  return crypto.signerFromSeed(new Uint8Array(32).fill(byte));
}

/** The cluster identity every test cluster of `t` uses: id 0x11…, admin = identity(0xad), server i = identity(0xc0 + i). */
export async function testCluster(t = 1): Promise<{ cluster: ClusterIdentity; admin: Signer; serverSigners: Signer[] }> {
  const admin = await identity(0xad);
  const serverSigners = await Promise.all(Array.from({ length: 3 * t + 1 }, (_, i) => identity(0xc0 + i)));
  return {
    cluster: { id: new Uint8Array(16).fill(0x11), admin: admin.publicKey, servers: serverSigners.map((s) => s.publicKey) },
    admin,
    serverSigners,
  };
}

let counter = 0;
/** Deterministic "random" bytes (a linear congruential generator), so runs repeat exactly. */
export const random = (n: number) => Uint8Array.from({ length: n }, () => (counter = (counter * 1103515245 + 12345) >>> 0) & 0xff);

/**
 * A cluster of `3t + 1` servers on fresh `MemoryStorage`s, with the identity of
 * {@link testCluster}, writer sessions of `identity(1)` (the `owner`) and helpers that run
 * operations to the end. `skip`: servers that never get a message.
 */
export async function makeCluster(
  t = 1,
  options: { skip?: Set<number>; policy?: WritePolicy; now?: () => number; history?: Partial<HistoryLimits> } = {},
) {
  const { skip = new Set<number>(), policy, now = () => 1_000_000, history } = options;
  const config = clusterConfig(t);
  const codec = createReferenceCodec({ k: t + 1, n: config.n });
  const { cluster, admin, serverSigners } = await testCluster(t);
  const storages = Array.from({ length: config.n }, () => new MemoryStorage());
  const servers = storages.map(
    (storage, index) =>
      new Server({
        config,
        index,
        crypto,
        storage,
        cluster,
        signer: serverSigners[index]!,
        now,
        ...(policy ? { policy } : {}),
        ...(history ? { history } : {}),
      }),
  );
  const owner = await identity(1);
  let instance = 0;
  const session = (signer: Signer = owner, grants: Grant[] = []) =>
    new WriterSession({ crypto, cluster, signer, instance: new Uint8Array(16).fill(++instance), grants });
  const defaultSession = session();
  const verifier = new CertificateVerifier(crypto, cluster);
  let opId = 1;

  /** Runs `op`, delivering every message at once; resolves with the result or rejects with the step's error. */
  async function drive<R>(op: ClientOperation<R> & { stalled?(): Step<R> }): Promise<R> {
    const first = await op.start();
    if (first.error) throw first.error;
    let queue: Outgoing[] = [...(first.send ?? [])];
    // Nothing left to deliver: a real host's timer fires (a read asks more servers for fragments).
    const stalled = () => (queue.length === 0 ? (op.stalled?.().send ?? []) : []);
    while (queue.length > 0 || (queue.push(...stalled()), queue.length > 0)) {
      const [o, ...rest] = queue;
      queue = rest;
      if (skip.has(o!.to)) continue;
      const reply = await servers[o!.to]!.handle(o!.message);
      const step: Step<R> = await op.onReply(o!.to, reply);
      if (step.error) throw step.error;
      if (step.result !== undefined) return step.result;
      queue.push(...(step.send ?? []));
    }
    throw new Error('operation did not finish');
  }

  return {
    config,
    codec,
    cluster,
    admin,
    serverSigners,
    owner,
    servers,
    storages,
    session,
    verifier,
    drive,
    writeOp: (key: string, value: WriteValue, s: WriterSession = defaultSession) =>
      new WriteOperation({ config, crypto, codec, random, session: s, now }, key, value, opId++),
    write: (key: string, value: WriteValue, s: WriterSession = defaultSession) =>
      drive(new WriteOperation({ config, crypto, codec, random, session: s, now }, key, value, opId++)),
    read: (key: string) => drive(new ReadOperation({ config, crypto, codec, verifier }, key, opId++)),
    listOp: (prefix: string, after = '', limit = 1000, onEvidence?: (server: number, reason: string) => void) =>
      new ListOperation({ config, crypto, verifier, ...(onEvidence ? { onEvidence } : {}) }, prefix, after, limit, opId++),
  };
}

/** `~<ownerId>/<rest>` for `signer`. */
export function own(signer: Signer, rest: string): string {
  return `~${ownerIdOf(crypto, signer.publicKey)}/${rest}`;
}

/** A STORE as a writer would send it to server `index`, signed by `signer` (for tests that bend one field). */
export async function storeFor(
  c: Awaited<ReturnType<typeof makeCluster>>,
  signer: Signer,
  key: string,
  value: Uint8Array,
  options: {
    num?: number;
    index?: number;
    grant?: Parameters<typeof signCertificate>[3]['grant'];
    nonce?: Uint8Array;
    writerId?: Uint8Array;
  } = {},
): Promise<{ store: StoreRequest; candidate: Candidate; fragments: Uint8Array[] }> {
  const ts: Timestamp = { num: options.num ?? 1, writerId: options.writerId ?? c.session(signer).writerId };
  const fragments = c.codec.encode(value);
  const cc = await computeCrossChecksum(crypto, fragments, value.length, false);
  const nonce = options.nonce ?? new Uint8Array(32).fill(5);
  const cert = await signCertificate(crypto, c.cluster.id, signer, {
    key,
    ts,
    nonceHash: nonceHash(crypto, nonce),
    ccDigest: crossChecksumDigest(crypto, cc),
    tombstone: cc.tombstone,
    grant: options.grant,
  });
  const index = options.index ?? 0;
  return {
    store: { type: 'STORE', key, opId: 1, ts, stripe: 0, fragment: fragments[index]!, cc, cert },
    candidate: { ts, nonce, cert, proof: [] },
    fragments,
  };
}

/** Sends the write's STORE to every server; returns the candidate with the store proof of the first `n − t` receipts. */
export async function storeEverywhere(
  c: Awaited<ReturnType<typeof makeCluster>>,
  w: Awaited<ReturnType<typeof storeFor>>,
): Promise<Candidate> {
  const proof = [];
  for (const [i, s] of c.servers.entries()) {
    const ack = await s.handle({ ...w.store, fragment: w.fragments[i]! });
    // Every server must take it: a refusal here is the test's failure, not a smaller proof.
    if (ack.type !== 'STORE_ACK')
      throw new Error(`server ${i} answered the STORE with ${ack.type === 'ERROR' ? `${ack.code}: ${ack.message}` : ack.type}`);
    if (proof.length < c.config.n - c.config.t) proof.push({ server: i, signature: ack.receipt });
  }
  return { ...w.candidate, proof };
}
