/** Node has no IndexedDB: identities live in files there (`Identity.fromJSON`, `powerstore id`). */
import type { Identity } from './identity.js';
import { PowerStoreError } from '../errors.js';

/** Browsers only; in Node, load an identity file with `Identity.fromJSON`. */
export async function openBrowserIdentity(_name?: string): Promise<Identity> {
  throw new PowerStoreError(
    'INVALID_ARGUMENT',
    'openBrowserIdentity is for browsers; in Node load an identity file with Identity.fromJSON (`powerstore id` creates one)',
  );
}
