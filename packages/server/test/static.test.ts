/**
 * The demo's static server (`dev --static`) answers only loopback `Host`s when it listens
 * on loopback: a DNS-rebinding page, whose requests carry its own name, gets 421.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startStaticServer, type StaticServer } from '../src/index.js';
import { loopbackHostHeader } from '../src/static.js';

const root = mkdtempSync(join(tmpdir(), 'powerstore-static-'));
let server: StaticServer;
let port: number;

beforeAll(async () => {
  writeFileSync(join(root, 'index.html'), '<h1>demo</h1>');
  writeFileSync(join(root, 'cluster.json'), '{"n":4}');
  server = await startStaticServer({ root, clusterJson: join(root, 'cluster.json'), host: '127.0.0.1', port: 0 });
  port = Number(new URL(server.url).port);
});

afterAll(async () => {
  await server?.close();
  rmSync(root, { recursive: true, force: true });
});

/** A GET with exactly this `Host` header (fetch would set its own). */
function get(path: string, host: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, headers: { host }, setHost: false }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

it('answers loopback Hosts, with no port or its own', async () => {
  for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, 'localhost', '127.0.0.1', `[::1]:${port}`, `LOCALHOST:${port}`]) {
    const r = await get('/', host);
    expect(r, host).toEqual({ status: 200, body: '<h1>demo</h1>' });
  }
  expect((await get('/cluster.json', `127.0.0.1:${port}`)).body).toBe('{"n":4}');
});

it('refuses any other Host with 421, for the page and the cluster file alike', async () => {
  for (const host of [
    `evil.example:${port}`,
    'evil.example',
    `127.0.0.1:${port + 1}`,
    `10.0.0.1:${port}`,
    `evil.example@127.0.0.1:${port}`,
    `127.0.0.1.nip.io:${port}`,
    '',
  ]) {
    for (const path of ['/', '/cluster.json']) {
      const r = await get(path, host);
      expect(r.status, `${host} ${path}`).toBe(421);
      expect(r.body).toMatch(/^misdirected request/);
      expect(r.body).not.toContain('demo');
    }
  }
});

it('reads the Host header strictly', () => {
  expect(loopbackHostHeader('127.0.0.1:7000', 7000)).toBe(true);
  expect(loopbackHostHeader('127.0.0.2', 7000)).toBe(true);
  expect(loopbackHostHeader('[::1]', 7000)).toBe(true);
  expect(loopbackHostHeader(undefined, 7000)).toBe(false);
  expect(loopbackHostHeader('localhost:7001', 7000)).toBe(false);
  expect(loopbackHostHeader('localhost:', 7000)).toBe(false);
  expect(loopbackHostHeader('localhost:7000/x', 7000)).toBe(false);
  expect(loopbackHostHeader('user@localhost:7000', 7000)).toBe(false);
});
