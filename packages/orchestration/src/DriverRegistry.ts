/**
 * DriverRegistry: this orchestrator incarnation as a run driver on the shared database. Each incarnation (a process,
 * or a restart of the orchestrator within one) registers a `drivers` row with its host, pid and heartbeat when its
 * Layer is built, and marks it stopped when the Layer is released. Runs record the driver that accepted them, then
 * the driver that claimed them to run, and native threads the driver holding their provider session, so two
 * processes on one database agree on who owns what without any process-local set.
 *
 * Liveness of another driver (`isAlive`), in order:
 * - an incarnation of this process still running (its Layer not released) is alive;
 * - a stopped driver, or an earlier incarnation of this process, is gone;
 * - a driver on this host (this host name and pid namespace: `hostIdentity`) is alive while its pid is (signal 0);
 * - a driver on another host is alive while its heartbeat is younger than `driverLeaseMillis` (default 30 s,
 *   refreshed every third of it).
 * The first rule needs a process-local set of incarnations: it is the one fact that is process-local by nature.
 *
 * It does not decide what to do with a gone driver's runs: ThreadService.recover does.
 */
import { type DriverRecord, ThreadStore, UnitOfWork } from "@baton/persistence"
import { DateTime, Duration, Effect, Schedule } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import { IdGenerator } from "./IdGenerator.js"
import { OrchestratorConfig } from "./OrchestratorConfig.js"

/**
 * This host as driver rows name it: the host name and, on Linux, the process's pid namespace (`/proc/self/ns/pid`,
 * e.g. `pid:[4026531836]`). Two processes that share a host name but not a pid namespace (containers with host
 * networking) cannot see each other's pids: judged by `kill(pid, 0)` each found the other gone and ended its runs in
 * flight (every `goneDriverSweepMillis`, review r43). With the namespace in the name they are other hosts to each
 * other, judged by their heartbeats. Where the namespace cannot be read, the host name alone.
 */
export const hostIdentity = (): string => {
  try {
    return `${Os.hostname()} ${Fs.readlinkSync("/proc/self/ns/pid")}`
  } catch {
    return Os.hostname()
  }
}

/** Driver ids of the incarnations running in this process (their Layer is built and not yet released). */
const runningHere = new Set<string>()

/** Whether a process with `pid` exists on this host (signal 0 checks without signalling; EPERM: it exists). */
const pidAlive = (pid: number) =>
  Effect.sync(() => {
    try {
      process.kill(pid, 0)
      return true
    } catch (e) {
      return (e as { readonly code?: unknown }).code === "EPERM"
    }
  })

export class DriverRegistry extends Effect.Service<DriverRegistry>()("@baton/orchestration/DriverRegistry", {
  scoped: Effect.gen(function*() {
    const store = yield* ThreadStore
    const uow = yield* UnitOfWork
    const ids = yield* IdGenerator
    const config = yield* OrchestratorConfig
    const host = hostIdentity()
    const driverId = ids.next("drv")
    const now = yield* DateTime.now
    yield* uow.global("DriverRegistry.register")(store.insertDriver({
      id: driverId,
      host,
      pid: process.pid,
      startedAt: now,
      heartbeatAt: now,
      stoppedAt: null
    }))
    runningHere.add(driverId)
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => runningHere.delete(driverId)).pipe(
        Effect.zipRight(Effect.flatMap(DateTime.now, (at) => uow.global("DriverRegistry.stop")(store.touchDriver(driverId, at, true)))),
        Effect.ignore
      )
    )
    const lease = config.driverLeaseMillis
    if (lease > 0) {
      yield* Effect.forkScoped(
        Effect.flatMap(DateTime.now, (at) => uow.global("DriverRegistry.heartbeat")(store.touchDriver(driverId, at, false))).pipe(
          Effect.ignore,
          Effect.repeat(Schedule.spaced(Duration.millis(Math.max(1, Math.floor(lease / 3)))))
        )
      )
    }

    const aliveRecord = (d: DriverRecord) =>
      Effect.gen(function*() {
        if (runningHere.has(d.id)) return true
        if (d.stoppedAt !== null) return false
        if (d.host === host) return d.pid === process.pid ? false : yield* pidAlive(d.pid)
        if (lease <= 0) return true
        const at = yield* DateTime.now
        return DateTime.distance(d.heartbeatAt, at) < lease
      })

    return {
      /** This incarnation's driver id (`drv_…`). */
      driverId,
      /**
       * Which of `driverIds` are alive (see the module doc). An unknown id (no row) counts as gone; `null` (a run
       * accepted before drivers were recorded) as gone too.
       */
      aliveAmong: (driverIds: ReadonlyArray<string | null>) =>
        Effect.gen(function*() {
          const wanted = [...new Set(driverIds.filter((d): d is string => d !== null))]
          const records = yield* store.getDrivers(wanted)
          const alive = new Set<string>()
          for (const r of records) if (yield* aliveRecord(r)) alive.add(r.id)
          return alive
        })
    }
  })
}) {}
