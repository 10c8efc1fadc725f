export * as Harness from "./Harness.js"
export * as Simulation from "./Simulation.js"
export * as ConcurrentSends from "./ConcurrentSends.js"
export * as Prng from "./internal/Prng.js"
