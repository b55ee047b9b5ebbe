/**
 * The BigMac attack REPAIR exists for (journal, Lemma 5.8), scripted message by message,
 * because the random simulator needs an unlikely schedule to hit it: a writer crashes
 * after its COMPLETE reached only a Byzantine server, which then offers one reader the
 * candidate with the other servers' MACs corrupted and hides it from another.
 */
import { createReferenceCodec } from '@powerstore/erasure/reference';
import {
  clusterConfig,
  HASH_LENGTH,
  MemoryStorage,
  ReadOperation,
  Server,
  WriteOperation,
  writerCredentials,
  type Candidate,
  type Outgoing,
  type ReadResult,
  type Reply,
  type Request,
} from '@powerstore/protocol';
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import { describe, expect, it } from 'vitest';
import { checkLinearizable, type RegisterOp } from '../lincheck/lincheck.js';

class NoRepair extends ReadOperation {
  protected override repairs(): Candidate[] {
    return [];
  }
}

const crypto = createCryptoProvider();
const config = clusterConfig(1);
const codec = createReferenceCodec({ k: 2, n: 4 });
const BYZ = 3;

async function scenario(makeReader: (key: string, opId: number) => ReadOperation) {
  const serverKeys = Array.from({ length: 4 }, (_, i) => new Uint8Array(32).fill(i + 1));
  const servers = serverKeys.map((serverKey, index) => new Server({ config, index, serverKey, crypto, storage: new MemoryStorage() }));
  const credentials = writerCredentials(crypto, serverKeys, new Uint8Array(16).fill(5));
  const random = (n: number) => new Uint8Array(n).fill(42);
  const to = (send: readonly Outgoing[] | undefined, i: number): Request => send!.find((o) => o.to === i)!.message;

  // The write: CLOCK from s0, s1, s3; STORE reaches s0, s1, s3 (s2's is lost in the
  // network); COMPLETE reaches only the Byzantine s3, then the writer crashes.
  const value = new TextEncoder().encode('new');
  const w = new WriteOperation({ config, credentials, crypto, codec, random }, 'k', { kind: 'value', value }, 1);
  let send = (await w.start()).send;
  let step: Awaited<ReturnType<typeof w.onReply>> = {};
  for (const i of [0, 1, BYZ]) step = await w.onReply(i, await servers[i]!.handle(to(send, i)));
  send = step.send;
  for (const i of [0, 1, BYZ]) step = await w.onReply(i, await servers[i]!.handle(to(send, i)));
  await servers[BYZ]!.handle(to(step.send, BYZ));
  const lc = (await servers[BYZ]!.handle({ type: 'COLLECT', key: 'k', opId: 0 })) as Extract<Reply, { type: 'COLLECT_ACK' }>;
  const poisoned: Candidate = { ...lc.candidate!, vec: lc.candidate!.vec.map((m, j) => (j === BYZ ? m : new Uint8Array(HASH_LENGTH).fill(0xbb))) };

  const history: RegisterOp[] = [{ key: 'k', client: 'w', kind: 'write', value: 'new', call: 1 }];
  const read = async (opId: number, collectFrom: number[], filterFrom: number[], byzCollect: Candidate | undefined, call: number) => {
    const r = makeReader('k', opId);
    let s = await r.start();
    for (const i of collectFrom) {
      const reply: Reply =
        i === BYZ ? { type: 'COLLECT_ACK', key: 'k', opId, candidate: byzCollect } : await servers[i]!.handle(to(s.send, i));
      const next = await r.onReply(i, reply);
      if (next.send) s = next;
    }
    let result: ReadResult | undefined;
    let rounds = 0;
    while (!result && rounds++ < 3) {
      const round = s.send!;
      for (const i of filterFrom) {
        const next = await r.onReply(i, await servers[i]!.handle(to(round, i)));
        if (next.result) result = next.result;
        else if (next.send) s = next;
        if (result || next.send) break;
      }
    }
    history.push({ key: 'k', client: `r${opId}`, kind: 'read', value: result?.value ? new TextDecoder().decode(result.value) : null, call, ret: call + 1 });
    return result!;
  };

  // Reader A hears the poisoned candidate from s3; s0 (which has Hist[ts]) and s3 vouch
  // for it, s2 cannot validate it; s1's FILTER is still in flight when A decides.
  const a = await read(10, [0, 2, BYZ], [0, BYZ, 2], poisoned, 2);
  // Reader B, after A returned, never hears from s0 and gets nothing from s3.
  const b = await read(11, [1, 2, BYZ], [1, 2, BYZ], undefined, 4);
  return { a, b, linearizable: checkLinearizable(history).ok };
}

describe('REPAIR under the BigMac attack', () => {
  it('the reader repairs the candidate in a third round, and a later read sees the value', async () => {
    const { a, b, linearizable } = await scenario((key, opId) => new ReadOperation({ config, crypto, codec }, key, opId));
    expect(new TextDecoder().decode(a.value)).toBe('new');
    expect(a.rounds).toBe(3);
    expect(new TextDecoder().decode(b.value)).toBe('new');
    expect(linearizable).toBe(true);
  });

  it('without REPAIR the later read returns the older value: not linearizable', async () => {
    const { a, b, linearizable } = await scenario((key, opId) => new NoRepair({ config, crypto, codec }, key, opId));
    expect(a.rounds).toBe(2);
    expect(b.value).toBeUndefined();
    expect(linearizable).toBe(false);
  });
});
