/**
 * Server CPU per operation without other processes in the way: the `n` servers (the
 * protocol's Server over LevelStorage, synced group commit, node:crypto) and one client
 * run in this process, and every message is handed over at once, one operation at a time.
 * Process CPU (every thread) is split into the client's share and the servers' share by
 * timing (thread CPU of the main thread around each server's `handle`).
 *
 *   pnpm exec tsx --conditions=@powerstore/source bench/profile/server-cpu.ts [--t 1] [--bytes 4096] [--ops 500]
 *     [--concurrency 1] [--batching on|off] [--sessions 1]
 *
 * `--concurrency C` runs C operations at once (each on its own key); `--batching off`
 * signs every receipt and certificate alone (as before signature batches).
 *
 * Run it under `node --cpu-prof` to see where a server's time goes.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { createCodec } from '@powerstore/erasure';
import {
  CertificateVerifier,
  clusterConfig,
  ReadOperation,
  Server,
  WriteOperation,
  WriterSession,
  type ClientOperation,
  type Outgoing,
  type Step,
} from '@powerstore/protocol';
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import { LevelStorage } from 'powerstore-server';
import { randomBytes } from 'node:crypto';

const { values } = parseArgs({
  options: {
    t: { type: 'string', default: '1' },
    bytes: { type: 'string', default: '4096' },
    ops: { type: 'string', default: '500' },
    concurrency: { type: 'string', default: '1' },
    batching: { type: 'string', default: 'on' },
    sessions: { type: 'string', default: '1' },
  },
});
const t = Number(values.t);
const config = clusterConfig(t);
const base = createCryptoProvider();
/** Ed25519 verifications and signatures made, counted. */
const counts = { verify: 0, sign: 0 };
const crypto: typeof base = Object.assign(Object.create(base) as typeof base, {
  verifyEd25519: (k: Uint8Array, m: Uint8Array, s: Uint8Array) => {
    counts.verify++;
    return base.verifyEd25519(k, m, s);
  },
});
const codec = await createCodec({ k: t + 1, n: config.n });
const admin = await crypto.signerFromSeed(randomBytes(32));
const serverSigners = await Promise.all(Array.from({ length: config.n }, () => crypto.signerFromSeed(randomBytes(32))));
const cluster = { id: randomBytes(16), admin: admin.publicKey, servers: serverSigners.map((s) => s.publicKey) };
const dir = mkdtempSync(join(tmpdir(), 'powerstore-server-cpu-'));
const storages = await Promise.all(serverSigners.map((_, i) => LevelStorage.open({ path: join(dir, `s${i}`), n: config.n, sync: true })));
const batching = values.batching !== 'off';
const nextTurn = (f: () => void) => void setImmediate(f);
let receiptSignatures = 0;
let receipts = 0;
const servers = storages.map(
  (storage, index) =>
    new Server({
      config,
      index,
      crypto,
      storage,
      cluster,
      signer: serverSigners[index]!,
      now: Date.now,
      ...(batching
        ? {
            receiptBatching: nextTurn,
            onReceiptsSigned: (n: number) => {
              receiptSignatures++;
              receipts += n;
            },
          }
        : {}),
    }),
);
const owner = await crypto.signerFromSeed(randomBytes(32));
// `--sessions N`: N writers (as N clients would be), each with its own certificate batches.
const sessions = Array.from(
  { length: Number(values.sessions) },
  () =>
    new WriterSession({
      crypto,
      cluster,
      signer: owner,
      instance: randomBytes(16),
      ...(batching ? { certificateBatching: nextTurn } : {}),
    }),
);
const verifier = new CertificateVerifier(crypto, cluster);
const random = (n: number) => new Uint8Array(randomBytes(n));

let serverMs = 0;
let requests = 0;
async function drive<R>(op: ClientOperation<R>): Promise<R> {
  const first = await op.start();
  if (first.error) throw first.error;
  const queue: Outgoing[] = [...(first.send ?? [])];
  while (queue.length > 0) {
    const o = queue.shift()!;
    const s = performance.now();
    const reply = await servers[o.to]!.handle(o.message);
    serverMs += performance.now() - s;
    requests++;
    const step: Step<R> = await op.onReply(o.to, reply);
    if (step.error) throw step.error;
    if (step.result !== undefined) return step.result;
    queue.push(...(step.send ?? []));
  }
  throw new Error('operation did not finish');
}

const ownerId = (await import('@powerstore/protocol')).ownerIdOf(crypto, owner.publicKey);
const value = random(Number(values.bytes));
let opId = 1;
const ops = Number(values.ops);
const concurrency = Number(values.concurrency);
const keys = Math.max(16, concurrency);
const write = (i: number) =>
  drive(
    new WriteOperation(
      { config, crypto, codec, random, session: sessions[i % sessions.length]!, now: Date.now },
      `~${ownerId}/k${i % keys}`,
      { kind: 'value', value },
      opId++,
    ),
  );
const read = (i: number) => drive(new ReadOperation({ config, crypto, codec, verifier }, `~${ownerId}/k${i % keys}`, opId++));

for (const [name, run] of [
  ['write', write],
  ['read', read],
] as const) {
  const all = async (n: number) => {
    for (let i = 0; i < n; i += concurrency) await Promise.all(Array.from({ length: Math.min(concurrency, n - i) }, (_, j) => run(i + j)));
  };
  await all(20);
  serverMs = 0;
  requests = 0;
  receiptSignatures = 0;
  receipts = 0;
  counts.verify = 0;
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  await all(ops);
  const c = process.cpuUsage(c0);
  const wall = performance.now() - t0;
  console.log(
    `${name}: ${(wall / ops).toFixed(3)} ms wall per op; process CPU ${((c.user + c.system) / 1000 / ops).toFixed(3)} ms per op; ` +
      `inside Server.handle (wall, all ${config.n} servers, fsync waits included) ${(serverMs / ops).toFixed(3)} ms per op, ${(requests / ops).toFixed(1)} requests per op` +
      (receiptSignatures ? `; ${(receipts / receiptSignatures).toFixed(1)} receipts per signature` : '') +
      `; ${(counts.verify / ops).toFixed(1)} Ed25519 verifications per op`,
  );
}
await Promise.all(storages.map((s) => s.close()));
rmSync(dir, { recursive: true, force: true });
