/**
 * Checks a --net profile's links with bulk TCP (no bench servers involved): one flow
 * between two hosts (a link's rate), and two hosts sending to a third at once (its
 * download link shared). Where the profile gives clients links of their own (`edge`), also
 * a client host's upload and download. Builds the network, measures, tears it down.
 *
 *   pnpm exec tsx bench/net-check.ts --net 1gbit [--seconds 2]
 */
import { parseArgs } from 'node:util';
import { createNetwork, measureTcp, type NetHost } from './lib/netns.js';

const { values } = parseArgs({ options: { net: { type: 'string', default: '1gbit' }, seconds: { type: 'string', default: '2' } } });
const net = createNetwork(values.net);
try {
  const tbf = net.tbf;
  if (!tbf) throw new Error(`${net.profile.name} is not shaped: nothing to check`);
  const client = net.clientTbf;
  console.log(`--net ${net.profile.name}: ${net.profile.description}`);
  console.log(
    `tbf rate ${tbf.rateBit / 1e6} Mbit/s${client ? " (servers' links)" : ''}, burst ${tbf.burstBytes} B, limit ${tbf.limitBytes} B (HZ ${tbf.hz}); subnet ${net.subnet}`,
  );
  if (client)
    console.log(
      `client links: ${client.up.rateBit / 1e6} Mbit/s up (burst ${client.up.burstBytes} B, limit ${client.up.limitBytes} B), ${client.down.rateBit / 1e6} Mbit/s down (burst ${client.down.burstBytes} B, limit ${client.down.limitBytes} B)`,
    );
  const rate = (h: NetHost, way: 'up' | 'down') => (h.kind === 'client' && client ? client[way].rateBit : tbf.rateBit);
  // Enough bytes for `seconds` at the rate the path should have: the burst is then a rounding error.
  const bytesFor = (from: readonly NetHost[], to: NetHost) => {
    const bit = Math.min(
      rate(to, 'down'),
      from.reduce((sum, h) => sum + rate(h, 'up'), 0),
    );
    return Math.round(((bit / 8) * Number(values.seconds)) / from.length);
  };
  const [a, b, c] = [net.host('hosta'), net.host('hostb'), net.host('hostc')];
  const checks: [string, NetHost[], NetHost][] = [
    ['one flow a→b', [a], b],
    ['one flow b→a', [b], a],
    ['bench process→a', [net.self], a],
    ['two flows a,b→c', [a, b], c],
  ];
  if (client) {
    const d = net.host('clientd', 'client');
    checks.push(['client d→a (up)', [d], a], ['a→client d (down)', [a], d], ['two flows a,b→d', [a, b], d]);
  }
  for (const [label, from, to] of checks) {
    const r = await measureTcp(net, from, to, bytesFor(from, to));
    console.log(
      `${label.padEnd(18)} ${(r.bytes / 1e6).toFixed(1).padStart(6)} MB in ${r.ms.toFixed(0).padStart(5)} ms: ${r.mbitPerSec} Mbit/s of TCP payload`,
    );
  }
  for (const q of net.qdiscs())
    console.log(
      `  qdisc ${q.link.padEnd(12)} ${String(q.rateBit / 1e6).padStart(5)} Mbit/s, sent ${(q.sentBytes / 1e6).toFixed(1)} MB, ${q.packets} packets, dropped ${q.drops}, overlimits ${q.overlimits}`,
    );
} finally {
  net.close();
}
