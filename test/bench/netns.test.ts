/**
 * bench/lib/netns.ts builds real namespaces, veth links, a bridge and tbf qdiscs: a tiny
 * network of two hosts per profile, checked from the outside (TCP across it, `tc -s
 * qdisc show` as text, `ip` listings after teardown), and the cuts the nemesis makes. Needs root and iproute2; skipped,
 * with the reason logged, only when not root or `ip` is missing. No timing is asserted.
 */
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import {
  bin,
  clientTbfOf,
  createNetwork,
  leftovers,
  measureTcp,
  NET_PROFILES,
  netUnavailable,
  parseTcQdiscs,
  tbfConfig,
  type NetHost,
  type Network,
  type TbfConfig,
} from '../../bench/lib/netns.js';

const unavailable = netUnavailable();
if (unavailable) console.log(`test/bench/netns.test.ts skipped: ${unavailable}`);

const FRAME = 256 * 1024;

function tcText(netns: string | undefined, dev: string): string {
  const r = spawnSync(bin('tc'), [...(netns ? ['-n', netns] : []), '-s', 'qdisc', 'show', 'dev', dev], { encoding: 'utf8' });
  expect(r.status, r.stderr).toBe(0);
  return r.stdout;
}

/** One tbf qdisc in `text`, at `config`'s rate and burst (default: the network's own). */
function expectShaped(text: string, net: Network, config: TbfConfig = net.tbf!): void {
  const tbf = parseTcQdiscs(text).filter((q) => q.kind === 'tbf');
  expect(tbf).toHaveLength(1);
  expect(tbf[0]!.rateBit).toBe(config.rateBit);
  expect(tbf[0]!.burstBytes).toBe(config.burstBytes);
}

/** Builds `profile`, runs `check`, closes, and checks nothing named after the network is left. */
async function withNetwork(profile: string, check: (net: Network) => Promise<void>): Promise<void> {
  const net = createNetwork(profile, { prefix: 'pstest' });
  const tag = net.tag!;
  try {
    expect(leftovers(tag).length).toBeGreaterThan(0); // the leftover check sees what exists
    await check(net);
  } finally {
    net.close();
  }
  expect(leftovers(tag)).toEqual([]);
}

describe('tbf parameters', () => {
  it('burst covers a timer tick and a 64 KiB packet; the queue holds a 256 KiB frame', () => {
    for (const rate of [1e9, 100e6, 10e6]) {
      for (const hz of [100, 250, 1000]) {
        const t = tbfConfig(rate, hz);
        expect(t.burstBytes).toBeGreaterThanOrEqual(rate / 8 / hz);
        expect(t.burstBytes).toBeGreaterThan(65536);
        expect(t.limitBytes - t.burstBytes).toBeGreaterThanOrEqual(FRAME);
      }
    }
  });

  it('edge: servers at 1 Gbit/s each way, client hosts 20 Mbit/s up and 100 Mbit/s down', () => {
    const edge = NET_PROFILES.edge;
    expect(edge.topology).toBe('switched');
    expect(edge.rateBit).toBe(1e9);
    expect(edge.clientLink).toEqual({ upBit: 20e6, downBit: 100e6 });
    const c = clientTbfOf(edge, 250)!;
    expect(c.up.rateBit).toBe(20e6);
    expect(c.down.rateBit).toBe(100e6);
    // At both rates the 96 KiB floor sets the burst and the 2-frame floor the queue
    // (at 20 Mbit/s that is 210 ms of queue: a home router's, not a switch's).
    for (const t of [c.up, c.down]) expect([t.burstBytes, t.limitBytes]).toEqual([98304, 98304 + 2 * FRAME]);
    // Profiles without client links have none.
    for (const name of ['1gbit', 'wan-100mbit', 'shared-1gbit'] as const) expect(clientTbfOf(NET_PROFILES[name])).toBeUndefined();
  });

  it('parses tc -s qdisc show', () => {
    const text =
      'qdisc tbf 8001: root refcnt 2 rate 100Mbit burst 96Kb lat 41.9ms \n Sent 1234 bytes 5 pkt (dropped 2, overlimits 0 requeues 0) \n backlog 0b 0p requeues 0\n';
    expect(parseTcQdiscs(text)).toEqual([{ kind: 'tbf', rateBit: 100e6, burstBytes: 98304, sentBytes: 1234, drops: 2 }]);
  });
});

describe.skipIf(unavailable !== undefined)('bench network namespaces (root)', () => {
  it('1gbit: two hosts in their own namespaces talk TCP through shaped links; teardown leaves nothing', async () => {
    await withNetwork('1gbit', async (net) => {
      const a = net.host('a');
      const b = net.host('b');
      expect(a.netns).not.toBe(b.netns);
      expect(a.address).not.toBe(b.address);
      // One 256 KiB frame's worth, each way, and from the bench process (health checks, profile).
      for (const [from, to] of [
        [a, b],
        [b, a],
        [net.self, a],
      ] as [NetHost, NetHost][]) {
        const r = await measureTcp(net, [from], to, FRAME);
        expect(r.bytes).toBe(FRAME);
      }
      // Both ends of every link shaped: the host's eth0 (upload) and the switch's port (download).
      expectShaped(tcText(a.netns, 'eth0'), net);
      expectShaped(tcText(b.netns, 'eth0'), net);
      for (const port of ['h0', 'h1', 'h2']) expectShaped(tcText(`${net.tag}-sw`, port), net);
      expectShaped(tcText(undefined, `${net.tag}-r`), net);
      const stats = net.qdiscs();
      expect(stats.map((s) => s.link).sort()).toEqual(['a down', 'a up', 'b down', 'b up', 'bench down', 'bench up']);
      expect(stats.find((s) => s.link === 'b down')!.sentBytes).toBeGreaterThan(FRAME);
    });
  });

  it('edge: client hosts (and the bench process) shaped 20 up / 100 down, servers 1 Gbit/s; teardown leaves nothing', async () => {
    await withNetwork('edge', async (net) => {
      const client = net.host('c', 'client');
      const server = net.host('s');
      expect(client.kind).toBe('client');
      expect(server.kind).toBe('server');
      expect(net.self.kind).toBe('client');
      expect(() => net.host('c')).toThrow(/client host/);
      const { up, down } = net.clientTbf!;
      for (const [from, to] of [
        [client, server],
        [server, client],
        [net.self, server],
      ] as [NetHost, NetHost][]) {
        const r = await measureTcp(net, [from], to, FRAME);
        expect(r.bytes).toBe(FRAME);
      }
      // h0 is the bench process's port, h1 the client's, h2 the server's.
      expectShaped(tcText(client.netns, 'eth0'), net, up);
      expectShaped(tcText(`${net.tag}-sw`, 'h1'), net, down);
      expectShaped(tcText(undefined, `${net.tag}-r`), net, up);
      expectShaped(tcText(`${net.tag}-sw`, 'h0'), net, down);
      expectShaped(tcText(server.netns, 'eth0'), net);
      expectShaped(tcText(`${net.tag}-sw`, 'h2'), net);
      const rates = Object.fromEntries(net.qdiscs().map((q) => [q.link, q.rateBit]));
      expect(rates).toEqual({
        'bench up': 20e6,
        'bench down': 100e6,
        'c up': 20e6,
        'c down': 100e6,
        's up': 1e9,
        's down': 1e9,
      });
      expect(net.describe()).toMatchObject({
        profile: 'edge',
        rateMbit: 1000,
        clientLink: { hosts: ['bench', 'c'], upMbit: 20, downMbit: 100 },
      });
    });
  });

  it('shared-1gbit: hosts share one namespace whose lo is shaped; teardown leaves nothing', async () => {
    await withNetwork('shared-1gbit', async (net) => {
      const a = net.host('a');
      const b = net.host('b');
      expect(a.netns).toBe(b.netns);
      const r = await measureTcp(net, [a], b, FRAME);
      expect(r.bytes).toBe(FRAME);
      expectShaped(tcText(a.netns, 'lo'), net);
      expect(net.qdiscs().find((s) => s.link === 'shared lo')!.sentBytes).toBeGreaterThan(FRAME);
    });
  });

  it('lan: unshaped; block drops what one host sends another, setLink cuts a host off, both undone', async () => {
    await withNetwork('lan', async (net) => {
      const [a, b, c] = [net.host('a'), net.host('b'), net.host('c')];
      expect(net.tbf).toBeUndefined();
      expect(net.qdiscs()).toEqual([]);
      const reaches = async (from: NetHost, to: NetHost) =>
        measureTcp(net, [from], to, 4096, 3000).then(
          (r) => r.bytes === 4096,
          () => false,
        );
      expect(await reaches(a, b)).toBe(true);
      net.block(a, b);
      expect(await reaches(a, b)).toBe(false);
      expect(await reaches(a, c)).toBe(true); // only b is cut off from a
      net.unblock(a, b);
      expect(await reaches(a, b)).toBe(true);
      net.setLink(b, false);
      expect(await reaches(a, b)).toBe(false);
      expect(await reaches(c, b)).toBe(false);
      expect(await reaches(a, c)).toBe(true);
      net.setLink(b, true);
      // A link back up can refuse the first connections at once (EHOSTUNREACH: the neighbour
      // entry failed while it was down, and the kernel tries it again a moment later).
      let back = false;
      for (let i = 0; i < 10 && !back; i++) {
        back = await reaches(c, b);
        if (!back) await new Promise((r) => setTimeout(r, 300));
      }
      expect(back).toBe(true);
      // Unblocking what is not blocked is harmless (healing twice).
      net.unblock(a, b);
    });
  }, 60_000);

  it('closes on process exit too (a child that builds a network and exits without closing)', () => {
    const script = `
      const { createNetwork } = await import(${JSON.stringify(new URL('../../bench/lib/netns.ts', import.meta.url).pathname)});
      const net = createNetwork('1gbit', { prefix: 'pstest' });
      net.host('a');
      console.log(net.tag);
      process.kill(process.pid, 'SIGTERM');
      await new Promise((r) => setTimeout(r, 5000));
    `;
    const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { encoding: 'utf8', timeout: 30_000 });
    const tag = r.stdout.trim();
    expect(tag, r.stderr).toMatch(/^pstest\d+$/);
    expect(leftovers(tag)).toEqual([]);
  });
});
