/**
 * A server's connection that goes silent (a partition that drops packets, a frozen host)
 * is presumed dead and reopened, where TCP alone would wait minutes; one that answers,
 * however slowly within the limit, is left alone.
 */
import { createServer, type Server, type Socket as TcpSocket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocketServer, type WebSocket } from 'ws';
import { ServerConnection, type ConnectionEvents } from '../src/host/connection.js';

const LIVENESS = { silenceMs: 400, connectTimeoutMs: 300 };
const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0)) c();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(what: string, ok: () => boolean, ms = 5_000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/** A WebSocket server on loopback that answers each frame after `delayMs` (never, if undefined), counting connections. */
async function server(delayMs: number | undefined): Promise<{ url: string; connections: WebSocket[] }> {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise<void>((r) => wss.once('listening', () => r()));
  const connections: WebSocket[] = [];
  wss.on('connection', (ws) => {
    connections.push(ws);
    ws.on('message', (data: Buffer) => {
      if (delayMs !== undefined) setTimeout(() => ws.readyState === ws.OPEN && ws.send(data), delayMs);
    });
  });
  cleanups.push(() => wss.close());
  return { url: `ws://127.0.0.1:${(wss.address() as AddressInfo).port}`, connections };
}

function connection(url: string): { link: ServerConnection; opened: () => number; frames: () => number } {
  let opened = 0;
  let frames = 0;
  const events: ConnectionEvents = {
    onFrame: () => frames++,
    onOpen: () => opened++,
    onStatus: () => {},
    onOversized: () => {},
  };
  const link = new ServerConnection(0, url, 1 << 20, events, LIVENESS);
  cleanups.push(() => link.close());
  return { link, opened: () => opened, frames: () => frames };
}

describe('ServerConnection liveness', () => {
  it('drops a connection that owes an answer and stays silent, and reopens it', async () => {
    const { url, connections } = await server(undefined);
    const c = connection(url);
    await until('open', () => c.opened() === 1);
    expect(c.link.send(new Uint8Array([1, 2, 3]), 1 << 20)).toBe(true);
    await until('a second connection', () => c.opened() === 2, 3_000);
    expect(connections.length).toBe(2);
    expect(c.link.status().lastError ?? '').toBe(''); // cleared by the reopen
  });

  it('leaves alone a connection that answers within the limit, and one that owes nothing', async () => {
    const { url, connections } = await server(LIVENESS.silenceMs / 2);
    const c = connection(url);
    await until('open', () => c.opened() === 1);
    // Idle for well past the limit: nothing is owed, so silence means nothing.
    await sleep(LIVENESS.silenceMs * 2);
    // Then a steady stream of requests, each answered after half the limit.
    for (let i = 0; i < 6; i++) {
      c.link.send(new Uint8Array([i]), 1 << 20);
      await sleep(LIVENESS.silenceMs / 4);
    }
    await until('every answer', () => c.frames() === 6);
    await sleep(LIVENESS.silenceMs);
    expect(c.opened()).toBe(1);
    expect(connections.length).toBe(1);
  });

  it('does not blame the server for time this process spent frozen: the answer waiting is read first', async () => {
    const { url, connections } = await server(50);
    const c = connection(url);
    await until('open', () => c.opened() === 1);
    c.link.send(new Uint8Array([1]), 1 << 20);
    // The event loop stalls for well past the limit (as a stopped or suspended process
    // does), while the answer arrives in the socket's buffer.
    const until_ = Date.now() + LIVENESS.silenceMs * 3;
    while (Date.now() < until_);
    await until('the answer', () => c.frames() === 1);
    await sleep(LIVENESS.silenceMs / 2);
    expect(c.opened()).toBe(1);
    expect(connections.length).toBe(1);
  });

  it('gives up on a connection that does not open in time, and tries again', async () => {
    // Accepts TCP, never answers the WebSocket handshake: a frozen process, or a SYN
    // answered by a middlebox.
    const accepted: TcpSocket[] = [];
    const tcp: Server = createServer((s) => accepted.push(s));
    await new Promise<void>((r) => tcp.listen(0, '127.0.0.1', () => r()));
    cleanups.push(() => {
      accepted.forEach((s) => s.destroy());
      tcp.close();
    });
    const c = connection(`ws://127.0.0.1:${(tcp.address() as AddressInfo).port}`);
    await until('three attempts', () => accepted.length >= 3, 5_000);
    expect(c.opened()).toBe(0);
    expect(c.link.status().lastError).toMatch(/not connected after 300 ms/);
  });
});
