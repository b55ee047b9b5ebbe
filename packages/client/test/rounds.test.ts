/**
 * How the client matches replies to rounds, against an in-process cluster: the protocol's
 * `Server` on `MemoryStorage` behind `ws` servers on loopback, whose requests a test may
 * hold back, drop, answer itself, or follow by closing the connection. Each round goes
 * out under a wire id of its own, so late answers of an earlier round (acknowledgements
 * or ERROR replies) never count for the current one, and a reconnect resends the current
 * round to every server that has not answered it.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocketServer, type WebSocket } from 'ws';
import {
  CLUSTER_ID_LENGTH,
  clusterConfig,
  decodeMessage,
  framesOf,
  encodeMessage,
  encodePublicKey,
  Server,
  toBase32,
  type ErrorReply,
  type ListAck,
  type Request,
} from '@powerstore/protocol';
import { MemoryStorage } from '@powerstore/protocol/testing';
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import { connect, Identity, type Store } from '../src/index.js';
import { RoundBook } from '../src/host/rounds.js';

const crypto = createCryptoProvider();
const T = 1;
const config = clusterConfig(T);

/** One accepted connection, as a script sees it. */
interface Connection {
  /** 0 for a server's first connection, 1 for the next… */
  readonly number: number;
  /** The honest reply to `request`, encoded. */
  answer(request: Request): Promise<Uint8Array>;
  send(frame: Uint8Array): void;
  close(): void;
}

/**
 * What a server does with a request: `true` once the script has dealt with it (answered it
 * itself, or not at all), anything else to let the server answer it honestly.
 */
type Script = (request: Request, connection: Connection) => boolean | Promise<boolean>;

interface TestCluster {
  readonly file: object;
  /** The script of each server (0-based), replaceable at any time. */
  readonly scripts: (Script | undefined)[];
  close(): Promise<void>;
}

async function startCluster(): Promise<TestCluster> {
  const signers = await Promise.all(Array.from({ length: config.n }, (_, i) => crypto.signerFromSeed(new Uint8Array(32).fill(0xc0 + i))));
  const admin = await crypto.signerFromSeed(new Uint8Array(32).fill(0xad));
  const id = new Uint8Array(CLUSTER_ID_LENGTH).fill(0x11);
  const identity = { id, admin: admin.publicKey, servers: signers.map((s) => s.publicKey) };
  const scripts = new Array<Script | undefined>(config.n).fill(undefined);
  const servers: WebSocketServer[] = [];
  const urls: string[] = [];
  for (let index = 0; index < config.n; index++) {
    const protocol = new Server({
      config,
      index,
      crypto,
      storage: new MemoryStorage(),
      cluster: identity,
      signer: signers[index]!,
      now: Date.now,
    });
    const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    await new Promise<void>((resolve) => wss.once('listening', () => resolve()));
    let connections = 0;
    wss.on('connection', (ws: WebSocket) => {
      const connection: Connection = {
        number: connections++,
        answer: async (request) => (await protocol.handleFrame(encodeMessage(request))).reply,
        send: (frame) => ws.send(frame),
        close: () => ws.close(),
      };
      const onMessage = async (data: Buffer) => {
        const frame = new Uint8Array(data);
        const request = decodeMessage(frame, { n: config.n }) as Request;
        if ((await scripts[index]?.(request, connection)) === true) return;
        ws.send((await protocol.handleFrame(frame)).reply);
      };
      // A client's bundle: each frame handled, and answered, on its own (as a server may).
      ws.on('message', (data: Buffer) => {
        const message = new Uint8Array(data);
        for (const frame of framesOf(message)) void onMessage(Buffer.from(frame));
      });
    });
    servers.push(wss);
    const address = wss.address();
    if (address === null || typeof address === 'string') throw new Error('no address');
    urls.push(`ws://127.0.0.1:${address.port}`);
  }
  return {
    file: {
      version: 2,
      id: toBase32(id),
      admin: encodePublicKey(admin.publicKey),
      t: T,
      n: config.n,
      servers: urls.map((url, i) => ({ id: i + 1, url, publicKey: encodePublicKey(signers[i]!.publicKey) })),
      policy: { writers: 'open' },
    },
    scripts,
    close: async () => {
      for (const wss of servers) {
        for (const c of wss.clients) c.terminate();
        await new Promise<void>((resolve) => wss.close(() => resolve()));
      }
    },
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const text = (b: Uint8Array | undefined) => (b === undefined ? undefined : new TextDecoder().decode(b));

let cluster: TestCluster | undefined;
const stores: Store[] = [];

async function open(options: { maxValueBytes?: number; timeoutMs?: number; down?: number } = {}): Promise<Store> {
  cluster ??= await startCluster();
  const { down, ...rest } = options;
  const file = cluster.file as { servers: { url: string }[] };
  // Server `down` (0-based) at an address where nothing listens: its connections are refused.
  const servers = file.servers.map((s, i) => (i === down ? { ...s, url: 'ws://127.0.0.1:9' } : s));
  const store = await connect({
    cluster: { ...file, servers },
    identity: await Identity.generate(),
    timeoutMs: options.timeoutMs ?? 5_000,
    ...rest,
  });
  stores.push(store);
  return store;
}

afterEach(async () => {
  for (const s of stores.splice(0)) s.close();
  await cluster?.close();
  cluster = undefined;
});

describe('reads fetch t + 1 fragments', () => {
  it('asks t + 1 servers for fragments; a silent one costs a short wait, not the timeout, and the others are asked in the same round', async () => {
    const store = await open({ timeoutMs: 5_000 });
    const key = `${store.namespace}fetch`;
    await store.put(key, 'value');
    const asked: boolean[][] = [];
    const record = (silent: number | undefined) => {
      const round: boolean[] = [];
      asked.push(round);
      for (let i = 0; i < config.n; i++) {
        cluster!.scripts[i] = (request) => {
          if (request.type !== 'FILTER') return false;
          round.push(request.fragment);
          return i === silent;
        };
      }
    };
    record(undefined);
    expect(text(await store.get(key))).toBe('value');
    expect(asked[0]!.filter(Boolean)).toHaveLength(T + 1);
    // Each server in turn never answers FILTER; whichever servers a read picks, it ends well
    // before its 5 s timeout.
    for (let silent = 0; silent < config.n; silent++) {
      for (let read = 0; read < 2; read++) {
        record(silent);
        const started = performance.now();
        expect(text(await store.get(key))).toBe('value');
        expect(performance.now() - started).toBeLessThan(2_000);
      }
    }
    // Some read picked the silent server and asked the others too (a supplement: more FILTERs than n).
    expect(asked.some((round) => round.length > config.n)).toBe(true);
  });
});

describe('a listing that cannot complete', () => {
  /** s1 answers every LIST with a key its writer never wrote beside the real ones (its candidate is not valid for it). */
  const forgeListings = (forged: string) => {
    cluster!.scripts[0] = async (request, connection) => {
      if (request.type !== 'LIST') return false;
      const honest = decodeMessage(await connection.answer(request), { n: config.n }) as ListAck;
      const first = honest.entries[0]!;
      connection.send(encodeMessage({ ...honest, entries: [first, { ...first, key: forged }, ...honest.entries.slice(1)] }));
      return true;
    };
  };

  it('with an answer that fails verification and a refusal, fails at once naming what each server did', async () => {
    const store = await open({ timeoutMs: 10_000 });
    const prefix = `${store.namespace}dir/`;
    await store.put(`${prefix}a`, 'value');
    const forged = `${prefix}a-forged`;
    forgeListings(forged);
    cluster!.scripts[3] = (request, connection) => {
      if (request.type !== 'LIST') return false;
      connection.send(
        encodeMessage({ type: 'ERROR', key: request.key, opId: request.opId, code: 'UNAVAILABLE', message: 'the disk is full' }),
      );
      return true;
    };
    const started = performance.now();
    const err = await store.list(prefix).catch((e: unknown) => e);
    expect(performance.now() - started).toBeLessThan(3_000);
    expect(err).toMatchObject({
      code: 'QUORUM_UNREACHABLE',
      message: `need 3 of 4 servers, 4 reachable: s4 rejected (UNAVAILABLE: the disk is full); the LIST needs 3 answers that verify: s2, s3 sent one; s1 sent one that fails verification (listed ${JSON.stringify(forged)} with a candidate that is not valid)`,
    });
    expect(store.servers()[0]!.misbehaving).toMatch(/not valid/);
  });

  it('with an answer that fails verification and a server that refuses connections, fails at once naming both', async () => {
    const store = await open({ timeoutMs: 10_000, down: 3 });
    const prefix = `${store.namespace}dir/`;
    await store.put(`${prefix}a`, 'value');
    const forged = `${prefix}a-forged`;
    forgeListings(forged);
    const started = performance.now();
    const err = await store.list(prefix).catch((e: unknown) => e);
    // Within s4's next connection attempt (backoff doubles from 100 ms), not the 10 s timeout.
    expect(performance.now() - started).toBeLessThan(6_000);
    expect(err).toMatchObject({
      code: 'QUORUM_UNREACHABLE',
      message: `need 3 of 4 servers, 3 reachable: s4 refused; the LIST needs 3 answers that verify: s2, s3 sent one; s1 sent one that fails verification (listed ${JSON.stringify(forged)} with a candidate that is not valid)`,
    });
  });

  it('with a server silent, one refusing connections and an answer that fails verification, fails at once: the silent one has not answered', async () => {
    const store = await open({ timeoutMs: 10_000, down: 3 });
    const prefix = `${store.namespace}dir/`;
    await store.put(`${prefix}a`, 'value');
    const forged = `${prefix}a-forged`;
    forgeListings(forged);
    cluster!.scripts[1] = (request) => request.type === 'LIST';
    const started = performance.now();
    const err = await store.list(prefix).catch((e: unknown) => e);
    expect(performance.now() - started).toBeLessThan(6_000);
    expect(err).toMatchObject({
      code: 'QUORUM_UNREACHABLE',
      message: `need 3 of 4 servers, 3 reachable: s2 has not answered, s4 refused; the LIST needs 3 answers that verify: s3 sent one; s1 sent one that fails verification (listed ${JSON.stringify(forged)} with a candidate that is not valid)`,
    });
  });
});

describe('a FILTER asked again is resent after a reconnect', () => {
  it('servers asked again for fragments whose connection closes before they answer are asked again when they reconnect (the simulator found reads timing out)', async () => {
    const store = await open({ timeoutMs: 5_000 });
    const key = `${store.namespace}asked-again`;
    await store.put(key, 'value');
    // The first server asked for a fragment never answers FILTER. Every other server, on its
    // first connection, closes it when FILTER comes again asking for a fragment after it
    // answered without one (a supplement): the read gets its second fragment only if the
    // supplement is resent once they reconnect.
    let silent: number | undefined;
    for (let i = 0; i < config.n; i++) {
      let answeredWithout = false;
      cluster!.scripts[i] = (request, connection) => {
        if (request.type !== 'FILTER') return false;
        if (request.fragment && silent === undefined) silent = i;
        if (i === silent) return true;
        if (connection.number > 0) return false;
        if (!request.fragment) answeredWithout = true;
        else if (answeredWithout) {
          connection.close();
          return true;
        }
        return false;
      };
    }
    const started = performance.now();
    expect(text(await store.get(key))).toBe('value');
    expect(performance.now() - started).toBeLessThan(3_000);
    expect(store.servers().map((s) => s.misbehaving)).toEqual([undefined, undefined, undefined, undefined]);
  });
});

describe('replies count only for the round they answer', () => {
  it('a COLLECT_ACK arriving during FILTER is not an answer to FILTER: a reconnect resends FILTER to that server', async () => {
    const store = await open();
    const key = `${store.namespace}late-ack`;
    await store.put(key, 'value');
    // s4 holds its COLLECT answer back; when FILTER reaches it, it sends the stale answer,
    // drops FILTER and closes the connection. s1 never answers FILTER. The read needs s4's
    // FILTER answer, which it gets only if FILTER is resent when s4 reconnects.
    let stale: Uint8Array | undefined;
    cluster!.scripts[3] = async (request, connection) => {
      if (connection.number > 0) return false;
      if (request.type === 'COLLECT') {
        stale = await connection.answer(request);
        return true;
      }
      if (request.type === 'FILTER') {
        connection.send(stale!);
        connection.close();
        return true;
      }
      return false;
    };
    cluster!.scripts[0] = (request) => request.type === 'FILTER';
    expect(text(await store.get(key))).toBe('value');
    expect(store.servers().map((s) => s.misbehaving)).toEqual([undefined, undefined, undefined, undefined]);
  });

  it('an ERROR answering COLLECT, arriving during FILTER, is not a refusal of FILTER (and a refusal the quorum contradicts is misbehaving)', async () => {
    const store = await open();
    const key = `${store.namespace}late-error`;
    await store.put(key, 'value');
    // s4 refuses COLLECT, but its refusal arrives only once FILTER has gone out; s1 refuses
    // FILTER. Counted together they would be t + 1 refusals of FILTER and fail the read.
    let stale: Uint8Array | undefined;
    cluster!.scripts[3] = (request, connection) => {
      if (request.type === 'COLLECT') {
        stale = encodeMessage({ type: 'ERROR', key: request.key, opId: request.opId, code: 'INTERNAL', message: 'slow disk' });
        return true;
      }
      if (request.type === 'FILTER' && stale) {
        connection.send(stale);
        stale = undefined;
      }
      return false;
    };
    cluster!.scripts[0] = (request, connection) => {
      if (request.type !== 'FILTER') return false;
      connection.send(encodeMessage({ type: 'ERROR', key: request.key, opId: request.opId, code: 'INTERNAL', message: 'busy' }));
      return true;
    };
    // s2 and s3 answer FILTER after both refusals are in.
    for (const i of [1, 2]) {
      cluster!.scripts[i] = async (request) => {
        if (request.type === 'FILTER') await sleep(200);
        return false;
      };
    }
    expect(text(await store.get(key))).toBe('value');
    const flagged = store.servers().map((s) => s.misbehaving);
    expect(flagged[0]).toMatch(/^refused a FILTER that 3 other servers accepted \(INTERNAL: busy\)$/);
    expect(flagged[3]).toMatch(/^refused a COLLECT that 3 other servers accepted \(INTERNAL: slow disk\)$/);
    expect(flagged.slice(1, 3)).toEqual([undefined, undefined]);
  });

  it('a server refusing with UNAVAILABLE (its disk failed) is not misbehaving, even once the quorum accepted', async () => {
    const store = await open();
    const key = `${store.namespace}disk-failed`;
    await store.put(key, 'value');
    cluster!.scripts[0] = async (request, connection) => {
      // Late, after the quorum's answers: a refusal the quorum contradicts.
      await sleep(100);
      connection.send(
        encodeMessage({ type: 'ERROR', key: request.key, opId: request.opId, code: 'UNAVAILABLE', message: 'the disk is full' }),
      );
      return true;
    };
    await store.put(key, 'again');
    expect(text(await store.get(key))).toBe('again');
    await sleep(300);
    expect(store.servers().map((s) => s.misbehaving)).toEqual([undefined, undefined, undefined, undefined]);
  });

  it('a reply of another request type under a round’s id is not an answer to it, and is misbehaving', async () => {
    const store = await open();
    const key = `${store.namespace}wrong-type`;
    await store.put(key, 'value');
    cluster!.scripts[3] = (request, connection) => {
      if (request.type !== 'FILTER' || connection.number > 0) return false;
      connection.send(encodeMessage({ type: 'COLLECT_ACK', key: request.key, opId: request.opId, candidate: undefined }));
      connection.close();
      return true;
    };
    cluster!.scripts[0] = (request) => request.type === 'FILTER';
    expect(text(await store.get(key))).toBe('value');
    expect(store.servers()[3]!.misbehaving).toBe('answered a FILTER with COLLECT_ACK of key ' + JSON.stringify(key));
  });
});

describe('frames over the limit in Node, where the transport cannot tell whose answer they were', () => {
  it('holds the reads waiting on a server and asks it one at a time: the large read fails with VALUE_TOO_LARGE, the small one succeeds', async () => {
    const writer = await open();
    const big = `${writer.namespace}big`;
    const small = `${writer.namespace}small`;
    // Public: the reader is another identity, and what is tested here is the transport.
    await writer.put(big, new Uint8Array(300_000).fill(7), { public: true });
    await writer.put(small, 'small', { public: true });
    // Each server answers the first two FILTERs together, the large answer first: the
    // socket closes at it (1009) and the small answer is lost with it.
    for (let i = 0; i < config.n; i++) {
      const waiting = new Map<string, Request>();
      let done = false;
      cluster!.scripts[i] = async (request, connection) => {
        if (request.type !== 'FILTER' || done) return false;
        waiting.set(request.key, request);
        if (waiting.size < 2) return true;
        done = true;
        for (const k of [big, small]) connection.send(await connection.answer(waiting.get(k)!));
        return true;
      };
    }
    const reader = await open({ maxValueBytes: 1_000 });
    const [large, fits] = await Promise.allSettled([reader.get(big), reader.get(small)]);
    expect(large).toMatchObject({ status: 'rejected', reason: { code: 'VALUE_TOO_LARGE' } });
    expect(fits.status === 'fulfilled' && text(fits.value)).toBe('small');
    expect(reader.servers().map((s) => s.misbehaving)).toEqual([undefined, undefined, undefined, undefined]);
  });
});

describe('which refusals of a round the quorum accepted are evidence', () => {
  const refusal = (code: ErrorReply['code']): ErrorReply => ({ type: 'ERROR', key: 'k', opId: 1, code, message: 'no' });
  const storeRound = () => {
    const book = new RoundBook<object>();
    const round = book.start(
      {},
      'k',
      'STORE',
      () => new Map(),
      () => {},
      0,
    );
    for (const i of [0, 1, 2]) round.acked.add(i);
    return round;
  };

  it('a STORE refused for what reached that server (STRIPES_MISSING, SUPERSEDED, …) is not: the simulator caught the host blaming correct servers for STRIPES_MISSING', () => {
    const round = storeRound();
    for (const code of ['STRIPES_MISSING', 'SUPERSEDED', 'PENDING_LIMIT', 'CONFLICT', 'QUOTA_EXCEEDED'] as const) {
      expect(round.refusalEvidence(3, refusal(code), 3), code).toBeUndefined();
    }
  });

  it('a STORE refused as malformed, or any refusal with fewer than n − t others accepting, is (only) in the first case', () => {
    const round = storeRound();
    expect(round.refusalEvidence(3, refusal('INVALID_ARGUMENT'), 3)).toMatch(/refused a STORE that 3 other servers accepted/);
    expect(round.refusalEvidence(3, refusal('INVALID_ARGUMENT'), 4)).toBeUndefined();
  });
});

describe('a server asked twice in one round owes two answers', () => {
  it('its oversized answer to a supplement, after it answered the first request, is an answer, not misbehaving (the simulator found the host blaming correct servers)', () => {
    const book = new RoundBook<object>();
    const round = book.start(
      {},
      'k',
      'FILTER',
      () => new Map([[0, new Uint8Array(1)]]),
      () => {},
      0,
    );
    round.pending.add(0); // FILTER, metadata only
    round.pending.add(0); // the supplement asks it again for its fragment, before its first answer came
    round.pending.answered(0); // the first answer
    expect(round.pending.has(0)).toBe(true);
    const verdict = book.oversized(0, round.id);
    expect(verdict.kind).toBe('answer');
    // Once the connection closed, nothing more is owed on it.
    expect(round.pending.has(0)).toBe(false);
    expect(book.oversized(0, round.id).kind).toBe('misbehaving');
  });
});
