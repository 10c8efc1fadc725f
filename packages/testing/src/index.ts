export * as Harness from "./Harness.js"
export * as Simulation from "./Simulation.js"
