/**
 * Key rotation mid-run (`rotate`, `epochs.ts`): a correct server's receipt key is replaced
 * (key epoch 1), the other servers reload the new cluster file and the clients switch to
 * it, each at its own moment, and a thief then tries the retired key. Drawn from the
 * rotation stream.
 */
import type { ClusterIdentity } from '@powerstore/protocol';
import { MemoryStorage } from '@powerstore/protocol/testing';
import type { Adversary } from './adversary.js';
import type { HonestClients } from './clients.js';
import type { Cluster } from './cluster.js';
import type { ScheduledEvent, World } from './world.js';

/** Puts the rotation's steps on the agenda; returns what it replaces when, for the report. */
export async function planRotation(world: World, cluster: Cluster, clients: HonestClients, adversary: Adversary): Promise<string> {
  const { config, crypto, cast, byzantine, streams, agenda } = world;
  const { n, t } = config;
  const rng = streams.rotation;
  const j = rng.pick([...Array(n).keys()].filter((i) => !byzantine.has(i)));
  const retired = cast.servers[j]!;
  const signer = await crypto.signerFromSeed(rng.bytes(32));
  const next: ClusterIdentity = {
    ...cast.cluster,
    epoch: 1,
    servers: cast.cluster.servers.map((k, i) => (i === j ? signer.publicKey : k)),
    history: cast.cluster.servers.map((key, i) =>
      i === j
        ? [
            { from: 0, key },
            { from: 1, key: signer.publicKey },
          ]
        : [{ from: 0, key }],
    ),
  };
  // Its disk is lost too only while that keeps the faults within t.
  const lost = byzantine.size < t;
  const at = rng.range(100, 1200);
  const events: ScheduledEvent[] = [{ at, run: () => cluster.replace(j, lost ? new MemoryStorage() : cluster.storages[j]!, next, signer) }];
  // The other servers reload the cluster file (SIGHUP), Byzantine ones too.
  for (let i = 0; i < n; i++) if (i !== j) events.push({ at: at + rng.range(0, 300), run: () => cluster.inners[i]!.setCluster(next) });
  // Clients load the new file, each when it does: operations already running keep their old one.
  for (const c of clients.all) events.push({ at: at + rng.range(0, 600), run: () => clients.loadIdentity(c, next) });
  // Once every server reloaded, a thief holding the retired key tries it with the
  // Byzantine servers' keys, for a certificate of the retired epoch and of the new one.
  events.push({ at: at + 301, run: () => adversary.tryRetiredKey(retired, j, rng) });
  agenda.add(...events);
  return `s${j} replaced at ${at}${lost ? ' with an empty disk' : ', keeping its data'}`;
}
