/**
 * Deliberately broken protocol variants. Each overrides one predicate or step of the
 * production classes; the simulator must report a violation for every one, which is
 * evidence that it can see the failure the corresponding rule prevents.
 */
import {
  ReadOperation,
  Server,
  TS0,
  WriteOperation,
  type Candidate,
  type FilterRequest,
  type KeyRecord,
  type Reply,
  type Timestamp,
} from '@powerstore/protocol';
import { correctProtocol, type ProtocolFactories } from './protocol-factories.js';

/** A named broken variant. */
export interface Mutant {
  readonly name: string;
  /** The rule it breaks. */
  readonly description: string;
  readonly protocol: ProtocolFactories;
}

/** FILTER answers without writing the candidate back to `lc`. */
class NoFilterWriteBack extends Server {
  protected override async onFilter(record: KeyRecord, req: FilterRequest): Promise<Reply> {
    const chv = await this.highestValid(record, req.key, req.candidates);
    const ts = chv?.ts ?? TS0;
    const entry = chv ? await record.getEntry(ts) : undefined;
    return {
      type: 'FILTER_ACK',
      key: req.key,
      opId: req.opId,
      ts,
      stripe: req.stripe,
      entry: entry ? { fragment: entry.fragment, cc: entry.cc, vec: entry.vec } : undefined,
    };
  }
}

/** Any candidate counts as valid: write-backs are not authenticated. */
class UncheckedWriteBack extends Server {
  protected override async valid(_record: KeyRecord, _key: string, c: Candidate): Promise<boolean> {
    return c.ts.num > 0;
  }
}

/** `lc` is overwritten even by a lower timestamp. */
class WriteBackWithoutCompare extends Server {
  protected override async writeBack(record: KeyRecord, c: Candidate): Promise<void> {
    await record.setLc(c);
  }
}

/** `safe` with `t` matching servers instead of `t + 1`. */
class SafeWithT extends ReadOperation {
  protected override matchingServersForSafe(): number {
    return this.options.config.t;
  }
}

/** Fragments are not checked against the cross-checksum. */
class IgnoresCrossChecksum extends ReadOperation {
  protected override async fragmentVerifies(): Promise<boolean> {
    return true;
  }
}

/** A candidate is dropped once `t + 1` servers answered lower, not `n − t`. */
class EagerInvalid extends ReadOperation {
  protected override isInvalid(c: Candidate): boolean {
    let lower = 0;
    for (const w of this.answers.values()) if (w.ts.num < c.ts.num) lower++;
    return lower >= this.options.config.t + 1;
  }
}

/** CLOCK adopts timestamps whose MAC does not verify. */
class TrustingClock extends WriteOperation {
  protected override acceptClockTimestamp(): boolean {
    return true;
  }
}

/** CLOCK reuses the highest timestamp's `num` instead of incrementing it. */
class NoIncrement extends WriteOperation {
  protected override nextTimestamp(highest: Timestamp): Timestamp {
    return super.nextTimestamp({ ...highest, num: Math.max(0, highest.num - 1) });
  }
}

const withServer = (server: ProtocolFactories['server']): ProtocolFactories => ({ ...correctProtocol, server });
const withReader = (reader: ProtocolFactories['reader']): ProtocolFactories => ({ ...correctProtocol, reader });
const withWriter = (writer: ProtocolFactories['writer']): ProtocolFactories => ({ ...correctProtocol, writer });

/** Every mutant `pnpm sim:mutants` runs. */
export const MUTANTS: readonly Mutant[] = [
  {
    name: 'filter-no-writeback',
    description: 'FILTER without the metadata write-back',
    protocol: withServer((o) => new NoFilterWriteBack(o)),
  },
  {
    name: 'writeback-unchecked',
    description: 'lc changes without a validity check',
    protocol: withServer((o) => new UncheckedWriteBack(o)),
  },
  {
    name: 'writeback-no-compare',
    description: 'lc overwritten by lower timestamps',
    protocol: withServer((o) => new WriteBackWithoutCompare(o)),
  },
  {
    name: 'safe-with-t',
    description: 'safe() satisfied by t matching servers instead of t + 1',
    protocol: withReader((o, key, opId) => new SafeWithT(o, key, opId)),
  },
  {
    name: 'reader-ignores-cc',
    description: 'reader does not check fragments against the cross-checksum',
    protocol: withReader((o, key, opId) => new IgnoresCrossChecksum(o, key, opId)),
  },
  {
    name: 'eager-invalid',
    description: 'candidates dropped after t + 1 lower answers instead of n − t',
    protocol: withReader((o, key, opId) => new EagerInvalid(o, key, opId)),
  },
  {
    name: 'clock-trusts-unauthenticated',
    description: 'CLOCK adopts timestamps without verifying their MAC',
    protocol: withWriter((o, key, value, opId) => new TrustingClock(o, key, value, opId)),
  },
  {
    name: 'clock-no-increment',
    description: 'a new write reuses the highest timestamp number seen',
    protocol: withWriter((o, key, value, opId) => new NoIncrement(o, key, value, opId)),
  },
];
