// ESLint, type-aware (typescript-eslint), over every TypeScript file the type check
// covers; formatting is Prettier's (eslint-config-prettier turns off the rules it owns).
import js from '@eslint/js';
import prettier from 'eslint-config-prettier';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      '**/node_modules/**',
      '**/dist/**',
      'wasm/.cache/**',
      'wasm/generated/**',
      'packages/erasure/src/wasm/**',
      'bench/results/**',
      'bench/erasure/ronomon/**',
      'test-results/**',
      'examples/web/dist/**',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      // Off: many methods are async because their interface is (a storage backend, a
      // crypto provider, a protocol step that may verify); an implementation with nothing
      // to await is still right to return a promise.
      '@typescript-eslint/require-await': 'off',
      // Unused parameters and destructured names are allowed when named `_…`.
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', destructuredArrayIgnorePattern: '^_' },
      ],
    },
  },
  {
    // A page script run in the browser by the tests.
    files: ['test/browser/fixtures/**'],
    languageOptions: { globals: globals.browser },
  },
  {
    // Plain JavaScript (scripts, configs): no type information.
    files: ['**/*.js', '**/*.mjs', '**/*.cjs'],
    ...tseslint.configs.disableTypeChecked,
    languageOptions: { parserOptions: { projectService: false }, globals: globals.node },
  },
  prettier,
);
