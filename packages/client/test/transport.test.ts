/**
 * `connect` refuses plaintext `ws://` to hosts that are not loopback unless told
 * `allowInsecure`, before any traffic.
 */
import { describe, expect, it } from 'vitest';
import { encodePublicKey, parseClusterFile, toBase32 } from '@powerstore/protocol';
import { connect, PowerStoreError } from '../src/index.js';
import { checkTransport, insecureServers } from '../src/transport.js';

/** A well-formed cluster file whose servers have these URLs (keys are placeholders: nothing is contacted). */
function clusterJson(urls: readonly string[]) {
  return {
    version: 2,
    id: toBase32(new Uint8Array(16).fill(7)),
    admin: encodePublicKey(new Uint8Array(32).fill(1)),
    t: 1,
    n: 4,
    servers: urls.map((url, i) => ({ id: i + 1, url, publicKey: encodePublicKey(new Uint8Array(32).fill(i + 2)) })),
  };
}
const cluster = (urls: readonly string[]) => parseClusterFile(clusterJson(urls));
const four = (url: (i: number) => string) => [1, 2, 3, 4].map(url);

function refusal(fn: () => void): PowerStoreError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(PowerStoreError);
    return e as PowerStoreError;
  }
  throw new Error('accepted');
}

describe('checkTransport', () => {
  it('accepts ws:// to loopback hosts in every spelling, and wss:// anywhere', () => {
    for (const host of ['127.0.0.1', 'localhost', '127.3.4.5', '[::1]', '127.1', '[0:0:0:0:0:0:0:1]', 'LocalHost']) {
      expect(() => checkTransport(cluster(four((i) => `ws://${host}:${7000 + i}`)), undefined), host).not.toThrow();
    }
    for (const host of ['10.0.0.1', 'example.com', '[2001:db8::1]']) {
      expect(() => checkTransport(cluster(four((i) => `wss://${host}:${7000 + i}`)), false), host).not.toThrow();
    }
  });

  it('refuses ws:// to any other host, naming the servers, wss:// and allowInsecure', () => {
    for (const host of ['10.0.0.1', 'example.com', '0.0.0.0', '192.168.1.10', '[2001:db8::1]', 'localhost.example.com']) {
      const err = refusal(() => checkTransport(cluster(four((i) => `ws://${host}:${7000 + i}`)), undefined));
      expect(err.code, host).toBe('INVALID_ARGUMENT');
      expect(err.message).toMatch(/^cluster: s1 ws:\/\/.*plaintext.*wss:\/\/.*allowInsecure: true/);
    }
    // One server of four is enough to refuse: it would see every operation.
    const mixed = cluster(['ws://127.0.0.1:7001', 'wss://10.0.0.2:7002', 'ws://10.0.0.3:7003', 'ws://127.0.0.1:7004']);
    expect(insecureServers(mixed)).toEqual([{ id: 3, url: 'ws://10.0.0.3:7003', publicKey: expect.any(String) as string }]);
    expect(refusal(() => checkTransport(mixed, false)).message).toMatch(/^cluster: s3 ws:\/\/10\.0\.0\.3:7003: /);
  });

  it('accepts anything with allowInsecure: true, and only a boolean there', () => {
    expect(() => checkTransport(cluster(four((i) => `ws://10.0.0.1:${7000 + i}`)), true)).not.toThrow();
    expect(refusal(() => checkTransport(cluster(four((i) => `ws://10.0.0.1:${7000 + i}`)), 'yes')).message).toContain(
      'allowInsecure must be a boolean',
    );
  });
});

describe('connect', () => {
  it('refuses plaintext to example.com before any traffic, and tries it with allowInsecure', async () => {
    const remote = clusterJson(four((i) => `ws://example.com:${7000 + i}`));
    const started = Date.now();
    await expect(connect({ cluster: remote, timeoutMs: 60_000 })).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
      message: expect.stringContaining('allowInsecure') as string,
    });
    expect(Date.now() - started).toBeLessThan(5_000);
    // Allowed, it goes on to the network: 192.0.2.0/24 is reserved for documentation, nobody answers.
    const unreachable = clusterJson(four((i) => `ws://192.0.2.1:${7000 + i}`));
    await expect(connect({ cluster: unreachable, allowInsecure: true, timeoutMs: 300 })).rejects.toMatchObject({
      code: 'QUORUM_UNREACHABLE',
    });
  });
});
