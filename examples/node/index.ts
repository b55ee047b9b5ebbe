/**
 * PowerStore from Node in a dozen lines. Start a local cluster first (`npm start`, or
 * `pnpm exec powerstore-server dev`), then: pnpm example:node
 */
import { readFileSync } from 'node:fs';
import { connect, Identity } from '@powerstore/client';

const dir = process.env.POWERSTORE_DIR ?? '.powerstore';
const cluster = JSON.parse(readFileSync(`${dir}/cluster.json`, 'utf8')) as object; // public
const identity = await Identity.generate(); // keep identity.toJSON() (a secret) to write as it, and read its values, again
const store = await connect({ cluster, identity });

const key = `${store.namespace}examples/greeting`; // ~<owner id>/…: this identity's own keys
await store.put(key, 'Hello, Byzantine world!'); // encrypted here: the servers get ciphertext
console.log(new TextDecoder().decode(await store.get(key)));
console.log(await store.stat(key));

// Without the key: NOT_AUTHORIZED. With a read capability for the prefix: the value.
const stranger = await connect({ cluster });
await stranger.get(key).catch((e: { code?: string }) => console.log('without the key:', e.code));
const friend = await connect({ cluster, capabilities: [await store.share(`${store.namespace}examples/`)] });
console.log('with a capability:', new TextDecoder().decode(await friend.get(key)));
stranger.close();
friend.close();

await store.delete(key);
console.log('after delete:', await store.get(key));
store.close();
