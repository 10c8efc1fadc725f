/**
 * A preload (`node --import ./bench/support/commit-clock.mjs`) for a `baton serve` on SQLite, used by `bench/web.ts`
 * to time a live event from its real commit (not from its `createdAt`, stamped when the event was appended: in a
 * long unit of work, up to its whole length before the commit). It wraps better-sqlite3's statements: the
 * `global_seq` each `INSERT INTO thread_events ... RETURNING` returns is remembered until the transaction ends; at
 * `COMMIT` each is written to `BENCH_COMMIT_LOG` as `<globalSeq> <Date.now() after the COMMIT returned>` (a line
 * per event); at `ROLLBACK` they are forgotten. Savepoints (a nested unit of work) are inside the transaction and
 * change nothing here. Bench-only: nothing in Baton depends on it.
 */
import * as Fs from "node:fs"
import { createRequire } from "node:module"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

const log = process.env["BENCH_COMMIT_LOG"]
if (log !== undefined && log !== "") {
  // better-sqlite3 as Baton loads it: the dependency of @effect/sql-sqlite-node, a dependency of @baton/persistence.
  const persistence = Path.join(Path.dirname(fileURLToPath(import.meta.url)), "..", "..", "packages", "persistence", "package.json")
  const client = createRequire(persistence).resolve("@effect/sql-sqlite-node")
  const Database = createRequire(client)("better-sqlite3")
  const probe = new Database(":memory:")
  const Statement = Object.getPrototypeOf(probe.prepare("SELECT 1"))
  probe.close()
  const fd = Fs.openSync(log, "a")
  let inTransaction = []
  const all = Statement.all
  Statement.all = function(...params) {
    const rows = all.apply(this, params)
    if (this.source.startsWith("INSERT INTO thread_events")) for (const row of rows) inTransaction.push(row.global_seq)
    return rows
  }
  const run = Statement.run
  Statement.run = function(...params) {
    const result = run.apply(this, params)
    const source = this.source.trim().toUpperCase()
    if (source === "COMMIT") {
      if (inTransaction.length > 0) Fs.writeSync(fd, inTransaction.map((seq) => `${seq} ${Date.now()}\n`).join(""))
      inTransaction = []
    } else if (source === "ROLLBACK") {
      inTransaction = []
    }
    return result
  }
}
