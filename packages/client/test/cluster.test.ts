/**
 * `connect` judges cluster files exactly as servers do (the protocol's one validator), and
 * says which of its inputs is at fault in `error.source`, before any traffic.
 */
import { describe, expect, it } from 'vitest';
import { ClusterFileError } from '@powerstore/protocol';
import { acceptedClusterFiles, refusedClusterFiles, validClusterFile } from '@powerstore/protocol/testing';
import { parseCluster } from '../src/cluster.js';
import { connect, Identity, PowerStoreError } from '../src/index.js';

async function refusal(p: Promise<unknown>): Promise<PowerStoreError> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(PowerStoreError);
    return e as PowerStoreError;
  }
  throw new Error('accepted');
}

describe('cluster files', () => {
  // The protocol's own cases (packages/protocol/test/cluster-file-cases.ts), which the
  // server's loader runs too.
  it.each(acceptedClusterFiles())('accepts what servers accept: %s', (_name, file) => {
    expect(parseCluster(file).file).toMatchObject({ version: 2 });
  });

  it.each(refusedClusterFiles())('refuses at connect what servers refuse, naming the field: %s', async (_name, file, field) => {
    const err = await refusal(connect({ cluster: file as object, timeoutMs: 100 }));
    expect(err).toMatchObject({ code: 'INVALID_ARGUMENT', source: 'cluster' });
    expect(err.message).toMatch(/^cluster: /);
    expect(err.cause).toBeInstanceOf(ClusterFileError);
    expect((err.cause as ClusterFileError).field).toBe(field);
  });
});

describe('error.source', () => {
  it('names the identity, the grants or the cluster; other bad arguments have none', async () => {
    const cluster = validClusterFile();
    const identity = (
      await refusal(connect({ cluster, identity: { kind: 'powerstore-identity', version: 2, publicKey: 'x', secretKey: 'y' } }))
    ).source;
    expect(identity).toBe('identity');
    const me = await Identity.generate();
    expect((await refusal(connect({ cluster, identity: me, grants: [{}] }))).source).toBe('grants');
    expect((await refusal(connect({ cluster, identity: me, grants: {} as never }))).source).toBe('grants');
    const remote = { ...cluster, servers: cluster.servers.map((s, i) => ({ ...s, url: `ws://192.0.2.1:${7001 + i}` })) };
    expect((await refusal(connect({ cluster: remote }))).source).toBe('cluster');
    const usage = await refusal(connect({ cluster, timeoutMs: -1 }));
    expect(usage).toMatchObject({ code: 'INVALID_ARGUMENT', source: undefined });
    expect((await refusal(connect({ cluster: remote, allowInsecure: 'yes' as never }))).source).toBeUndefined();
  });
});
