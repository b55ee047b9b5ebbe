/** `powerstore-server status`'s table and exit code, from hand-made `/status` answers. */
import { describe, expect, it } from 'vitest';
import type { StatusReport } from '../src/healing.js';
import { formatStatuses, healthy, policyDisagreement, statusExitCode, type ServerStatusLine } from '../src/status.js';

const report = (server: number, over: Partial<StatusReport> = {}): ServerStatusLine => ({
  id: server,
  url: `ws://127.0.0.1:${7000 + server}`,
  report: {
    server,
    status: 'ok',
    version: '0.1.0',
    disk: 'ok',
    freeBytes: 5 * 2 ** 30,
    connections: 1,
    keys: 3,
    entries: 4,
    bytes: 2048,
    ...over,
  },
});
const down = (id: number): ServerStatusLine => ({ id, url: `ws://127.0.0.1:${7000 + id}`, error: 'ECONNREFUSED' });

describe('status', () => {
  it('shows each server’s disk, free space and version beside what it holds', () => {
    const table = formatStatuses([report(1), report(2, { disk: 'full', freeBytes: 0 }), down(3)]);
    const [head, s1, s2, s3] = table.split('\n');
    expect(head).toMatch(/^server\s+up\s+disk\s+free\s+version\s+policy\s+catch-up/);
    expect(s1).toMatch(/^s1\s+up\s+ok\s+5\.0 GiB\s+0\.1\.0\s+-\s+off\s/);
    expect(s2).toMatch(/^s2\s+up\s+FULL\s+0 B\s+0\.1\.0/);
    expect(s3).toMatch(/^s3\s+DOWN\s+\(ECONNREFUSED\)$/);
  });

  it('shows each server’s policy version, and says when they differ and how to fix it', () => {
    const lines = [report(1, { policyVersion: 5 }), report(2, { policyVersion: 4 }), down(3), report(4, { policyVersion: 5 })];
    expect(formatStatuses(lines).split('\n')[2]).toMatch(/^s2\s+up\s+ok\s+5\.0 GiB\s+0\.1\.0\s+v4\s+off\s/);
    expect(policyDisagreement(lines)).toBe(
      'the servers hold different write policies (v5 on s1, s4; v4 on s2): `powerstore-server policy sync` gives every server the latest',
    );
    expect(policyDisagreement([report(1, { policyVersion: 5 }), down(2), report(3, { policyVersion: 5 })])).toBeUndefined();
  });

  it('exits 0 when every server is healthy, 1 when the quorum holds without some, 2 when it does not', () => {
    const need = 3; // n = 4, t = 1
    const all = [1, 2, 3, 4].map((i) => report(i));
    expect(statusExitCode(all, need)).toBe(0);
    expect(statusExitCode([...all.slice(0, 3), down(4)], need)).toBe(1);
    expect(statusExitCode([...all.slice(0, 3), report(4, { disk: 'failed' })], need)).toBe(1);
    expect(statusExitCode([...all.slice(0, 2), report(3, { disk: 'full' }), down(4)], need)).toBe(2);
    expect(statusExitCode([...all.slice(0, 2), report(3, { status: 'shutting-down' }), down(4)], need)).toBe(2);
    const rebuilding = report(4, {
      heal: { catchUp: { rebuilding: true } } as unknown as StatusReport['heal'],
    });
    expect(healthy(rebuilding)).toBe(false);
    expect(statusExitCode([...all.slice(0, 3), rebuilding], need)).toBe(1);
  });
});
