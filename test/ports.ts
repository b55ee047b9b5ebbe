/** Free loopback ports for servers the tests and the bench start (no dependencies, so both can import it). */
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

async function portFree(port: number): Promise<boolean> {
  return new Promise((done) => {
    const s = createServer();
    s.once('error', () => done(false));
    s.listen(port, '127.0.0.1', () => s.close(() => done(true)));
  });
}

/**
 * Where base ports are drawn from: below the kernel's ephemeral range (Linux:
 * `ip_local_port_range`, 32768–60999 by default), since any outgoing connection may take a
 * port there between our check and the server's listen (CI saw EADDRINUSE that way).
 */
function portRange(): { low: number; high: number } {
  try {
    const [ephemeralLow] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
    if (ephemeralLow !== undefined && ephemeralLow > 12_000) return { low: 10_000, high: ephemeralLow };
  } catch {
    // Not Linux: the range of old.
  }
  return { low: 20_000, high: 50_000 };
}

/** A base port with `count` consecutive free ports after it, chosen at random to avoid other runs. */
export async function freeBasePort(count: number): Promise<number> {
  const { low, high } = portRange();
  for (let attempt = 0; attempt < 50; attempt++) {
    const base = low + Math.floor(Math.random() * (high - low - count));
    let ok = true;
    for (let p = base; p < base + count && ok; p++) ok = await portFree(p);
    if (ok) return base;
  }
  throw new Error('no free ports');
}
