/**
 * How the client turns the protocol's errors into its own codes (and so the CLI's exit
 * status): by `ProtocolError.origin`, never by the message's words, which the protocol
 * may reword at any time.
 */
import { describe, expect, it } from 'vitest';
import { clusterConfig, ProtocolError, type ErrorReply } from '@powerstore/protocol';
import { Rejections } from '../../protocol/src/operations/rejections.js';
import { toClientError } from '../src/errors.js';
import { PowerStoreError } from '../src/index.js';

function refusal(code: ErrorReply['code'], message: string): ErrorReply {
  return { type: 'ERROR', key: 'k', opId: 1, code, message };
}

describe('errors by origin', () => {
  it("classifies the servers' refusal by origin, whatever its message says", () => {
    for (const code of ['INVALID_ARGUMENT', 'VALUE_TOO_LARGE'] as const) {
      const reworded = new ProtocolError(code, 'the cluster turned this down', { origin: 'servers' });
      const err = toClientError(reworded);
      expect(err).toBeInstanceOf(PowerStoreError);
      expect(err).toMatchObject({ code: code === 'INVALID_ARGUMENT' ? 'REJECTED' : 'VALUE_TOO_LARGE' });
      // This store's maxValueBytes is not what the servers refused over.
      expect(err.message).toBe('the cluster turned this down');
    }
  });

  it('classifies a local check as local even when its message reads like a refusal', () => {
    const local = toClientError(new ProtocolError('INVALID_ARGUMENT', 'key: 3 servers refused to accept this shape'));
    expect(local).toMatchObject({ code: 'INVALID_ARGUMENT', message: 'key: 3 servers refused to accept this shape' });
    const tooLarge = toClientError(new ProtocolError('VALUE_TOO_LARGE', 'servers refused nothing; the value is over the limit'));
    expect(tooLarge).toMatchObject({ code: 'VALUE_TOO_LARGE' });
    expect(tooLarge.message).toMatch(/\(connect's maxValueBytes\)$/);
  });

  it("marks what Rejections builds from more than t servers' refusals as theirs", () => {
    const config = clusterConfig(1);
    const agreeing = new Rejections();
    expect(agreeing.add(config, 0, refusal('INVALID_ARGUMENT', 'bad shape'))).toBeUndefined();
    const agreed = agreeing.add(config, 1, refusal('INVALID_ARGUMENT', 'bad shape'));
    expect(agreed).toMatchObject({ code: 'INVALID_ARGUMENT', origin: 'servers' });
    expect(toClientError(agreed)).toMatchObject({ code: 'REJECTED' });
    const differing = new Rejections();
    differing.add(config, 0, refusal('CONFLICT', 'x'));
    expect(differing.add(config, 2, refusal('QUOTA_EXCEEDED', 'y'))).toMatchObject({ code: 'INTERNAL', origin: 'servers' });
  });

  it('reports more than t servers whose disks failed (UNAVAILABLE) as QUORUM_UNREACHABLE', () => {
    const config = clusterConfig(1);
    const down = new Rejections();
    expect(down.add(config, 0, refusal('UNAVAILABLE', 'the disk is full'))).toBeUndefined();
    const failed = down.add(config, 3, refusal('UNAVAILABLE', 'the disk failed'));
    expect(failed).toMatchObject({ code: 'UNAVAILABLE', origin: 'servers' });
    expect(toClientError(failed)).toMatchObject({ code: 'QUORUM_UNREACHABLE' });
  });

  it("defaults to 'local', so existing callers of the two-argument constructor keep their meaning", () => {
    expect(new ProtocolError('INVALID_ARGUMENT', 'x').origin).toBe('local');
  });
});
