/**
 * Per-key exclusion by promise chains: a callback for a key starts only after every
 * earlier callback for that key has settled. Different keys run concurrently. The one
 * implementation every storage backend (and the benchmark baselines) uses.
 */
export class KeyedMutex {
  readonly #tails = new Map<string, Promise<unknown>>();

  /** Runs `fn` once every earlier `run(key, …)` has settled; resolves or rejects as `fn` does. */
  run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.#tails.get(key) ?? Promise.resolve();
    const run = prev.then(fn, fn);
    const tail = run.catch(() => undefined);
    this.#tails.set(key, tail);
    // Forget idle chains so the map does not grow with every key ever touched.
    void tail.then(() => {
      if (this.#tails.get(key) === tail) this.#tails.delete(key);
    });
    return run;
  }

  /** Resolves once no callback is running or waiting, including ones started meanwhile. */
  async idle(): Promise<void> {
    while (this.#tails.size > 0) await Promise.all([...this.#tails.values()]);
  }
}
