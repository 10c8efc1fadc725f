// @ts-check
/**
 * ESLint for every package, app and the benchmarks (`pnpm lint`; CI's `pnpm check` runs it from
 * scripts/typecheck.mjs).
 *
 * Type-aware: one TypeScript program over `tsconfig.lint.json` plus the dashboard's two, used only by the promise rules
 * below. Run alone, ESLint builds and type-checks them itself (about 55 s of CPU more than without types); `pnpm check`
 * hands it the programs its typecheck already built (`parserOptions.programs`). The rest of `recommendedTypeChecked`
 * is left off: on this code it reports ~250 "unnecessary" non-null assertions and `String(unknown)` in error messages,
 * noise rather than bugs. Effect-specific checks (floating Effects, missing error or context types, `unknown` in an
 * error channel) come from `@effect/language-service`, configured in tsconfig.base.json and run by `pnpm typecheck`
 * (scripts/typecheck.mjs).
 */
import js from "@eslint/js"
import tseslint from "typescript-eslint"

/** The files typed by the program over tsconfig.lint.json (`scripts/typecheck.mjs --lint` hands ESLint its program). */
export const typedFiles = [
  "packages/*/{src,test}/**/*.ts",
  "apps/*/{src,test}/**/*.ts",
  "bench/*.ts",
  "bench/test/*.ts",
  "scripts/test/*.ts"
]
/** The dashboard's files, typed by its own programs (apps/web/tsconfig.json and tsconfig.test.json). */
export const dashboardFiles = ["apps/web/src/**/*.{ts,tsx}", "apps/web/test/**/*.ts"]

export default tseslint.config(
  { ignores: ["**/node_modules/**", "**/.turbo/**", "**/*.tmp.ts", "**/*.tmp.mts", "tmp-breaker/**", "**/.test-bundle/**", "apps/web/dist/**", "apps/web/test-results/**"] },
  {
    files: typedFiles,
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
    files: dashboardFiles,
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
