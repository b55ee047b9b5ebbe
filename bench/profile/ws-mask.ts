/**
 * What a client→server WebSocket frame costs to send with ws as the PowerStore client
 * configures it (a random mask per frame, masked in JavaScript unless the optional
 * `bufferutil` addon is installed), against the same send with an all-zero mask (ws then
 * skips masking). Every byte a client sends pays this, which is why the bytes a protocol
 * makes the client send (full values in ABD's write-back; n fragments in PowerStore's
 * STORE) show up as client CPU in the profile.
 */
import { createRequire } from 'node:module';
import { WebSocket, WebSocketServer } from 'ws';
import { round } from '../lib/stats.js';

export interface MaskResult {
  readonly frameBytes: number;
  readonly frames: number;
  /** Mean ms per frame inside ws.send(), and from first send to the last frame received. */
  readonly randomMask: { readonly sendMs: number; readonly totalMs: number };
  readonly zeroMask: { readonly sendMs: number; readonly totalMs: number };
  readonly bufferutil: boolean;
}

export async function measureMasking(frameBytes = 256 * 1024, frames = 100): Promise<MaskResult> {
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1', perMessageDeflate: false });
  await new Promise<void>((r) => wss.once('listening', () => r()));
  let got = 0;
  wss.on('connection', (ws) => ws.on('message', () => got++));
  const port = (wss.address() as { port: number }).port;
  const frame = new Uint8Array(frameBytes);
  globalThis.crypto.getRandomValues(frame.subarray(0, Math.min(frameBytes, 65536)));
  const run = async (zero: boolean) => {
    const ws = new WebSocket(`ws://127.0.0.1:${port}`, {
      perMessageDeflate: false,
      ...(zero ? { generateMask: (m: Buffer) => void m.fill(0) } : {}),
    });
    await new Promise<void>((r, j) => ws.once('open', () => r()).once('error', j));
    got = 0;
    let sendMs = 0;
    const t0 = performance.now();
    for (let i = 0; i < frames; i++) {
      const a = performance.now();
      ws.send(frame, { binary: true });
      sendMs += performance.now() - a;
      if (i % 4 === 3) await new Promise((r) => setImmediate(r));
    }
    for (let i = 0; i < 10_000 && got < frames; i++) await new Promise((r) => setTimeout(r, 1));
    const totalMs = performance.now() - t0;
    ws.close();
    return { sendMs: round(sendMs / frames, 3), totalMs: round(totalMs / frames, 3) };
  };
  try {
    const randomA = await run(false);
    const zeroA = await run(true);
    const randomB = await run(false);
    const zeroB = await run(true);
    const mid = (a: { sendMs: number; totalMs: number }, b: { sendMs: number; totalMs: number }) => ({
      sendMs: round((a.sendMs + b.sendMs) / 2, 3),
      totalMs: round((a.totalMs + b.totalMs) / 2, 3),
    });
    let bufferutil = false;
    try {
      // Resolved from ws's own location: that is where ws looks for it (as a peer).
      const require = createRequire(import.meta.url);
      createRequire(require.resolve('ws'))('bufferutil');
      bufferutil = true;
    } catch {
      // not installed: ws masks in JavaScript
    }
    return { frameBytes, frames, randomMask: mid(randomA, randomB), zeroMask: mid(zeroA, zeroB), bufferutil };
  } finally {
    await new Promise<void>((r) => wss.close(() => r()));
  }
}
