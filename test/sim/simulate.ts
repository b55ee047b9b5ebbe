/**
 * Deterministic simulation of an M-PoWerStore cluster: `3t + 1` in-memory servers (up to
 * `t` Byzantine), concurrent writers (some crashing mid-STORE or mid-COMPLETE), readers,
 * a Byzantine reader writing back forged candidates, and an adversarial network that
 * reorders, delays, duplicates and partitions but eventually delivers between correct
 * processes. Every message crosses the real wire codec. One seed fixes everything.
 */
import { createReferenceCodec } from '@powerstore/erasure/reference';
import type { ErasureCodec } from '@powerstore/erasure';
import {
  clusterConfig,
  decodeMessage,
  encodeMessage,
  HASH_LENGTH,
  MemoryStorage,
  timestampKey,
  toHex,
  writerCredentials,
  WRITER_ID_LENGTH,
  type Candidate,
  type ClientOperation,
  type ClusterConfig,
  type Message,
  type ReadResult,
  type Reply,
  type Request,
  type Server,
  type Step,
  type WriteResult,
} from '@powerstore/protocol';
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import { checkLinearizable, type RegisterOp } from '../lincheck/lincheck.js';
import { BEHAVIOURS, ByzantineServer, type Behaviour } from './byzantine.js';
import { correctProtocol, type ProtocolFactories } from './protocol-factories.js';
import { Prng } from './prng.js';

/** What to simulate. */
export interface SimOptions {
  readonly seed: number;
  readonly t: number;
  /** Protocol classes; mutants swap one. */
  readonly protocol?: ProtocolFactories;
  /** Always field `t` Byzantine servers and a Byzantine reader (used for mutants). */
  readonly hostile?: boolean;
  /** Draw Byzantine behaviours only from these (to focus a hunt on one attack). */
  readonly behaviours?: readonly Behaviour[];
}

/** Outcome of one run. */
export interface SimReport {
  readonly seed: number;
  readonly t: number;
  readonly ok: boolean;
  readonly violations: string[];
  /** Per-key history of correct clients, for the linearizability checkers. */
  readonly history: RegisterOp[];
  readonly steps: number;
  readonly messages: number;
  readonly byzantine: string[];
  readonly byzantineReader: boolean;
  readonly crashedWriters: number;
  readonly reads: number;
  readonly writes: number;
  readonly threeRoundReads: number;
}

const crypto = createCryptoProvider();
const codecs = new Map<number, ErasureCodec>();
function codecFor(config: ClusterConfig): ErasureCodec {
  let c = codecs.get(config.t);
  if (!c) {
    c = createReferenceCodec({ k: config.t + 1, n: config.n });
    codecs.set(config.t, c);
  }
  return c;
}

const MAX_STEPS = 200_000;

interface InFlight {
  readonly from: string;
  readonly to: string;
  readonly frame: Uint8Array;
  /** Virtual delivery time. */
  at: number;
  duplicates: number;
}

type Planned = { readonly key: string; readonly kind: 'write' | 'delete' | 'read' };

interface Client {
  readonly name: string;
  readonly role: 'writer' | 'reader';
  readonly plan: Planned[];
  readonly opIds: { next: number };
  current:
    | { op: ClientOperation<ReadResult> | ClientOperation<WriteResult>; record: MutableOp; crashIn?: 'STORE' | 'COMPLETE'; valueBytes?: Uint8Array }
    | undefined;
  crashed: boolean;
  readonly writerIndex: number;
}

type MutableOp = { -readonly [K in keyof RegisterOp]: RegisterOp[K] };

/** Runs one seeded simulation and checks every property on its history. */
export async function simulate(options: SimOptions): Promise<SimReport> {
  const { seed } = options;
  const protocol = options.protocol ?? correctProtocol;
  const config = clusterConfig(options.t);
  const { n, t } = config;
  const prng = new Prng(seed);
  const netRng = prng.fork();
  const advRng = prng.fork();
  const codec = codecFor(config);
  const violations: string[] = [];
  let step = 0;
  /** Virtual time of the scheduler. */
  let now = 0;
  /** History clock: one tick per call or return, so no two events tie. */
  let clock = 0;
  let messages = 0;

  // Workload shape.
  const keys = Array.from({ length: prng.range(1, 2) }, (_, i) => `key-${i}`);
  const writerCount = prng.range(2, 3);
  const readerCount = prng.range(2, 4);
  const byzCount = options.hostile ? t : prng.chance(0.3) ? 0 : prng.range(1, t);
  const byzantineReader = options.hostile ? prng.chance(0.8) : prng.chance(0.3);
  const byzIndices = new Set(prng.shuffle(Array.from({ length: n }, (_, i) => i)).slice(0, byzCount));

  // Keys and servers.
  const serverKeys = Array.from({ length: n }, () => prng.bytes(32));
  const servers: (Server | ByzantineServer)[] = [];
  const byzantine: string[] = [];
  const adversary = { config, crypto, codec, now: () => step, keys };
  for (let i = 0; i < n; i++) {
    const server = protocol.server({ config, index: i, serverKey: serverKeys[i]!, crypto, storage: new MemoryStorage() });
    if (byzIndices.has(i)) {
      const behaviour: Behaviour = advRng.pick(options.behaviours ?? BEHAVIOURS);
      byzantine.push(`s${i}:${behaviour}`);
      servers.push(new ByzantineServer(i, behaviour, server, adversary, advRng.fork()));
    } else {
      servers.push(server);
    }
  }

  // Oracles.
  const valueIdByHex = new Map<string, string>();
  const writtenByTs = new Map<string, { id: string | null; bytes: Uint8Array | undefined }>();
  const generatedNums = new Map<string, Set<number>>(keys.map((k) => [k, new Set<number>()]));
  const history: MutableOp[] = [];
  let reads = 0;
  let writes = 0;
  let threeRoundReads = 0;
  let crashedWriters = 0;

  const clients: Client[] = [];
  for (let w = 0; w < writerCount; w++) {
    const plan = Array.from({ length: prng.range(2, 4) }, (): Planned => ({ key: prng.pick(keys), kind: prng.chance(0.2) ? 'delete' : 'write' }));
    clients.push({ name: `w${w}`, role: 'writer', plan, opIds: { next: 1 }, current: undefined, crashed: false, writerIndex: w });
  }
  for (let r = 0; r < readerCount; r++) {
    const plan = Array.from({ length: prng.range(2, 4) }, (): Planned => ({ key: prng.pick(keys), kind: 'read' }));
    clients.push({ name: `r${r}`, role: 'reader', plan, opIds: { next: 1 }, current: undefined, crashed: false, writerIndex: -1 });
  }
  // Which writer operations crash, and where.
  const crashPlan = new Map<string, 'STORE' | 'COMPLETE'>();
  for (const c of clients) {
    if (c.role === 'writer' && prng.chance(0.5)) crashPlan.set(`${c.name}#${prng.int(c.plan.length)}`, prng.chance(0.5) ? 'STORE' : 'COMPLETE');
  }
  const credentials = clients
    .filter((c) => c.role === 'writer')
    .map((c) => {
      const id = prng.bytes(WRITER_ID_LENGTH);
      id[0] = c.writerIndex + 1; // distinct and never all-zero
      return writerCredentials(crypto, serverKeys, id);
    });
  const writerRandom = prng.fork();

  // Network: every message gets a delivery time from a heavy-tailed delay times a
  // per-link factor (some links are far), so whole rounds can lag far behind others.
  const pool: InFlight[] = [];
  const linkFactor = new Map<string, number>();
  const delay = (from: string, to: string, slow: boolean) => {
    const link = `${from}>${to}`;
    let f = linkFactor.get(link);
    if (f === undefined) {
      f = netRng.chance(0.15) ? netRng.range(5, 40) : 1;
      linkFactor.set(link, f);
    }
    const r = netRng.float();
    const base = r < 0.8 ? netRng.range(1, 10) : r < 0.97 ? netRng.range(10, 100) : netRng.range(100, 1500);
    return base * f * (slow ? 30 : 1);
  };
  let partition: { a: Set<string>; b: Set<string>; until: number } | undefined;
  let nextPartition = netRng.range(0, 2000);
  const sendFrame = (from: string, to: string, frame: Uint8Array, slow = false) => {
    pool.push({ from, to, frame, at: now + delay(from, to, slow), duplicates: 0 });
    messages++;
  };
  const send = (from: string, to: string, message: Message, slow = false) => sendFrame(from, to, encodeMessage(message), slow);
  const blocked = (m: InFlight) =>
    partition !== undefined && ((partition.a.has(m.from) && partition.b.has(m.to)) || (partition.b.has(m.from) && partition.a.has(m.to)));

  // Byzantine reader: collects candidates, then writes back poisoned versions of them.
  const mallory = { opId: 1_000_000, attacks: byzantineReader ? prng.range(2, 6) : 0, seen: [] as { key: string; c: Candidate }[] };
  const malloryRng = prng.fork();
  const malloryAttack = () => {
    const key = malloryRng.pick(keys);
    mallory.opId++;
    for (let i = 0; i < n; i++) send('mallory', `s${i}`, { type: 'COLLECT', key, opId: mallory.opId });
  };
  const malloryReceive = (reply: Reply) => {
    if (reply.type !== 'COLLECT_ACK' || !reply.candidate) return;
    const c = reply.candidate;
    mallory.seen.push({ key: reply.key, c });
    const poisoned: Candidate[] = [
      // BigMac: keep some MACs, corrupt the rest; servers holding Hist[ts] still accept it.
      { ...c, vec: c.vec.map((m) => (malloryRng.chance(0.5) ? malloryRng.bytes(HASH_LENGTH) : m)) },
      { ...c, nonce: malloryRng.bytes(HASH_LENGTH) },
      { ts: { num: c.ts.num + malloryRng.range(1, 50), writerId: c.ts.writerId, mac: c.ts.mac }, nonce: c.nonce, vec: c.vec },
    ];
    const other = mallory.seen.find((s) => s.key !== reply.key);
    if (other) poisoned.push(other.c);
    const candidate = malloryRng.pick(poisoned);
    for (const i of malloryRng.subset(Array.from({ length: n }, (_, j) => j))) {
      const kind = malloryRng.int(3);
      const msg: Request =
        kind === 0
          ? { type: 'FILTER', key: reply.key, opId: reply.opId, stripe: 0, candidates: [candidate] }
          : kind === 1
            ? { type: 'REPAIR', key: reply.key, opId: reply.opId, candidates: [candidate] }
            : { type: 'COMPLETE', key: reply.key, opId: reply.opId, candidate };
      send('mallory', `s${i}`, msg);
    }
  };

  const valueId = (bytes: Uint8Array | undefined): string | null => {
    if (bytes === undefined) return null;
    return valueIdByHex.get(toHex(bytes)) ?? `unknown:${toHex(bytes).slice(0, 16)}`;
  };

  /** Observes what a client sends, for the oracles, then puts it on the network. */
  const emit = (client: Client, step_: Step<unknown>) => {
    const current = client.current!;
    let out = step_.send ?? [];
    const crashIn = current.crashIn;
    if (crashIn && out.some((m) => m.message.type === crashIn)) {
      // Crash part-way through sending this round.
      out = netRng.subset(out);
      client.crashed = true;
      crashedWriters++;
    }
    for (const o of out) {
      const m = o.message;
      if (m.type === 'STORE') {
        const k = `${m.key}/${timestampKey(m.ts)}`;
        if (!writtenByTs.has(k)) {
          const nums = generatedNums.get(m.key)!;
          if (m.ts.num !== 1 && !nums.has(m.ts.num - 1)) {
            violations.push(`timestamp skipped: ${client.name} wrote ${m.key} at num ${m.ts.num}, but num ${m.ts.num - 1} was never generated`);
          }
          nums.add(m.ts.num);
          writtenByTs.set(k, { id: current.record.value, bytes: current.valueBytes });
        }
      }
      send(client.name, `s${o.to}`, m);
    }
  };

  const finish = (client: Client, result: ReadResult | WriteResult) => {
    const cur = client.current!;
    cur.record.ret = ++clock;
    if (client.role === 'writer') {
      const w = result as WriteResult;
      writes++;
      if (w.rounds !== 3) violations.push(`${client.name} write took ${w.rounds} rounds, expected 3`);
    } else {
      const r = result as ReadResult;
      reads++;
      if (r.rounds === 3) threeRoundReads++;
      const attacked = byzCount > 0 || byzantineReader;
      if (r.rounds < 2 || r.rounds > (attacked ? 3 : 2)) {
        violations.push(`${client.name} read took ${r.rounds} rounds (${attacked ? 'at most 3' : 'exactly 2'} expected)`);
      }
      cur.record.value = valueId(r.value);
      if (r.ts.num === 0) {
        if (r.value !== undefined) violations.push(`${client.name} read a value at ts0`);
      } else {
        const w = writtenByTs.get(`${cur.record.key}/${timestampKey(r.ts)}`);
        if (!w) violations.push(`validity: ${client.name} read ${cur.record.key} at ts ${timestampKey(r.ts)} that no writer used`);
        else if ((w.bytes === undefined) !== (r.value === undefined) || (w.bytes && r.value && toHex(w.bytes) !== toHex(r.value))) {
          violations.push(`validity: ${client.name} read ${cur.record.key} = ${cur.record.value}, but ts ${timestampKey(r.ts)} wrote ${w.id}`);
        }
      }
    }
    client.current = undefined;
  };

  const startOp = async (client: Client) => {
    const planned = client.plan.shift()!;
    const opIndex = client.opIds.next - 1;
    const opId = client.opIds.next++;
    const record: MutableOp = { key: planned.key, client: client.name, kind: planned.kind === 'read' ? 'read' : 'write', value: null, call: ++clock, ret: undefined };
    history.push(record);
    if (client.role === 'reader') {
      const op = protocol.reader({ config, crypto, codec }, planned.key, opId);
      client.current = { op, record };
    } else {
      let valueBytes: Uint8Array | undefined;
      if (planned.kind === 'write') {
        const id = `${client.name}.${opId}`;
        const pad = prng.bytes(prng.range(0, 3 * (t + 1) + 2)).map((b) => 0x61 + (b % 26));
        valueBytes = new Uint8Array([...new TextEncoder().encode(`${id}:`), ...pad]);
        valueIdByHex.set(toHex(valueBytes), id);
        record.value = id;
      }
      const value = valueBytes ? { kind: 'value' as const, value: valueBytes } : { kind: 'tombstone' as const };
      const options = { config, crypto, codec, credentials: credentials[client.writerIndex]!, random: (len: number) => writerRandom.bytes(len) };
      const op = protocol.writer(options, planned.key, value, opId);
      const crashIn = crashPlan.get(`${client.name}#${opIndex}`);
      client.current = crashIn ? { op, record, crashIn, valueBytes } : { op, record, valueBytes };
    }
    const s = await client.current.op.start();
    emit(client, s);
  };

  const deliverToServer = async (m: InFlight) => {
    const server = servers[Number(m.to.slice(1))]!;
    if (server instanceof ByzantineServer) {
      const request = decodeMessage(m.frame, { n }) as Request;
      for (const e of await server.receive(m.from, request)) send(m.to, m.from, e.reply, e.slow ?? false);
    } else {
      sendFrame(m.to, m.from, await server.handleFrame(m.frame));
    }
  };

  const deliverToClient = async (m: InFlight) => {
    const reply = decodeMessage(m.frame, { n }) as Reply;
    if (m.to === 'mallory') return malloryReceive(reply);
    const client = clients.find((c) => c.name === m.to)!;
    if (client.crashed || !client.current) return;
    let s: Step<unknown>;
    try {
      s = await client.current.op.onReply(Number(m.from.slice(1)), reply);
    } catch (err) {
      // The operation is dead; the client stops, and the run fails.
      violations.push(`${client.name}'s ${client.current.record.kind} of ${client.current.record.key} threw: ${err instanceof Error ? err.message : String(err)}`);
      client.crashed = true;
      return;
    }
    if (s.send) emit(client, s);
    if (s.result && !client.crashed) {
      finish(client, s.result as ReadResult | WriteResult);
      nextStart.set(client, now + netRng.range(0, 200));
    }
  };

  // When each client next wants to start an operation, and when Mallory strikes.
  const nextStart = new Map<Client, number>(clients.map((c) => [c, netRng.range(0, 100)]));
  const attackTimes = Array.from({ length: mallory.attacks }, () => netRng.range(0, 1500)).sort((a, b) => a - b);

  while (true) {
    step++;
    if (step > MAX_STEPS) {
      violations.push(`no termination within ${MAX_STEPS} steps`);
      break;
    }
    if (partition && now >= partition.until) partition = undefined;
    if (!partition && now >= nextPartition) {
      const names = [...servers.map((_, i) => `s${i}`), ...clients.map((c) => c.name)];
      const a = new Set(netRng.subset(names));
      partition = { a, b: new Set(names.filter((x) => !a.has(x))), until: now + netRng.range(50, 1500) };
      nextPartition = partition.until + netRng.range(0, 3000);
    }
    let message: InFlight | undefined;
    for (const m of pool) if (!blocked(m) && (!message || m.at < message.at)) message = m;
    let starter: Client | undefined;
    for (const c of clients) {
      if (c.crashed || c.current || c.plan.length === 0) continue;
      if (!starter || nextStart.get(c)! < nextStart.get(starter)!) starter = c;
    }
    const attackAt = attackTimes[0];
    const times = [message?.at, starter ? nextStart.get(starter) : undefined, attackAt].filter((x): x is number => x !== undefined);
    if (times.length === 0) {
      // Only partitioned messages are left: the partition must heal (eventual delivery).
      if (partition && pool.length > 0) {
        partition = undefined;
        continue;
      }
      break;
    }
    const at = Math.min(...times);
    now = Math.max(now, at);
    if (starter && nextStart.get(starter) === at) {
      await startOp(starter);
      continue;
    }
    if (attackAt === at) {
      attackTimes.shift();
      malloryAttack();
      continue;
    }
    const m = message!;
    if (m.duplicates < 2 && netRng.chance(0.03)) {
      m.duplicates++;
      m.at = now + delay(m.from, m.to, false);
    } else {
      pool.splice(pool.indexOf(m), 1);
    }
    const concurrent = m.to.startsWith('s') ? pool.filter((o) => o.to.startsWith('s') && !blocked(o) && o.at <= now + 3) : [];
    if (concurrent.length > 0 && netRng.chance(0.3)) {
      // Several requests in flight at servers at once: exercises per-key serialization.
      const batch = [m, ...concurrent.slice(0, 2)];
      for (const o of batch.slice(1)) pool.splice(pool.indexOf(o), 1);
      await Promise.all(batch.map(deliverToServer));
    } else if (m.to.startsWith('s')) {
      await deliverToServer(m);
    } else {
      await deliverToClient(m);
    }
  }

  // Wait-freedom: every operation of a correct client finished.
  for (const c of clients) {
    if (c.crashed) continue;
    if (c.current) {
      const { op, record } = c.current;
      const phase = (op as { phase?: string }).phase ?? '?';
      violations.push(`wait-freedom: ${c.name}'s ${record.kind} of ${record.key} never finished (stuck in ${phase})`);
    }
    if (c.plan.length > 0) violations.push(`${c.name} never got to start ${c.plan.length} operations`);
  }
  // A read that never returned had no effect; a write that never returned may have had one.
  const checked = history.filter((op) => op.kind === 'write' || op.ret !== undefined);
  const lin = checkLinearizable(checked);
  for (const k of lin.keys) if (!k.ok) violations.push(`not linearizable: key ${k.key} (${k.ops} operations)`);

  return {
    seed,
    t,
    ok: violations.length === 0,
    violations,
    history: checked,
    steps: step,
    messages,
    byzantine,
    byzantineReader,
    crashedWriters,
    reads,
    writes,
    threeRoundReads,
  };
}

/** The command that replays one run exactly. */
export function replayCommand(seed: number, t: number, { mutant, hostile }: { mutant?: string; hostile?: boolean } = {}): string {
  // A mutant always runs hostile, so its replay needs no flag for it.
  const flags = mutant ? ` --mutant ${mutant}` : hostile ? ' --hostile' : '';
  return `pnpm sim -- --seed ${seed} --t ${t}${flags}`;
}
