/**
 * A session gives a write a number above its in-flight (or abandoned) writes of the key.
 * When an earlier write of the session saw a higher `lc` (an owner's write that jumped,
 * completed at few servers yet), the later write's number is beyond the window its own
 * CLOCK's basis gives; it must send the session's highest basis, or a server that has not
 * yet handled the earlier write's STORE refuses it for the window (found by the simulator
 * work on issue 23; links being FIFO does not prevent it: a server runs a connection's
 * requests concurrently, and the earlier STORE has a basis to verify first).
 */
import { describe, expect, it } from 'vitest';
import { signGrant, TIMESTAMP_WINDOW, type Outgoing, type Reply, type Step, type WriteResult } from '../src/index.js';
import { crypto, identity, makeCluster, own, storeEverywhere, storeFor } from '../src/testing/cluster.js';

const W = TIMESTAMP_WINDOW;
const text = (s: string) => new TextEncoder().encode(s);

describe('a session’s numbers and the window', () => {
  it('the second of two concurrent writes of a grantee session succeeds though its STORE overtakes the first’s', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    await c.write(key, { kind: 'value', value: text('v1') });
    const grantee = async (byte: number) => {
      const signer = await identity(byte);
      return {
        signer,
        grant: await signGrant(crypto, c.cluster, c.owner, { grantee: signer.publicKey, prefix: own(c.owner, ''), expiresAt: 10 ** 12 }),
      };
    };
    // A grantee planted a write at the top of its window (W), so the owner's next write jumps to W + 1.
    const bob = await grantee(2);
    await storeEverywhere(c, await storeFor(c, bob.signer, key, text('planted'), { num: W, grant: bob.grant }));
    const o = c.writeOp(key, { kind: 'value', value: text('owner') });
    let q: readonly Outgoing[] = (await o.start()).send!;
    for (let round = 0; round < 2; round++) {
      const next: Outgoing[] = [];
      for (const m of q) next.push(...((await o.onReply(m.to, await c.servers[m.to]!.handle(m.message))).send ?? []));
      q = next;
    }
    // Its COMPLETE has reached server 1 only so far.
    expect(q[0]!.message).toMatchObject({ type: 'COMPLETE', candidate: { ts: { num: W + 1 } } });
    await c.servers[0]!.handle(q[0]!.message);
    // Another grantee runs two writes of the key at once in one session: the first's CLOCK
    // quorum includes server 1 (it takes W + 2), the second's does not (it takes W + 3,
    // above the session's first, with the basis v1: window v1 + W).
    const carol = await grantee(3);
    const session = c.session(carol.signer, [carol.grant]);
    const g1 = c.writeOp(key, { kind: 'value', value: text('g1') }, session);
    const g2 = c.writeOp(key, { kind: 'value', value: text('g2') }, session);
    const clock = async (op: typeof g1, servers: number[]) => {
      let s: Step<WriteResult> = {};
      for (const m of (await op.start()).send!)
        if (servers.includes(m.to)) s = await op.onReply(m.to, await c.servers[m.to]!.handle(m.message));
      return s.send!;
    };
    const first = await clock(g1, [0, 1, 2]);
    const second = await clock(g2, [1, 2, 3]);
    expect(first[0]!.message).toMatchObject({ type: 'STORE', ts: { num: W + 2 } });
    expect(second[0]!.message).toMatchObject({ type: 'STORE', ts: { num: W + 3 } });
    // It carries the session's basis (the owner's W + 1), not only the one its CLOCK saw.
    expect(second[1]!.message).toMatchObject({ basis: { ts: { num: W + 1 } } });
    // The second write's STOREs reach servers 2–4 before the first's.
    const refusals: Reply[] = [];
    let end: Step<WriteResult> = {};
    for (const m of second) {
      if (m.to === 0) continue;
      const reply = await c.servers[m.to]!.handle(m.message);
      if (reply.type === 'ERROR') refusals.push(reply);
      end = await g2.onReply(m.to, reply);
      if (end.error) break;
    }
    expect(refusals).toEqual([]);
    expect(end.error).toBeUndefined();
  });
});
