/** Free loopback ports for servers the tests and the bench start (no dependencies, so both can import it). */
import { createServer } from 'node:net';

async function portFree(port: number): Promise<boolean> {
  return new Promise((done) => {
    const s = createServer();
    s.once('error', () => done(false));
    s.listen(port, '127.0.0.1', () => s.close(() => done(true)));
  });
}

/** A base port with `count` consecutive free ports after it, chosen at random to avoid other runs. */
export async function freeBasePort(count: number): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const base = 20_000 + Math.floor(Math.random() * 30_000);
    let ok = true;
    for (let p = base; p < base + count && ok; p++) ok = await portFree(p);
    if (ok) return base;
  }
  throw new Error('no free ports');
}
