// @ts-check
/**
 * ESLint for every package, app and the benchmarks (`pnpm lint`, run by CI after the typecheck).
 *
 * Type-aware: one TypeScript program over `tsconfig.lint.json` (about 17 s of CPU for the whole repository), used only
 * by the promise rules below. The rest of `recommendedTypeChecked` is left off: on this code it reports ~250
 * "unnecessary" non-null assertions and `String(unknown)` in error messages, noise rather than bugs. Effect-specific
 * checks (floating Effects, missing error or context types, `unknown` in an error channel) come from
 * `@effect/language-service`, configured in tsconfig.base.json and run by `pnpm typecheck` (scripts/typecheck.mjs).
 */
import js from "@eslint/js"
import tseslint from "typescript-eslint"

export default tseslint.config(
  { ignores: ["**/node_modules/**", "**/.turbo/**", "**/*.tmp.ts", "**/*.tmp.mts", "tmp-breaker/**", "**/.test-bundle/**", "apps/web/dist/**", "apps/web/test-results/**"] },
  {
    files: ["packages/*/{src,test}/**/*.ts", "apps/*/{src,test}/**/*.ts", "bench/*.ts", "bench/test/*.ts", "scripts/test/*.ts"],
    extends: [js.configs.recommended, ...tseslint.configs.recommended],
    languageOptions: {
      parserOptions: {
        project: "./tsconfig.lint.json",
        tsconfigRootDir: import.meta.dirname
      }
    },
    linterOptions: { reportUnusedDisableDirectives: "error" },
    rules: {
      // STYLE.md, Errors: no `any`.
      "@typescript-eslint/no-explicit-any": "error",
      // A leading underscore marks a binding kept on purpose (e.g. a property removed from a rest spread).
      "@typescript-eslint/no-unused-vars": [
        "error",
        { argsIgnorePattern: "^_", varsIgnorePattern: "^_", caughtErrorsIgnorePattern: "^_", ignoreRestSiblings: true }
      ],
      "@typescript-eslint/consistent-type-imports": ["error", { fixStyle: "inline-type-imports" }],
      // Promises appear at the edges (tests, benchmarks, the CLI's entry points); a dropped one is a swallowed failure.
      "@typescript-eslint/no-floating-promises": "error",
      "@typescript-eslint/no-misused-promises": "error",
      "@typescript-eslint/await-thenable": "error"
    }
  },
  {
    // The dashboard (browser code with JSX, and its browser tests) is typed by its own programs.
    files: ["apps/web/src/**/*.{ts,tsx}", "apps/web/test/**/*.ts"],
    extends: [js.configs.recommended, ...tseslint.configs.recommended],
    languageOptions: {
      parserOptions: {
        project: ["./apps/web/tsconfig.json", "./apps/web/tsconfig.test.json"],
        tsconfigRootDir: import.meta.dirname
      }
    }
  },
  {
    // STYLE.md, Errors: production code fails with tagged errors and never throws. Tests may throw to fail a test.
    files: ["packages/*/src/**/*.ts", "apps/*/src/**/*.ts"],
    rules: {
      "no-restricted-syntax": [
        "error",
        { selector: "ThrowStatement", message: "No throw (STYLE.md, Errors): fail with a tagged error instead." }
      ]
    }
  }
)
