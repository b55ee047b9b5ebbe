/**
 * What the production operation host (`@powerstore/client/host`) runs on in the
 * simulator: a virtual clock whose timers the scheduler fires in time order, and links
 * that put frames on the seeded network. Honest clients are the client's own host on
 * these, so rounds, wire ids, resends after a reconnect, held FILTERs, fragment timers,
 * timeouts and aborts are the code users run.
 */
import type { CancelTimer, Clock, Link, ServerState, ServerStatus } from '@powerstore/client/host';

interface Timer {
  readonly at: number;
  readonly seq: number;
  readonly fire: () => void;
}

/** Virtual time: `now` is the network's; timers wait in a queue the scheduler drains in order. */
export class SimClock implements Clock {
  readonly #timers: Timer[] = [];
  #seq = 0;

  constructor(private readonly time: { readonly now: number }) {}

  now(): number {
    return this.time.now;
  }

  setTimer(ms: number, fire: () => void): CancelTimer {
    const timer: Timer = { at: this.time.now + Math.max(0, ms), seq: this.#seq++, fire };
    this.#timers.push(timer);
    return () => {
      const i = this.#timers.indexOf(timer);
      if (i >= 0) this.#timers.splice(i, 1);
    };
  }

  /** When the next timer is due, if one is armed. */
  get nextAt(): number | undefined {
    return this.#next()?.at;
  }

  /** Fires the earliest timer (the first armed among those due together). */
  fireNext(): void {
    const timer = this.#next();
    if (!timer) return;
    this.#timers.splice(this.#timers.indexOf(timer), 1);
    timer.fire();
  }

  #next(): Timer | undefined {
    let best: Timer | undefined;
    for (const t of this.#timers) if (!best || t.at < best.at || (t.at === best.at && t.seq < best.seq)) best = t;
    return best;
  }
}

/**
 * A client's link to one server. `connection` counts its connections: a reply sent on an
 * older one is never delivered, as on a WebSocket that closed.
 */
export class SimLink implements Link {
  state: ServerState = 'open';
  readonly bufferedBytes = 0;
  connection = 0;
  lastError: string | undefined;
  misbehaving: string | undefined;
  /** How often the host blamed this server. */
  blames = 0;

  constructor(
    readonly index: number,
    private readonly put: (frame: Uint8Array, connection: number) => boolean,
    private readonly onBlame: (reason: string) => void,
  ) {}

  send(frame: Uint8Array): boolean {
    return this.state === 'open' && this.put(frame, this.connection);
  }

  markMisbehaving(reason: string): void {
    this.misbehaving = reason;
    this.blames++;
    this.onBlame(reason);
  }

  noteRoundTrip(): void {}

  status(): ServerStatus {
    return {
      id: this.index + 1,
      url: `sim://s${this.index}`,
      state: this.state,
      lastError: this.lastError,
      misbehaving: this.misbehaving,
      bufferedBytes: 0,
      lastRoundTripMs: undefined,
    };
  }

  /** The connection dropped (`reason`); what was on its way back on it is lost. */
  drop(reason: string): void {
    if (this.state !== 'open') return;
    this.state = 'closed';
    this.lastError = reason;
  }

  /** A new connection is up: the caller then tells the host (`opened`). */
  reopen(): void {
    this.state = 'open';
    this.connection++;
  }

  close(): void {
    this.state = 'closed';
  }
}
