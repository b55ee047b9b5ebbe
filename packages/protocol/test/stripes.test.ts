/**
 * Values in stripes (`stripes.ts`): one write of many stripes, each verified on its own;
 * what servers refuse (stripes without authority, a stripe 0 before the other stripes, a
 * layout that lists other stripes); readers of any stripe, pinned to one version; garbage
 * collection of every stripe; listing sizes.
 */
import { describe, expect, it } from 'vitest';
import {
  MIN_STRIPE_SIZE,
  ReadOperation,
  WriteOperation,
  type Outgoing,
  type ReadResult,
  type StoreRequest,
  type StripeSource,
  type WriteValue,
} from '../src/index.js';
import { crypto, identity, makeCluster, own, random } from '../src/testing/cluster.js';

const S = MIN_STRIPE_SIZE;

function bytes(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  let x = seed;
  for (let i = 0; i < n; i++) out[i] = (x = (x * 1103515245 + 12345) >>> 0) >>> 24;
  return out;
}

/** A source yielding `value` in stripes of `size`. */
function sourceOf(value: Uint8Array, size = S): StripeSource {
  let at = 0;
  return {
    stripeSize: size,
    next: async () => {
      if (at >= value.length && at > 0) return undefined;
      const s = value.subarray(at, at + size);
      at += size;
      if (s.length === 0) at = 1;
      return s;
    },
  };
}

const striped = (value: Uint8Array, size = S): WriteValue => ({ kind: 'stripes', source: sourceOf(value, size) });

type Cluster = Awaited<ReturnType<typeof makeCluster>>;

function readStripe(c: Cluster, key: string, stripe: number, pinned?: ReadResult['candidate']): Promise<ReadResult> {
  const op = new ReadOperation({ config: c.config, crypto, codec: c.codec, verifier: c.verifier }, key, 900 + stripe, {
    stripe,
    ...(pinned ? { pinned } : {}),
  });
  return c.drive(op);
}

async function readAll(c: Cluster, key: string): Promise<Uint8Array | undefined> {
  const first = await readStripe(c, key, 0);
  if (!first.layout) return first.value;
  const parts = [first.value!];
  for (let s = 1; s < first.layout.digests.length; s++) parts.push((await readStripe(c, key, s, first.candidate)).value!);
  const out = new Uint8Array(first.layout.valueLength);
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}

/** Runs a striped write's rounds up to (not including) stripe 0's STORE, and returns the STOREs it would send then. */
async function uploadAllButFirst(c: Cluster, op: WriteOperation): Promise<Outgoing[]> {
  let queue: Outgoing[] = [...((await op.start()).send ?? [])];
  for (;;) {
    const next: Outgoing[] = [];
    for (const o of queue) {
      const step = await op.onReply(o.to, await c.servers[o.to]!.handle(o.message));
      if (step.error) throw step.error;
      next.push(...(step.send ?? []));
    }
    if (next.length > 0 && next[0]!.message.type === 'STORE' && next[0]!.message.stripe === 0) return next;
    queue = next;
  }
}

describe('striped values', () => {
  it('a value of several stripes is written once and read stripe by stripe, every stripe verified', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'big');
    const value = bytes(3 * S + 1234, 7);
    const result = await c.write(key, striped(value));
    expect(result.rounds).toBe(3);
    expect(await readAll(c, key)).toEqual(value);
    // A stripe past the end answers with the last one; the layout says which.
    const last = await readStripe(c, key, 99);
    expect(last.stripe).toBe(3);
    expect(last.value).toEqual(value.subarray(3 * S));
    // Each server holds four entries (stripes) for the one write, indexed as one write.
    const index = await c.storages[0]!.withKey(key, (r) => r.index());
    expect(index.map((w) => [w.head, w.stripes, w.top])).toEqual([[true, 3, 3]]);
  });

  it('a value that fits one stripe is written as a plain value', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'small');
    const value = bytes(S - 1, 3);
    await c.write(key, striped(value));
    const r = await readStripe(c, key, 0);
    expect(r.layout).toBeUndefined();
    expect(r.value).toEqual(value);
    await c.write(key, striped(new Uint8Array(0)));
    expect((await readStripe(c, key, 0)).value).toEqual(new Uint8Array(0));
  });

  it('a source whose stripe is short and not the last fails the write with INVALID_ARGUMENT, storing nothing readable', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    const parts = [bytes(S, 1), bytes(S - 1, 2), bytes(S, 3)];
    const source: StripeSource = { stripeSize: S, next: async () => parts.shift() };
    await expect(c.write(key, { kind: 'stripes', source })).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
      message: expect.stringContaining('stripe 1') as string,
    });
    expect((await readStripe(c, key, 0)).value).toBeUndefined();
  });

  it('readers see the old value until stripe 0 is stored: a writer that stops mid-upload leaves nothing visible', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    await c.write(key, { kind: 'value', value: bytes(100, 1) });
    const op = c.writeOp(key, striped(bytes(4 * S, 2)));
    await uploadAllButFirst(c, op);
    expect(await readAll(c, key)).toEqual(bytes(100, 1));
  });

  it('a server signs no receipt for stripe 0 until it holds every other stripe the layout lists', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    const op = c.writeOp(key, striped(bytes(3 * S, 4)));
    const stores = await uploadAllButFirst(c, op);
    const seal = stores.find((o) => o.to === 0)!.message as StoreRequest;
    expect(seal.layout?.digests).toHaveLength(3);
    // Server 0 loses stripe 2 (a server that never got it, in effect).
    const fresh = await makeCluster(1);
    const onlyFirst = fresh.servers[0]!;
    const partial = await onlyFirst.handle(seal);
    expect(partial).toMatchObject({ type: 'ERROR', code: 'STRIPES_MISSING' });
    expect(await c.servers[0]!.handle(seal)).toMatchObject({ type: 'STORE_ACK' });
  });

  it('a layout listing stripes other than the ones stored is refused (CONFLICT)', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    const op = c.writeOp(key, striped(bytes(3 * S, 5)));
    const stores = await uploadAllButFirst(c, op);
    const seal = stores.find((o) => o.to === 1)!.message as StoreRequest;
    // The same write signed over a layout with stripe 1's digest changed: the writer equivocating.
    const other = new Uint8Array(32).fill(9);
    const layout = { ...seal.layout!, digests: [seal.layout!.digests[0]!, other, seal.layout!.digests[2]!] };
    const { signCertificate, layoutDigest } = await import('../src/index.js');
    const cert = await signCertificate(crypto, c.cluster.id, c.owner, {
      key,
      ts: seal.ts,
      nonceHash: seal.cert.nonceHash,
      ccDigest: layoutDigest(crypto, layout),
      tombstone: false,
      grant: undefined,
    });
    expect(await c.servers[1]!.handle({ ...seal, layout, cert })).toMatchObject({ type: 'ERROR', code: 'CONFLICT' });
  });

  it('stripes need a stripe certificate of the key’s writer, for that very stripe', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    const op = c.writeOp(key, striped(bytes(3 * S, 6)));
    const first = await op.start();
    let stripe1: StoreRequest | undefined;
    for (const o of first.send!) {
      const step = await op.onReply(o.to, await c.servers[o.to]!.handle(o.message));
      stripe1 ??= step.send?.find((m) => m.to === 2)?.message as StoreRequest | undefined;
    }
    expect(stripe1?.stripe).toBe(1);
    // Moved to another index, its certificate no longer verifies.
    expect(await c.servers[2]!.handle({ ...stripe1!, stripe: 2 })).toMatchObject({ code: 'UNAUTHENTICATED' });
    // Another identity cannot put stripes in this namespace, even under its own signature.
    const mallory = await identity(66);
    const malloryOp = new WriteOperation(
      { config: c.config, crypto, codec: c.codec, random, session: c.session(mallory), now: () => 1_000_000 },
      own(mallory, 'k'),
      striped(bytes(3 * S, 6)),
      77,
    );
    const m = await malloryOp.start();
    let forged: StoreRequest | undefined;
    for (const o of m.send!) {
      const step = await malloryOp.onReply(o.to, await c.servers[o.to]!.handle(o.message));
      forged ??= step.send?.find((x) => x.to === 2)?.message as StoreRequest | undefined;
    }
    expect(await c.servers[2]!.handle({ ...forged!, key })).toMatchObject({ code: 'NOT_AUTHORIZED' });
  });

  it('garbage collection deletes every stripe of a collected write', async () => {
    const c = await makeCluster(1, { history: { keep: 0 } });
    const key = own(c.owner, 'k');
    await c.write(key, striped(bytes(3 * S, 8)));
    await c.write(key, { kind: 'value', value: bytes(10, 9) });
    for (const i of [0, 1, 2]) expect(await c.storages[i]!.withKey(key, async (r) => (await r.index()).length)).toBe(1);
    expect(c.storages[0]!.entries(key)).toHaveLength(1);
  });

  it('a stripe that arrives below lc (its write overtaken by a delete) is kept while it may still complete, then collected once idle', async () => {
    let now = 1_000_000;
    const idle = 60_000;
    const c = await makeCluster(1, { now: () => now, history: { uploadIdleMs: idle } });
    const key = own(c.owner, 'late');
    const op = c.writeOp(key, striped(bytes(2 * S, 15)));
    // CLOCK everywhere; the STORE of stripe 1 is held back from server 0 until the delete completed.
    let late: Outgoing | undefined;
    for (const o of (await op.start()).send ?? []) {
      const step = await op.onReply(o.to, await c.servers[o.to]!.handle(o.message));
      late ??= step.send?.find((x) => x.to === 0);
    }
    expect(late?.message.type === 'STORE' && late.message.stripe).toBe(1);
    const deleted = await c.write(key, { kind: 'tombstone' });
    expect(late!.message.type === 'STORE' && deleted.ts.num > late!.message.ts.num).toBe(true);
    await c.servers[0]!.handle(late!.message);
    const below = () => c.storages[0]!.withKey(key, async (r) => (await r.index()).filter((e) => e.ts.num < deleted.ts.num));
    // Its stripe 0 may still come (the upload then completes before the delete, and is
    // erased with it): erasing the stripes at once made it fail with STRIPES_MISSING.
    expect(await below()).toMatchObject([{ head: false, stripes: 1 }]);
    now += idle / 10;
    await c.servers[0]!.sweep(key);
    expect(await below()).toEqual([]);
  });

  it('a pinned read of a collected version fails with VALUE_CHANGED instead of moving on', async () => {
    const c = await makeCluster(1, { history: { keep: 0 } });
    const key = own(c.owner, 'k');
    await c.write(key, striped(bytes(3 * S, 10)));
    const first = await readStripe(c, key, 0);
    await c.write(key, { kind: 'value', value: bytes(10, 11) });
    await expect(readStripe(c, key, 1, first.candidate)).rejects.toMatchObject({ code: 'VALUE_CHANGED' });
    // While it is kept, a pinned read of it works.
    const kept = await makeCluster(1, { history: { keep: 1 } });
    const k2 = own(kept.owner, 'k');
    await kept.write(k2, striped(bytes(3 * S, 12)));
    const r = await readStripe(kept, k2, 0);
    await kept.write(k2, { kind: 'value', value: bytes(10, 13) });
    expect((await readStripe(kept, k2, 2, r.candidate)).value).toEqual(bytes(3 * S, 12).subarray(2 * S));
  });

  it('a pinned read given the layout is answered without it, and checks each stripe against it', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    const value = bytes(3 * S + 7, 20);
    await c.write(key, striped(value));
    const first = await readStripe(c, key, 0);
    const layout = first.layout!;
    const options = { config: c.config, crypto, codec: c.codec, verifier: c.verifier };
    // A layout the pinned certificate does not sign is refused before anything is sent.
    expect(
      () =>
        new ReadOperation(options, key, 1, {
          stripe: 1,
          pinned: first.candidate!,
          layout: { ...layout, valueLength: layout.valueLength + 1 },
        }),
    ).toThrow(/the layout must be the one/);
    expect(() => new ReadOperation(options, key, 1, { stripe: 1, layout })).toThrow(/only with the pinned version/);
    // Server 0 is Byzantine: asked for a stripe without the layout, it answers with stripe 1
    // (fragment included), labelled as that stripe or as the one asked for.
    const handle = c.servers.map((s) => s.handle.bind(s));
    let labelTruthfully = false;
    const layouts: boolean[] = [];
    c.servers.forEach((s, i) => {
      s.handle = async (m) => {
        const reply = i === 0 && m.type === 'FILTER' && m.withoutLayout ? await handle[i]!({ ...m, stripe: 1 }) : await handle[i]!(m);
        if (reply.type !== 'FILTER_ACK') return reply;
        if (i !== 0) layouts.push(reply.entry?.layout !== undefined);
        return i === 0 && m.type === 'FILTER' && m.withoutLayout && !labelTruthfully ? { ...reply, stripe: m.stripe } : reply;
      };
    });
    for (const truthful of [false, true]) {
      labelTruthfully = truthful;
      for (const stripe of [2, 3]) {
        const caught: number[] = [];
        // Server 0 among those asked for their fragment.
        const op = new ReadOperation(
          { ...options, fragmentServers: () => [0, 1], onEvidence: (server) => caught.push(server) },
          key,
          100 + stripe,
          { stripe, pinned: first.candidate!, layout },
        );
        const r = await c.drive(op);
        expect(r.value).toEqual(value.subarray(stripe * S, (stripe + 1) * S));
        expect(r).toMatchObject({ stripe, layout });
        expect(caught).toContain(0);
      }
    }
    expect(layouts.length).toBeGreaterThan(0);
    expect(layouts.every((had) => !had)).toBe(true);
  });

  it('listing a striped value gives its whole length, which its certificate signs', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'big');
    await c.write(key, striped(bytes(2 * S + 5, 14)));
    const page = await c.drive(c.listOp(own(c.owner, '')));
    expect(page.keys.map((k) => [k.key, k.size])).toEqual([[key, 2 * S + 5]]);
  });
});
