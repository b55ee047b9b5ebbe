/**
 * The protocol's client operations, with the observations a client reports about
 * servers: which answers were checked and found wrong. The protocol decides; these
 * subclasses only watch.
 */
import {
  ReadOperation,
  WriteOperation,
  timestampsEqual,
  type FilterAnswer,
  type ReaderOptions,
  type SafeGroup,
  type Timestamp,
  type WriteValue,
  type WriterOptions,
} from '@powerstore/protocol';

/** A server caught answering what no correct server would. */
export interface Misbehaviour {
  /** Protocol index (0-based). */
  readonly index: number;
  readonly reason: string;
}

export class ObservedRead extends ReadOperation {
  #selected: SafeGroup | undefined;

  constructor(options: ReaderOptions, key: string, opId: number) {
    super(options, key, opId);
  }

  protected override safeGroup(ts: Timestamp): SafeGroup | undefined {
    const group = super.safeGroup(ts);
    if (group) this.#selected = group;
    return group;
  }

  /** Servers whose FILTER answer for the value read contradicts the agreeing `t + 1`. */
  misbehaviours(): Misbehaviour[] {
    const group = this.#selected;
    const out: Misbehaviour[] = [];
    const agreed = group ? this.answers.get(group.members[0]!)?.groupKey : undefined;
    for (const [index, answer] of this.answers as Map<number, FilterAnswer>) {
      if (answer.entry && !answer.fragmentOk) {
        out.push({ index, reason: 'sent a fragment that does not match its cross-checksum' });
      } else if (group && answer.entry && timestampsEqual(answer.ts, group.ts) && answer.groupKey !== agreed) {
        out.push({ index, reason: 'sent a cross-checksum or MAC vector no other server agrees with' });
      }
    }
    return out;
  }

  /** Servers that answered FILTER, in protocol indices. */
  answered(): number[] {
    return [...this.answers.keys()].sort((a, b) => a - b);
  }
}

export class ObservedWrite extends WriteOperation {
  readonly #forgers = new Set<number>();
  #current = -1;

  constructor(options: WriterOptions, key: string, value: WriteValue, opId: number) {
    super(options, key, value, opId);
  }

  override async onReply(from: number, reply: Parameters<WriteOperation['onReply']>[1]) {
    this.#current = from;
    return super.onReply(from, reply);
  }

  protected override acceptClockTimestamp(ts: Timestamp): boolean {
    const ok = super.acceptClockTimestamp(ts);
    if (!ok) this.#forgers.add(this.#current);
    return ok;
  }

  misbehaviours(): Misbehaviour[] {
    return [...this.#forgers].map((index) => ({ index, reason: 'sent a timestamp whose MAC does not verify' }));
  }
}
