import { defineConfig } from 'vitest/config';

// Workspace packages resolve to their TypeScript sources (the `@powerstore/source`
// export condition), so tests never run a stale build. Vitest resolves Node-side
// modules through the SSR environment, which has its own conditions.
const conditions = ['@powerstore/source', 'node', 'import', 'default'];

export default defineConfig({
  resolve: { conditions },
  ssr: { resolve: { conditions, externalConditions: conditions } },
  test: {
    include: ['packages/*/test/**/*.test.ts', 'test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
  },
});
