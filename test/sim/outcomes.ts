/**
 * How an honest client's operation ended, judged: a result goes to the checker (a striped
 * value first read whole, stripe by stripe, each pinned to the version the first read
 * named), a failure either is one the run allows (an expired grant, a striped write
 * overtaken, a refusal by servers of another key epoch, a value too large for a reader's
 * limit) or is a violation; then the client's next operation is scheduled.
 */
import { compareTimestamps, ProtocolError, type ListPage, type ReadResult, type WriteResult } from '@powerstore/protocol';
import { PowerStoreError } from '@powerstore/client';
import type { Client, HonestClients, Outcome, Running } from './clients.js';
import { SIM_MAX_FRAME } from './options.js';
import { concat, sameLayout } from './stripes.js';

/** Refusals by servers of another key epoch than the client's (`rotate`). */
export const EPOCH_CODES: ReadonlySet<string> = new Set(['CLUSTER_OUTDATED', 'SERVER_OUTDATED']);

/** An operation ended at its host: check its result, or whether it was allowed to fail. */
export async function judgeOutcome(clients: HonestClients, { client, run, opId, result, error }: Outcome): Promise<void> {
  const { options, checker, keys, byzantine } = clients.world;
  client.running.delete(opId);
  run.cancelGiveUp?.();
  run.cancelGiveUp = undefined;
  if (client.crashed) return;
  if (error !== undefined) {
    (run.op as { abandon?: () => void }).abandon?.();
    const what = run.listing ? 'listing' : `${run.record.kind} of ${run.record.key}`;
    if (!(error instanceof PowerStoreError)) {
      // The operation is dead; the client stops, and the run fails.
      checker.violations.push(`${client.name}'s ${what} threw: ${error instanceof Error ? error.message : JSON.stringify(error)}`);
      client.crashed = true;
      return;
    }
    if (
      error.code === 'QUORUM_UNREACHABLE' &&
      client.maxFrame < SIM_MAX_FRAME &&
      clients.stripedKeys.has(run.record.key) &&
      overLimitFromCorrect(error.message, byzantine)
    ) {
      // A reader with a small limit, a stripe too large for it at a correct server, and a
      // silent Byzantine one: no t + 1 answers over the limit to conclude VALUE_TOO_LARGE
      // from, and too few usable answers to go on, so the read runs out its time. The same
      // outcome as VALUE_TOO_LARGE, reached slowly (a known limit; the protocol README).
      clients.stats.tooLarge++;
      if (client.nextStart === undefined) clients.scheduleNext(client, false);
      return;
    }
    if (error.code === 'ABORTED' || error.code === 'QUORUM_UNREACHABLE') {
      // Given up after an allowed refusal, or timed out (which no correct client's operation should).
      const refusal = run.epochRefusal ?? run.refused;
      if (!refusal) {
        checker.violations.push(`${client.name}'s ${what} failed: ${error.code}: ${error.message}`);
      } else {
        if (run.epochRefusal) clients.stats.staleOps++;
        if (client.role !== 'reader') {
          checker.writeFailed(client.name, run.record.key, refusal, true);
          clients.writeEnded(client);
        }
      }
      if (client.nextStart === undefined) clients.scheduleNext(client, false);
      return;
    }
    if (error.code === 'VALUE_TOO_LARGE' && client.maxFrame < SIM_MAX_FRAME && clients.stripedKeys.has(run.record.key)) {
      // A reader with a small limit asked for a large stripe: it fails, as it must, and
      // stays out of the history, like any failed read.
      clients.stats.tooLarge++;
      if (client.nextStart === undefined) clients.scheduleNext(client, false);
      return;
    }
    const cause = error.cause;
    if (!(cause instanceof ProtocolError)) {
      checker.violations.push(`${client.name}'s ${what} failed: ${error.code}: ${error.message}`);
    } else if (run.assembly && cause.code === 'VALUE_CHANGED') {
      // The version being read was collected before its other stripes were: the read
      // fails (as a streaming get does) and stays out of the history, like any failed read.
      checker.valueChanged++;
    } else if (client.role === 'reader' && options.rotate && epochFailure(cause, byzantine)) {
      // Refused by servers of another key epoch: it fails, as it must, and stays out of the history.
      clients.stats.staleOps++;
    } else if (client.role === 'reader') {
      checker.violations.push(`${client.name}'s ${what} failed: ${cause.code}: ${cause.message}`);
    } else {
      const stale = options.rotate === true && epochFailure(cause, byzantine);
      if (stale) clients.stats.staleOps++;
      checker.writeFailed(client.name, run.record.key, cause, stale || allowedFailure(client, cause.code, run, cause.message, byzantine));
      clients.writeEnded(client);
    }
  } else if (run.listing) {
    checker.listDone(run.record, client.name, result as ListPage, keys);
  } else if (client.role === 'reader') {
    if (await readStripes(clients, client, run, result as ReadResult)) return;
  } else {
    if (run.stripes) clients.stats.stripedWritesDone++;
    checker.writeDone(run.record, client.name, result as WriteResult);
    clients.writeEnded(client);
  }
  if (client.nextStart === undefined) clients.scheduleNext(client, false);
}

/**
 * A read finished. A striped value is read whole: the first read named its version and
 * layout, each other stripe is read pinned to that version. Returns whether a further
 * stripe read is under way (the operation goes on).
 */
async function readStripes(clients: HonestClients, client: Client, run: Running, r: ReadResult): Promise<boolean> {
  const { protocol, config, crypto, codec, checker, streams } = clients.world;
  const a = run.assembly;
  if (!a) {
    if (!r.layout || !r.candidate) {
      checker.readDone(run.record, client.name, r);
      return false;
    }
    const count = r.layout.digests.length;
    const stripes = new Array<Uint8Array | undefined>(count).fill(undefined);
    stripes[r.stripe ?? 0] = r.value;
    const queue = Array.from({ length: count }, (_, i) => i).filter((i) => i !== (r.stripe ?? 0));
    run.assembly = { first: { ...r, layout: r.layout, candidate: r.candidate }, stripes, queue };
  } else {
    // A pinned read returns that version's stripe, or fails: never another version or stripe.
    const { first } = a;
    if (compareTimestamps(r.ts, first.ts) !== 0 || !r.layout || !sameLayout(r.layout, first.layout) || r.stripe !== a.asked)
      checker.violations.push(
        `pinned read: ${client.name} asked ${run.record.key} for stripe ${a.asked} at ${first.ts.num} and got stripe ${r.stripe} at ${r.ts.num}${r.layout ? '' : ' without a layout'}`,
      );
    a.stripes[a.asked!] = r.value;
  }
  const asm = run.assembly!;
  const next = asm.queue.shift();
  if (next === undefined) {
    const parts = asm.stripes.map((p) => p ?? new Uint8Array(0));
    checker.stripesRead(client.name, run.record.key, parts);
    checker.readDone(run.record, client.name, { ...asm.first, value: concat(parts) });
    return false;
  }
  asm.asked = next;
  const opId = client.nextOpId++;
  // Half the pinned reads pass the layout on (servers then answer without it).
  const op = protocol.reader({ config, crypto, codec, verifier: client.verifier }, run.record.key, opId, {
    stripe: next,
    pinned: asm.first.candidate,
    ...(streams.stripes.chance(0.5) ? { layout: asm.first.layout } : {}),
  });
  for (const [id, r2] of client.running) if (r2 === run) client.running.delete(id);
  run.op = op;
  client.running.set(opId, run);
  await clients.launch(client, run, opId);
  return true;
}

/**
 * Whether an operation's failure is the refusal of servers of another key epoch: its code,
 * or t + 1 refusals of different codes (`INTERNAL`), every correct server's among them an
 * epoch refusal or one the run allows anyway.
 */
function epochFailure(error: ProtocolError, byzantine: ReadonlySet<number>): boolean {
  if (EPOCH_CODES.has(error.code)) return true;
  if (error.code !== 'INTERNAL') return false;
  const codes = [...error.message.matchAll(/s(\d+): ([A-Z_]+) \(/g)].filter((m) => !byzantine.has(Number(m[1]) - 1)).map((m) => m[2]!);
  return (
    codes.some((c) => EPOCH_CODES.has(c)) &&
    codes.every((c) => EPOCH_CODES.has(c) || ['GRANT_EXPIRED', 'SUPERSEDED', 'STRIPES_MISSING'].includes(c))
  );
}

/**
 * The only ways an honest write may fail: the expiring grantee's grant has expired; or a
 * striped write, which cannot take a fresh timestamp (its stripes were pulled from a
 * source and are gone), was overtaken (`SUPERSEDED`), or its stripe 0 reached a server
 * before one of its other stripes did (`STRIPES_MISSING`: the simulated network does not
 * keep a link's messages in order, TCP does).
 */
export function allowedFailure(
  client: Client,
  code: string,
  run: Running | undefined,
  message = '',
  byzantine: ReadonlySet<number> = new Set(),
): boolean {
  const allowed = (c: string) =>
    (client.role === 'expiring' && c === 'GRANT_EXPIRED') ||
    (run?.stripes !== undefined && (c === 'SUPERSEDED' || c === 'STRIPES_MISSING'));
  // t + 1 refusals, some of each kind: `Rejections` reports them as INTERNAL, listing each
  // as `s<index + 1>`. What Byzantine servers gave as their reason does not matter: they
  // may refuse anything, and the correct servers' refusals must each be allowed.
  const codes = [...message.matchAll(/s(\d+): ([A-Z_]+) \(/g)].filter((m) => !byzantine.has(Number(m[1]) - 1)).map((m) => m[2]!);
  return allowed(code) || (code === 'INTERNAL' && codes.length > 0 && codes.every(allowed));
}

/** Whether a host's QUORUM_UNREACHABLE message names a correct server (1-based `sN`) as having sent a frame over the limit. */
function overLimitFromCorrect(message: string, byzantine: ReadonlySet<number>): boolean {
  for (const m of message.matchAll(/\bs(\d+) sent a frame over the limit/g)) if (!byzantine.has(Number(m[1]) - 1)) return true;
  return false;
}
