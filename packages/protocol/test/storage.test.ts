import { describe, expect, it } from 'vitest';
import { MemoryStorage, storageConformance, type KeyRecord, type ServerStorage } from '../src/index.js';

describe('MemoryStorage conformance', () => {
  for (const check of storageConformance(() => new MemoryStorage())) it(check.name, check.run);
});

describe('the conformance suite', () => {
  it('fails a backend without per-key serialization', async () => {
    // Same records, but callbacks run as soon as they are called.
    const unlocked = (): ServerStorage => {
      const inner = new MemoryStorage();
      const views = new Map<string, KeyRecord>();
      void inner.withKey('k', async (r) => views.set('k', r));
      return { withKey: async (key, fn) => fn(views.get(key)!) };
    };
    const check = storageConformance(unlocked).find((c) => c.name.startsWith('callbacks on one key'))!;
    await expect(check.run()).rejects.toThrow(/storage conformance/);
  });
});
