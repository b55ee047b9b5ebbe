/**
 * Linearizability checker for read/write registers (one per key), after Wing & Gong and
 * Lowe, with Porcupine's memoization of (linearized set, state): a search over the
 * orders consistent with real time, pruned by states already shown to be dead ends.
 *
 * An operation without a return (a writer that crashed) may take effect at any point
 * after its call, or never.
 */

/** The register's value: a value id, or `null` for absent (never written, or deleted). */
export type RegisterValue = string | null;

/** One operation on one key. Times are distinct integers from one clock. */
export interface RegisterOp {
  readonly key: string;
  readonly client: string;
  readonly kind: 'write' | 'read';
  /** Written value, or the value the read returned. */
  readonly value: RegisterValue;
  readonly call: number;
  /** Undefined for an operation that never returned. */
  readonly ret?: number | undefined;
}

/** Verdict for one key. */
export interface KeyVerdict {
  readonly key: string;
  readonly ok: boolean;
  readonly ops: number;
  /** States explored, to spot histories too large to check. */
  readonly explored: number;
}

/** Checks every key's history independently (registers are independent objects). */
export function checkLinearizable(ops: readonly RegisterOp[]): { ok: boolean; keys: KeyVerdict[] } {
  const byKey = new Map<string, RegisterOp[]>();
  for (const op of ops) {
    const list = byKey.get(op.key);
    if (list) list.push(op);
    else byKey.set(op.key, [op]);
  }
  const keys = [...byKey].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([key, list]) => ({ key, ...checkRegister(list) }));
  return { ok: keys.every((k) => k.ok), keys };
}

interface Entry {
  readonly op: number;
  readonly isCall: boolean;
  readonly time: number;
  prev: Entry | undefined;
  next: Entry | undefined;
  /** For a call: its return entry, if the operation returned. */
  match: Entry | undefined;
}

/** Checks one register history starting from `null`. */
export function checkRegister(ops: readonly RegisterOp[]): { ok: boolean; ops: number; explored: number } {
  // Events sorted by time; at equal times calls go after returns (both orders would be
  // defensible; the simulator never produces ties).
  const events: Entry[] = [];
  ops.forEach((op, i) => {
    const call: Entry = { op: i, isCall: true, time: op.call, prev: undefined, next: undefined, match: undefined };
    events.push(call);
    if (op.ret !== undefined) {
      const ret: Entry = { op: i, isCall: false, time: op.ret, prev: undefined, next: undefined, match: undefined };
      call.match = ret;
      events.push(ret);
    }
  });
  events.sort((a, b) => a.time - b.time || (a.isCall ? 1 : 0) - (b.isCall ? 1 : 0));
  const head: Entry = { op: -1, isCall: false, time: -Infinity, prev: undefined, next: undefined, match: undefined };
  let last = head;
  for (const e of events) {
    e.prev = last;
    last.next = e;
    last = e;
  }

  const lift = (call: Entry) => {
    call.prev!.next = call.next;
    if (call.next) call.next.prev = call.prev;
    const ret = call.match;
    if (ret) {
      ret.prev!.next = ret.next;
      if (ret.next) ret.next.prev = ret.prev;
    }
  };
  const unlift = (call: Entry) => {
    const ret = call.match;
    if (ret) {
      ret.prev!.next = ret;
      if (ret.next) ret.next.prev = ret;
    }
    call.prev!.next = call;
    if (call.next) call.next.prev = call;
  };

  const words = Math.ceil(ops.length / 32) || 1;
  const linearized = new Uint32Array(words);
  const cache = new Set<string>();
  const stack: { call: Entry; state: RegisterValue }[] = [];
  let state: RegisterValue = null;
  let remaining = ops.filter((op) => op.ret !== undefined).length;
  let explored = 0;
  let entry = head.next;

  while (remaining > 0) {
    if (!entry) return { ok: false, ops: ops.length, explored };
    if (entry.isCall) {
      const op = ops[entry.op]!;
      const ok = op.kind === 'write' || op.value === state;
      const next: RegisterValue = op.kind === 'write' ? op.value : state;
      if (ok) {
        linearized[entry.op >>> 5]! |= 1 << (entry.op & 31);
        const key = `${linearized.join(',')}|${next === null ? '\u0000' : next}`;
        if (!cache.has(key)) {
          cache.add(key);
          explored++;
          stack.push({ call: entry, state });
          state = next;
          if (op.ret !== undefined) remaining--;
          lift(entry);
          entry = head.next;
          continue;
        }
        linearized[entry.op >>> 5]! &= ~(1 << (entry.op & 31));
      }
      entry = entry.next;
    } else {
      // A return whose operation is not linearized yet: undo the last choice.
      const top = stack.pop();
      if (!top) return { ok: false, ops: ops.length, explored };
      state = top.state;
      linearized[top.call.op >>> 5]! &= ~(1 << (top.call.op & 31));
      if (ops[top.call.op]!.ret !== undefined) remaining++;
      unlift(top.call);
      entry = top.call.next;
    }
  }
  return { ok: true, ops: ops.length, explored };
}
