/**
 * `powerstore get` when the value's stream fails part way, which a real cluster does only
 * under load or attack: after some stripes the stream errors with VALUE_CHANGED (the
 * version being read was collected) or TAMPERED (a stripe failed authentication). The CLI
 * runs in-process (main()) against a store whose getStream is scripted; everything else
 * of the client is real.
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { PowerStoreError, type Store, type ValueStream } from '@powerstore/client';

/** What the scripted store's getStream delivers: chunks, then an error (or the end). */
const script: { chunks: Uint8Array[]; error?: PowerStoreError; pulls: number } = { chunks: [], pulls: 0 };

vi.mock('@powerstore/client', async (importOriginal) => {
  const real = await importOriginal<typeof import('@powerstore/client')>();
  const store: Partial<Store> = {
    namespace: undefined,
    close: () => {},
    getStream: (): Promise<ValueStream> => {
      const size = script.chunks.reduce((n, c) => n + c.length, 0) + (script.error ? 1024 : 0);
      let i = 0;
      const stream = new ReadableStream<Uint8Array>({
        pull(controller) {
          script.pulls++;
          if (i < script.chunks.length) controller.enqueue(script.chunks[i++]);
          else if (script.error) controller.error(script.error);
          else controller.close();
        },
      });
      return Promise.resolve({ size, start: 0, end: size, stream });
    },
  };
  return { ...real, connect: () => Promise.resolve(store as Store) };
});

const { main } = await import('../../packages/cli/src/main.js');

let dir: string;
let stderr: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'powerstore-cli-failures-'));
  writeFileSync(join(dir, 'cluster.json'), '{}');
  vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
    stderr += chunk.toString();
    return true;
  });
});
afterAll(() => {
  vi.restoreAllMocks();
  rmSync(dir, { recursive: true, force: true });
});

const get = (target: string) => {
  stderr = '';
  script.pulls = 0;
  return main(['--cluster', join(dir, 'cluster.json'), '--no-progress', 'get', 'k', target]);
};
const chunk = (byte: number) => new Uint8Array(256 * 1024).fill(byte);

it('exits 9 on VALUE_CHANGED part way, saying so, and leaves no file (an existing one as it was)', async () => {
  script.chunks = [chunk(1), chunk(2), chunk(3)];
  script.error = new PowerStoreError('VALUE_CHANGED', 'the value of "k" was overwritten while it was read');
  const out = join(dir, 'changed');
  mkdirSync(out);
  expect(await get(join(out, 'new.bin'))).toBe(9);
  expect(stderr).toContain('VALUE_CHANGED: the value of "k" was overwritten');
  expect(stderr).toContain('was not written: run get again');
  // The bytes before the error were pulled (and written to the temporary file), then removed.
  expect(script.pulls).toBeGreaterThanOrEqual(4);
  expect(readdirSync(out)).toEqual([]);
  writeFileSync(join(out, 'kept.bin'), 'old');
  expect(await get(join(out, 'kept.bin'))).toBe(9);
  expect(readdirSync(out)).toEqual(['kept.bin']);
  expect(readFileSync(join(out, 'kept.bin'), 'utf8')).toBe('old');
});

it('exits 8 on TAMPERED part way, with no file left', async () => {
  script.chunks = [chunk(7)];
  script.error = new PowerStoreError('TAMPERED', 'stripe 1 failed authentication');
  const out = mkdtempSync(join(dir, 'tampered-'));
  expect(await get(join(out, 'x.bin'))).toBe(8);
  expect(stderr).toContain('TAMPERED: stripe 1 failed authentication');
  expect(readdirSync(out)).toEqual([]);
});

it('writes every chunk, in order, when the stream ends', async () => {
  script.chunks = [chunk(1), chunk(2), new Uint8Array([9])];
  delete script.error;
  const out = mkdtempSync(join(dir, 'ok-'));
  expect(await get(join(out, 'x.bin'))).toBe(0);
  expect(Buffer.compare(readFileSync(join(out, 'x.bin')), Buffer.concat([chunk(1), chunk(2), new Uint8Array([9])]))).toBe(0);
  expect(readdirSync(out)).toEqual(['x.bin']);
});
