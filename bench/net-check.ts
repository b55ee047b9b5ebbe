/**
 * Checks a --net profile's links with bulk TCP (no bench servers involved): one flow
 * between two hosts (a link's rate), and two hosts sending to a third at once (its
 * download link shared). Builds the network, measures, tears it down.
 *
 *   pnpm exec tsx bench/net-check.ts --net 1gbit [--seconds 2]
 */
import { parseArgs } from 'node:util';
import { createNetwork, measureTcp } from './lib/netns.js';

const { values } = parseArgs({ options: { net: { type: 'string', default: '1gbit' }, seconds: { type: 'string', default: '2' } } });
const net = createNetwork(values.net);
try {
  if (!net.tbf) throw new Error('loopback is not shaped: nothing to check');
  // Enough bytes for `seconds` at the configured rate: the burst is then a rounding error.
  const bytes = Math.round((net.tbf.rateBit / 8) * Number(values.seconds));
  console.log(`--net ${net.profile.name}: ${net.profile.description}`);
  console.log(
    `tbf rate ${net.tbf.rateBit / 1e6} Mbit/s, burst ${net.tbf.burstBytes} B, limit ${net.tbf.limitBytes} B (HZ ${net.tbf.hz}); subnet ${net.subnet}`,
  );
  const [a, b, c] = [net.host('hosta'), net.host('hostb'), net.host('hostc')];
  for (const [label, from, to, n] of [
    ['one flow a→b', [a], b, bytes],
    ['one flow b→a', [b], a, bytes],
    ['bench process→a', [net.self], a, bytes],
    ['two flows a,b→c', [a, b], c, Math.round(bytes / 2)],
  ] as const) {
    const r = await measureTcp(net, from, to, n);
    console.log(
      `${label.padEnd(18)} ${(r.bytes / 1e6).toFixed(0).padStart(4)} MB in ${r.ms.toFixed(0).padStart(5)} ms: ${r.mbitPerSec} Mbit/s of TCP payload`,
    );
  }
  for (const q of net.qdiscs())
    console.log(
      `  qdisc ${q.link.padEnd(12)} sent ${(q.sentBytes / 1e6).toFixed(1)} MB, ${q.packets} packets, dropped ${q.drops}, overlimits ${q.overlimits}`,
    );
} finally {
  net.close();
}
