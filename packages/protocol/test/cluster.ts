/** A tiny synchronous-delivery harness: every message is delivered at once, in order. */
import { createReferenceCodec } from '@powerstore/erasure/reference';
import { createCryptoProvider } from '../src/crypto.node.js';
import {
  clusterConfig,
  MemoryStorage,
  ReadOperation,
  Server,
  WriteOperation,
  writerCredentials,
  type ClientOperation,
  type Outgoing,
  type WriteValue,
} from '../src/index.js';

export const crypto = createCryptoProvider();

export function makeCluster(t = 1, { skip = new Set<number>() } = {}) {
  const config = clusterConfig(t);
  const codec = createReferenceCodec({ k: t + 1, n: config.n });
  const serverKeys = Array.from({ length: config.n }, (_, i) => new Uint8Array(32).fill(i + 1));
  const storages = Array.from({ length: config.n }, () => new MemoryStorage());
  const servers = storages.map((storage, index) => new Server({ config, index, serverKey: serverKeys[index]!, crypto, storage }));
  let counter = 0;
  const random = (n: number) => Uint8Array.from({ length: n }, () => (counter = (counter * 1103515245 + 12345) >>> 0) & 0xff);
  const credentials = writerCredentials(crypto, serverKeys, new Uint8Array(16).fill(0xaa));
  let opId = 1;

  async function drive<R>(op: ClientOperation<R>): Promise<R> {
    let queue: Outgoing[] = [...((await op.start()).send ?? [])];
    while (queue.length > 0) {
      const [o, ...rest] = queue;
      queue = rest;
      if (skip.has(o!.to)) continue;
      const reply = await servers[o!.to]!.handle(o!.message);
      const step = await op.onReply(o!.to, reply);
      if (step.result !== undefined) return step.result;
      queue.push(...(step.send ?? []));
    }
    throw new Error('operation did not finish');
  }

  return {
    config,
    codec,
    servers,
    storages,
    serverKeys,
    credentials,
    write: (key: string, value: WriteValue) => drive(new WriteOperation({ config, credentials, crypto, codec, random }, key, value, opId++)),
    read: (key: string) => drive(new ReadOperation({ config, crypto, codec }, key, opId++)),
  };
}
