/**
 * `powerstore-server status --cluster cluster.json`: every server's `GET /status` side by
 * side, for an operator watching a rebuild: up or not, catch-up state, the last pass, what
 * each server holds, and scrub's findings. The answers are each server's own word (a
 * Byzantine server can say anything about itself); what a server *stores* is checked by
 * the protocol, not by this page.
 */
import { quorum, type Cluster } from '@powerstore/protocol';
import type { StatusReport } from './healing.js';

/** One server's answer, or why there is none. */
export type ServerStatusLine = { readonly id: number; readonly url: string } & (
  { readonly report: StatusReport } | { readonly error: string }
);

/** Asks every server of `cluster` for `GET /status` (5 s each, in parallel). */
export async function fetchStatuses(cluster: Cluster, timeoutMs = 5000): Promise<ServerStatusLine[]> {
  return Promise.all(
    cluster.servers.map(async (s) => {
      const url = `${s.url.replace(/^ws/, 'http')}/status`;
      try {
        const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
        if (!res.ok) return { id: s.id, url: s.url, error: `HTTP ${res.status}` };
        return { id: s.id, url: s.url, report: (await res.json()) as StatusReport };
      } catch (err) {
        const cause = (err as { cause?: { code?: string; message?: string } }).cause;
        return { id: s.id, url: s.url, error: cause?.code ?? cause?.message ?? (err as Error).message };
      }
    }),
  );
}

/** Bytes for people: KiB, MiB, GiB. */
export function humanBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${v} B` : `${v.toFixed(v >= 100 ? 0 : 1)} ${units[u]}`;
}

function ago(iso: string | undefined, now: number): string {
  if (!iso) return '-';
  const s = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (s < 120) return `${s} s ago`;
  if (s < 7200) return `${Math.round(s / 60)} min ago`;
  if (s < 172800) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

/** The table `status` prints. */
export function formatStatuses(lines: readonly ServerStatusLine[], now = Date.now()): string {
  const rows: string[][] = [
    [
      'server',
      'up',
      'disk',
      'free',
      'version',
      'policy',
      'catch-up',
      'last complete pass',
      'progress',
      'keys',
      'entries',
      'bytes',
      'scrub',
    ],
  ];
  for (const l of lines) {
    if ('error' in l) {
      rows.push([`s${l.id}`, 'DOWN', `(${l.error})`, '', '', '', '', '', '', '', '', '', '']);
      continue;
    }
    const r = l.report;
    const c = r.heal?.catchUp;
    const pass = c?.pass;
    const last = c?.lastPass;
    const progress = pass
      ? `${pass.keysChecked} keys checked, ${pass.writesRepaired} repaired (${humanBytes(pass.bytesRepaired)})`
      : last
        ? `last pass: ${last.keysChecked} keys, ${last.writesRepaired} repaired${
            last.pendingRepaired ? ` (and ${last.pendingRepaired} under way)` : ''
          } in ${(last.seconds ?? 0).toFixed(1)} s${
            Object.keys(last.failures).length
              ? `, failed: ${Object.entries(last.failures)
                  .map(([k, v]) => `${v} ${k}`)
                  .join(', ')}`
              : ''
          }`
        : '-';
    const s = r.heal?.scrub;
    const scrub = !s ? '-' : !s.enabled ? 'off' : `${s.fragments} checked, ${s.damaged} damaged, ${s.repaired} repaired`;
    rows.push([
      `s${l.id}`,
      r.status === 'ok' ? 'up' : r.status,
      r.disk === 'ok' ? 'ok' : r.disk.toUpperCase(),
      r.freeBytes === undefined ? '-' : humanBytes(r.freeBytes),
      r.version,
      r.policyVersion === undefined ? '-' : `v${r.policyVersion}`,
      c ? c.state : 'off',
      ago(c?.lastCompletePass, now),
      progress,
      String(r.keys),
      String(r.entries),
      humanBytes(r.bytes),
      scrub,
    ]);
  }
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)));
  return rows
    .map((row) =>
      row
        .map((cell, i) => cell.padEnd(widths[i]!))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

/**
 * Whether a server is healthy: it answered, is not shutting down, its disk is fine, and it
 * is not rebuilding (a rebuilding server counts against t until its first complete pass).
 */
export function healthy(l: ServerStatusLine): boolean {
  return 'report' in l && l.report.status === 'ok' && l.report.disk === 'ok' && !l.report.heal?.catchUp.rebuilding;
}

/** `status`'s exit code: 0 every server healthy, 1 some not but `n − t` are (the quorum holds), 2 fewer (operations fail). */
export function statusExitCode(lines: readonly ServerStatusLine[], need: number): 0 | 1 | 2 {
  const ok = lines.filter(healthy).length;
  return ok === lines.length ? 0 : ok >= need ? 1 : 2;
}

/**
 * A line when the servers that answered hold different write policies (a change some
 * missed while down), naming who holds which version; `undefined` when they agree.
 */
export function policyDisagreement(lines: readonly ServerStatusLine[]): string | undefined {
  const byVersion = new Map<number, string[]>();
  for (const l of lines)
    if ('report' in l && l.report.policyVersion !== undefined)
      byVersion.set(l.report.policyVersion, [...(byVersion.get(l.report.policyVersion) ?? []), `s${l.id}`]);
  if (byVersion.size < 2) return undefined;
  const held = [...byVersion].sort(([a], [b]) => b - a).map(([v, ids]) => `v${v} on ${ids.join(', ')}`);
  return `the servers hold different write policies (${held.join('; ')}): \`powerstore-server policy sync\` gives every server the latest`;
}

/** `powerstore-server status`: prints the table (or JSON); the exit code is {@link statusExitCode}'s. */
export async function runStatus(cluster: Cluster, json: boolean): Promise<void> {
  const lines = await fetchStatuses(cluster);
  const need = quorum(cluster.config);
  const ok = lines.filter(healthy).length;
  if (json) process.stdout.write(`${JSON.stringify(lines, null, 2)}\n`);
  else {
    process.stdout.write(`${formatStatuses(lines)}\n`);
    process.stdout.write(
      `\n${ok} of ${lines.length} servers healthy; operations need ${need}: ${
        ok === lines.length ? 'all well' : ok >= need ? 'the quorum holds, with less room for faults' : 'NO QUORUM: reads and writes fail'
      }\n`,
    );
    const policies = policyDisagreement(lines);
    if (policies) process.stdout.write(`\n${policies}.\n`);
    const rebuilding = lines.filter((l) => 'report' in l && l.report.heal?.catchUp.rebuilding).map((l) => `s${l.id}`);
    if (rebuilding.length > 0) {
      process.stdout.write(
        `\n${rebuilding.join(', ')} ${rebuilding.length > 1 ? 'are' : 'is'} rebuilding: until ${rebuilding.length > 1 ? 'their' : 'its'} first complete catch-up pass ${rebuilding.length > 1 ? 'they count' : 'it counts'} against t (the faulty servers the cluster tolerates).\n`,
      );
    }
  }
  process.exitCode = statusExitCode(lines, need);
}
