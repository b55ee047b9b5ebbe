/**
 * CPU a server spends per STORE while one writer floods a key with stripes of a write it
 * never finishes (issue 23: "unbounded work per request"). In process: the real `Server`
 * on the real `LevelStorage` (synced group commit), t = 1, the writer the key's owner.
 * Prints the median CPU time (user + system, LevelDB's threads included) of the STOREs at
 * each point of the flood.
 *
 *   pnpm bench:flood [--stripes 2160] [--bytes 65536]
 *
 * `--bytes 0` sends empty stripes, which servers now refuse (INVALID_ARGUMENT); the bench
 * then counts refusals, whose cost is the point.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { createReferenceCodec } from '@powerstore/erasure/reference';
import {
  clusterConfig,
  computeCrossChecksum,
  crossChecksumDigest,
  makeWriterId,
  nonceHash,
  ownerIdOf,
  Server,
  signCertificate,
  writerTagOf,
  type StoreRequest,
} from '@powerstore/protocol';
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import { LevelStorage } from 'powerstore-server';

const { values } = parseArgs({ options: { stripes: { type: 'string', default: '2160' }, bytes: { type: 'string', default: '65536' } } });
const stripes = Number(values.stripes);
const bytes = Number(values.bytes);
const crypto = createCryptoProvider();
const config = clusterConfig(1);
const codec = createReferenceCodec({ k: 2, n: 4 });
const seed = (b: number) => crypto.signerFromSeed(new Uint8Array(32).fill(b));
const [admin, writer, ...servers] = await Promise.all([0xad, 1, 0xc0, 0xc1, 0xc2, 0xc3].map(seed));
const cluster = { id: new Uint8Array(16).fill(0x11), admin: admin!.publicKey, servers: servers.map((s) => s.publicKey) };
const dir = mkdtempSync(join(tmpdir(), 'powerstore-flood-'));
const storage = await LevelStorage.open({ path: dir, n: config.n });
const server = new Server({ config, index: 0, crypto, storage, cluster, signer: servers[0]!, now: Date.now });
const key = `~${ownerIdOf(crypto, writer!.publicKey)}/flooded`;
const ts = { num: 1, writerId: makeWriterId(writerTagOf(crypto, writer!.publicKey), new Uint8Array(16).fill(7)) };
const value = new Uint8Array(bytes).fill(0x5a);
const fragments = codec.encode(value);
const cc = await computeCrossChecksum(crypto, fragments, value.length, false);

const cpuMs: number[] = [];
let refused = 0;
for (let s = 1; s <= stripes; s++) {
  const cert = await signCertificate(crypto, cluster.id, writer!, {
    key,
    ts,
    nonceHash: nonceHash(crypto, new Uint8Array(32)),
    ccDigest: crossChecksumDigest(crypto, cc),
    tombstone: false,
    grant: undefined,
    stripe: s,
  });
  const store: StoreRequest = { type: 'STORE', key, opId: s, ts, stripe: s, fragment: fragments[0]!, cc, cert };
  const before = process.cpuUsage();
  const reply = await server.handle(store);
  const used = process.cpuUsage(before);
  cpuMs.push((used.user + used.system) / 1000);
  if (reply.type === 'ERROR') refused++;
}
await storage.close();
rmSync(dir, { recursive: true, force: true });

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;
const points = [1, 100, 500, 1000, 2000, stripes].filter((p, i, a) => p <= stripes && a.indexOf(p) === i);
console.log(
  `${stripes} stripe STOREs of ${bytes} bytes to one key (${refused} refused); median CPU ms per STORE over the 50 before each point:`,
);
for (const p of points) console.log(`  at stripe ${String(p).padStart(5)}: ${median(cpuMs.slice(Math.max(0, p - 50), p)).toFixed(3)} ms`);
