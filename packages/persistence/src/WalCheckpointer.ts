/**
 * WalCheckpointer: SQLite's WAL checkpoints on a worker thread instead of inside a unit of work's `COMMIT`.
 *
 * Why: in WAL mode SQLite appends each commit to `<file>-wal`; by default (`wal_autocheckpoint` = 1,000 pages) the
 * commit that takes the WAL past 1,000 pages also copies it back into the database file and syncs both, in the
 * committing call. better-sqlite3 is synchronous, so that checkpoint (4-7 ms on this machine, measured with
 * `bench/turn-start.bench.ts` and a statement timer: 94 of a 10,000-item bench's commits over 3 ms, 2 without it)
 * held the whole server's event loop: every request, event stream and turn waited behind it, and it landed in one
 * turn's or gateway request's time at random (their p99).
 *
 * How: each SQLite file Baton opens (`Database.layerSqlite`, not `:memory:`) is registered here for as long as its
 * Layer lives. One worker thread per process (started with the first file, `unref`'d: it never keeps the process
 * alive) opens its own connection to each registered file (the same better-sqlite3 the SQL client loads) and, every
 * `intervalMs`, runs `PRAGMA wal_checkpoint(PASSIVE)` on each file whose WAL changed since its last look. A passive
 * checkpoint takes no writer's lock: the process's commits go on while it copies, and it copies only what no reader
 * still needs; the next commit after a complete checkpoint rewinds the WAL, so it stays about one interval of writes
 * long. The connections' own automatic checkpoint is raised to `fallbackPages` (a safety net should the worker be
 * gone: the WAL still cannot grow without bound), not turned off.
 *
 * Durability is unchanged: a checkpoint only moves committed pages from the WAL into the database file; a process
 * killed mid-checkpoint leaves both consistent (SQLite's own guarantee). Several processes on one file each
 * checkpoint it; a checkpoint that finds another one running does nothing that time.
 */
import { Effect } from "effect"
import { createRequire } from "node:module"
import * as Path from "node:path"
import { Worker } from "node:worker_threads"

/** How often the worker looks at each registered file's WAL (ms). */
export const intervalMs = 100
/** The connections' own automatic checkpoint threshold, in pages (SQLite's default is 1,000): a safety net only. */
export const fallbackPages = 10_000

/** A file's checkpoint count as the worker reports it (`stats`). */
export interface FileStats {
  /** Passive checkpoints the worker ran on this file. */
  readonly checkpoints: number
  /** Checkpoints that failed (the file gone, another checkpoint running, a lock): retried at the next interval. */
  readonly failures: number
}

const workerSource = `
const { parentPort, workerData } = require("node:worker_threads")
const Fs = require("node:fs")
const Database = require(workerData.driver)
const files = new Map()
parentPort.on("message", (m) => {
  if (m.add !== undefined && !files.has(m.add)) files.set(m.add, { db: null, ino: 0, seen: "" })
  if (m.remove !== undefined) {
    const f = files.get(m.remove)
    files.delete(m.remove)
    if (f !== undefined && f.db !== null) { try { f.db.close() } catch {} }
  }
})
setInterval(() => {
  for (const [file, f] of files) {
    let stat
    try { stat = Fs.statSync(file + "-wal") } catch { continue }
    const seen = stat.size + ":" + stat.mtimeMs
    if (seen === f.seen) continue
    try {
      // A file removed and made again at the path (another inode): the connection to the removed one is closed (SQLite
      // skips its checkpoint-and-delete on close for a moved file, so the new file's -wal and -shm stay).
      const ino = Fs.statSync(file).ino
      if (f.db !== null && f.ino !== ino) { try { f.db.close() } catch {} f.db = null }
      if (f.db === null) { f.db = new Database(file, { fileMustExist: true, timeout: 0 }); f.ino = ino }
      f.db.pragma("wal_checkpoint(PASSIVE)")
      f.seen = seen
      parentPort.postMessage({ file, ok: true })
    } catch (e) {
      parentPort.postMessage({ file, ok: false, message: String(e && e.message) })
    }
  }
}, workerData.intervalMs)
`

let worker: Worker | null = null
/** How many times a worker that died was started again (see `start`). */
let restarts = 0
/** The most restarts of a dead worker in a process's life. */
const maxRestarts = 5
const held = new Map<string, number>()
const counts = new Map<string, { checkpoints: number; failures: number }>()

/** The better-sqlite3 entry point `@effect/sql-sqlite-node` loads (the same native driver, not a second copy). */
const driverPath = () => {
  const require = createRequire(import.meta.url)
  return require.resolve("better-sqlite3", { paths: [Path.dirname(require.resolve("@effect/sql-sqlite-node"))] })
}

const start = (): Worker => {
  const w = new Worker(workerSource, { eval: true, workerData: { driver: driverPath(), intervalMs } })
  w.on("message", (m: { file: string; ok: boolean }) => {
    const c = counts.get(m.file) ?? { checkpoints: 0, failures: 0 }
    counts.set(m.file, m.ok ? { ...c, checkpoints: c.checkpoints + 1 } : { ...c, failures: c.failures + 1 })
  })
  // A worker that dies is started again at once while files are held (up to `maxRestarts` times in the process's
  // life, so a worker that cannot run is not restarted in a loop), else by the next registration; meanwhile
  // `fallbackPages` bounds the WAL.
  const gone = () => {
    if (worker !== w) return
    worker = null
    if (held.size > 0 && restarts < maxRestarts) {
      restarts++
      try {
        worker = start()
      } catch {
        worker = null
      }
    }
  }
  w.on("error", gone)
  w.on("exit", gone)
  // After the listeners: adding a "message" listener refs the worker's port again (the process would then wait for
  // the worker before it exits).
  w.unref()
  for (const file of held.keys()) w.postMessage({ add: file })
  return w
}

/**
 * Registers `filename` (a SQLite database file in WAL mode) with the process's checkpoint worker for the current
 * scope; the last release of a file closes the worker's connection to it. Never fails: without a worker (it could not
 * start) the connections' automatic checkpoint (`fallbackPages`) still bounds the WAL.
 */
export const hold = (filename: string) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const file = Path.resolve(filename)
      held.set(file, (held.get(file) ?? 0) + 1)
      try {
        if (worker === null) worker = start()
        else if (held.get(file) === 1) worker.postMessage({ add: file })
      } catch {
        worker = null
      }
      return file
    }),
    (file) =>
      Effect.sync(() => {
        const n = (held.get(file) ?? 1) - 1
        if (n > 0) return void held.set(file, n)
        held.delete(file)
        worker?.postMessage({ remove: file })
      })
  )

/**
 * Stops the running worker as if it had died (tests: a dead worker is started again while files are held). Resolves
 * when it has exited.
 */
export const terminateWorkerForTest = (): Promise<void> => worker === null ? Promise.resolve() : worker.terminate().then(() => undefined)

/** What the worker did for `filename` so far (zeros for a file it never checkpointed). */
export const stats = (filename: string): FileStats => counts.get(Path.resolve(filename)) ?? { checkpoints: 0, failures: 0 }
