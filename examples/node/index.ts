/**
 * PowerStore from Node in a dozen lines. Start a local cluster first (`npm start`, or
 * `pnpm exec powerstore-server dev`), then: pnpm example:node
 */
import { readFileSync } from 'node:fs';
import { connect } from '@powerstore/client';

const dir = process.env.POWERSTORE_DIR ?? '.powerstore';
const store = await connect({
  cluster: JSON.parse(readFileSync(`${dir}/cluster.json`, 'utf8')),
  credentials: JSON.parse(readFileSync(`${dir}/writer.json`, 'utf8')), // leave out to read only
});

await store.put('examples/greeting', 'Hello, Byzantine world!');
console.log(new TextDecoder().decode(await store.get('examples/greeting')));
console.log(await store.stat('examples/greeting'));
await store.delete('examples/greeting');
console.log('after delete:', await store.get('examples/greeting'));
store.close();
