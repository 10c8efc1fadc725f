/**
 * The dashboard's build: `pnpm build:web` (this package's `vite build`) writes `dist/`, which `baton serve` serves at
 * `/` (apps/server/src/WebApp.ts). JSX goes through Vite's own esbuild transform (the automatic runtime), so the build
 * needs no React plugin; what that costs is Fast Refresh in `vite dev`, which reloads the page instead.
 */
import { fileURLToPath } from "node:url"
import { defineConfig } from "vite"

export default defineConfig({
  root: fileURLToPath(new URL(".", import.meta.url)),
  base: "/",
  esbuild: { jsx: "automatic", jsxDev: false },
  // React's production build whatever NODE_ENV the builder inherits (vitest's global setup runs under NODE_ENV=test,
  // which Vite would otherwise pass on, bundling React's development build).
  define: { "process.env.NODE_ENV": JSON.stringify("production") },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    target: "es2022",
    // The app's chunk and the charts' (uPlot, loaded after the first screen: src/ThreadView.tsx), with their CSS.
    reportCompressedSize: false
  },
  server: { proxy: { "^/(threads|events|items|handoffs|runs|session|healthz)": "http://127.0.0.1:8787" } },
  logLevel: "warn"
})
