export * as Harness from "./Harness.js"
