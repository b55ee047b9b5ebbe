/**
 * LevelDB storage of the baselines, the way powerstore-server's LevelStorage uses it:
 * classic-level, per-key exclusion by promise chains, and group commit — every write
 * handed in during one event-loop turn (or while the previous batch syncs) goes into one
 * `batch(..., { sync })`, and each request is answered only once its batch is durable.
 * The committer and the LevelDB sizes are powerstore-server's own.
 */
import { ClassicLevel } from 'classic-level';
import { KeyedMutex } from '@powerstore/protocol';
import { GroupCommitter, LEVELDB_TUNING } from 'powerstore-server';

export class BaselineStore {
  readonly #db: ClassicLevel<string, Uint8Array>;
  readonly #committer: GroupCommitter;
  readonly #mutex = new KeyedMutex();

  private constructor(db: ClassicLevel<string, Uint8Array>, sync: boolean) {
    this.#db = db;
    this.#committer = new GroupCommitter(db, sync, undefined);
  }

  static async open(path: string, sync: boolean): Promise<BaselineStore> {
    // The same LevelDB sizes as powerstore-server's, so the systems compare like for like.
    const db = new ClassicLevel<string, Uint8Array>(path, { keyEncoding: 'utf8', valueEncoding: 'view', ...LEVELDB_TUNING });
    await db.open();
    return new BaselineStore(db, sync);
  }

  get(key: string): Promise<Uint8Array | undefined> {
    return this.#db.get(key);
  }

  getMany(keys: string[]): Promise<(Uint8Array | undefined)[]> {
    return this.#db.getMany(keys);
  }

  /** Durable once resolved. */
  commit(puts: { key: string; value: Uint8Array }[]): Promise<void> {
    return this.#committer.commit(puts.map((p) => ({ type: 'put', key: p.key, value: p.value })));
  }

  /** Runs `fn` after every earlier callback on `key` (and its commit) finished. */
  withKey<R>(key: string, fn: () => Promise<R>): Promise<R> {
    return this.#mutex.run(key, fn);
  }

  close(): Promise<void> {
    return this.#db.close();
  }
}
