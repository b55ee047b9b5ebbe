/**
 * Identities, grants, certificates and the write policy: who may write what, checked
 * without any server.
 */
import { describe, expect, it } from 'vitest';
import {
  authorityProblem,
  CertificateVerifier,
  ClusterFileError,
  encodePublicKey,
  grantFromJson,
  grantId,
  grantToJson,
  identityFromJson,
  identityToJson,
  isOwnerId,
  namespaceOf,
  OPEN_POLICY,
  ownerIdOf,
  parseClusterFile,
  signCertificate,
  signGrant,
  toBase32,
  writerTagOf,
  type CryptoProvider,
  type Grant,
  type Signer,
  type Timestamp,
  type WriteCertificate,
} from '../src/index.js';
import { certificateMessage } from '../src/auth/certificate.js';
import { WritePolicyCheck } from '../src/auth/policy.js';
import { acceptedClusterFiles, refusedClusterFiles } from '../src/testing/cluster-file-cases.js';
import { crypto, identity, own, testCluster } from '../src/testing/cluster.js';

const hash = (b: number) => new Uint8Array(32).fill(b);
const tsOf = (signer: Signer, num = 1): Timestamp => {
  const writerId = new Uint8Array(32);
  writerId.set(writerTagOf(crypto, signer.publicKey));
  writerId.fill(7, 16);
  return { num, writerId };
};

async function cert(
  signer: Signer,
  key: string,
  options: { ts?: Timestamp; grant?: Grant; clusterId?: Uint8Array } = {},
): Promise<{ ts: Timestamp; cert: WriteCertificate }> {
  const { cluster } = await testCluster();
  const ts = options.ts ?? tsOf(signer);
  return {
    ts,
    cert: await signCertificate(crypto, options.clusterId ?? cluster.id, signer, {
      key,
      ts,
      nonceHash: hash(1),
      ccDigest: hash(2),
      tombstone: false,
      grant: options.grant,
    }),
  };
}

describe('identities', () => {
  it('owner ids are 32 base32 characters, stable, and distinct per key', async () => {
    const a = await identity(1);
    const b = await identity(2);
    const id = ownerIdOf(crypto, a.publicKey);
    expect(isOwnerId(id)).toBe(true);
    expect(ownerIdOf(crypto, a.publicKey)).toBe(id);
    expect(ownerIdOf(crypto, b.publicKey)).not.toBe(id);
  });

  it('namespaceOf reads ~<owner>/ and nothing else', () => {
    expect(namespaceOf('~abc/x/y')).toBe('abc');
    expect(namespaceOf('~abc')).toBeUndefined();
    expect(namespaceOf('~/x')).toBeUndefined();
    expect(namespaceOf('abc/x')).toBeUndefined();
    expect(namespaceOf('')).toBeUndefined();
  });

  it('identity files round-trip and never echo the secret in errors', async () => {
    const seed = new Uint8Array(32).fill(9);
    const s = await crypto.signerFromSeed(seed);
    const json = identityToJson(crypto, s.publicKey, seed);
    expect(json.ownerId).toBe(ownerIdOf(crypto, s.publicKey));
    const back = identityFromJson(JSON.parse(JSON.stringify(json)));
    expect(back.publicKey).toEqual(s.publicKey);
    expect(back.seed).toEqual(seed);
    const broken = { ...json, secretKey: json.secretKey.slice(0, 20) + '!!!' };
    const err = (() => {
      try {
        identityFromJson(broken);
      } catch (e) {
        return e as Error;
      }
      return undefined;
    })();
    expect(err?.message).toMatch(/secretKey/);
    expect(err?.message).not.toContain(json.secretKey.slice(0, 10));
  });
});

describe('authority and certificates', () => {
  it('an owner may write its namespace, nobody else’s; the admin may write any key', async () => {
    const { cluster, admin } = await testCluster();
    const alice = await identity(1);
    const bob = await identity(2);
    const check = (key: string, s: Signer, g?: Grant) => authorityProblem(crypto, cluster, key, tsOf(s), s.publicKey, g);
    expect(check(own(alice, 'x'), alice)).toBeUndefined();
    expect(check(own(alice, 'x'), bob)).toMatch(/outside the signer's namespace/);
    expect(check('shared/x', alice)).toMatch(/outside/);
    expect(check('shared/x', admin)).toBeUndefined();
    expect(check(own(alice, 'x'), admin)).toBeUndefined();
  });

  it('a timestamp carrying another identity’s writer tag is refused', async () => {
    const { cluster } = await testCluster();
    const alice = await identity(1);
    const bob = await identity(2);
    expect(authorityProblem(crypto, cluster, own(alice, 'x'), tsOf(bob), alice.publicKey, undefined)).toMatch(/writer id/);
  });

  it('grants: an owner grants inside its namespace, the admin anywhere; a grant covers its prefix for its grantee only', async () => {
    const { cluster, admin } = await testCluster();
    const alice = await identity(1);
    const bob = await identity(2);
    const carol = await identity(3);
    const photos = await signGrant(crypto, cluster, alice, { grantee: bob.publicKey, prefix: own(alice, 'photos/'), expiresAt: 2e12 });
    const check = (key: string, s: Signer, g?: Grant) => authorityProblem(crypto, cluster, key, tsOf(s), s.publicKey, g);
    expect(check(own(alice, 'photos/cat.jpg'), bob, photos)).toBeUndefined();
    expect(check(own(alice, 'notes/x'), bob, photos)).toMatch(/covers keys starting with/);
    expect(check(own(alice, 'photos/cat.jpg'), carol, photos)).toMatch(/another identity/);
    await expect(signGrant(crypto, cluster, alice, { grantee: bob.publicKey, prefix: own(carol, ''), expiresAt: 2e12 })).rejects.toThrow(
      /only grant prefixes inside/,
    );
    // A grant signed for a prefix the issuer does not own is refused even if forged into shape.
    const forged: Grant = { ...photos, prefix: own(carol, '') };
    expect(check(own(carol, 'x'), bob, forged)).toMatch(/does not own its prefix/);
    const everything = await signGrant(crypto, cluster, admin, { grantee: bob.publicKey, prefix: '', expiresAt: 2e12 });
    expect(check('shared/x', bob, everything)).toBeUndefined();
    expect(check(own(carol, 'x'), bob, everything)).toBeUndefined();
  });

  it('a certificate verifies only for its cluster, key and timestamp, unmodified', async () => {
    const { cluster } = await testCluster();
    const alice = await identity(1);
    const verifier = new CertificateVerifier(crypto, cluster);
    const key = own(alice, 'k');
    const { ts, cert: c } = await cert(alice, key);
    expect(await verifier.check(key, ts, c)).toEqual({ ok: true });
    expect(await verifier.check(own(alice, 'other'), ts, c)).toMatchObject({ ok: false, code: 'UNAUTHENTICATED' });
    expect(await verifier.check(key, { ...ts, num: 2 }, c)).toMatchObject({ ok: false, code: 'UNAUTHENTICATED' });
    for (const field of ['nonceHash', 'ccDigest', 'signature'] as const) {
      const bad = c[field].slice();
      bad[0]! ^= 1;
      expect(await verifier.check(key, ts, { ...c, [field]: bad }), field).toMatchObject({ ok: false, code: 'UNAUTHENTICATED' });
    }
    const other = await cert(alice, key, { clusterId: new Uint8Array(16).fill(0x22) });
    expect(await verifier.check(key, other.ts, other.cert)).toMatchObject({ ok: false, code: 'UNAUTHENTICATED' });
  });

  it('a certificate binds its grant: swapping in another grant breaks it', async () => {
    const { cluster } = await testCluster();
    const alice = await identity(1);
    const bob = await identity(2);
    const verifier = new CertificateVerifier(crypto, cluster);
    const g1 = await signGrant(crypto, cluster, alice, { grantee: bob.publicKey, prefix: own(alice, ''), expiresAt: 2e12 });
    const g2 = await signGrant(crypto, cluster, alice, { grantee: bob.publicKey, prefix: own(alice, ''), expiresAt: 3e12 });
    const key = own(alice, 'k');
    const { ts, cert: c } = await cert(bob, key, { grant: g1 });
    expect(await verifier.check(key, ts, c)).toEqual({ ok: true });
    expect(await verifier.check(key, ts, { ...c, grant: g2 })).toMatchObject({ ok: false, code: 'UNAUTHENTICATED' });
    const badGrant = { ...g1, signature: g2.signature };
    expect(await verifier.check(key, ts, { ...c, grant: badGrant })).toMatchObject({ ok: false, code: 'UNAUTHENTICATED' });
  });

  it('verifies each signature once and remembers it', async () => {
    const { cluster } = await testCluster();
    const alice = await identity(1);
    let calls = 0;
    const counting: CryptoProvider = { ...crypto, verifyEd25519: (...args) => (calls++, crypto.verifyEd25519(...args)) };
    const verifier = new CertificateVerifier(counting, cluster);
    const key = own(alice, 'k');
    const { ts, cert: c } = await cert(alice, key);
    for (let i = 0; i < 5; i++) expect((await verifier.check(key, ts, c)).ok).toBe(true);
    expect(calls).toBe(1);
    const bad = { ...c, ccDigest: hash(9) };
    for (let i = 0; i < 3; i++) expect((await verifier.check(key, ts, bad)).ok).toBe(false);
    expect(calls).toBe(4); // failures are never cached as successes
    // A signature this process made itself is never verified again.
    const mine = await cert(alice, own(alice, 'mine'));
    verifier.signed(alice.publicKey, certificateMessage(crypto, cluster.id, own(alice, 'mine'), mine.ts, mine.cert), mine.cert.signature);
    expect((await verifier.check(own(alice, 'mine'), mine.ts, mine.cert)).ok).toBe(true);
    expect(calls).toBe(4);
  });

  it('grant files round-trip; an edited one is refused', async () => {
    const { cluster, admin } = await testCluster();
    const bob = await identity(2);
    const g = await signGrant(crypto, cluster, admin, { grantee: bob.publicKey, prefix: 'apps/', expiresAt: Date.UTC(2030, 0, 1) });
    const json = grantToJson(crypto, cluster.id, g);
    expect(json).toMatchObject({
      kind: 'powerstore-grant',
      cluster: toBase32(cluster.id),
      prefix: 'apps/',
      expiresAt: '2030-01-01T00:00:00.000Z',
      id: grantId(crypto, g),
    });
    expect(grantFromJson(crypto, JSON.parse(JSON.stringify(json)))).toEqual({ grant: g, clusterId: cluster.id });
    expect(() => grantFromJson(crypto, { ...json, prefix: 'other/' })).toThrow(/does not match the grant/);
    expect(() => grantFromJson(crypto, { ...json, kind: 'x' })).toThrow(/not a grant/);
  });
});

describe('write policy (admission)', () => {
  async function setup() {
    const { cluster, admin } = await testCluster();
    const alice = await identity(1);
    const bob = await identity(2);
    const grant = await signGrant(crypto, cluster, alice, { grantee: bob.publicKey, prefix: own(alice, ''), expiresAt: 5000 });
    const viaGrant = (await cert(bob, own(alice, 'k'), { grant })).cert;
    const ownWrite = (await cert(alice, own(alice, 'k'))).cert;
    return { cluster, admin, alice, bob, grant, viaGrant, ownWrite };
  }

  it('refuses expired grants by the server clock, at and after the expiry', async () => {
    const { cluster, alice, viaGrant } = await setup();
    const a = new WritePolicyCheck(crypto, cluster, OPEN_POLICY);
    expect(a.refusal(own(alice, 'k'), viaGrant, 4999)).toBeUndefined();
    expect(a.refusal(own(alice, 'k'), viaGrant, 5000)).toMatchObject({ code: 'GRANT_EXPIRED' });
  });

  it('refuses revoked signers, revoked issuers and revoked grants', async () => {
    const { cluster, alice, bob, grant, viaGrant, ownWrite } = await setup();
    const policy = (p: Partial<typeof OPEN_POLICY>) => new WritePolicyCheck(crypto, cluster, { ...OPEN_POLICY, ...p });
    const key = own(alice, 'k');
    expect(policy({ revokedKeys: [encodePublicKey(bob.publicKey)] }).refusal(key, viaGrant, 0)).toMatchObject({
      code: 'REVOKED',
      reason: /signer/,
    });
    expect(policy({ revokedKeys: [encodePublicKey(alice.publicKey)] }).refusal(key, viaGrant, 0)).toMatchObject({
      code: 'REVOKED',
      reason: /issuer/,
    });
    expect(policy({ revokedKeys: [encodePublicKey(alice.publicKey)] }).refusal(key, ownWrite, 0)).toMatchObject({ code: 'REVOKED' });
    expect(policy({ revokedGrants: [grantId(crypto, grant)] }).refusal(key, viaGrant, 0)).toMatchObject({
      code: 'REVOKED',
      reason: /grant/,
    });
    expect(policy({}).refusal(key, viaGrant, 0)).toBeUndefined();
  });

  it('an owners-only policy admits listed owners and the admin', async () => {
    const { cluster, admin, alice, ownWrite } = await setup();
    const closed = new WritePolicyCheck(crypto, cluster, { ...OPEN_POLICY, writers: 'owners' });
    expect(closed.refusal(own(alice, 'k'), ownWrite, 0)).toMatchObject({ code: 'NOT_AUTHORIZED' });
    const listed = new WritePolicyCheck(crypto, cluster, {
      ...OPEN_POLICY,
      writers: 'owners',
      owners: [ownerIdOf(crypto, alice.publicKey)],
    });
    expect(listed.refusal(own(alice, 'k'), ownWrite, 0)).toBeUndefined();
    const byAdmin = (await cert(admin, own(alice, 'k'))).cert;
    expect(closed.refusal(own(alice, 'k'), byAdmin, 0)).toBeUndefined();
  });

  it('quotas: per owner over the default field by field, default for the rest, the admin unlimited unless named', async () => {
    const { cluster, admin, alice } = await setup();
    const bob = 'b'.repeat(32);
    const a = new WritePolicyCheck(crypto, cluster, {
      ...OPEN_POLICY,
      quotas: { default: { bytes: 10, keys: 5 }, owners: { [ownerIdOf(crypto, alice.publicKey)]: { keys: 3 }, [bob]: { bytes: 0 } } },
    });
    // An override of one field keeps the default's other (it used to drop it: unlimited).
    expect(a.quotaFor(ownerIdOf(crypto, alice.publicKey))).toEqual({ bytes: 10, keys: 3 });
    expect(a.quotaFor(bob)).toEqual({ bytes: 0, keys: 5 });
    expect(a.quotaFor('c'.repeat(32))).toEqual({ bytes: 10, keys: 5 });
    expect(a.quotaFor(ownerIdOf(crypto, admin.publicKey))).toEqual({});
    const named = new WritePolicyCheck(crypto, cluster, {
      ...OPEN_POLICY,
      quotas: { default: { bytes: 10, keys: 5 }, owners: { [ownerIdOf(crypto, admin.publicKey)]: { keys: 7 } } },
    });
    expect(named.quotaFor(ownerIdOf(crypto, admin.publicKey))).toEqual({ keys: 7 });
    expect(a.ownerOfKey('shared/x')).toBe(ownerIdOf(crypto, admin.publicKey));
    expect(a.ownerOfKey(own(alice, 'x'))).toBe(ownerIdOf(crypto, alice.publicKey));
  });
});

describe('cluster.json', () => {
  async function file() {
    const { cluster } = await testCluster();
    return {
      version: 2,
      id: toBase32(cluster.id),
      admin: encodePublicKey(cluster.admin),
      t: 1,
      n: 4,
      servers: cluster.servers.map((k, i) => ({ id: i + 1, url: `ws://127.0.0.1:${7001 + i}`, publicKey: encodePublicKey(k) })),
      policy: { writers: 'open', quotas: { default: { bytes: 1000, keys: 10 } } },
    };
  }

  it('parses a valid file into config, identity, servers and policy', async () => {
    const c = parseClusterFile(await file());
    expect(c.config).toEqual({ t: 1, n: 4 });
    expect(c.identity.admin).toEqual((await testCluster()).cluster.admin);
    expect(c.identity.servers).toEqual((await testCluster()).cluster.servers);
    expect(c.policy).toMatchObject({ writers: 'open', quotas: { default: { bytes: 1000, keys: 10 } } });
    expect(parseClusterFile(JSON.parse(JSON.stringify(c.file))).file).toEqual(c.file);
  });

  it('names the field it rejects', async () => {
    const f = await file();
    const fieldOf = (x: unknown) => {
      try {
        parseClusterFile(x);
      } catch (e) {
        return e instanceof ClusterFileError ? e.field : 'not a ClusterFileError';
      }
      return 'accepted';
    };
    expect(fieldOf({ ...f, t: 0 })).toBe('t');
    expect(fieldOf({ ...f, n: 7 })).toBe('n');
    expect(fieldOf({ ...f, admin: 'xyz' })).toBe('admin');
    expect(fieldOf({ ...f, servers: [...f.servers.slice(0, 3), { ...f.servers[3], url: 'http://x:1' }] })).toBe('servers[3].url');
    expect(fieldOf({ ...f, servers: [...f.servers.slice(0, 3), { ...f.servers[3], publicKey: undefined }] })).toBe('servers[3].publicKey');
    expect(fieldOf({ ...f, policy: { writers: 'some' } })).toBe('policy.writers');
    expect(fieldOf({ ...f, policy: { writers: 'open', quotas: { default: { bytes: -1 } } } })).toBe('policy.quotas.default.bytes');
    expect(fieldOf({ ...f, policy: { writers: 'open', revoked: { keys: ['nope'] } } })).toBe('policy.revoked.keys[0]');
    expect(fieldOf({ version: 1, t: 1, n: 4, servers: f.servers })).toBe('version');
  });

  // The same cases run through the server's loader (packages/server/test/config.test.ts)
  // and the client's connect (packages/client/test/cluster.test.ts).
  it.each(acceptedClusterFiles())('accepts a file every side accepts: %s', (_name, f) => {
    const c = parseClusterFile(f);
    expect(parseClusterFile(JSON.parse(JSON.stringify(c.file))).file).toEqual(c.file);
  });

  it.each(refusedClusterFiles())('refuses a file every side refuses: %s', (_name, f, field) => {
    let err: unknown;
    try {
      parseClusterFile(f);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ClusterFileError);
    expect(err).toMatchObject({ code: 'INVALID_ARGUMENT', field });
  });
});
