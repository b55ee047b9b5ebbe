/**
 * The network the bench and the nemesis run on. On loopback (the bench's default) every
 * process talks over the machine's `lo`, where bytes are free and the CPU is the limit.
 * The other profiles put the paper's network back: Linux network namespaces joined by
 * veth pairs, shaped with tc's token bucket filter (`tbf`; `netem` is not assumed to
 * exist, so no delay or loss). `lan` is the same switched network unshaped, which the
 * nemesis (test/nemesis) partitions: a switched network can cut a host off ({@link
 * Network.setLink}) and drop what one host sends another ({@link Network.block}).
 *
 * - `lan` / `1gbit` / `wan-100mbit` / `edge` ("switched"): every host (each server process, each
 *   load worker) is a namespace of its own with one veth link to a bridge in a dedicated
 *   switch namespace; the link is shaped in both directions (egress of the host end =
 *   upload, egress of the switch end = download), the bridge itself is not: a
 *   non-blocking switch with one port per host. The bench process itself stays in the
 *   root namespace and is a host too (its own shaped link to the switch): it runs health
 *   checks and the profile's client. `edge` gives client hosts (the bench process's and
 *   every host made with `host(role, 'client')`, the load workers') their own,
 *   asymmetric link ({@link NetProfile.clientLink}): a home uplink, against the servers'
 *   1 Gbit/s.
 * - `shared-1gbit`: every process in one namespace whose `lo` is shaped: one link shared
 *   by all. Servers listen on the namespace's veth address, but traffic between
 *   processes of one namespace to a local address goes through `lo` all the same; the
 *   veth (shaped too) only carries the bench process's own traffic.
 *
 * Everything this module creates is named `<prefix><pid>-…` (namespaces, and the one link
 * in the root namespace), so two runs never clash and leftovers are easy to find; it is
 * deleted again by {@link Network.close}, which also runs on exit (SIGINT and SIGTERM
 * included). Addresses come from a /24 of 10.0.0.0/8 (or 172.16.0.0/12) that no address
 * or route of the root namespace overlaps.
 */
import { spawn, spawnSync, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { release } from 'node:os';
import { gunzipSync } from 'node:zlib';
import { freeBasePort } from '../../test/ports.js';

export type NetProfileName = 'loopback' | 'lan' | '1gbit' | 'shared-1gbit' | 'wan-100mbit' | 'edge';

/** What a host is, for profiles that shape clients' links apart from servers' ({@link NetProfile.clientLink}). */
export type HostKind = 'server' | 'client';

/** One network set-up the bench can run on. */
export interface NetProfile {
  readonly name: NetProfileName;
  readonly topology: 'loopback' | 'switched' | 'shared';
  /**
   * Rate of every shaped link, each way, bit/s (with {@link clientLink}: of every server
   * host's link); absent where links are unshaped (loopback, lan).
   */
  readonly rateBit?: number;
  /**
   * Client hosts' links, when they differ from {@link rateBit} (switched topology only):
   * `upBit` shapes what a client host sends (egress of its own end of the link), `downBit`
   * what it receives (egress of the switch's port towards it).
   */
  readonly clientLink?: { readonly upBit: number; readonly downBit: number };
  /** One line for READMEs and result files. */
  readonly description: string;
  /** What the profile does not emulate, when that matters for reading its results. */
  readonly omits?: string;
}

const GBIT = 1e9;
const MBIT = 1e6;

/** The profiles `--net` accepts. */
export const NET_PROFILES: Readonly<Record<NetProfileName, NetProfile>> = {
  loopback: {
    name: 'loopback',
    topology: 'loopback',
    description: "every process on the machine's loopback (127.0.0.1), unshaped: bytes are free, the CPU is the limit",
  },
  lan: {
    name: 'lan',
    topology: 'switched',
    description:
      'switched LAN, unshaped: every server and load worker in its own network namespace, one veth link per host to a bridge; links are as fast as the CPU moves bytes',
    omits: 'no bandwidth limit, propagation delay, jitter or loss',
  },
  '1gbit': {
    name: '1gbit',
    topology: 'switched',
    rateBit: GBIT,
    description:
      'switched LAN: every server and load worker in its own network namespace, one veth link per host to a bridge, each link shaped to 1 Gbit/s each way with tbf',
    omits: 'no propagation delay, jitter or loss (netem is not available; links are shaped, not delayed)',
  },
  'shared-1gbit': {
    name: 'shared-1gbit',
    topology: 'shared',
    rateBit: GBIT,
    description:
      'one shared 1 Gbit/s link: every server and load worker in one network namespace whose loopback is shaped to 1 Gbit/s with tbf',
    omits: 'no propagation delay, jitter or loss; all traffic of all hosts shares one link',
  },
  'wan-100mbit': {
    name: 'wan-100mbit',
    topology: 'switched',
    rateBit: 100 * MBIT,
    description: "as 1gbit, with every host link shaped to 100 Mbit/s each way (the paper's WAN bandwidth)",
    omits:
      "bandwidth only: no WAN latency (the paper's tens of milliseconds), jitter or loss, since netem is not available; latency-bound effects (round trips) are not reproduced",
  },
  edge: {
    name: 'edge',
    topology: 'switched',
    rateBit: GBIT,
    clientLink: { upBit: 20 * MBIT, downBit: 100 * MBIT },
    description:
      "the web client's situation: switched as 1gbit, servers on 1 Gbit/s links each way, every client host (each load worker, and the bench process) on a home uplink of 20 Mbit/s up (client → servers) and 100 Mbit/s down (servers → client), shaped with tbf",
    omits:
      'bandwidth only: no access-network or WAN latency (a home link adds milliseconds to tens of them per round trip), jitter or loss, since netem is not available; each client host has a link of its own (clients of one load worker share it), so the clients of one run are not behind one shared home link',
  },
};

/** The profile called `name`; throws, listing the valid names, for any other. */
export function netProfile(name: string): NetProfile {
  const p = (NET_PROFILES as Record<string, NetProfile | undefined>)[name];
  if (!p) throw new Error(`unknown --net profile ${JSON.stringify(name)}: one of ${Object.keys(NET_PROFILES).join(', ')}`);
  return p;
}

/** The tbf parameters of every shaped link of a network. */
export interface TbfConfig {
  readonly rateBit: number;
  /** Bucket size: bytes that may leave at once after an idle spell. */
  readonly burstBytes: number;
  /** Bytes that may wait in the qdisc (tbf's `limit` counts the burst too); more are dropped. */
  readonly limitBytes: number;
  /** The kernel's timer frequency the burst was sized for. */
  readonly hz: number;
}

/** The largest packet tbf is handed: a 64 KiB GSO/TSO super-packet on veth, a 64 KiB packet on `lo` (MTU 65536), plus headers. */
const MAX_PACKET_BYTES = 65536 + 1024;
/** The bench's default value size: one such frame must fit in the queue whole. */
const FRAME_BYTES = 256 * 1024;

/**
 * tbf's burst and limit for a rate.
 *
 * burst ≥ rate / HZ: tc's rule, so the bucket can hold what the link sends in one timer
 * tick (older kernels refill per tick); and ≥ the largest packet, since tbf drops a
 * non-GSO packet bigger than its bucket (on `lo`, with its 64 KiB MTU, that would drop
 * traffic outright). At 1 Gbit/s and HZ = 250 that is 500 000 bytes (4 ms at line rate:
 * an idle host sends its first 500 kB unshaped, so a lone 256 KiB frame after a pause
 * is not slowed; under load the bucket is empty and the rate holds).
 *
 * limit = burst + max(20 ms at the rate, 2 frames of 256 KiB): room for a switch port's
 * worth of queue (fan-in of several servers answering one client) before tail drops,
 * whose retransmission timeouts (≥ 200 ms) would dominate every latency figure; at
 * 100 Mbit/s the 2-frame floor sets it (≈ 50 ms of queue).
 */
export function tbfConfig(rateBit: number, hz: number = kernelHz()): TbfConfig {
  const rateBytes = rateBit / 8;
  const burstBytes = Math.max(Math.ceil(rateBytes / hz), 96 * 1024);
  const limitBytes = burstBytes + Math.max(Math.ceil(rateBytes * 0.02), 2 * FRAME_BYTES);
  // The invariants the comment promises, checked rather than trusted.
  if (burstBytes < rateBytes / hz || burstBytes < MAX_PACKET_BYTES || limitBytes - burstBytes < FRAME_BYTES)
    throw new Error('tbfConfig: inconsistent burst/limit');
  return { rateBit, burstBytes, limitBytes, hz };
}

/**
 * The kernel's HZ, from its config (/proc/config.gz, /boot/config-<release>); 100 when
 * neither is readable, the smallest common value, so the burst errs on the large side.
 */
export function kernelHz(): number {
  const sources: (() => string)[] = [
    () => gunzipSync(readFileSync('/proc/config.gz')).toString('utf8'),
    () => readFileSync(`/boot/config-${release()}`, 'utf8'),
  ];
  for (const read of sources) {
    try {
      const m = /^CONFIG_HZ=(\d+)$/m.exec(read());
      if (m) return Number(m[1]);
    } catch {
      // try the next source
    }
  }
  return 100;
}

/** Where a process runs and which address it serves on. */
export interface NetHost {
  readonly role: string;
  /** What it was created as (the bench process's own host is a client). */
  readonly kind: HostKind;
  /** Its network namespace; absent: the bench process's own (the root namespace). */
  readonly netns?: string;
  /** The IPv4 address its servers listen on and clients connect to. */
  readonly address: string;
}

/** The tbf parameters of a client host's two directions, on profiles with a {@link NetProfile.clientLink}. */
export interface ClientTbf {
  /** Egress of the client host's own end: what it sends (uploads). */
  readonly up: TbfConfig;
  /** Egress of the switch's port towards it: what it receives (downloads). */
  readonly down: TbfConfig;
}

/** One shaped qdisc's counters (from `tc -s -j qdisc show`). */
export interface QdiscStat {
  /** Which host's link and which way: `up` = the host's egress, `down` = the switch's egress towards it. */
  readonly link: string;
  readonly rateBit: number;
  readonly burstBytes: number;
  readonly sentBytes: number;
  readonly packets: number;
  readonly drops: number;
  readonly overlimits: number;
}

/** A network built for one bench run; see the module comment. */
export interface Network {
  readonly profile: NetProfile;
  /** Every shaped link's, each way (with {@link clientTbf}: every server host's); absent where links are unshaped. */
  readonly tbf?: TbfConfig;
  /** Client hosts' links (the bench process's and every `host(role, 'client')`), when the profile shapes them apart. */
  readonly clientTbf?: ClientTbf;
  /** `<prefix><pid>`: every namespace of this network, and its root-namespace link, is named `<tag>-…`. Absent on loopback. */
  readonly tag?: string;
  /** The /24 the hosts' addresses come from. Absent on loopback. */
  readonly subnet?: string;
  /** The bench process's own host. */
  readonly self: NetHost;
  /**
   * The host called `role` (lower-case letters and digits), created on first use as a
   * `kind` host (default `server`; it matters only where the profile shapes clients' links
   * apart, {@link NetProfile.clientLink}). Asking for an existing host as another kind throws.
   */
  host(role: string, kind?: HostKind): NetHost;
  /** `count` consecutive ports free on every host. */
  basePort(count: number): Promise<number>;
  /** Starts `command` on `host` (through `ip netns exec`, which execs it: same pid, inherited fds, an IPC channel included). */
  spawn(host: NetHost, command: string, args: readonly string[], options: SpawnOptions): ChildProcess;
  /** Counters of every shaped qdisc, now. */
  qdiscs(): QdiscStat[];
  /**
   * What results files record about the network; qdisc totals count from `since` (an
   * earlier {@link qdiscs}) when given, so traffic before it (a link check) is left out.
   */
  describe(since?: readonly QdiscStat[]): Record<string, unknown>;
  /**
   * Switched networks only: from now on every packet `from` sends to `to` is dropped
   * silently (one way; block both ways for a symmetric cut), connections already open
   * included. Undone by {@link unblock}.
   */
  block(from: NetHost, to: NetHost): void;
  /** Undoes {@link block}: `from` reaches `to` again (the open connections too, if they have not given up). */
  unblock(from: NetHost, to: NetHost): void;
  /**
   * Switched networks only: takes `host`'s link down at the switch (`up = false`), which
   * cuts it off from every other host at once, silently, or brings it up again.
   */
  setLink(host: NetHost, up: boolean): void;
  /** Deletes everything created (idempotent, synchronous so it can run on exit). */
  close(): void;
}

/**
 * Why network profiles other than loopback cannot run here — not Linux, not root, or no
 * `ip` — or undefined when they can (tc and kernel support are checked when building).
 */
export function netUnavailable(): string | undefined {
  if (process.platform !== 'linux') return `network namespaces need Linux (this is ${process.platform})`;
  if (process.getuid?.() !== 0) return 'network namespaces, veth links and tc need root: run as root (or sudo -E)';
  if (!runs('ip', ['-V'])) return '`ip` not found: install iproute2 (apt-get install iproute2)';
  return undefined;
}

const resolved = new Map<string, string>();

/**
 * The absolute path of `ip` or `tc`: from PATH, else the sbin directories, which a
 * user's PATH kept through `sudo -E` may lack.
 */
export function bin(name: 'ip' | 'tc'): string {
  let path = resolved.get(name);
  if (!path) {
    const dirs = [...(process.env['PATH'] ?? '').split(delimiter).filter(Boolean), '/usr/sbin', '/sbin', '/usr/bin', '/bin'];
    path = dirs.map((d) => join(d, name)).find((p) => existsSync(p)) ?? name;
    resolved.set(name, path);
  }
  return path;
}

function runs(cmd: 'ip' | 'tc', args: string[]): boolean {
  const r = spawnSync(bin(cmd), args, { stdio: 'ignore' });
  return !r.error && r.status === 0;
}

/** Runs one iproute2 command; throws with its stderr (and `hint`, for the errors that mean missing kernel support). */
function sh(cmd: 'ip' | 'tc', args: readonly string[], hint?: string): string {
  const r = spawnSync(bin(cmd), args, { encoding: 'utf8' });
  if (r.error || r.status !== 0) {
    const why = r.error ? r.error.message : r.stderr.trim();
    throw new Error(`${cmd} ${args.join(' ')} failed: ${why}${hint ? ` (${hint})` : ''}`);
  }
  return r.stdout;
}

// ---- addresses ------------------------------------------------------------------------

const ipToInt = (ip: string) => ip.split('.').reduce((a, o) => a * 256 + Number(o), 0);
const intToIp = (n: number) => [24, 16, 8, 0].map((s) => Math.floor(n / 2 ** s) % 256).join('.');

function overlaps(a: [number, number], b: [number, number]): boolean {
  const size = (len: number) => 2 ** (32 - len);
  const [aStart, aLen] = [a[0] - (a[0] % size(a[1])), a[1]];
  const [bStart, bLen] = [b[0] - (b[0] % size(b[1])), b[1]];
  return aStart < bStart + size(bLen) && bStart < aStart + size(aLen);
}

/** Every IPv4 prefix the root namespace has an address or a route in (default routes aside). */
function rootPrefixes(): [number, number][] {
  const out: [number, number][] = [];
  for (const r of JSON.parse(sh('ip', ['-j', '-4', 'route', 'show', 'table', 'all'])) as { dst: string }[]) {
    if (r.dst === 'default') continue;
    const [ip, len] = r.dst.split('/');
    out.push([ipToInt(ip!), len === undefined ? 32 : Number(len)]);
  }
  for (const l of JSON.parse(sh('ip', ['-j', '-4', 'addr', 'show'])) as { addr_info?: { local: string; prefixlen: number }[] }[]) {
    for (const a of l.addr_info ?? []) out.push([ipToInt(a.local), a.prefixlen]);
  }
  return out;
}

/** A /24 no root address or route overlaps, picked by pid so concurrent runs differ. */
function pickSubnet(): number {
  const taken = rootPrefixes();
  for (let k = 0; k < 512; k++) {
    const x = (process.pid + k * 7919) % 32768;
    // 10.64.0.0–10.191.255.0, then 172.16.0.0/12 should all of those be routed.
    const base =
      k < 256
        ? ipToInt(`10.${64 + (Math.floor(x / 256) % 128)}.${x % 256}.0`)
        : ipToInt(`172.${16 + (Math.floor(x / 256) % 16)}.${x % 256}.0`);
    if (!taken.some((p) => overlaps([base, 24], p))) return base;
  }
  throw new Error('no free private /24 for the bench network: every candidate overlaps an address or route of this machine');
}

// ---- networks ---------------------------------------------------------------------------

const live = new Set<Network>();
let hooked = false;

/** Closes every live network when the process ends, however it ends. */
function hookExit(): void {
  if (hooked) return;
  hooked = true;
  process.on('exit', () => {
    for (const n of live) n.close();
  });
  // Without a handler these signals end the process without running 'exit' handlers.
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => process.exit(130));
}

/** The loopback network: today's bench, nothing created. */
function loopbackNetwork(): Network {
  const self: NetHost = { role: 'bench', kind: 'client', address: '127.0.0.1' };
  return {
    profile: NET_PROFILES.loopback,
    self,
    host: (role, kind = 'server') => ({ role, kind, address: '127.0.0.1' }),
    basePort: freeBasePort,
    spawn: (_host, command, args, options) => spawn(command, args, options),
    qdiscs: () => [],
    describe: () => ({ profile: 'loopback', description: NET_PROFILES.loopback.description }),
    block: noFaults,
    unblock: noFaults,
    setLink: noFaults,
    close: () => {},
  };
}

function noFaults(): never {
  throw new Error('network faults need a switched network (lan, 1gbit, wan-100mbit, edge): on loopback every host is the same host');
}

/**
 * The link-layer address {@link Network.block} points a blocked host's neighbour entry at:
 * locally administered and owned by no interface, so the bridge floods frames for it to
 * every port and each host's stack discards them as addressed to another host.
 */
const NOWHERE_MAC = '02:00:00:00:00:00';

/** Options of {@link createNetwork}. */
export interface NetworkOptions {
  /** Name prefix (lower-case letters); default `psb`. */
  readonly prefix?: string;
}

/**
 * Builds the network of `profile` (a name from {@link NET_PROFILES}). Throws with a
 * clear reason when it cannot (not root, iproute2 missing, no veth/bridge/tbf in the
 * kernel), after undoing what it had built.
 */
export function createNetwork(profile: string, options: NetworkOptions = {}): Network {
  const p = netProfile(profile);
  if (p.topology === 'loopback') return loopbackNetwork();
  const why = netUnavailable();
  if (why) throw new Error(`--net ${p.name}: ${why}`);
  if (!runs('tc', ['-V'])) throw new Error(`--net ${p.name}: \`tc\` not found: install iproute2 (apt-get install iproute2)`);
  const prefix = options.prefix ?? 'psb';
  if (!/^[a-z]{1,6}$/.test(prefix)) throw new Error('network prefix: 1 to 6 lower-case letters');
  const net = new NsNetwork(p, `${prefix}${process.pid}`);
  live.add(net);
  hookExit();
  try {
    net.build();
  } catch (e) {
    net.close();
    throw e;
  }
  return net;
}

/** A shaped link end: where tc finds it, and what {@link QdiscStat.link} calls it. */
interface Shaped {
  readonly netns?: string;
  readonly dev: string;
  readonly link: string;
}

/** The client links' tbf parameters of `profile`, if it shapes clients apart. */
export function clientTbfOf(profile: NetProfile, hz?: number): ClientTbf | undefined {
  const c = profile.clientLink;
  if (!c) return undefined;
  if (profile.topology !== 'switched') throw new Error(`${profile.name}: client links need the switched topology`);
  return { up: tbfConfig(c.upBit, hz), down: tbfConfig(c.downBit, hz) };
}

class NsNetwork implements Network {
  readonly tbf: TbfConfig | undefined;
  readonly clientTbf: ClientTbf | undefined;
  readonly subnet: string;
  readonly self: NetHost;
  readonly #base: number;
  readonly #switch: string;
  readonly #shared: string;
  /** The bench process's link in the root namespace (the only name this network adds there). */
  readonly #rootLink: string;
  readonly #hosts = new Map<string, NetHost>();
  /** Each switched host's port on the bridge (the bench process's is `h0`). */
  readonly #ports = new Map<NetHost, string>();
  readonly #namespaces: string[] = [];
  readonly #shaped: Shaped[] = [];
  #nextPort = 20_000;
  #closed = false;

  constructor(
    readonly profile: NetProfile,
    readonly tag: string,
  ) {
    this.tbf = profile.rateBit === undefined ? undefined : tbfConfig(profile.rateBit);
    this.clientTbf = clientTbfOf(profile);
    this.#base = pickSubnet();
    this.subnet = `${intToIp(this.#base)}/24`;
    this.#switch = `${tag}-sw`;
    this.#shared = `${tag}-shared`;
    this.#rootLink = `${tag}-r`;
    if (this.#rootLink.length > 15) throw new Error(`link name ${this.#rootLink} is longer than 15 characters`);
    this.self = { role: 'bench', kind: 'client', address: intToIp(this.#base + 1) };
  }

  #addNamespace(name: string): void {
    sh('ip', ['netns', 'add', name]);
    this.#namespaces.push(name);
    sh('ip', ['-n', name, 'link', 'set', 'dev', 'lo', 'up']);
  }

  /** The tbf parameters of one direction of a `kind` host's link, or undefined where links are unshaped. */
  #tbfFor(kind: HostKind, direction: 'up' | 'down'): TbfConfig | undefined {
    return kind === 'client' && this.clientTbf ? this.clientTbf[direction] : this.tbf;
  }

  #shape(s: Shaped, t: TbfConfig | undefined): void {
    if (!t) return; // an unshaped profile
    sh(
      'tc',
      [
        ...(s.netns ? ['-n', s.netns] : []),
        'qdisc',
        'replace',
        'dev',
        s.dev,
        'root',
        'tbf',
        'rate',
        `${t.rateBit}bit`,
        'burst',
        String(t.burstBytes),
        'limit',
        String(t.limitBytes),
      ],
      'the kernel needs the tbf qdisc (CONFIG_NET_SCH_TBF)',
    );
    this.#shaped.push(s);
  }

  /** A veth pair from the root namespace (`this.#rootLink`) or a host namespace into `peerNs`. */
  #veth(name: string, netns: string | undefined, peer: string, peerNs: string): void {
    sh(
      'ip',
      ['link', 'add', name, ...(netns ? ['netns', netns] : []), 'type', 'veth', 'peer', 'name', peer, 'netns', peerNs],
      'the kernel needs veth (CONFIG_VETH)',
    );
  }

  build(): void {
    const self = { dev: this.#rootLink };
    if (this.profile.topology === 'switched') {
      this.#addNamespace(this.#switch);
      sh('ip', ['-n', this.#switch, 'link', 'add', 'br0', 'type', 'bridge'], 'the kernel needs bridge support (CONFIG_BRIDGE)');
      sh('ip', ['-n', this.#switch, 'link', 'set', 'dev', 'br0', 'up']);
      this.#veth(this.#rootLink, undefined, 'h0', this.#switch);
      this.#plug('h0');
      this.#ports.set(this.self, 'h0');
      this.#shape({ ...self, link: 'bench up' }, this.#tbfFor('client', 'up'));
      this.#shape({ netns: this.#switch, dev: 'h0', link: 'bench down' }, this.#tbfFor('client', 'down'));
    } else {
      this.#addNamespace(this.#shared);
      // The shared link: every process of the namespace talks through lo.
      this.#shape({ netns: this.#shared, dev: 'lo', link: 'shared lo' }, this.tbf);
      this.#veth(this.#rootLink, undefined, 'eth0', this.#shared);
      this.#up(this.#shared, 'eth0', this.#base + 2);
      this.#shape({ ...self, link: 'bench up' }, this.tbf);
      this.#shape({ netns: this.#shared, dev: 'eth0', link: 'bench down' }, this.tbf);
    }
    this.#up(undefined, this.#rootLink, this.#base + 1);
  }

  /** Attaches a switch-side veth end to the bridge. */
  #plug(dev: string): void {
    sh('ip', ['-n', this.#switch, 'link', 'set', 'dev', dev, 'master', 'br0', 'up']);
  }

  #up(netns: string | undefined, dev: string, address: number): void {
    const n = netns ? ['-n', netns] : [];
    sh('ip', [...n, 'addr', 'add', `${intToIp(address)}/24`, 'dev', dev]);
    sh('ip', [...n, 'link', 'set', 'dev', dev, 'up']);
  }

  host(role: string, kind: HostKind = 'server'): NetHost {
    if (this.#closed) throw new Error('network closed');
    if (!/^[a-z][a-z0-9]{0,11}$/.test(role))
      throw new Error(`host role ${JSON.stringify(role)}: lower-case letters and digits, at most 12`);
    let h = this.#hosts.get(role);
    if (h) {
      if (h.kind !== kind) throw new Error(`host ${role} is a ${h.kind} host, asked for as a ${kind}`);
      return h;
    }
    if (this.profile.topology === 'shared') {
      h = { role, kind, netns: this.#shared, address: intToIp(this.#base + 2) };
    } else {
      const index = this.#hosts.size + 1;
      if (index > 250) throw new Error('more than 250 hosts');
      const ns = `${this.#tagged(role)}`;
      this.#addNamespace(ns);
      const port = `h${index}`;
      this.#veth('eth0', ns, port, this.#switch);
      this.#plug(port);
      this.#up(ns, 'eth0', this.#base + 1 + index);
      this.#shape({ netns: ns, dev: 'eth0', link: `${role} up` }, this.#tbfFor(kind, 'up'));
      this.#shape({ netns: this.#switch, dev: port, link: `${role} down` }, this.#tbfFor(kind, 'down'));
      h = { role, kind, netns: ns, address: intToIp(this.#base + 1 + index) };
      this.#ports.set(h, port);
    }
    this.#hosts.set(role, h);
    return h;
  }

  #tagged(role: string): string {
    return `${this.tag}-${role}`;
  }

  async basePort(count: number): Promise<number> {
    // Every namespace here is ours alone, so a counter suffices; it also keeps the
    // servers of one shared namespace (one address) on distinct ports.
    const base = this.#nextPort;
    this.#nextPort += count;
    if (this.#nextPort > 60_000) throw new Error('out of ports');
    return base;
  }

  spawn(host: NetHost, command: string, args: readonly string[], options: SpawnOptions): ChildProcess {
    if (!host.netns) return spawn(command, args, options);
    return spawn(bin('ip'), ['netns', 'exec', host.netns, command, ...args], options);
  }

  qdiscs(): QdiscStat[] {
    if (this.#closed) return [];
    return this.#shaped.map((s) => {
      const [q] = JSON.parse(
        sh('tc', [...(s.netns ? ['-n', s.netns] : []), '-s', '-j', 'qdisc', 'show', 'dev', s.dev, 'root']),
      ) as TcQdisc[];
      return qdiscStat(s.link, q);
    });
  }

  describe(since?: readonly QdiscStat[]): Record<string, unknown> {
    if (!this.tbf)
      return {
        profile: this.profile.name,
        description: this.profile.description,
        ...(this.profile.omits ? { omits: this.profile.omits } : {}),
        subnet: this.subnet,
        hosts: [...this.#hosts.keys()],
      };
    const q = this.qdiscs();
    const before = new Map((since ?? []).map((s) => [s.link, s]));
    const sum = (f: (s: QdiscStat) => number) => q.reduce((a, s) => a + f(s) - (before.has(s.link) ? f(before.get(s.link)!) : 0), 0);
    return {
      profile: this.profile.name,
      description: this.profile.description,
      ...(this.profile.omits ? { omits: this.profile.omits } : {}),
      rateMbit: this.tbf.rateBit / MBIT,
      tbf: { burstBytes: this.tbf.burstBytes, limitBytes: this.tbf.limitBytes, hz: this.tbf.hz },
      ...(this.clientTbf
        ? {
            clientLink: {
              hosts: [this.self, ...this.#hosts.values()].filter((h) => h.kind === 'client').map((h) => h.role),
              upMbit: this.clientTbf.up.rateBit / MBIT,
              downMbit: this.clientTbf.down.rateBit / MBIT,
              up: { burstBytes: this.clientTbf.up.burstBytes, limitBytes: this.clientTbf.up.limitBytes },
              down: { burstBytes: this.clientTbf.down.burstBytes, limitBytes: this.clientTbf.down.limitBytes },
            },
          }
        : {}),
      subnet: this.subnet,
      hosts: this.profile.topology === 'shared' ? 'all in one namespace' : [...this.#hosts.keys()],
      qdiscTotals: {
        links: q.length,
        sentBytes: sum((s) => s.sentBytes),
        drops: sum((s) => s.drops),
        overlimits: sum((s) => s.overlimits),
      },
    };
  }

  /** The device `host` reaches the switch by, in its own namespace. */
  #hostLink(host: NetHost): { netns?: string; dev: string } {
    if (this.profile.topology !== 'switched' || !this.#ports.has(host))
      throw new Error(`network faults need a host of a switched network (${host.role} on ${this.profile.name})`);
    return host.netns ? { netns: host.netns, dev: 'eth0' } : { dev: this.#rootLink };
  }

  // A permanent neighbour entry sends `from`'s frames for `to` to an address nobody has,
  // and ARP cannot overwrite it: the packets leave and are lost, as on a cut cable, and
  // established connections stall rather than fail. (iptables, nftables and tc's drop
  // action are not assumed to exist; iproute2 and the kernel's neighbour table always do.)
  block(from: NetHost, to: NetHost): void {
    const { netns, dev } = this.#hostLink(from);
    this.#hostLink(to);
    sh('ip', [...(netns ? ['-n', netns] : []), 'neigh', 'replace', to.address, 'lladdr', NOWHERE_MAC, 'dev', dev, 'nud', 'permanent']);
  }

  unblock(from: NetHost, to: NetHost): void {
    const { netns, dev } = this.#hostLink(from);
    // Without the entry ARP resolves `to` again on the next packet.
    const r = spawnSync(bin('ip'), [...(netns ? ['-n', netns] : []), 'neigh', 'del', to.address, 'dev', dev], { encoding: 'utf8' });
    if (r.status !== 0 && !/No such file|Cannot find|RTNETLINK answers: No such/.test(r.stderr))
      throw new Error(`ip neigh del ${to.address} in ${netns ?? 'the root namespace'} failed: ${r.stderr.trim()}`);
  }

  setLink(host: NetHost, up: boolean): void {
    this.#hostLink(host);
    // The switch's end: the host's own eth0 stays configured and loses its carrier.
    sh('ip', ['-n', this.#switch, 'link', 'set', 'dev', this.#ports.get(host)!, up ? 'up' : 'down']);
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    live.delete(this);
    const errors: string[] = [];
    const attempt = (args: string[]) => {
      const r = spawnSync(bin('ip'), args, { encoding: 'utf8' });
      if (r.status !== 0 && !/Cannot find device|No such file|does not exist/.test(r.stderr))
        errors.push(`ip ${args.join(' ')}: ${r.stderr.trim()}`);
    };
    // Deleting one end of a veth pair deletes the other; deleting a namespace deletes its
    // virtual links even while a straggling process keeps the namespace itself alive.
    attempt(['link', 'del', 'dev', this.#rootLink]);
    for (const ns of [...this.#namespaces].reverse()) attempt(['netns', 'del', ns]);
    if (errors.length > 0) console.error(`bench network ${this.tag}: teardown left errors:\n  ${errors.join('\n  ')}`);
  }
}

interface TcQdisc {
  kind: string;
  options?: { rate?: number; burst?: number };
  bytes?: number;
  packets?: number;
  drops?: number;
  overlimits?: number;
}

function qdiscStat(link: string, q: TcQdisc | undefined): QdiscStat {
  if (!q || q.kind !== 'tbf') throw new Error(`${link}: no tbf qdisc installed`);
  // tc's JSON gives the rate in bytes per second.
  return {
    link,
    rateBit: (q.options?.rate ?? 0) * 8,
    burstBytes: q.options?.burst ?? 0,
    sentBytes: q.bytes ?? 0,
    packets: q.packets ?? 0,
    drops: q.drops ?? 0,
    overlimits: q.overlimits ?? 0,
  };
}

/**
 * The tbf qdiscs of one link end, parsed from `tc -s qdisc show` (text, as an operator
 * reads it): for checks that do not trust this module's own bookkeeping.
 */
export function parseTcQdiscs(
  text: string,
): { kind: string; dev?: string; rateBit?: number; burstBytes?: number; sentBytes?: number; drops?: number }[] {
  const out: { kind: string; dev?: string; rateBit?: number; burstBytes?: number; sentBytes?: number; drops?: number }[] = [];
  const units: Record<string, number> = { '': 1, K: 1e3, M: 1e6, G: 1e9, T: 1e12 };
  const sizeUnits: Record<string, number> = { b: 1, Kb: 1024, Mb: 1024 * 1024 };
  for (const block of text.split(/^(?=qdisc )/m)) {
    const head = /^qdisc (\S+) \S+(?: dev (\S+))?/.exec(block);
    if (!head) continue;
    const rate = /\brate (\d+(?:\.\d+)?)([KMGT]?)bit/.exec(block);
    const burst = /\bburst (\d+(?:\.\d+)?)(b|Kb|Mb)/.exec(block);
    const sent = /Sent (\d+) bytes \d+ pkt \(dropped (\d+)/.exec(block);
    out.push({
      kind: head[1]!,
      ...(head[2] ? { dev: head[2] } : {}),
      ...(rate ? { rateBit: Number(rate[1]) * units[rate[2]!]! } : {}),
      ...(burst ? { burstBytes: Math.round(Number(burst[1]) * sizeUnits[burst[2]!]!) } : {}),
      ...(sent ? { sentBytes: Number(sent[1]), drops: Number(sent[2]) } : {}),
    });
  }
  return out;
}

/** Names of namespaces and root-namespace links now present that start with `<tag>-`: what {@link Network.close} must leave none of. */
export function leftovers(tag: string): string[] {
  const mine = (name: string) => name.startsWith(`${tag}-`);
  const ns =
    existsSync('/run/netns') || existsSync('/var/run/netns')
      ? sh('ip', ['netns', 'list'])
          .split('\n')
          .map((l) => l.split(' ')[0] ?? '')
      : [];
  const links = (JSON.parse(sh('ip', ['-j', 'link', 'show'])) as { ifname: string }[]).map((l) => l.ifname);
  return [...ns.filter(mine).map((n) => `netns ${n}`), ...links.filter(mine).map((l) => `link ${l}`)];
}

// ---- link check -------------------------------------------------------------------------

/** A bulk TCP transfer's outcome. */
export interface TcpRate {
  readonly from: string[];
  readonly to: string;
  readonly bytes: number;
  readonly ms: number;
  readonly mbitPerSec: number;
}

/** Receiver: accepts `flows` connections, counts bytes from the first byte to the last end, prints JSON. */
const RECEIVER = `
const [addr, port, flows] = process.argv.slice(1);
let bytes = 0, first = 0, ended = 0, last = 0;
const s = require('node:net').createServer((c) => {
  c.on('data', (d) => { if (!first) first = performance.now(); bytes += d.length; });
  c.on('end', () => { last = performance.now(); if (++ended === Number(flows)) { console.log(JSON.stringify({ bytes, ms: last - first })); s.close(); } });
});
s.listen(Number(port), addr, () => console.log('listening'));
`;
/** Sender: writes `bytes` in 1 MiB chunks as fast as the socket takes them. */
const SENDER = `
const [addr, port, total] = process.argv.slice(1);
const chunk = Buffer.alloc(1 << 20, 7);
const c = require('node:net').connect(Number(port), addr, () => {
  let left = Number(total);
  const pump = () => { while (left > 0) { const n = Math.min(left, chunk.length); left -= n; if (!c.write(n === chunk.length ? chunk : chunk.subarray(0, n))) return void c.once('drain', pump); } c.end(); };
  pump();
});
c.on('error', (e) => { console.error(e.message); process.exit(1); });
`;

/**
 * Bulk TCP from each of `from` to `to` at once (`bytes` per sender), measured at the
 * receiver: bytes over time from the first byte to the last connection's end. One
 * sender shows a link's rate; several into one host show its download link shared.
 * Every process is bounded: it sends a fixed amount, and the whole check times out.
 */
export async function measureTcp(net: Network, from: readonly NetHost[], to: NetHost, bytes: number, timeoutMs = 60_000): Promise<TcpRate> {
  const port = await net.basePort(1);
  const children: ChildProcess[] = [];
  const timer = setTimeout(() => children.forEach((c) => c.kill('SIGKILL')), timeoutMs);
  try {
    const receiver = net.spawn(to, process.execPath, ['-e', RECEIVER, to.address, String(port), String(from.length)], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    children.push(receiver);
    let out = '';
    receiver.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    const listening = new Promise<void>((resolve, reject) => {
      receiver.stdout!.on('data', () => out.includes('listening') && resolve());
      receiver.once('close', (code) => reject(new Error(`receiver exited (${code}) before listening`)));
    });
    // 'close', not 'exit': the result line must have been read from stdout.
    const done = new Promise<{ bytes: number; ms: number }>((resolve, reject) =>
      receiver.once('close', (code) => {
        const line = out.split('\n').find((l) => l.startsWith('{'));
        if (code === 0 && line) resolve(JSON.parse(line) as { bytes: number; ms: number });
        else reject(new Error(`receiver exited (${code}) without a result`));
      }),
    );
    done.catch(() => {}); // awaited below; this only keeps an early failure from being "unhandled"
    await listening;
    const senders = from.map((h) =>
      net.spawn(h, process.execPath, ['-e', SENDER, to.address, String(port), String(bytes)], { stdio: ['ignore', 'ignore', 'inherit'] }),
    );
    children.push(...senders);
    const r = await done;
    if (r.bytes !== bytes * from.length) throw new Error(`received ${r.bytes} of ${bytes * from.length} bytes`);
    return {
      from: from.map((h) => h.role),
      to: to.role,
      bytes: r.bytes,
      ms: Math.round(r.ms * 10) / 10,
      mbitPerSec: Math.round((r.bytes * 8) / (r.ms / 1000) / 1e5) / 10,
    };
  } finally {
    clearTimeout(timer);
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  }
}
