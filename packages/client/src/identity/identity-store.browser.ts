/**
 * Browser identities kept in IndexedDB: the private key is a non-extractable WebCrypto
 * Ed25519 key, so page scripts can sign with it but nothing can read it out. Beside it is
 * the identity's encryption root, a non-extractable HMAC-SHA256 key: a non-extractable
 * Ed25519 key cannot be fed to a key derivation, so the root is a secret of its own,
 * random, and lives and dies with the signing key (clearing site data loses both, and
 * with the root every encrypted value of the identity).
 */
import { signerFromCryptoKey } from '@powerstore/protocol';
import { Identity } from './identity.js';
import { PowerStoreError } from '../errors.js';
import { rootFromCryptoKey } from './key-tree.js';

const DB = 'powerstore';
const STORE = 'identities';

interface Stored {
  readonly privateKey: CryptoKey;
  readonly publicKey: Uint8Array;
  /** Absent in identities stored before values were encrypted: added on their next open. */
  readonly encryptionKey?: CryptoKey;
}

const HMAC_SHA256 = { name: 'HMAC', hash: 'SHA-256', length: 256 } as const;

function request<T>(r: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error ?? new Error('IndexedDB request failed'));
  });
}

/**
 * The identity this browser keeps under `name` (default `"default"`), created on first
 * use. It is per browser profile and origin; clearing site data deletes it.
 */
export async function openBrowserIdentity(name = 'default'): Promise<Identity> {
  if (typeof indexedDB === 'undefined') throw new PowerStoreError('INVALID_ARGUMENT', 'openBrowserIdentity needs IndexedDB (a browser)');
  const open = indexedDB.open(DB, 1);
  open.onupgradeneeded = () => open.result.createObjectStore(STORE);
  const db = await request(open);
  try {
    let stored = (await request(db.transaction(STORE).objectStore(STORE).get(name))) as Stored | undefined;
    if (!stored?.encryptionKey) {
      // Keys are made before the read-write transaction, which would commit while
      // waiting on them; inside it, whatever another tab stored first wins, so two tabs
      // opening a new identity at once end up with the same one.
      const encryptionKey = await crypto.subtle.generateKey(HMAC_SHA256, false, ['sign']);
      const pair = await crypto.subtle.generateKey({ name: 'Ed25519' }, false, ['sign', 'verify']);
      const fresh: Stored = {
        privateKey: pair.privateKey,
        publicKey: new Uint8Array(await crypto.subtle.exportKey('raw', pair.publicKey)),
        encryptionKey,
      };
      const objects = db.transaction(STORE, 'readwrite').objectStore(STORE);
      const current = (await request(objects.get(name))) as Stored | undefined;
      if (current?.encryptionKey) stored = current;
      else {
        stored = current ? { ...current, encryptionKey } : fresh;
        await request(objects.put(stored, name));
      }
    }
    return new Identity(
      signerFromCryptoKey(crypto.subtle, stored.privateKey, stored.publicKey),
      undefined,
      rootFromCryptoKey(crypto.subtle, stored.encryptionKey!),
    );
  } finally {
    db.close();
  }
}
