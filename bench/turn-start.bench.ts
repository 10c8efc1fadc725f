/**
 * Turn-start overhead: the time Baton adds to a turn (everything but the provider's own time), on threads of
 * 100, 1,000 and 10,000 items, on a real SQLite file.
 *
 * For each size it builds a thread on one scripted provider (runs of 10 items: the prompt, an answer and four tool
 * call/result pairs), then measures `sendMessage` for 200 further runs, subtracting the time spent inside the
 * provider adapter's own calls. Half of the measured runs follow a provider switch, so they carry owed history
 * (selection, rendering, inline delivery); the other half owe nothing. Prints median and p99 in milliseconds.
 *
 * Run: `pnpm --filter @baton/bench exec tsx turn-start.bench.ts` (or `npx tsx bench/turn-start.bench.ts`).
 */
import { Commands, type CommandId, type ProviderInstance, type ThreadId } from "@baton/contracts"
import { ThreadService } from "@baton/orchestration"
import type { ProviderAdapter } from "@baton/providers"
import { Harness } from "@baton/testing"
import { Effect, Stream } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { performance } from "node:perf_hooks"

const sizes = (process.env.BENCH_SIZES ?? "100,1000,10000").split(",").map(Number)
const measured = 200

let providerMs = 0
const timed = (adapter: ProviderAdapter.ProviderAdapterShape) => {
  const wrap = <A extends ReadonlyArray<unknown>, B, E>(f: (...a: A) => Effect.Effect<B, E>) => (...a: A) =>
    Effect.suspend(() => {
      const t0 = performance.now()
      return Effect.ensuring(f(...a), Effect.sync(() => void (providerMs += performance.now() - t0)))
    })
  const mutable = adapter as { -readonly [K in keyof ProviderAdapter.ProviderAdapterShape]: ProviderAdapter.ProviderAdapterShape[K] }
  // The provider's own time of a streamed turn: it is played to its end first (timed), then replayed to Baton.
  const collect = wrap((input: ProviderAdapter.StartTurnInput) => Stream.runCollect(adapter.startTurn(input)))
  mutable.startTurn = (input) => Stream.unwrap(Effect.map(collect(input), Stream.fromChunk))
  mutable.startThread = wrap(adapter.startThread)
  if (adapter.injectHistory) mutable.injectHistory = wrap(adapter.injectHistory)
}

const runResponse = (i: number) => ({
  items: [
    { kind: "assistant_message" as const, text: `Looking at step ${i}: I will read the files and run the tests.`, toolCallId: null, toolName: null, messageId: `m${i}`, isError: false, toolCallState: null },
    ...[0, 1, 2, 3].flatMap((k) => [
      { kind: "tool_call" as const, text: JSON.stringify({ command: `cat src/module${k}.ts` }), toolCallId: `call_${i}_${k}`, toolName: "bash", messageId: `m${i}`, isError: false, toolCallState: "answered" as const },
      { kind: "tool_result" as const, text: `export const value${k} = ${i * k}\n`.repeat(8), toolCallId: `call_${i}_${k}`, toolName: "bash", messageId: null, isError: false, toolCallState: null }
    ])
  ]
})

const quantile = (xs: ReadonlyArray<number>, q: number) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!
}

for (const size of sizes) {
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-bench-"))
  const h = Harness.make([
    { name: "claude", window: 1_000_000, inject: false },
    { name: "codex", window: 1_000_000, inject: false }
  ], { db: Path.join(dir, "baton.sqlite") })
  for (const p of Object.values(h.providers)) timed(p)
  let n = 0
  const cid = () => `cmd_${++n}` as CommandId
  const program = Effect.gen(function*() {
    const service = yield* ThreadService.ThreadService
    const threadId: ThreadId = yield* service.createThread(Commands.CreateThread.make({ commandId: cid(), title: "bench", providerInstance: "claude" as ProviderInstance }))
    const runsToBuild = Math.ceil(size / 10)
    for (let i = 0; i < runsToBuild; i++) {
      h.script.enqueue(runResponse(i))
      yield* service.sendMessage(Commands.SendMessage.make({ commandId: cid(), threadId, text: `Step ${i}: continue with the plan.` }))
    }
    const samples: Array<number> = []
    const owedSamples: Array<number> = []
    let provider: "claude" | "codex" = "claude"
    for (let i = 0; i < measured; i++) {
      const switching = i % 2 === 0
      if (switching) {
        provider = provider === "claude" ? "codex" : "claude"
        yield* service.switchProvider(Commands.SwitchProvider.make({ commandId: cid(), threadId, providerInstance: provider as ProviderInstance }))
      }
      h.script.enqueue(runResponse(runsToBuild + i))
      providerMs = 0
      const t0 = performance.now()
      yield* service.sendMessage(Commands.SendMessage.make({ commandId: cid(), threadId, text: `Measured step ${i}.` }))
      const overhead = performance.now() - t0 - providerMs
      ;(switching ? owedSamples : samples).push(overhead)
    }
    return { samples, owedSamples }
  })
  const { samples, owedSamples } = await Effect.runPromise(program.pipe(Effect.provide(h.layer)))
  const fmt = (x: number) => x.toFixed(3)
  console.log(
    `${String(size).padStart(6)} items | nothing owed: median ${fmt(quantile(samples, 0.5))} ms, p99 ${fmt(quantile(samples, 0.99))} ms` +
    ` | after a switch (owed history): median ${fmt(quantile(owedSamples, 0.5))} ms, p99 ${fmt(quantile(owedSamples, 0.99))} ms`
  )
  Fs.rmSync(dir, { recursive: true, force: true })
}
