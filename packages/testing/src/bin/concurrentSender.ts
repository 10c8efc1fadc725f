/**
 * One sender process of the concurrent-sends acceptance (see `ConcurrentSends`):
 *
 *   node --import tsx packages/testing/src/bin/concurrentSender.ts '<SenderConfig JSON>' <summary file>
 *
 * Builds its own orchestrator on the shared database, runs `ConcurrentSends.sendAll`, writes the `SenderSummary`
 * JSON to the summary file and exits 0; exits 1 (the cause on stderr) when the orchestrator cannot be built.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Effect } from "effect"
import * as Fs from "node:fs"
import * as ConcurrentSends from "../ConcurrentSends.js"

const config = JSON.parse(process.argv[2] ?? "{}") as ConcurrentSends.SenderConfig
const out = process.argv[3] ?? "concurrent-sender.json"

NodeRuntime.runMain(
  ConcurrentSends.sendAll(config).pipe(
    Effect.flatMap((summary) => Effect.sync(() => Fs.writeFileSync(out, JSON.stringify(summary)))),
    Effect.provide(ConcurrentSends.layer(config.db))
  ),
  { disableErrorReporting: false }
)
