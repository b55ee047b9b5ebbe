/**
 * The value envelope, the key tree and capabilities, without a cluster: what opens, what is
 * refused as tampering, and what tells a wrong key from a tampered value.
 */
import { describe, expect, it } from 'vitest';
import * as webcrypto from '../src/values/aead.browser.js';
import * as nodeCrypto from '../src/values/aead.node.js';
import { decodeCapability, encodeCapability, scopeCovers } from '../src/identity/capability.js';
import {
  ENCRYPTED_OVERHEAD,
  FORMAT_ENCRYPTED_V1,
  HEADER_LENGTH,
  openEncrypted,
  parseEnvelope,
  plaintextSize,
  sealEncrypted,
  sealPublic,
  stripeMismatch,
  writeNonce,
  writeOrigin,
  type Envelope,
} from '../src/values/encryption.js';
import { Identity } from '../src/identity/identity.js';
import { descendToKey, descendToPrefix, namespaceNode, rootFromCryptoKey, rootFromSeed } from '../src/identity/key-tree.js';
import { KeyRing } from '../src/identity/keyring.js';

const enc = (s: string) => new TextEncoder().encode(s);
const dec = (b: Uint8Array) => new TextDecoder().decode(b);

async function ownRing(identity: Identity): Promise<KeyRing> {
  return new KeyRing({ namespace: identity.namespace, root: identity.encryptionRoot! }, []);
}

async function leafOf(ring: KeyRing, key: string, epoch = 0): Promise<Uint8Array> {
  const found = await ring.leaf(key, epoch);
  if (!('leaf' in found)) throw new Error(found.missing);
  return found.leaf;
}

function encrypted(stored: Uint8Array): Extract<Envelope, { kind: 'encrypted' }> {
  const e = parseEnvelope(stored);
  if (e.kind !== 'encrypted') throw new Error(`not encrypted: ${e.kind}`);
  return e;
}

describe('the envelope', () => {
  it('round-trips a value under its key, with a fresh write nonce each time, and hides the plaintext', async () => {
    const id = await Identity.generate();
    const ring = await ownRing(id);
    const key = `${id.namespace}notes/today`;
    const leaf = await leafOf(ring, key);
    const value = enc('MARKER-secret-notes '.repeat(20));
    const a = await sealEncrypted(key, value, leaf, 0);
    const b = await sealEncrypted(key, value, leaf, 0);
    expect(a.length).toBe(value.length + ENCRYPTED_OVERHEAD);
    expect(a[3]).toBe(FORMAT_ENCRYPTED_V1);
    expect(a).not.toEqual(b);
    expect(Buffer.from(a).includes('MARKER')).toBe(false);
    expect(dec((await openEncrypted(key, encrypted(a), leaf)) as Uint8Array)).toBe(dec(value));
    expect(plaintextSize(a)).toBe(value.length);
    // Empty values too.
    const empty = await sealEncrypted(key, new Uint8Array(0), leaf, 0);
    expect(await openEncrypted(key, encrypted(empty), leaf)).toEqual(new Uint8Array(0));
  });

  it('refuses every flipped byte of header, ciphertext and tag as tampered', async () => {
    const id = await Identity.generate();
    const key = `${id.namespace}k`;
    const leaf = await leafOf(await ownRing(id), key);
    const sealed = await sealEncrypted(key, enc('sixteen bytes!!!'), leaf, 0);
    // Bytes 4..15 (epoch, stripe, stripes) and the key check are checked before or as
    // associated data; the write nonce and everything after are authenticated.
    for (let i = 4; i < sealed.length; i++) {
      const bad = sealed.slice();
      bad[i]! ^= 0x01;
      const e = parseEnvelope(bad);
      expect(e.kind).toBe('encrypted');
      const opened = await openEncrypted(key, e as Extract<Envelope, { kind: 'encrypted' }>, leaf);
      // Flipping the key check reads as a key mismatch; everything else as tampering.
      expect(opened, `byte ${i}`).toBe(i >= 16 && i < 24 ? 'wrong-key' : 'tampered');
    }
  });

  it('refuses a ciphertext moved to another key, even one its reader holds the key of', async () => {
    const id = await Identity.generate();
    const ring = await ownRing(id);
    const [a, b] = [`${id.namespace}a`, `${id.namespace}b`];
    const sealed = await sealEncrypted(a, enc('for a'), await leafOf(ring, a), 0);
    // Under b's key the key check differs: not even decryption is tried.
    expect(await openEncrypted(b, encrypted(sealed), await leafOf(ring, b))).toBe('wrong-key');
    // With a's key (as if key checks collided), the key name in the associated data fails it.
    expect(await openEncrypted(b, encrypted(sealed), await leafOf(ring, a))).toBe('tampered');
  });

  it('takes the stripes of a value only from the write of its stripe 0, each in its place', async () => {
    const id = await Identity.generate();
    const key = `${id.namespace}film`;
    const leaf = await leafOf(await ownRing(id), key);
    /** The stripes of one streamed write of `count` stripes, parsed. */
    const write = async (count: number, epoch = 0, nonce = writeNonce()) => {
      const stripes = [];
      for (let index = 0; index < count; index++) {
        stripes.push(encrypted(await sealEncrypted(key, enc(`stripe ${index}`), leaf, epoch, { nonce, index, last: index === count - 1 })));
      }
      return stripes;
    };
    const [v1, v2] = [await write(3), await write(3)];
    const at = (index: number, count = 3) => ({ index, count });
    // Every stripe of one write, in its place, against that write's stripe 0; a value written whole is stripe 0 of 1.
    for (const [i, stripe] of v2.entries()) expect(stripeMismatch(stripe, at(i), writeOrigin(v2[0]!)), `stripe ${i}`).toBeUndefined();
    expect(stripeMismatch(encrypted(await sealEncrypted(key, enc('whole'), leaf, 0)), at(0, 1))).toBeUndefined();
    // Spliced: stripe 1 of v1 after stripe 0 of v2. It authenticates on its own, so only the header tells.
    expect(await openEncrypted(key, v1[1]!, leaf)).toBeInstanceOf(Uint8Array);
    expect(stripeMismatch(v1[1]!, at(1), writeOrigin(v2[0]!))).toMatch(/another write nonce than stripe 0/);
    expect(stripeMismatch(v2[2]!, at(2), writeOrigin(v1[0]!))).toMatch(/another write/);
    // The same nonce at another key epoch is another write too.
    const nonce = v2[0]!.nonce.slice();
    const rotated = await write(3, 1, nonce);
    expect(stripeMismatch(rotated[1]!, at(1), writeOrigin(v2[0]!))).toMatch(/key epoch 1 and stripe 0 at 0/);
    // A header rewritten to carry stripe 0's nonce passes the check and then fails to open.
    const forged = await sealEncrypted(key, enc('stripe 1'), leaf, 0, { nonce: v1[0]!.nonce, index: 1, last: false });
    forged.set(nonce, 16 + 8);
    expect(stripeMismatch(encrypted(forged), at(1), writeOrigin(v2[0]!))).toBeUndefined();
    expect(await openEncrypted(key, encrypted(forged), leaf)).toBe('tampered');
    // Cut short (stripe 1 of v2 as the last of 2), extended (its last stripe followed by one more), moved.
    expect(stripeMismatch(v2[1]!, at(1, 2), writeOrigin(v2[0]!))).toMatch(/cut short/);
    expect(stripeMismatch(v2[2]!, at(2, 4), writeOrigin(v2[0]!))).toMatch(/extended past its end/);
    expect(stripeMismatch(v2[1]!, at(2), writeOrigin(v2[0]!))).toMatch(/says it is stripe 1/);
    // Public and encrypted stripes never make one value; public ones go together (they carry no write).
    const pub = parseEnvelope(sealPublic(enc('public'))) as Extract<Envelope, { kind: 'public' }>;
    expect(stripeMismatch(pub, at(1), writeOrigin(v2[0]!))).toMatch(/is public and stripe 0 is encrypted/);
    expect(stripeMismatch(v2[1]!, at(1), writeOrigin(pub))).toMatch(/is encrypted and stripe 0 is public/);
    expect(stripeMismatch(pub, at(1), writeOrigin(pub))).toBeUndefined();
    // The origin is a copy: it outlives (and ignores changes to) the stored bytes it came from.
    const origin = writeOrigin(v2[0]!);
    v2[0]!.nonce.fill(0);
    expect(stripeMismatch(v2[1]!, at(1), origin)).toBeUndefined();
  });

  it('tells public, encrypted and raw values apart', async () => {
    const pub = sealPublic(enc('hello'));
    expect(parseEnvelope(pub)).toMatchObject({ kind: 'public' });
    expect(dec((parseEnvelope(pub) as { value: Uint8Array }).value)).toBe('hello');
    expect(parseEnvelope(enc('hello')).kind).toBe('unknown');
    expect(parseEnvelope(new Uint8Array(0)).kind).toBe('unknown');
    expect(parseEnvelope(Uint8Array.of(0xf5, 0x50, 0x53, 0x07, 1, 2)).kind).toBe('unknown');
    // An encrypted format byte with fewer bytes than a header and tag is not read as anything.
    expect(parseEnvelope(Uint8Array.of(0xf5, 0x50, 0x53, 0x01, 0, 0)).kind).toBe('unknown');
    // A public value whose plaintext looks like an encrypted envelope stays public.
    const id = await Identity.generate();
    const key = `${id.namespace}x`;
    const inner = await sealEncrypted(key, enc('x'), await leafOf(await ownRing(id), key), 0);
    expect(parseEnvelope(sealPublic(inner)).kind).toBe('public');
    expect(HEADER_LENGTH).toBe(48);
  });
});

describe('AES-256-GCM', () => {
  it('gives the same bytes through node:crypto (Node) and WebCrypto (browsers), and each opens the other', async () => {
    const key = crypto.getRandomValues(new Uint8Array(32));
    const iv = Uint8Array.of(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7);
    const ad = enc('associated');
    const head = enc('HEAD');
    for (const size of [0, 1, 4095, 70_001]) {
      const plain = new Uint8Array(size).map((_, i) => i * 31);
      const a = await nodeCrypto.aesGcmSeal(key, iv, ad, plain, head);
      const b = await webcrypto.aesGcmSeal(key, iv, ad, plain, head);
      expect(Buffer.compare(a, b), `size ${size}`).toBe(0);
      expect(Buffer.compare(a.subarray(0, 4), head)).toBe(0);
      for (const open of [nodeCrypto.aesGcmOpen, webcrypto.aesGcmOpen]) {
        expect(Buffer.compare((await open(key, iv, ad, a.subarray(4)))!, plain)).toBe(0);
        const bad = a.slice(4);
        bad[bad.length - 1]! ^= 1;
        expect(await open(key, iv, ad, bad)).toBeUndefined();
        expect(await open(key, iv, enc('other'), a.subarray(4))).toBeUndefined();
      }
    }
    for (const open of [nodeCrypto.aesGcmOpen, webcrypto.aesGcmOpen]) expect(await open(key, iv, ad, new Uint8Array(5))).toBeUndefined();
  });
});

describe('the key tree', () => {
  it('gives an identity file the same keys after export and import, and other identities other keys', async () => {
    const id = await Identity.generate();
    const again = await Identity.fromJSON(JSON.parse(JSON.stringify(id.toJSON())));
    const key = `${id.namespace}photos/cat.jpg`;
    expect(await leafOf(await ownRing(again), key)).toEqual(await leafOf(await ownRing(id), key));
    expect(await leafOf(await ownRing(id), key, 1)).not.toEqual(await leafOf(await ownRing(id), key, 0));
    const other = await Identity.generate();
    expect(await namespaceNode(other.encryptionRoot!, 0)).not.toEqual(await namespaceNode(id.encryptionRoot!, 0));
  });

  it('derives the same keys from a WebCrypto HMAC root as from bytes', async () => {
    const raw = crypto.getRandomValues(new Uint8Array(32));
    const key = await crypto.subtle.importKey('raw', raw, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
    const fromKey = rootFromCryptoKey(crypto.subtle, key);
    const { hmac } = await import('@noble/hashes/hmac.js');
    const { sha256 } = await import('@noble/hashes/sha2.js');
    const data = enc('anything');
    expect(await fromKey.mac(data)).toEqual(hmac(sha256, raw, data));
    expect(rootFromSeed(raw)).not.toBe(fromKey);
  });

  it('derives a prefix node that gives the keys under it, and not those of a sibling with a longer name', async () => {
    const id = await Identity.generate();
    const ns = id.namespace;
    const top = await namespaceNode(id.encryptionRoot!, 0);
    const photos = descendToPrefix(top, ns, `${ns}photos/`);
    expect(descendToKey(photos, `${ns}photos/`, `${ns}photos/2024/cat.jpg`)).toEqual(descendToKey(top, ns, `${ns}photos/2024/cat.jpg`));
    // photos2/x from photos/'s node would be "2/x" below it: a different key from the real one.
    expect(descendToKey(photos, `${ns}photos/`, `${ns}photos/2/x`)).not.toEqual(descendToKey(top, ns, `${ns}photos2/x`));
    // A directory's node is not the key of the key with the same name.
    expect(descendToPrefix(top, ns, `${ns}a/`)).not.toEqual(descendToKey(top, ns, `${ns}a`));
    expect(descendToKey(top, ns, `${ns}a/`)).not.toEqual(descendToPrefix(top, ns, `${ns}a/`));
  });
});

describe('capabilities', () => {
  it('round-trip through a URL-safe string, and a ring built from one decrypts its scope only', async () => {
    const id = await Identity.generate();
    const owner = await ownRing(id);
    const ns = id.namespace;
    const cap = (await owner.share(`${ns}photos/`, 0))!;
    expect(cap).toMatch(/^psr1\.[A-Za-z0-9_-]+$/);
    expect(encodeURIComponent(cap)).toBe(cap);
    const parsed = decodeCapability(cap);
    expect(parsed).toMatchObject({ scope: `${ns}photos/`, epoch: 0 });
    expect(encodeCapability(parsed)).toBe(cap);
    const reader = new KeyRing(undefined, [parsed]);
    expect(await leafOf(reader, `${ns}photos/cat.jpg`)).toEqual(await leafOf(owner, `${ns}photos/cat.jpg`));
    expect(await leafOf(reader, `${ns}photos/a/b/c`)).toEqual(await leafOf(owner, `${ns}photos/a/b/c`));
    expect(await reader.leaf(`${ns}photos2/cat.jpg`, 0)).toHaveProperty('missing');
    expect(await reader.leaf(`${ns}photos`, 0)).toHaveProperty('missing');
    expect(await reader.leaf(`${ns}photos/cat.jpg`, 1)).toMatchObject({ missing: expect.stringContaining('key epoch 0') as string });
    // It shares what it covers, narrower, and nothing else.
    const narrower = (await reader.share(`${ns}photos/2024/`, 0))!;
    expect(await leafOf(new KeyRing(undefined, [decodeCapability(narrower)]), `${ns}photos/2024/x`)).toEqual(
      await leafOf(owner, `${ns}photos/2024/x`),
    );
    expect(await reader.share(`${ns}notes/`, 0)).toBeUndefined();
    expect(await reader.share(`${ns}photos/`, 1)).toBeUndefined();
  });

  it('for one key cover that key and no other', async () => {
    const id = await Identity.generate();
    const owner = await ownRing(id);
    const key = `${id.namespace}notes/today`;
    const reader = new KeyRing(undefined, [decodeCapability((await owner.share(key, 0))!)]);
    expect(await leafOf(reader, key)).toEqual(await leafOf(owner, key));
    expect(await reader.leaf(`${key}2`, 0)).toHaveProperty('missing');
    expect(await reader.leaf(`${key}/x`, 0)).toHaveProperty('missing');
    expect(scopeCovers(key, key)).toBe(true);
    expect(scopeCovers(`${id.namespace}notes/`, key)).toBe(true);
    expect(scopeCovers(`${id.namespace}note`, key)).toBe(false);
  });

  it('are refused with a reason that never quotes them', () => {
    for (const bad of [undefined, 42, 'hello', 'psr1.', 'psr1.!!!!', 'psr1.AAAA']) {
      expect(() => decodeCapability(bad)).toThrow(/capability/);
    }
    const notNamespaced = encodeCapability({ scope: 'shared/', epoch: 0, node: new Uint8Array(32) });
    expect(() => decodeCapability(notNamespaced)).toThrow(/namespace/);
    const secret = encodeCapability({ scope: `~${'a'.repeat(32)}/x`, epoch: 0, node: new Uint8Array(32).fill(7) });
    try {
      decodeCapability(`${secret}!`);
    } catch (e) {
      expect((e as Error).message).not.toContain(secret.slice(5, 20));
    }
  });
});
