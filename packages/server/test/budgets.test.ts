/**
 * The server's budgets on their own, without sockets: connection caps per server and per
 * address, the memory budget and the address share, progress for a lone large request,
 * and waiting users told when room comes back; LIST slots taken in turns by address.
 */
import { describe, expect, it } from 'vitest';
import { ListSlots, MemoryBudget, type BudgetUser } from '../src/budgets.js';

const limits = { maxConnections: 3, maxConnectionsPerAddress: 2, maxBufferedBytes: 1000, maxBufferedBytesPerAddress: 600 };

describe('MemoryBudget', () => {
  it('caps connections per server (server_full) and per address (address_full), and gives slots back', () => {
    const a = new MemoryBudget(limits);
    expect(a.openConnection('10.0.0.1')).toBeUndefined();
    expect(a.openConnection('10.0.0.1')).toBeUndefined();
    expect(a.openConnection('10.0.0.1')).toBe('address_full');
    expect(a.openConnection('10.0.0.2')).toBeUndefined();
    expect(a.openConnection('10.0.0.3')).toBe('server_full');
    a.closeConnection('10.0.0.1');
    expect(a.openConnection('10.0.0.3')).toBeUndefined();
    expect(a.stats()).toMatchObject({ connections: 3, addresses: 3 });
    for (const addr of ['10.0.0.1', '10.0.0.2', '10.0.0.3']) a.closeConnection(addr);
    expect(a.stats()).toMatchObject({ connections: 0, addresses: 0 });
  });

  it('reserves within the budget and the address share; a lone request always starts', () => {
    const a = new MemoryBudget(limits);
    expect(a.tryReserve('x', 'requests', 500)).toBe(true);
    // The address share (600) is the limit for x, not the budget (1000).
    expect(a.tryReserve('x', 'requests', 200)).toBe(false);
    expect(a.tryReserve('y', 'requests', 450)).toBe(true);
    // Budget: 950 used; 100 more does not fit for anyone.
    expect(a.tryReserve('z', 'requests', 100)).toBe(false);
    expect(a.full).toBe(false);
    a.release('x', 'requests', 500);
    a.release('y', 'requests', 450);
    // Nothing held: one request larger than the whole budget still starts.
    expect(a.tryReserve('z', 'requests', 5000)).toBe(true);
    expect(a.full).toBe(true);
    expect(a.tryReserve('w', 'requests', 1)).toBe(false);
    a.release('z', 'requests', 5000);
    expect(a.used).toBe(0);
  });

  it('counts partial frames against the budget but not the address share', () => {
    const a = new MemoryBudget(limits);
    a.add('x', 'partial', 800);
    expect(a.tryReserve('x', 'requests', 100)).toBe(true);
    expect(a.tryReserve('y', 'requests', 200)).toBe(false);
    expect(a.tryReserve('y', 'requests', 100)).toBe(true);
    expect(a.full).toBe(true);
    expect(a.stats().buffered).toEqual({ partial: 800, requests: 200, replies: 0 });
    a.release('x', 'partial', 800);
    expect(a.full).toBe(false);
  });

  it('tells waiting users, first come first told, when bytes come back; a user that stops waiting is not told', () => {
    const a = new MemoryBudget(limits);
    const told: string[] = [];
    const user = (name: string): BudgetUser => ({ retry: () => told.push(name) });
    const first = user('first');
    const second = user('second');
    const gone = user('gone');
    expect(a.tryReserve('x', 'replies', 600)).toBe(true);
    a.wait(first);
    a.wait(gone);
    a.wait(second);
    a.stopWaiting(gone);
    expect(a.stats().waiting).toBe(2);
    a.release('x', 'replies', 100);
    expect(told).toEqual(['first', 'second']);
    expect(a.stats().waiting).toBe(0);
  });
});

describe('ListSlots', () => {
  /** A connection of `address` holding `lists` LISTs, starting one whenever it is told it may. */
  function connection(slots: ListSlots, address: string, lists: number, log: string[]) {
    const user: BudgetUser & { left: number } = {
      left: lists,
      retry() {
        while (user.left > 0) {
          if (!slots.canStart(address)) return slots.wait(address, user);
          slots.start(address);
          user.left--;
          log.push(address);
        }
      },
    };
    user.retry();
    return user;
  }

  it('runs at most the limit at once and one per address; waiting addresses take turns, so a busy one gets no more than the others', () => {
    const slots = new ListSlots(2);
    const log: string[] = [];
    // The attacker's 16 LISTs over two connections, then three other clients' one each.
    connection(slots, 'attacker', 8, log);
    connection(slots, 'attacker', 8, log);
    for (const name of ['alice', 'bob', 'carol']) connection(slots, name, 1, log);
    // One of the attacker's runs, and alice's; the attacker's other 15 wait, as do bob and carol.
    expect(log).toEqual(['attacker', 'alice']);
    expect(slots.stats()).toEqual({ running: 2, waiting: 4 });
    expect(slots.canStart('dave')).toBe(false);
    // Alice's slot goes to bob: the attacker, first in line, already has one running.
    slots.finish('alice');
    expect(log.slice(2)).toEqual(['bob']);
    // The attacker's LIST ends: its turn (it waited first), then it goes to the back, behind carol.
    slots.finish('attacker');
    expect(log.slice(3)).toEqual(['attacker']);
    slots.finish('bob');
    expect(log.slice(4)).toEqual(['carol']);
    slots.finish('carol');
    // With only the attacker left, its LISTs run one at a time.
    expect(slots.stats()).toEqual({ running: 1, waiting: 2 });
    for (let i = 0; i < 14; i++) slots.finish('attacker');
    expect(log.filter((a) => a === 'attacker')).toHaveLength(16);
    slots.finish('attacker');
    expect(slots.stats()).toEqual({ running: 0, waiting: 0 });
  });

  it('forgets a user that stops waiting (its connection closed)', () => {
    const slots = new ListSlots(1);
    const log: string[] = [];
    connection(slots, 'a', 1, log);
    const gone = connection(slots, 'b', 1, log);
    connection(slots, 'c', 1, log);
    slots.stopWaiting('b', gone);
    slots.finish('a');
    expect(log).toEqual(['a', 'c']);
  });
});
