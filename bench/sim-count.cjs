/**
 * Preload for `pnpm sim` figures (bench/README.md "Simulator throughput"): counts better-sqlite3 statement
 * executions (`run`/`all`/`get`/`iterate`) and, at exit, prints them with the process's CPU time since the first
 * statement (the soak's start: module loading excluded; every thread of the process included) and in all. Run from
 * the repository root:
 *
 *   node -r ./bench/sim-count.cjs --import tsx apps/cli/src/sim.ts --seeds 10 --seed-start 1900 --steps 40 --no-shrink
 */
const path = require("node:path")
const fs = require("node:fs")
const dir = path.join(process.cwd(), "node_modules/.pnpm")
const pkg = fs.readdirSync(dir).find((d) => d.startsWith("better-sqlite3@"))
const Database = require(path.join(dir, pkg, "node_modules/better-sqlite3"))
const db = new Database(":memory:")
const Statement = Object.getPrototypeOf(db.prepare("SELECT 1"))
db.close()
let statements = 0
let cpuAtFirst = null
for (const method of ["run", "all", "get", "iterate"]) {
  const original = Statement[method]
  Statement[method] = function(...args) {
    if (cpuAtFirst === null) cpuAtFirst = process.cpuUsage()
    statements++
    return original.apply(this, args)
  }
}
process.on("exit", () => {
  const since = process.cpuUsage(cpuAtFirst ?? undefined)
  const all = process.cpuUsage()
  process.stderr.write(`statements ${statements}; CPU since the first statement ${((since.user + since.system) / 1e6).toFixed(2)} s; ` +
    `CPU in all ${((all.user + all.system) / 1e6).toFixed(2)} s\n`)
})
