/**
 * Scenario transcripts, in the manner of etcd raft's `testdata/*.txt`: a file of commands,
 * each followed by the trace it must produce, compared exactly. The interpreter runs a
 * `3t + 1` cluster of the protocol's `Server`s over `MemoryStorage` and the writer and
 * reader state machines, with a network that only queues: nothing moves until a command
 * delivers it, so a transcript shows every message of a run in the order it happened,
 * and a scenario can hold any message back (a slow writer, a server that is down).
 *
 * File format (a subset of cockroachdb/datadriven, which etcd raft uses):
 *
 * ```
 * # comments and blank lines before a command
 * write w1 k hello
 * ----
 *
 * deliver all
 * ----
 * w1 → s1 CLOCK k
 * …
 * ```
 *
 * A command, a line `----`, then its output up to the next blank line (none for commands
 * that only queue). `UPDATE_TESTDATA=1` rewrites the outputs with what the run produced.
 *
 * Commands:
 *
 * - `cluster t=<t> [keep=<δ>]`: the cluster (default `t=1`), only as the first command.
 * - `write <op> <key> <value>`, `delete <op> <key>`: a write (a tombstone) by writer
 *   session `<op>` up to its first `.`, so `w1.a` and `w1.b` are two concurrent writes of
 *   session `w1`. Sessions write as the cluster's admin, so any key will do. `read <op> <key>`.
 * - `deliver <pattern>…`: delivers queued messages matching a pattern, oldest first, until
 *   none is left, including the ones the deliveries produce. A pattern is `all`, a node
 *   (`s2`; `w1` also matches `w1.a`) for the messages to it, or `<from>→<to>` (or `->`),
 *   either side `*`: `deliver r1→* *→r1` runs the read `r1` alone.
 * - `drop <server>…` / `heal <server>…`: the server is down, up again; messages to and
 *   from a down server are dropped when their turn comes (its storage survives).
 * - `byzantine <server> <behaviour>…`: adds `corrupt-fragment` (flips a byte of every
 *   fragment it answers FILTER with, and makes one up when asked for metadata only), `inflate-timestamp` (adds 100 to the timestamp of
 *   the candidate it answers CLOCK and COLLECT with); `honest` clears them.
 * - `replay <op> <key> [key=<key2>] [value=<value>]`: intruder `<op>` sends every server
 *   the STORE it last saw a writer send it for `<key>`, under `<key2>` and with the
 *   fragments and cross-checksum of `<value>` if given (the certificate stays).
 * - `forge <op> <key> <value> [ts=<num>]`: intruder `<op>`, an identity of its own,
 *   signs a certificate for `<key>` (default number: above every STORE seen) and sends
 *   the STOREs.
 * - `timeout <op>`: the host's timer of read `<op>` fires (`ReadOperation.stalled`): the
 *   servers not yet asked for their fragment are asked now.
 * - `pending`: the queued messages. `state <key>`: each server's `lc` and history.
 *
 * Trace lines: `<from> → <to> <message>` per delivered message (`(dropped)` when a down
 * server is at either end), `<op> ok …` or `<op> error <code>: …` when an operation ends,
 * `<op> evidence s<i>: <reason>` when it catches a server. Timestamps read
 * `<num>.<session>` (`ts0` for none), fragments in hex.
 */
import { createReferenceCodec } from '@powerstore/erasure/reference';
import {
  CertificateVerifier,
  clusterConfig,
  computeCrossChecksum,
  crossChecksumDigest,
  isRequest,
  makeWriterId,
  nonceHash,
  ReadOperation,
  Server,
  signCertificate,
  toHex,
  WriteOperation,
  WriterSession,
  writerTagOf,
  type Candidate,
  type ClientOperation,
  type ClusterConfig,
  type ClusterIdentity,
  type Outgoing,
  type ReadResult,
  type Reply,
  type Request,
  type Signer,
  type StoreRequest,
  type Timestamp,
  type WriteResult,
  type WriteValue,
} from '../src/index.js';
import { MemoryStorage } from '../src/testing/memory-storage.js';
import { crypto, identity, testCluster } from '../src/testing/cluster.js';

/** One command of a testdata file and the output it is expected to produce. */
export interface TestdataCase {
  /** Comment and blank lines before the command, kept as they are. */
  readonly prelude: readonly string[];
  readonly command: string;
  /** 1-based line of the command, for error messages. */
  readonly line: number;
  readonly expected: readonly string[];
}

/** The cases of a testdata file, and comment lines after the last one. */
export function parseTestdata(text: string): { cases: TestdataCase[]; trailer: string[] } {
  const lines = text.split('\n');
  if (lines.at(-1) === '') lines.pop();
  const cases: TestdataCase[] = [];
  let prelude: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    if (line.trim() === '' || line.startsWith('#')) {
      prelude.push(line);
      continue;
    }
    if (lines[i + 1] !== '----') throw new Error(`line ${i + 2}: expected ---- after the command ${JSON.stringify(line)}`);
    const expected: string[] = [];
    let j = i + 2;
    for (; j < lines.length && lines[j]!.trim() !== ''; j++) expected.push(lines[j]!);
    cases.push({ prelude, command: line, line: i + 1, expected });
    prelude = [];
    // The blank line that ends the output belongs to this case.
    i = j;
  }
  return { cases, trailer: prelude };
}

/** A testdata file with `outputs` (one per case) as the expected outputs. */
export function formatTestdata(
  cases: readonly TestdataCase[],
  outputs: readonly (readonly string[])[],
  trailer: readonly string[],
): string {
  const blocks = cases.map((c, i) => [...c.prelude, c.command, '----', ...outputs[i]!].join('\n'));
  const tail = trailer.length > 0 ? `\n${trailer.join('\n')}` : '';
  return `${blocks.join('\n\n')}\n${tail}${tail ? '\n' : ''}`;
}

/** Runs every command of a testdata file; resolves with the file as it should read (the outputs this run produced). */
export async function runTestdata(text: string): Promise<string> {
  const { cases, trailer } = parseTestdata(text);
  const scenario = new Scenario();
  const outputs: string[][] = [];
  for (const c of cases) {
    try {
      outputs.push(await scenario.run(c.command));
    } catch (err) {
      throw new Error(`line ${c.line}: ${c.command}: ${(err as Error).message}`, { cause: err });
    }
  }
  return formatTestdata(cases, outputs, trailer);
}

/** Deterministic bytes (nonces): the runs must replay exactly. */
function seededRandom(seed: number): (n: number) => Uint8Array {
  let state = seed >>> 0;
  return (n) =>
    Uint8Array.from({ length: n }, () => {
      // xorshift32
      state ^= state << 13;
      state ^= state >>> 17;
      state ^= state << 5;
      return (state >>> 0) & 0xff;
    });
}

/** The servers' clock: grants and policy play no part in these scenarios. */
const NOW = () => 1_000_000;

type Behaviour = 'corrupt-fragment' | 'inflate-timestamp';

/** A client: a write or read in progress (or finished), or an intruder that only sends. */
interface Client {
  readonly name: string;
  readonly op: ClientOperation<WriteResult | ReadResult> | undefined;
  readonly kind: 'write' | 'read' | 'intruder';
  done: boolean;
}

/** A message in the network: a request to server `to`, or a reply to client `client`. */
interface Envelope {
  readonly from: string;
  readonly to: string;
  readonly client: Client;
  readonly message: Request | Reply;
}

interface World {
  readonly config: ClusterConfig;
  readonly cluster: ClusterIdentity;
  readonly admin: Signer;
  readonly servers: readonly Server[];
  readonly storages: readonly MemoryStorage[];
  readonly codec: ReturnType<typeof createReferenceCodec>;
  readonly verifier: CertificateVerifier;
}

/** The interpreter: one per testdata file. */
export class Scenario {
  #world: World | undefined;
  #queue: Envelope[] = [];
  readonly #clients = new Map<string, Client>();
  readonly #sessions = new Map<string, WriterSession>();
  readonly #intruders = new Map<string, { signer: Signer; writerId: Uint8Array }>();
  /** Writer id (hex) → the session or intruder name timestamps are shown with. */
  readonly #writerNames = new Map<string, string>();
  readonly #down = new Set<number>();
  readonly #byzantine = new Map<number, Set<Behaviour>>();
  /** The last STORE a writer sent each server, per key: what an intruder can replay. */
  readonly #stores = new Map<string, Map<number, StoreRequest>>();
  readonly #random = seededRandom(0x5eed);
  #opId = 0;
  /** The output of the command being run. */
  #out: string[] = [];

  /** Runs one command line; resolves with its output lines. */
  async run(line: string): Promise<string[]> {
    this.#out = [];
    const [command, ...args] = line.trim().split(/\s+/);
    if (command === 'cluster') {
      if (this.#world) throw new Error('cluster must be the first command');
      const options = keywords(args);
      this.#world = await makeWorld(Number(options.t ?? 1), options.keep === undefined ? undefined : Number(options.keep));
      return this.#out;
    }
    this.#world ??= await makeWorld(1, undefined);
    switch (command) {
      case 'write':
        await this.#startWrite(args[0], args[1], { kind: 'value', value: new TextEncoder().encode(required(args[2], 'value')) });
        break;
      case 'delete':
        await this.#startWrite(args[0], args[1], { kind: 'tombstone' });
        break;
      case 'read':
        await this.#startRead(args[0], args[1]);
        break;
      case 'deliver':
        await this.#deliver(args.length > 0 ? args : ['all']);
        break;
      case 'drop':
        for (const s of args) this.#down.add(this.#serverIndex(s));
        break;
      case 'heal':
        for (const s of args) this.#down.delete(this.#serverIndex(s));
        break;
      case 'byzantine': {
        const i = this.#serverIndex(args[0]);
        const behaviours = this.#byzantine.get(i) ?? new Set<Behaviour>();
        this.#byzantine.set(i, behaviours);
        for (const b of args.slice(1)) {
          if (b === 'honest') behaviours.clear();
          else if (b === 'corrupt-fragment' || b === 'inflate-timestamp') behaviours.add(b);
          else throw new Error(`unknown behaviour ${JSON.stringify(b)} (corrupt-fragment, inflate-timestamp, honest)`);
        }
        break;
      }
      case 'replay':
        await this.#replay(required(args[0], 'intruder'), required(args[1], 'key'), keywords(args.slice(2)));
        break;
      case 'forge':
        await this.#forge(required(args[0], 'intruder'), required(args[1], 'key'), required(args[2], 'value'), keywords(args.slice(3)));
        break;
      case 'timeout': {
        const client = this.#clients.get(required(args[0], 'operation name'));
        if (!client?.op || !(client.op instanceof ReadOperation)) throw new Error(`no read ${JSON.stringify(args[0])} running`);
        this.#send(client, client.op.stalled().send ?? []);
        break;
      }
      case 'pending':
        for (const e of this.#queue) this.#out.push(this.#describe(e));
        break;
      case 'state':
        await this.#state(required(args[0], 'key'));
        break;
      default:
        throw new Error(`unknown command ${JSON.stringify(command)}`);
    }
    return this.#out;
  }

  get #w(): World {
    return this.#world!;
  }

  async #startWrite(name: string | undefined, key: string | undefined, value: WriteValue): Promise<void> {
    const opName = required(name, 'operation name');
    const k = required(key, 'key');
    const session = this.#session(opName.split('.')[0]!);
    const { config, codec } = this.#w;
    const client = this.#newClient(
      opName,
      'write',
      (c) =>
        new WriteOperation(
          { config, crypto, codec, random: this.#random, session, now: NOW, onEvidence: (i, reason) => this.#evidence(c, i, reason) },
          k,
          value,
          ++this.#opId,
        ),
    );
    await this.#start(client);
  }

  async #startRead(name: string | undefined, key: string | undefined): Promise<void> {
    const { config, codec, verifier } = this.#w;
    const k = required(key, 'key');
    const client = this.#newClient(
      required(name, 'operation name'),
      'read',
      (c) =>
        new ReadOperation({ config, crypto, codec, verifier, onEvidence: (i, reason) => this.#evidence(c, i, reason) }, k, ++this.#opId),
    );
    await this.#start(client);
  }

  #newClient(name: string, kind: 'write' | 'read', make: (c: Client) => ClientOperation<WriteResult | ReadResult>): Client {
    const running = this.#clients.get(name);
    if (running?.kind === 'intruder') throw new Error(`${name} is an intruder`);
    if (running && !running.done) throw new Error(`${name} is still running`);
    const client: { -readonly [K in keyof Client]: Client[K] } = { name, kind, op: undefined, done: false };
    client.op = make(client);
    this.#clients.set(name, client);
    return client;
  }

  async #start(client: Client): Promise<void> {
    const step = await client.op!.start();
    this.#send(client, step.send ?? []);
  }

  #send(client: Client, send: readonly Outgoing[]): void {
    for (const o of send) {
      if (o.message.type === 'STORE' && client.kind === 'write') {
        let byServer = this.#stores.get(o.message.key);
        if (!byServer) this.#stores.set(o.message.key, (byServer = new Map<number, StoreRequest>()));
        byServer.set(o.to, o.message);
      }
      this.#queue.push({ from: client.name, to: serverName(o.to), client, message: o.message });
    }
  }

  /** A writer session: the admin identity (it may write any key), an instance id of its own. */
  #session(name: string): WriterSession {
    let session = this.#sessions.get(name);
    if (!session) {
      const instance = new Uint8Array(16).fill(this.#sessions.size + 1);
      session = new WriterSession({ crypto, cluster: this.#w.cluster, signer: this.#w.admin, instance });
      this.#sessions.set(name, session);
      this.#writerNames.set(toHex(session.writerId), name);
    }
    return session;
  }

  async #intruder(name: string): Promise<{ client: Client; signer: Signer; writerId: Uint8Array }> {
    let me = this.#intruders.get(name);
    if (!me) {
      const signer = await identity(0x60 + this.#intruders.size);
      const writerId = makeWriterId(writerTagOf(crypto, signer.publicKey), new Uint8Array(16).fill(0xee));
      me = { signer, writerId };
      this.#intruders.set(name, me);
      this.#writerNames.set(toHex(writerId), name);
    }
    let client = this.#clients.get(name);
    if (!client) {
      client = { name, kind: 'intruder', op: undefined, done: false };
      this.#clients.set(name, client);
    } else if (client.kind !== 'intruder') throw new Error(`${name} is a writer or reader, not an intruder`);
    return { client, ...me };
  }

  async #replay(name: string, key: string, options: Record<string, string>): Promise<void> {
    const seen = this.#stores.get(key);
    if (!seen) throw new Error(`no STORE of ${key} was sent yet`);
    const { client } = await this.#intruder(name);
    const { codec } = this.#w;
    const opId = ++this.#opId;
    let replaced: { fragments: Uint8Array[]; cc: StoreRequest['cc'] } | undefined;
    if (options.value !== undefined) {
      const bytes = new TextEncoder().encode(options.value);
      const fragments = codec.encode(bytes);
      replaced = { fragments, cc: await computeCrossChecksum(crypto, fragments, bytes.length, false) };
    }
    for (const [i, store] of [...seen].sort(([a], [b]) => a - b)) {
      const message: StoreRequest = {
        ...store,
        opId,
        key: options.key ?? store.key,
        ...(replaced ? { fragment: replaced.fragments[i]!, cc: replaced.cc } : {}),
      };
      this.#queue.push({ from: name, to: serverName(i), client, message });
    }
  }

  async #forge(name: string, key: string, value: string, options: Record<string, string>): Promise<void> {
    const { client, signer, writerId } = await this.#intruder(name);
    const { config, codec, cluster } = this.#w;
    const highest = Math.max(0, ...[...(this.#stores.get(key)?.values() ?? [])].map((s) => s.ts.num));
    const ts: Timestamp = { num: options.ts === undefined ? highest + 1 : Number(options.ts), writerId };
    const bytes = new TextEncoder().encode(value);
    const fragments = codec.encode(bytes);
    const cc = await computeCrossChecksum(crypto, fragments, bytes.length, false);
    const nonce = this.#random(32);
    const cert = await signCertificate(crypto, cluster.id, signer, {
      key,
      ts,
      nonceHash: nonceHash(crypto, nonce),
      ccDigest: crossChecksumDigest(crypto, cc),
      tombstone: cc.tombstone,
      grant: undefined,
    });
    const opId = ++this.#opId;
    for (let i = 0; i < config.n; i++) {
      this.#queue.push({
        from: name,
        to: serverName(i),
        client,
        message: { type: 'STORE', key, opId, ts, stripe: 0, fragment: fragments[i]!, cc, cert },
      });
    }
  }

  async #deliver(patterns: readonly string[]): Promise<void> {
    const matchers = patterns.map((p) => this.#matcher(p));
    for (let delivered = 0; ; delivered++) {
      if (delivered > 10_000) throw new Error('more than 10 000 deliveries: a loop?');
      const at = this.#queue.findIndex((e) => matchers.some((m) => m(e)));
      if (at < 0) return;
      const [envelope] = this.#queue.splice(at, 1);
      await this.#deliverOne(envelope!);
    }
  }

  async #deliverOne(e: Envelope): Promise<void> {
    const server = isRequest(e.message) ? this.#serverIndex(e.to) : undefined;
    const from = server === undefined ? this.#serverIndex(e.from) : undefined;
    if ((server !== undefined && this.#down.has(server)) || (from !== undefined && this.#down.has(from))) {
      this.#out.push(`${this.#describe(e)} (dropped)`);
      return;
    }
    this.#out.push(this.#describe(e));
    if (server !== undefined) {
      const reply = this.#misbehave(server, await this.#w.servers[server]!.handle(e.message as Request));
      this.#queue.push({ from: e.to, to: e.from, client: e.client, message: reply });
      return;
    }
    const client = e.client;
    if (!client.op) return;
    const step = await client.op.onReply(from!, e.message as Reply);
    this.#send(client, step.send ?? []);
    if (step.result !== undefined) {
      client.done = true;
      this.#out.push(`${client.name} ok ${this.#result(client, step.result)}`);
    }
    if (step.error) {
      client.done = true;
      this.#out.push(`${client.name} error ${step.error.code}: ${step.error.message}`);
    }
  }

  /** What a Byzantine server sends instead of its honest reply. */
  #misbehave(server: number, reply: Reply): Reply {
    const behaviours = this.#byzantine.get(server);
    if (behaviours?.has('corrupt-fragment') && reply.type === 'FILTER_ACK' && reply.entry && reply.entry.fragment?.length !== 0) {
      // Asked for metadata only, it sends a made-up fragment anyway.
      const fragment = reply.entry.fragment?.slice() ?? Uint8Array.of(0x11, 0x22, 0x33);
      fragment[0]! ^= 0xff;
      return { ...reply, entry: { ...reply.entry, fragment } };
    }
    if (behaviours?.has('inflate-timestamp') && (reply.type === 'CLOCK_ACK' || reply.type === 'COLLECT_ACK') && reply.candidate) {
      const candidate: Candidate = { ...reply.candidate, ts: { ...reply.candidate.ts, num: reply.candidate.ts.num + 100 } };
      return { ...reply, candidate };
    }
    return reply;
  }

  #evidence(client: Client, server: number, reason: string): void {
    this.#out.push(`${client.name} evidence ${serverName(server)}: ${reason}`);
  }

  #result(client: Client, result: WriteResult | ReadResult): string {
    if (client.kind === 'write') return `ts=${this.#ts(result.ts)} rounds=${result.rounds}`;
    const read = result as ReadResult;
    const value =
      read.value !== undefined ? JSON.stringify(new TextDecoder().decode(read.value)) : read.ts.num === 0 ? 'absent' : 'deleted';
    return `${value} ts=${this.#ts(read.ts)} rounds=${read.rounds}`;
  }

  async #state(key: string): Promise<void> {
    for (const [i, storage] of this.#w.storages.entries()) {
      const { lc, index } = await storage.withKey(key, async (r) => ({ lc: await r.getLc(), index: await r.index() }));
      const hist = index.map((e) => this.#ts(e.ts)).join(',') || '-';
      this.#out.push(`${serverName(i)} lc=${lc ? this.#ts(lc.ts) : 'ts0'} hist=${hist}${this.#down.has(i) ? ' (down)' : ''}`);
    }
  }

  /** `s2` (to s2), `w1` (to w1 and w1.*), `a→b` with `*` for any. */
  #matcher(pattern: string): (e: Envelope) => boolean {
    if (pattern === 'all') return () => true;
    const node = (p: string) => {
      // A typo would silently deliver nothing: every name must be a node of this run.
      if (/^s\d+$/.test(p)) this.#serverIndex(p);
      else if (p !== '*' && ![...this.#clients.keys()].some((c) => c === p || c.startsWith(`${p}.`)))
        throw new Error(`no server or client ${JSON.stringify(p)}`);
      return (name: string) => p === '*' || name === p || name.startsWith(`${p}.`);
    };
    const arrow = /^(.+?)(?:→|->)(.+)$/.exec(pattern);
    if (arrow) {
      const [from, to] = [node(arrow[1]!), node(arrow[2]!)];
      return (e) => from(e.from) && to(e.to);
    }
    const to = node(pattern);
    return (e) => to(e.to);
  }

  #serverIndex(name: string | undefined): number {
    const m = /^s(\d+)$/.exec(name ?? '');
    const i = m ? Number(m[1]) - 1 : -1;
    if (i < 0 || i >= this.#w.config.n) throw new Error(`not a server of this cluster: ${JSON.stringify(name)}`);
    return i;
  }

  /** `num.session`, so the transcripts name who wrote what instead of printing 32-byte ids. */
  #ts(ts: Timestamp): string {
    if (ts.num === 0) return 'ts0';
    const hex = toHex(ts.writerId);
    return `${ts.num}.${this.#writerNames.get(hex) ?? `?${hex.slice(0, 8)}`}`;
  }

  #describe(e: Envelope): string {
    return `${e.from} → ${e.to} ${this.#message(e.message)}`;
  }

  #message(m: Request | Reply): string {
    const head = `${m.type} ${m.key}`;
    switch (m.type) {
      case 'CLOCK':
      case 'COLLECT':
        return head;
      case 'CLOCK_ACK':
      case 'COLLECT_ACK':
        return `${head} lc=${m.candidate ? this.#ts(m.candidate.ts) : 'ts0'}`;
      case 'STORE':
        return `${head} ts=${this.#ts(m.ts)} ${m.cc.tombstone ? 'tombstone' : `fr=${fragment(m.fragment)}`}`;
      case 'STORE_ACK':
      case 'COMPLETE_ACK':
        return `${head} ts=${this.#ts(m.ts)}`;
      case 'COMPLETE':
        return `${head} ts=${this.#ts(m.candidate.ts)} proof=${m.candidate.proof.map((r) => serverName(r.server)).join(',')}`;
      case 'FILTER':
        return `${head}${m.fragment ? ' +fragment' : ''}${m.pending ? ' pending' : ''} C={${m.candidates.map((c) => this.#ts(c.ts)).join(',')}}`;
      case 'FILTER_ACK': {
        const entry = !m.entry
          ? 'no entry'
          : m.entry.cc.tombstone
            ? 'tombstone'
            : m.entry.fragment
              ? `fr=${fragment(m.entry.fragment)}`
              : 'metadata only';
        return `${head} ts=${this.#ts(m.ts)} ${entry}${m.newer ? ` newer=${this.#ts(m.newer.ts)}` : ''}`;
      }
      case 'LIST':
        return `${head} after=${JSON.stringify(m.after)} limit=${m.limit}`;
      case 'LIST_ACK':
        return `${head} ${m.entries.map((e) => `${e.key}@${this.#ts(e.candidate.ts)}`).join(',')}${m.more ? ' +more' : ''}`;
      case 'PENDING':
        return `${head} pending after=${JSON.stringify(m.after)} limit=${m.limit}`;
      case 'PENDING_ACK':
        return `${head} ${m.entries.map((e) => `${e.key}@${this.#ts(e.ts)}`).join(',')}${m.more ? ' +more' : ''}`;
      case 'ERROR':
        return `${head} ${m.code}: ${m.message}`;
    }
  }
}

async function makeWorld(t: number, keep: number | undefined): Promise<World> {
  const config = clusterConfig(t);
  const { cluster, admin, serverSigners } = await testCluster(t);
  const storages = Array.from({ length: config.n }, () => new MemoryStorage());
  const servers = storages.map(
    (storage, index) =>
      new Server({
        config,
        index,
        crypto,
        storage,
        cluster,
        signer: serverSigners[index]!,
        now: NOW,
        ...(keep === undefined ? {} : { history: { keep } }),
      }),
  );
  return {
    config,
    cluster,
    admin,
    servers,
    storages,
    codec: createReferenceCodec({ k: t + 1, n: config.n }),
    verifier: new CertificateVerifier(crypto, cluster),
  };
}

function serverName(i: number): string {
  return `s${i + 1}`;
}

/** A fragment in hex; long ones abbreviated to their first 8 bytes and length. */
function fragment(bytes: Uint8Array): string {
  if (bytes.length === 0) return '-';
  return bytes.length <= 8 ? toHex(bytes) : `${toHex(bytes.subarray(0, 8))}…(${bytes.length}B)`;
}

function keywords(args: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const a of args) {
    const m = /^([a-z]+)=(.*)$/.exec(a);
    if (!m) throw new Error(`expected name=value, got ${JSON.stringify(a)}`);
    out[m[1]!] = m[2]!;
  }
  return out;
}

function required(x: string | undefined, what: string): string {
  if (x === undefined || x === '') throw new Error(`missing ${what}`);
  return x;
}
