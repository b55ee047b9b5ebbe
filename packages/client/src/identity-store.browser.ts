/**
 * Browser identities kept in IndexedDB: the private key is a non-extractable WebCrypto
 * Ed25519 key, so page scripts can sign with it but nothing can read it out.
 */
import { signerFromCryptoKey } from '@powerstore/protocol';
import { Identity } from './identity.js';
import { PowerStoreError } from './errors.js';

const DB = 'powerstore';
const STORE = 'identities';

interface Stored {
  readonly privateKey: CryptoKey;
  readonly publicKey: Uint8Array;
}

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
    if (!stored) {
      const pair = await crypto.subtle.generateKey({ name: 'Ed25519' }, false, ['sign', 'verify']);
      stored = { privateKey: pair.privateKey, publicKey: new Uint8Array(await crypto.subtle.exportKey('raw', pair.publicKey)) };
      await request(db.transaction(STORE, 'readwrite').objectStore(STORE).put(stored, name));
    }
    return new Identity(signerFromCryptoKey(crypto.subtle, stored.privateKey, stored.publicKey));
  } finally {
    db.close();
  }
}
