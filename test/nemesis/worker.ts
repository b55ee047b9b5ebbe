/**
 * A nemesis client: one process on a host (network namespace) of its own, started by
 * run.ts with an IPC channel through `ip netns exec`. It connects once, then runs one
 * operation at a time on a few keys (puts, gets, deletes, now and then a striped
 * `putStream`) until told to stop; then, after the cluster has healed, reads every key
 * once more. It reports each operation when it invokes it and when it returns, with
 * times from CLOCK_MONOTONIC (`process.hrtime`), which every process of the machine
 * shares, so the parent can order operations of different clients.
 * Values are self-describing (messages.ts), so a read can say which write it returned
 * and whether its bytes are exactly that write's.
 */
import { connect, PowerStoreError, type ServerStatus, type Store } from '@powerstore/client';
import { Prng } from '../sim/prng.js';
import type { NemesisOp, OpKind } from './history.js';
import { identify, nemesisKey, STRIPE_BYTES, valueBytes, type ParentMessage, type WorkerConfig, type WorkerMessage } from './messages.js';

const now = () => process.hrtime.bigint().toString();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function send(m: WorkerMessage): void {
  process.send!(m);
}

async function main(config: WorkerConfig, control: { stopping: boolean; final: Promise<void> }): Promise<void> {
  const prng = new Prng(config.seed);
  const states = new Map<number, string>();
  const blamed = new Map<number, string>();
  const onServerStatus = (servers: readonly ServerStatus[]) => {
    for (const s of servers) {
      // The log says when this client lost and regained each server, for reading a failure.
      if (states.get(s.id) !== s.state) console.log(`${now()} s${s.id} ${s.state}${s.lastError ? ` (${s.lastError})` : ''}`);
      states.set(s.id, s.state);
      if (s.misbehaving !== undefined && blamed.get(s.id) !== s.misbehaving) {
        blamed.set(s.id, s.misbehaving);
        send({ type: 'blamed', server: s.id, reason: s.misbehaving });
      }
    }
  };
  const store: Store = await connect({
    onServerStatus,
    cluster: config.cluster,
    identity: config.identity,
    timeoutMs: config.opTimeoutMs,
    stripeBytes: STRIPE_BYTES,
    // Faults last seconds and values are small (a fragment arrives in milliseconds): a
    // connection silent for 3 s while it owes answers is gone, not slow.
    liveness: { silenceMs: 3_000, connectTimeoutMs: 3_000 },
    // Servers listen on their namespaces' addresses, with plaintext ws:// as on loopback.
    allowInsecure: true,
  });
  const keyOf = (k: string) => nemesisKey(store.namespace ?? '', k);
  let seq = 0;

  const run = async (kind: OpKind, key: string, final = false) => {
    const s = ++seq;
    const opts = { timeoutMs: config.opTimeoutMs };
    let written: string | null | undefined;
    let bytes: number | undefined;
    if (kind === 'put' || kind === 'putStream') {
      written = `${config.client}.${s}`;
      bytes = kind === 'put' ? 16 + prng.int(4096) : STRIPE_BYTES + prng.int(2 * STRIPE_BYTES);
    } else if (kind === 'delete') written = null;
    send({
      type: 'invoke',
      seq: s,
      kind,
      key,
      at: now(),
      ...(written !== undefined ? { written } : {}),
      ...(bytes ? { bytes } : {}),
      ...(final ? { final } : {}),
    });
    try {
      let read: { read: string | null; intact?: boolean } | Pick<NemesisOp, 'listed' | 'cursor'> | undefined;
      if (kind === 'put') await store.put(keyOf(key), valueBytes(written!, bytes!), opts);
      else if (kind === 'putStream') {
        const value = valueBytes(written!, bytes!);
        // In pieces, as a file or a socket delivers them.
        const source = (async function* () {
          for (let i = 0; i < value.length; i += 16 * 1024) yield value.subarray(i, i + 16 * 1024);
        })();
        await store.putStream(keyOf(key), source, { ...opts, size: value.length });
      } else if (kind === 'delete') await store.delete(keyOf(key), opts);
      else if (kind === 'list') {
        const prefix = keyOf('');
        const page = await store.list(prefix, opts);
        read = {
          listed: page.keys.map((k) => ({
            key: k.key.slice(prefix.length),
            ...(k.size !== undefined ? { size: k.size } : {}),
            ...(k.storedSize !== undefined ? { storedSize: k.storedSize } : {}),
          })),
          ...(page.cursor !== undefined ? { cursor: page.cursor.slice(prefix.length) } : {}),
        };
      } else {
        const got = await store.get(keyOf(key), opts);
        read = got === undefined ? { read: null } : (({ id, intact }) => ({ read: id, intact }))(identify(got));
      }
      send({ type: 'complete', seq: s, at: now(), outcome: 'ok', ...(read ?? {}) });
    } catch (e) {
      const code = e instanceof PowerStoreError ? e.code : 'EXCEPTION';
      send({ type: 'complete', seq: s, at: now(), outcome: code, error: e instanceof Error ? e.message : String(e) });
    }
  };

  send({ type: 'ready', namespace: store.namespace ?? '' });
  // Bounded: the parent stops the loop long before; the bound only guards a lost message.
  for (let i = 0; i < 1_000_000 && !control.stopping; i++) {
    const key = prng.pick(config.keys);
    const x = prng.float();
    const kind: OpKind = x < 0.4 ? 'get' : x < 0.45 ? 'list' : x < 0.55 ? 'delete' : prng.chance(config.streamShare) ? 'putStream' : 'put';
    await run(kind, kind === 'list' ? '*' : key);
    // A little think time, so the cluster is loaded but the history stays checkable.
    await sleep(prng.int(30));
  }
  send({ type: 'stopped' });
  await control.final;
  for (const key of config.keys) await run('get', key, true);
  send({ type: 'final-done' });
  store.close();
}

if (!process.send) {
  console.error('test/nemesis/worker.ts is started by the nemesis (run.ts), with an IPC channel');
  process.exit(2);
}
let releaseFinal!: () => void;
const control = { stopping: false, final: new Promise<void>((r) => (releaseFinal = r)) };
process.on('message', (m: ParentMessage) => {
  if (m.type === 'config')
    main(m, control).catch((e: unknown) => {
      send({ type: 'failed', error: e instanceof Error ? (e.stack ?? e.message) : String(e) });
      process.exitCode = 1;
    });
  else if (m.type === 'stop') control.stopping = true;
  else if (m.type === 'final') releaseFinal();
  else process.exit(0);
});
// The parent going away ends this process too.
process.on('disconnect', () => process.exit(0));
