/**
 * The admission rules on their own, without sockets: connection caps per server and per
 * address, the memory budget and the address share, progress for a lone large request,
 * and waiting users told when room comes back.
 */
import { describe, expect, it } from 'vitest';
import { Admission, type BudgetUser } from '../src/admission.js';

const limits = { maxConnections: 3, maxConnectionsPerAddress: 2, maxBufferedBytes: 1000, maxBufferedBytesPerAddress: 600 };

describe('Admission', () => {
  it('caps connections per server (server_full) and per address (address_full), and gives slots back', () => {
    const a = new Admission(limits);
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
    const a = new Admission(limits);
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
    const a = new Admission(limits);
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
    const a = new Admission(limits);
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
