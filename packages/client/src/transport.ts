/**
 * Which transports `connect` accepts. Plaintext `ws://` to another machine lets anyone on
 * the network path read every value and stand in for every server at once, which is more
 * than the `t` faulty servers the protocol tolerates; on loopback the traffic never leaves
 * the machine. So `ws://` is accepted for loopback hosts only, unless the caller says
 * plaintext is what it wants (`allowInsecure`).
 */
import { isLoopbackHost, type Cluster } from '@powerstore/protocol';
import { invalid, invalidInput } from './errors.js';

/** The servers of `cluster` that would be reached over `ws://` on a host that is not loopback. */
export function insecureServers(cluster: Cluster): { id: number; url: string }[] {
  return cluster.servers.filter((s) => {
    const url = new URL(s.url);
    return url.protocol === 'ws:' && !isLoopbackHost(url.hostname);
  });
}

/**
 * Throws `INVALID_ARGUMENT` with source `cluster` (the file is what needs fixing)
 * when a server of `cluster` would be reached over plaintext `ws://` on a host that is not
 * loopback, unless `allowInsecure`. The message names the servers and both ways out.
 */
export function checkTransport(cluster: Cluster, allowInsecure: unknown): void {
  if (allowInsecure !== undefined && typeof allowInsecure !== 'boolean') throw invalid('allowInsecure must be a boolean');
  if (allowInsecure) return;
  const insecure = insecureServers(cluster);
  if (insecure.length === 0) return;
  throw invalidInput(
    'cluster',
    `cluster: ${insecure.map((s) => `s${s.id} ${s.url}`).join(', ')}: plaintext ws:// to a host that is not loopback, ` +
      'where anyone on the network can read the values and tamper with the traffic; use wss:// URLs ' +
      '(servers started with --tls-cert/--tls-key), or allow plaintext explicitly with allowInsecure: true (the powerstore CLI: --allow-insecure)',
  );
}
