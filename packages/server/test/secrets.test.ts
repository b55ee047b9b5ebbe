/**
 * Secret files: no error and no log line carries any part of a key, and a secret file
 * other users may read is reported with the fix.
 */
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { decodeBase64url, encodeMessage } from '@powerstore/protocol';
import { ConfigError, initCluster, loadServerConfig, secretFileWarning, startServer } from '../src/index.js';

const root = mkdtempSync(join(tmpdir(), 'powerstore-secrets-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let dirs = 0;
const fresh = () => join(root, `c${dirs++}`);

/** Every 10-character piece of the secret's encodings (base64url as in the file, base64, hex). */
function secretPieces(base64url: string): string[] {
  const bytes = Buffer.from(decodeBase64url(base64url, 32, 'secret'));
  const pieces: string[] = [];
  for (const text of [base64url, bytes.toString('base64'), bytes.toString('hex')]) {
    for (let i = 0; i + 10 <= text.length; i++) pieces.push(text.slice(i, i + 10));
  }
  return pieces;
}

function expectNoSecret(text: string, secret: string): void {
  const leaked = secretPieces(secret).filter((p) => text.includes(p));
  expect(leaked, text).toEqual([]);
}

async function errorOf(p: Promise<unknown>): Promise<Error> {
  try {
    await p;
  } catch (e) {
    return e as Error;
  }
  throw new Error('resolved');
}

describe('secret files', () => {
  it('a broken server file gives the file and the line and column or field, never a piece of the key', async () => {
    const r = await initCluster({ t: 1, dir: fresh() });
    const file = r.serverFiles[0]!;
    const text = readFileSync(file, 'utf8');
    const obj = JSON.parse(text) as Record<string, unknown>;
    const secret = String(obj.secretKey);
    const at = text.indexOf(secret);
    const cases: [string, RegExp][] = [
      // Cut in the middle of the key (a truncated copy).
      [text.slice(0, at + 20), /not valid JSON \(at line \d+, column \d+\)/],
      // A trailing comma after the key (a hand edit).
      [text.replace(`"${secret}"`, `"${secret}",`), /not valid JSON \(at line 8, column 1\)/],
      // A stray token right after the key: V8 quotes the text around such errors.
      [text.replace(`"${secret}"`, `"${secret}" x`), /not valid JSON/],
      [`["${secret}",]`, /not valid JSON/],
      // The key pasted into the wrong field.
      [JSON.stringify({ ...obj, port: secret }), /field "port": must be an integer in 0\.\.65535, got a string of 43 characters/],
      [JSON.stringify({ ...obj, version: secret }), /field "version"/],
      [JSON.stringify({ ...obj, host: `${secret} x` }), /field "host": not a host name or address$/],
      [JSON.stringify({ ...obj, cluster: { secretKey: secret } }), /field "cluster": must be a non-empty string, got an object/],
    ];
    for (const [content, message] of cases) {
      writeFileSync(file, content);
      const err = await errorOf(loadServerConfig(file));
      expect(err, content).toBeInstanceOf(ConfigError);
      expect(err.message).toContain(file);
      expect(err.message).toMatch(message);
      expectNoSecret(`${err.message}\n${err.stack ?? ''}`, secret);
    }
  });

  it('warns, with the file, its mode and the chmod that fixes it, when others may read a server file; loads it anyway', async () => {
    const r = await initCluster({ t: 1, dir: fresh() });
    const file = r.serverFiles[1]!;
    expect((await loadServerConfig(file)).warnings).toEqual([]);
    expect(secretFileWarning(r.adminFile)).toBeUndefined();
    for (const mode of [0o644, 0o640, 0o604]) {
      chmodSync(file, mode);
      const loaded = await loadServerConfig(file);
      expect(loaded.id).toBe(2);
      expect(loaded.warnings).toHaveLength(1);
      const w = loaded.warnings[0]!;
      expect(w).toMatchObject({ file, mode: `0${mode.toString(8)}` });
      expect(w.message).toContain(file);
      expect(w.message).toContain(`0${mode.toString(8)}`);
      expect(w.message).toContain(`chmod 600 ${file}`);
    }
    chmodSync(r.adminFile, 0o660);
    expect(secretFileWarning(r.adminFile)?.message).toContain(`chmod 600 ${r.adminFile}`);
    expect(secretFileWarning(join(root, 'missing.json'))).toBeUndefined();
  });

  it('a server logging at trace level prints no piece of its receipt key, through start, traffic, errors and close', async () => {
    const r = await initCluster({ t: 1, dir: fresh() });
    const secret = (JSON.parse(readFileSync(r.serverFiles[0]!, 'utf8')) as { secretKey: string }).secretKey;
    const config = await loadServerConfig(r.serverFiles[0]!);
    let logs = '';
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        logs += chunk.toString();
        done();
      },
    });
    const logger = pino({ level: 'trace' }, sink);
    const server = await startServer({
      cluster: config.cluster,
      index: 0,
      seed: config.seed,
      host: '127.0.0.1',
      port: 0,
      dataDir: join(root, 'trace-data'),
      logger,
    });
    try {
      const http = server.url.replace(/^ws/, 'http');
      await (await fetch(`${http}/healthz`)).text();
      await (await fetch(`${http}/metrics`)).text();
      await (await fetch(`${http}/nope`)).text();
      const ws = new WebSocket(server.url, { perMessageDeflate: false });
      await new Promise<void>((resolve, reject) => {
        ws.once('open', () => resolve());
        ws.once('error', reject);
      });
      const replies = new Promise<void>((resolve) => {
        let n = 0;
        ws.on('message', () => ++n === 3 && resolve());
      });
      ws.send(encodeMessage({ type: 'CLOCK', key: 'k', opId: 1 }));
      ws.send(new Uint8Array([1, 2, 3]));
      ws.send('text frame');
      await replies;
      ws.close();
      await new Promise((resolve) => ws.once('close', resolve));
    } finally {
      await server.close();
    }
    // The capture works: the server did log (at least that it listens and stops).
    expect(logs.split('\n').filter(Boolean).length).toBeGreaterThan(1);
    expectNoSecret(logs, secret);
  });
});
