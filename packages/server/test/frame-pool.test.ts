import { describe, expect, it } from 'vitest';
import { FramePool } from '../src/frame-pool.js';

describe('FramePool', () => {
  it('lends large frames, takes each back once, and reuses it', () => {
    const pool = new FramePool();
    const a = pool.take(1_500_000);
    expect(a.length).toBeGreaterThanOrEqual(1_500_000);
    pool.give(a);
    // Given back twice: kept once, so two replies never share it.
    pool.give(a);
    const b = pool.take(1_000_000);
    expect(b.buffer).toBe(a.buffer);
    const c = pool.take(1_000_000);
    expect(c.buffer).not.toBe(a.buffer);
  });

  it('leaves small frames, huge frames and foreign buffers alone', () => {
    const pool = new FramePool();
    const small = pool.take(100);
    expect(small.length).toBe(100);
    pool.give(small);
    expect(pool.take(100).buffer).not.toBe(small.buffer);
    const foreign = new Uint8Array(2_000_000);
    pool.give(foreign);
    expect(pool.take(1_000_000).buffer).not.toBe(foreign.buffer);
    const huge = pool.take(20 * 1024 * 1024);
    pool.give(huge);
    expect(pool.take(20 * 1024 * 1024).buffer).not.toBe(huge.buffer);
  });
});
