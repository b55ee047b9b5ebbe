/**
 * The runner behind putMany, getMany and deleteMany, on fake single-key operations: how many
 * keys are in flight, how many bytes they hold, what an abort does to the keys in flight and
 * to those not started, the order of the outcomes, progress, and the call's own argument checks
 * (pairs, string keys, each key once). Real clusters: test/client/many.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { batchConcurrency, batchEntries, batchKeys, runBatch, valueBytes, type BatchItem } from '../src/batch.js';
import { PowerStoreError } from '../src/errors.js';
import { DEFAULT_BATCH_CONCURRENCY, type BatchProgress } from '../src/types.js';

/** A single-key operation that ends when the test says, remembering what is in flight. */
class Fake {
  readonly started: string[] = [];
  readonly inFlight = new Set<string>();
  maxInFlight = 0;
  readonly #ends = new Map<string, { resolve: (v: string) => void; reject: (e: Error) => void }>();
  readonly signals = new Map<string, AbortSignal>();

  run = (item: BatchItem<unknown>, signal: AbortSignal): Promise<string> => {
    this.started.push(item.key);
    this.inFlight.add(item.key);
    this.signals.set(item.key, signal);
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight.size);
    return new Promise<string>((resolve, reject) => {
      const end = () => this.inFlight.delete(item.key);
      this.#ends.set(item.key, { resolve: (v) => (end(), resolve(v)), reject: (e) => (end(), reject(e)) });
      signal.addEventListener('abort', () => (end(), reject(new PowerStoreError('ABORTED', 'the operation was aborted'))), { once: true });
    });
  };

  succeed(key: string): void {
    this.#ends.get(key)!.resolve(`value of ${key}`);
  }

  fail(key: string, error: Error): void {
    this.#ends.get(key)!.reject(error);
  }
}

const items = (n: number, cost = 0): BatchItem<undefined>[] =>
  Array.from({ length: n }, (_, i) => ({ key: `k${i}`, value: undefined, cost }));
const tick = () => new Promise((r) => setTimeout(r, 0));
const base = { maxBytes: Infinity, signal: undefined, name: 'test' };

describe('runBatch', () => {
  it('keeps at most `concurrency` keys in flight, starts them in order, and resolves with outcomes in the order given', async () => {
    const fake = new Fake();
    const progress: BatchProgress[] = [];
    const done = runBatch(items(7), fake.run, { ...base, concurrency: 3, onSettled: (p) => progress.push(p) });
    await tick();
    expect(fake.started).toEqual(['k0', 'k1', 'k2']);
    fake.succeed('k1');
    await tick();
    expect(fake.started).toEqual(['k0', 'k1', 'k2', 'k3']);
    fake.fail('k0', new PowerStoreError('NOT_AUTHORIZED', 'not yours'));
    for (const k of ['k2', 'k3', 'k4', 'k5', 'k6']) {
      await tick();
      fake.succeed(k);
    }
    const outcomes = await done;
    expect(fake.maxInFlight).toBe(3);
    expect(outcomes.map((o) => (o.ok ? o.value : (o.error as PowerStoreError).code))).toEqual([
      'NOT_AUTHORIZED',
      'value of k1',
      'value of k2',
      'value of k3',
      'value of k4',
      'value of k5',
      'value of k6',
    ]);
    expect(progress.map((p) => [p.done, p.failed, p.total])).toEqual([
      [1, 0, 7],
      [2, 1, 7],
      [3, 1, 7],
      [4, 1, 7],
      [5, 1, 7],
      [6, 1, 7],
      [7, 1, 7],
    ]);
  });

  it('holds keys back while the bytes in flight would exceed maxBytes, but always runs one', async () => {
    const fake = new Fake();
    const batch: BatchItem<undefined>[] = [
      { key: 'a', value: undefined, cost: 40 },
      { key: 'b', value: undefined, cost: 50 },
      { key: 'huge', value: undefined, cost: 500 },
      { key: 'c', value: undefined, cost: 10 },
    ];
    const done = runBatch(batch, fake.run, { ...base, concurrency: 10, maxBytes: 100 });
    await tick();
    expect([...fake.inFlight]).toEqual(['a', 'b']);
    fake.succeed('a');
    await tick();
    // 50 + 500 is over 100: the huge key waits until it can go alone (order is kept: c waits behind it).
    expect([...fake.inFlight]).toEqual(['b']);
    fake.succeed('b');
    await tick();
    expect([...fake.inFlight]).toEqual(['huge']);
    fake.succeed('huge');
    await tick();
    fake.succeed('c');
    expect((await done).every((o) => o.ok)).toBe(true);
  });

  it('on abort, fails the keys in flight through their own signals and the keys not started at once, and still resolves', async () => {
    const fake = new Fake();
    const controller = new AbortController();
    const done = runBatch(items(5), fake.run, { ...base, concurrency: 2, signal: controller.signal });
    await tick();
    fake.succeed('k0');
    await tick();
    expect([...fake.inFlight]).toEqual(['k1', 'k2']);
    controller.abort(new Error('user cancelled'));
    const outcomes = await done;
    expect(fake.started).toEqual(['k0', 'k1', 'k2']);
    expect(fake.signals.get('k1')!.aborted).toBe(true);
    expect(fake.signals.get('k0')!.aborted).toBe(false);
    expect(outcomes[0]).toEqual({ ok: true, value: 'value of k0' });
    for (const o of outcomes.slice(1)) expect(o).toMatchObject({ ok: false, error: { code: 'ABORTED' } });
    expect(outcomes[3]).toMatchObject({ error: { message: expect.stringContaining('before this key was started') as string } });
    expect((outcomes[3] as { error: Error }).error.cause).toEqual(new Error('user cancelled'));
  });

  it('with a signal already aborted, starts nothing; an empty call resolves at once', async () => {
    const fake = new Fake();
    const outcomes = await runBatch(items(3), fake.run, { ...base, concurrency: 2, signal: AbortSignal.abort() });
    expect(fake.started).toEqual([]);
    expect(outcomes.map((o) => !o.ok && (o.error as PowerStoreError).code)).toEqual(['ABORTED', 'ABORTED', 'ABORTED']);
    expect(await runBatch([], fake.run, { ...base, concurrency: 2 })).toEqual([]);
  });

  it('one listener on the caller’s signal, however many keys are in flight (no MaxListenersExceededWarning)', async () => {
    const fake = new Fake();
    const controller = new AbortController();
    let listeners = 0;
    const add = controller.signal.addEventListener.bind(controller.signal);
    controller.signal.addEventListener = ((...args: Parameters<typeof add>) => (listeners++, add(...args))) as typeof add;
    const done = runBatch(items(40), fake.run, { ...base, concurrency: 40, signal: controller.signal });
    await tick();
    expect(fake.inFlight.size).toBe(40);
    expect(listeners).toBe(1);
    for (let i = 0; i < 40; i++) fake.succeed(`k${i}`);
    await done;
  });

  it('a progress callback that throws changes nothing', async () => {
    const fake = new Fake();
    const done = runBatch(items(3), fake.run, {
      ...base,
      concurrency: 1,
      onSettled: () => {
        throw new Error('bug in the caller');
      },
    });
    for (const k of ['k0', 'k1', 'k2']) {
      await tick();
      fake.succeed(k);
    }
    expect((await done).every((o) => o.ok)).toBe(true);
  });

  it('turns what is thrown that is not an Error into one, and a synchronous throw into that key’s failure', async () => {
    const outcomes = await runBatch(
      items(2),
      (item) => {
        if (item.key === 'k0') throw new Error('sync');
        return Promise.reject(new Error('async'));
      },
      { ...base, concurrency: 2 },
    );
    expect(outcomes.map((o) => !o.ok && o.error.message)).toEqual(['sync', 'async']);
  });
});

describe("a call's own arguments", () => {
  const code = (f: () => unknown) => {
    try {
      f();
    } catch (e) {
      return e instanceof PowerStoreError ? `${e.code}: ${e.message}` : String(e);
    }
    return 'ok';
  };

  it('takes keys from any iterable of strings, each once; not a string, not a non-string key', () => {
    expect(batchKeys('getMany', new Set(['a', 'b'])).map((i) => i.key)).toEqual(['a', 'b']);
    expect(batchKeys('getMany', [])).toEqual([]);
    expect(code(() => batchKeys('getMany', 'abc'))).toMatch(
      /^INVALID_ARGUMENT: getMany: keys must be an iterable of strings .*not a string/,
    );
    expect(code(() => batchKeys('getMany', undefined))).toMatch(/^INVALID_ARGUMENT: .*not undefined$/);
    expect(code(() => batchKeys('deleteMany', ['a', 7]))).toBe('INVALID_ARGUMENT: deleteMany: key 1 is not a string (number)');
    expect(code(() => batchKeys('getMany', ['a', 'b', 'a']))).toBe(
      'INVALID_ARGUMENT: getMany: the key "a" is given twice (entries 0 and 2): each key may appear once',
    );
    // Malformed key names are each key's own outcome, not the call's.
    expect(batchKeys('getMany', ['', 'x'.repeat(2000)])).toHaveLength(2);
  });

  it('takes entries as pairs (array, Map, generator) or a plain object, each key once', () => {
    const bytes = new Uint8Array(5);
    const blob = new Blob([new Uint8Array(100)]);
    const keysOf = (e: unknown) => batchEntries(e, 1000).map((i) => [i.key, i.cost]);
    expect(
      keysOf([
        ['a', 'héllo'],
        ['b', bytes],
        ['c', blob],
      ]),
    ).toEqual([
      ['a', 6],
      ['b', 5],
      ['c', 100],
    ]);
    expect(keysOf(new Map([['m', 'x']]))).toEqual([['m', 1]]);
    expect(keysOf({ o: 'yy', p: bytes })).toEqual([
      ['o', 2],
      ['p', 5],
    ]);
    function* gen() {
      yield ['g', 'z'] as const;
    }
    expect(keysOf(gen())).toEqual([['g', 1]]);
    // A Blob counts as what it holds in flight (the cap), not its size.
    expect(batchEntries([['big', new Blob([new Uint8Array(5000)])]], 1000)[0]!.cost).toBe(1000);
    // Values that are not values are their key's failure later, not the call's now.
    expect(keysOf([['n', 42]])).toEqual([['n', 0]]);
    expect(code(() => batchEntries('ab', 0))).toMatch(/^INVALID_ARGUMENT: putMany: entries must be .*not a string$/);
    expect(code(() => batchEntries(null, 0))).toMatch(/not null$/);
    expect(code(() => batchEntries([['a', 'x'], ['b']], 0))).toBe('INVALID_ARGUMENT: putMany: entry 1 is not a [key, value] pair');
    expect(code(() => batchEntries([[1, 'x']], 0))).toBe('INVALID_ARGUMENT: putMany: the key of entry 0 is not a string (number)');
    expect(
      code(() =>
        batchEntries(
          [
            ['a', 'x'],
            ['a', 'y'],
          ],
          0,
        ),
      ),
    ).toBe('INVALID_ARGUMENT: putMany: the key "a" is given twice (entries 0 and 1): each key may appear once');
  });

  it('counts UTF-8 bytes as TextEncoder does', () => {
    for (const s of ['', 'a', 'é', '€', '😀', 'a\ud800b', '\udc00', 'x😀yé\ud83d'])
      expect(valueBytes(s)).toBe(new TextEncoder().encode(s).length);
  });

  it('checks concurrency: an integer from 1 to 1024, default 16', () => {
    expect(batchConcurrency('putMany', undefined)).toBe(DEFAULT_BATCH_CONCURRENCY);
    expect(DEFAULT_BATCH_CONCURRENCY).toBe(16);
    expect(batchConcurrency('putMany', 1024)).toBe(1024);
    for (const bad of [0, 1025, 1.5, '4', NaN])
      expect(code(() => batchConcurrency('putMany', bad))).toMatch(
        /^INVALID_ARGUMENT: putMany: concurrency must be an integer from 1 to 1024/,
      );
  });
});
