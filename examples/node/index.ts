/**
 * PowerStore from Node in a dozen lines. Start a local cluster first (`npm start`, or
 * `pnpm exec powerstore-server dev`), then: pnpm example:node
 */
import { readFileSync } from 'node:fs';
import { connect, Identity } from '@powerstore/client';

const dir = process.env.POWERSTORE_DIR ?? '.powerstore';
const identity = await Identity.generate(); // keep identity.toJSON() (a secret) to write as it again
const store = await connect({ cluster: JSON.parse(readFileSync(`${dir}/cluster.json`, 'utf8')) as object, identity });

const key = `${store.namespace}examples/greeting`; // ~<owner id>/…: this identity's own keys
await store.put(key, 'Hello, Byzantine world!');
console.log(new TextDecoder().decode(await store.get(key)));
console.log(await store.stat(key));
await store.delete(key);
console.log('after delete:', await store.get(key));
store.close();
