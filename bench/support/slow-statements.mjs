/**
 * A preload (`node --import ./bench/support/slow-statements.mjs --import tsx bench/turn-start.bench.ts`) that writes
 * every better-sqlite3 statement of this thread slower than `SLOW_STATEMENT_MS` (default 3) to stderr as
 * `SLOWSQL <ms>ms <the statement's first 100 characters>`, e.g. to count the commits that ran a WAL checkpoint
 * (`... 2>&1 | grep SLOWSQL | awk '{print $3}' | sort | uniq -c`). It wraps the statements of the better-sqlite3 that
 * Baton loads on the main thread; the checkpoint worker's own connection (WalCheckpointer) is not wrapped.
 * Bench-only: nothing in Baton depends on it.
 */
import { createRequire } from "node:module"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

// better-sqlite3 as Baton loads it: the dependency of @effect/sql-sqlite-node, a dependency of @baton/persistence.
const persistence = Path.join(Path.dirname(fileURLToPath(import.meta.url)), "..", "..", "packages", "persistence", "package.json")
const client = createRequire(persistence).resolve("@effect/sql-sqlite-node")
const Database = createRequire(client)("better-sqlite3")
const limit = Number(process.env["SLOW_STATEMENT_MS"] ?? 3)
const prepare = Database.prototype.prepare
Database.prototype.prepare = function(source) {
  const statement = prepare.call(this, source)
  for (const method of ["run", "all", "get"]) {
    const original = statement[method]
    statement[method] = function(...args) {
      const start = performance.now()
      const result = original.apply(this, args)
      const ms = performance.now() - start
      if (ms > limit) process.stderr.write(`SLOWSQL ${ms.toFixed(1)}ms ${source.slice(0, 100).replace(/\s+/g, " ")}\n`)
      return result
    }
  }
  return statement
}
