/**
 * The deterministic simulation: a bounded soak (CI), determinism, crash coverage, the shrinker, the shrunk failures
 * the simulator found, each as a regression test that must run without a violation.
 */
import { ScriptedProvider } from "@baton/providers"
import { Simulation } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"

/** CI features: every operation, crash point, fault, usage report, interrupt while a run is processed and client retry. */
const ci: Simulation.Features = Simulation.allFeatures

/**
 * The bounded soak's features: `ci` without reconfiguring restarts. Its crash-site list is pinned to these seeds'
 * draws, and a reconfiguring restart (added later, from a stream of its own) moves where the seeds' crashes land:
 * with them, no crash of seeds 1..30 × 40 fell after `provider.startTurn`. They run in `pnpm sim` by default and in
 * ReconfigureRestart.test.ts; without them every draw of these seeds is what it was.
 */
const bounded: Simulation.Features = { ...ci, reconfigures: false }

describe("simulation soak (bounded)", () => {
  it.live("seeds 1..30 × 40 operations: no violation, crash-restarts at many distinct durable steps", () =>
    Effect.gen(function*() {
      let crashes = 0
      let restarts = 0
      let clean = 0
      const points = new Set<string>()
      const failures: Array<string> = []
      for (let seed = 1; seed <= 30; seed++) {
        const outcome = yield* Simulation.runSeed(seed, 40, bounded)
        crashes += outcome.crashes
        restarts += outcome.stats.restarts
        for (const p of outcome.crashPoints) points.add(p)
        if (outcome.violations.length === 0) clean++
        for (const v of outcome.violations) failures.push(`seed ${seed}: ${v}`)
      }
      expect(failures).toEqual([])
      expect(clean).toBe(30)
      expect(crashes).toBeGreaterThanOrEqual(80)
      expect(restarts).toBeGreaterThan(crashes)
      // Crash points are `<operation>: <site>#<occurrence>`: store writes and both sides of provider calls.
      expect(points.size).toBeGreaterThanOrEqual(35)
      const sites = new Set([...points].map((p) => p.replace(/^[^:]+: /, "").replace(/#\d+$/, "")))
      for (const site of [
        "store.insertRun",
        "store.appendEvent",
        "store.updateRunEnded",
        "store.insertItemsAfterLast",
        "store.insertReceipt",
        "before provider.startTurn",
        "after provider.startTurn",
        "before provider.compactThread",
        // Forks and merge-backs crash too (their copies, links and handoffs).
        "store.insertLink"
      ]) {
        expect(sites).toContain(site)
      }
      // An injection is crashed around in these 30 seeds, on one side or the other: which side a seed's crash lands on
      // moves with the durable steps before it (fewer statements per turn moved seeds 16 and 30 from before to after
      // it; seed 76 crashes before it). The `lose_injection_ack` fault and the E1/E2 regressions cover the lost
      // acknowledgement, the `drop_injection` fault the injection that never arrived.
      expect([...sites].some((s) => s === "before provider.injectHistory" || s === "after provider.injectHistory")).toBe(true)
      expect([...points].some((p) => p.includes("recovery"))).toBe(true)
      expect([...points].some((p) => p.startsWith("fork: "))).toBe(true)
      expect([...points].some((p) => p.startsWith("merge: "))).toBe(true)
    // A bounded soak, not a timing check: about 135 s on a quiet machine, over 180 s with the two cores shared (one CI
    // run under a load of 9-21 timed out at 180 s).
    }), { timeout: 600_000 })
})

describe("determinism", () => {
  it("the same seed generates the same scenario; another seed another one", () => {
    expect(Simulation.generate(7, 60)).toEqual(Simulation.generate(7, 60))
    expect(Simulation.generate(8, 60)).not.toEqual(Simulation.generate(7, 60))
  })

  it.live("same seed, same run: identical database (every table, every event) and provider logs, byte for byte", () =>
    Effect.gen(function*() {
      const scenario = Simulation.generate(3, 40, ci)
      const a = yield* Simulation.execute(scenario, { keepDump: true })
      const b = yield* Simulation.execute(scenario, { keepDump: true })
      expect(a.crashes).toBeGreaterThan(0)
      expect(a.dump).toContain("## thread_events")
      expect(a.dump).toContain("## received by big")
      expect(b.dump === a.dump).toBe(true)
      expect(b.digest).toBe(a.digest)
      expect(b.trace).toEqual(a.trace)
      expect(b.crashPoints).toEqual(a.crashPoints)
      // A soak's run (no dump, no digest) is the same run.
      const c = yield* Simulation.execute(scenario, { digest: false })
      expect(c.digest).toBe("")
      expect(c.dump).toBe(null)
      expect(c.trace).toEqual(a.trace)
      expect(c.crashPoints).toEqual(a.crashPoints)
      expect(c.stats).toEqual(a.stats)
    }), { timeout: 60_000 })
})

describe("shrinking", () => {
  it.effect("keeps only the operations a failure needs and simplifies them", () =>
    Effect.gen(function*() {
      // A synthetic failure: a send that crashes, followed (anywhere later) by a /compact.
      const fails = (s: Simulation.Scenario) =>
        Effect.succeed(s.ops.some((op, i) =>
          op.kind === "send" && op.crash !== null && s.ops.slice(i + 1).some((later) => later.kind === "compact")
        ))
      const scenario = Simulation.generate(3, 60)
      expect(yield* fails(scenario)).toBe(true)
      const { scenario: shrunk, runs } = yield* Simulation.shrink(scenario, fails)
      expect(shrunk.ops.map((op) => op.kind)).toEqual(["create", "send", "compact"])
      const send = shrunk.ops[1]!
      if (send.kind !== "send") throw new Error("unreachable")
      expect(send.crash).not.toBeNull()
      expect(send.fault).toBeNull()
      expect(send.reply.tools).toEqual([])
      expect(send.prompt).toBeLessThanOrEqual(20)
      expect(runs).toBeLessThan(300)
    }))

  it.live("shrinks a real run: the shortest scenario in which history is delivered inline", () =>
    Effect.gen(function*() {
      // A property of real executions (not a bug): some delivery settled `inline` (the provider without injection).
      const inline = (s: Simulation.Scenario) => Effect.map(Simulation.execute(s), (o) => (o.stats.deliveries.inline ?? 0) > 0)
      const scenario = Simulation.generate(4, 30, ci)
      expect(yield* inline(scenario)).toBe(true)
      const { scenario: shrunk } = yield* Simulation.shrink(scenario, inline, { maxRuns: 150 })
      expect(yield* inline(shrunk)).toBe(true)
      // create, something owed to the provider without injection (a switch to it after a run, a missed run on it, or
      // an /offload that replaced its native thread after a run: then the replacement's history goes inline), and the
      // send that delivers it. (Seed 4 shrinks to create, fork, send, offload, send: each op needed.)
      expect(shrunk.ops.length).toBeLessThanOrEqual(5)
      expect(shrunk.ops.at(-1)!.kind).toBe("send")
    }), { timeout: 120_000 })
})

// ---- shrunk reproductions of violations the simulator found (A, B, C, C', D, E3, F1, F2), all fixed since

type Op = Simulation.Operation
const reply = { tokens: 20, tools: [], reasoning: false, usage: { kind: "counted" } } as const
const send = (id: number, extra: Partial<Extract<Op, { kind: "send" }>> = {}): Op =>
  ({ kind: "send", id, prompt: 20, reply, fault: null, interruptAt: null, crash: null, ...extra })
const crashAt = (at: number, retry = false) => ({ at, inRecoveryAt: null, retry })
const providers = (read: { big: boolean; small: boolean; plain: boolean }, small = { window: 64_000, autoCompactThreshold: 60_000 }, smallInject = true) => [
  { name: "big", window: 1_000_000, autoCompactThreshold: null, inject: true, readThread: read.big },
  { name: "small", ...small, inject: smallInject, readThread: read.small },
  { name: "plain", window: 200_000, autoCompactThreshold: null, inject: false, readThread: read.plain }
]
const allRead = { big: true, small: true, plain: true }

/** Each: what is violated, the shrunk scenario, and the violation's category. */
const knownViolations: ReadonlyArray<{ readonly name: string; readonly category: string; readonly scenario: Simulation.Scenario }> = [
  {
    name: "A. an interrupt that lands before `starting` is written is lost: the run completes (seed 2)",
    category: "lifecycle",
    scenario: { seed: 2, providers: providers(allRead), ops: [{ kind: "create", id: 0, provider: "small", crash: null }, send(2, { interruptAt: 1 })] }
  },
  {
    name: "B. an interrupt of a running run is overwritten by the completion transaction (seed 6)",
    category: "lifecycle",
    scenario: { seed: 6, providers: providers(allRead), ops: [{ kind: "create", id: 0, provider: "big", crash: null }, send(6), send(8, { interruptAt: 6 })] }
  },
  {
    name: "C. recover() marks a `running` run as seen by the provider although the process died before startTurn (seed 11)",
    category: "exactly-once",
    scenario: {
      seed: 11,
      providers: providers({ big: true, small: true, plain: false }),
      ops: [{ kind: "create", id: 0, provider: "small", crash: null }, send(23, { prompt: 3 }), send(24, { crash: crashAt(8) })]
    }
  },
  {
    name: "C'. ... or after a startTurn the provider refused (seed 10)",
    category: "exactly-once",
    scenario: {
      seed: 10,
      providers: providers({ big: false, small: false, plain: true }),
      ops: [
        { kind: "create", id: 0, provider: "small", crash: null },
        { kind: "interrupt_before_start", id: 1, prompt: 20, crash: null },
        send(2, { crash: crashAt(21) }),
        send(3, { prompt: 9, fault: "interrupt_before_start", crash: crashAt(32) })
      ]
    }
  },
  {
    name: "D. a crash in the completion transaction leaves the watermark behind: switching back re-delivers what the native thread saw (seed 7)",
    category: "exactly-once",
    scenario: {
      seed: 7,
      providers: providers(allRead, { window: 44_000, autoCompactThreshold: 42_000 }, false),
      ops: [
        { kind: "create", id: 0, provider: "small", crash: null },
        { kind: "switch", id: 1, to: "plain", crash: null },
        send(12, { crash: crashAt(16) }),
        { kind: "switch", id: 13, to: "small", crash: null },
        { kind: "switch", id: 15, to: "plain", crash: null },
        send(16)
      ]
    }
  },
  {
    name: "E3. a crash inside /compact's settlement leaves an injected delivery under an open handoff; the next turn start injects it again (seed 104)",
    category: "exactly-once",
    scenario: {
      seed: 104,
      providers: providers({ big: false, small: true, plain: true }),
      ops: [
        { kind: "create", id: 0, provider: "big", crash: null },
        send(1, { prompt: 7 }),
        { kind: "switch", id: 13, to: "plain", crash: null },
        { kind: "interrupt_before_start", id: 14, prompt: 20, crash: null },
        { kind: "switch", id: 18, to: "big", crash: null },
        { kind: "compact", id: 21, fault: null, crash: crashAt(9) },
        send(23)
      ]
    }
  },
  {
    name: "F1. SendMessage retried after a crash queues a second run (the receipt is written after the run) (seed 3)",
    category: "idempotency",
    scenario: {
      seed: 3,
      providers: providers({ big: true, small: true, plain: false }),
      ops: [{ kind: "create", id: 0, provider: "small", crash: null }, send(14, { prompt: 12, crash: crashAt(16, true) })]
    }
  },
  {
    name: "F2. CreateThread retried after a crash between its transaction and its receipt makes a second thread",
    category: "idempotency",
    scenario: { seed: 0, providers: providers(allRead), ops: [{ kind: "create", id: 0, provider: "big", crash: crashAt(6, true) }] }
  }
]

/** Shrunk simulation failures that have since been fixed: each must run without a violation. */
const regressions: ReadonlyArray<{ readonly name: string; readonly category: string; readonly scenario: Simulation.Scenario }> = [
  {
    // Steps renumbered when sendMessage's claim joined its queueing (two fewer durable steps before the turn): the
    // interrupt lands where it landed on main before that change (before provider.startThread). Where the name says
    // it should land (before provider.startTurn, the crash after it) is regression G' below.
    name: "G. an interrupt raced the provider turn and a crash lost the turn's outcome: recovery reads it back, a switch back owes nothing twice (seed 15)",
    category: "exactly-once",
    scenario: JSON.parse("{\"seed\":15,\"providers\":[{\"name\":\"big\",\"window\":1000000,\"autoCompactThreshold\":null,\"inject\":true,\"readThread\":true},{\"name\":\"small\",\"window\":44000,\"autoCompactThreshold\":42000,\"inject\":true,\"readThread\":true},{\"name\":\"plain\",\"window\":200000,\"autoCompactThreshold\":null,\"inject\":false,\"readThread\":true}],\"ops\":[{\"kind\":\"create\",\"id\":0,\"provider\":\"small\",\"crash\":null},{\"kind\":\"send\",\"id\":1,\"prompt\":20,\"reply\":{\"tokens\":20,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":6,\"crash\":{\"at\":17,\"inRecoveryAt\":null,\"retry\":false}},{\"kind\":\"switch\",\"id\":2,\"to\":\"big\",\"crash\":null},{\"kind\":\"switch\",\"id\":10,\"to\":\"small\",\"crash\":null},{\"kind\":\"send\",\"id\":11,\"prompt\":20,\"reply\":{\"tokens\":20,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null}]}") as Simulation.Scenario
  },
  {
    name: "E1. /compact after a lost injection acknowledgement does not inject the same history again (seed 1)",
    category: "exactly-once",
    scenario: {
      seed: 1,
      providers: providers({ big: true, small: false, plain: false }),
      ops: [
        { kind: "create", id: 0, provider: "big", crash: null },
        { kind: "interrupt_before_start", id: 5, prompt: 15_391, crash: null },
        send(15),
        { kind: "compact", id: 16, fault: "lose_injection_ack", crash: null },
        { kind: "compact", id: 18, fault: null, crash: null }
      ]
    }
  },
  {
    name: "E2. after a crash inside /compact's settlement, the injected delivery is not injected again (seed 14)",
    category: "exactly-once",
    scenario: {
      seed: 14,
      providers: providers(allRead, { window: 44_000, autoCompactThreshold: 42_000 }),
      ops: [
        { kind: "create", id: 0, provider: "small", crash: null },
        send(11, { reply: { ...reply, usage: { kind: "near_full", fraction: 0.88 } } }),
        { kind: "interrupt_before_start", id: 13, prompt: 20, crash: null },
        send(14),
        { kind: "compact", id: 15, fault: null, crash: crashAt(7) },
        { kind: "compact", id: 18, fault: null, crash: null }
      ]
    }
  },
  {
    name: "H. recovery took turn start's deferral pointer (a handoff_marker of the run) for streamed provider output and recorded an overflowed run as seen (seed 25)",
    category: "exactly-once",
    scenario: {
      seed: 25,
      providers: [
        { name: "big", window: 1_000_000, autoCompactThreshold: null, inject: true, readThread: false },
        { name: "small", window: 64_000, autoCompactThreshold: 60_000, inject: true, readThread: false, tokenScale: 1.15 },
        { name: "plain", window: 200_000, autoCompactThreshold: null, inject: false, readThread: true }
      ],
      ops: [
        { kind: "create", id: 0, provider: "big", crash: null },
        send(37, { reply: { ...reply, usage: { kind: "near_full", fraction: 0.94 } } }),
        { kind: "interrupt_before_start", id: 38, prompt: 20, crash: null },
        send(39, { reply: { ...reply, tokens: 7 }, fault: "overflow", crash: crashAt(24) })
      ]
    }
  },
]

/**
 * Fixed (G'): seed 15 with the interrupt landing before provider.startTurn (the interrupt's read-back finds the native
 * thread without the run: the run ends `interrupted` before the provider, native thread `null`) while the turn is
 * already on its way: the provider runs it, and the process dies right after (its completion, which would record that
 * the provider read the prompt, is lost). The switch to `big` and back used to owe run 1 to `small` in the switch
 * handoff, and the next turn delivered its items to the native thread that ran them. A switch now leaves the
 * destination's own never-read runs to the next turn start's missed-run recovery, which reads the native thread back.
 */
const interruptRacedTurn = {
  name: "G'. an interrupt read back before provider.startTurn while the turn is in flight, then a crash after it: a switch away and back owes run 1 nothing (seed 15, crash at 17)",
  category: "exactly-once",
  scenario: JSON.parse("{\"seed\":15,\"providers\":[{\"name\":\"big\",\"window\":1000000,\"autoCompactThreshold\":null,\"inject\":true,\"readThread\":true},{\"name\":\"small\",\"window\":44000,\"autoCompactThreshold\":42000,\"inject\":true,\"readThread\":true},{\"name\":\"plain\",\"window\":200000,\"autoCompactThreshold\":null,\"inject\":false,\"readThread\":true}],\"ops\":[{\"kind\":\"create\",\"id\":0,\"provider\":\"small\",\"crash\":null},{\"kind\":\"send\",\"id\":1,\"prompt\":20,\"reply\":{\"tokens\":20,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":8,\"crash\":{\"at\":17,\"inRecoveryAt\":null,\"retry\":false}},{\"kind\":\"switch\",\"id\":2,\"to\":\"big\",\"crash\":null},{\"kind\":\"switch\",\"id\":10,\"to\":\"small\",\"crash\":null},{\"kind\":\"send\",\"id\":11,\"prompt\":20,\"reply\":{\"tokens\":20,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null}]}") as Simulation.Scenario
}

/**
 * Fixed: the turn's output was recorded before the crash, but the run stayed recorded as never read (the interrupt
 * had read the native thread back just before the turn reached it): a switch away and back re-delivered the run to
 * the native thread that produced it. Output now proves the read, in the unit of work that records it.
 */
const outputProvesRead = {
  name: "G''. an interrupt read back before provider.startTurn, the turn's output recorded, then a crash: a switch away and back owes the run nothing (seed 15, crash at 18)",
  category: "exactly-once",
  scenario: JSON.parse("{\"seed\": 15, \"providers\": [{\"name\": \"big\", \"window\": 1000000, \"autoCompactThreshold\": null, \"inject\": true, \"readThread\": true}, {\"name\": \"small\", \"window\": 44000, \"autoCompactThreshold\": 42000, \"inject\": true, \"readThread\": true}, {\"name\": \"plain\", \"window\": 200000, \"autoCompactThreshold\": null, \"inject\": false, \"readThread\": true}], \"ops\": [{\"kind\": \"create\", \"id\": 0, \"provider\": \"small\", \"crash\": null}, {\"kind\": \"send\", \"id\": 1, \"prompt\": 20, \"reply\": {\"tokens\": 20, \"tools\": [], \"reasoning\": false, \"usage\": {\"kind\": \"counted\"}}, \"fault\": null, \"interruptAt\": 8, \"crash\": {\"at\": 18, \"inRecoveryAt\": null, \"retry\": false}}, {\"kind\": \"switch\", \"id\": 2, \"to\": \"big\", \"crash\": null}, {\"kind\": \"switch\", \"id\": 10, \"to\": \"small\", \"crash\": null}, {\"kind\": \"send\", \"id\": 11, \"prompt\": 20, \"reply\": {\"tokens\": 20, \"tools\": [], \"reasoning\": false, \"usage\": {\"kind\": \"counted\"}}, \"fault\": null, \"interruptAt\": null, \"crash\": null}]}") as Simulation.Scenario
}

/**
 * Fixed: a usage report near the window (the provider's context grew by content Baton never sent) passed the
 * calibration's 3x sample filter and, as a token-weighted moving average's heaviest sample, held the ratio at 2.3
 * against a true 1.05. The ratio is now the trimmed mean around the recent samples' median (Calibration.learn).
 */
const usageJumpCalibration = {
  name: "H. a usage report near the window (0.93) after a 15,000-token turn taught the calibration 2.3x against a true 1.05: the ratio now rests on the recent samples' trimmed median (seed 48)",
  category: "truth",
  scenario: JSON.parse("{\"seed\":48,\"providers\":[{\"name\":\"big\",\"window\":1000000,\"autoCompactThreshold\":null,\"inject\":true,\"readThread\":true,\"tokenScale\":1.12,\"requestOverhead\":926,\"overflowSignal\":\"code\"},{\"name\":\"small\",\"window\":64000,\"autoCompactThreshold\":60000,\"inject\":true,\"readThread\":true,\"tokenScale\":1.05,\"requestOverhead\":1645,\"overflowSignal\":\"code\"},{\"name\":\"plain\",\"window\":200000,\"autoCompactThreshold\":null,\"inject\":false,\"readThread\":true,\"tokenScale\":1.12,\"requestOverhead\":736,\"overflowSignal\":\"text\"}],\"summariser\":{\"inputWindow\":6000,\"verboseEvery\":4},\"ops\":[{\"kind\":\"create\",\"id\":0,\"provider\":\"plain\",\"crash\":null},{\"kind\":\"send\",\"id\":1,\"prompt\":20,\"reply\":{\"tokens\":32,\"tools\":[2083,563,536],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"switch\",\"id\":2,\"to\":\"small\",\"crash\":null},{\"kind\":\"send\",\"id\":18,\"prompt\":55,\"reply\":{\"tokens\":235,\"tools\":[2339],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"send\",\"id\":19,\"prompt\":20,\"reply\":{\"tokens\":235,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"send\",\"id\":21,\"prompt\":63,\"reply\":{\"tokens\":919,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"fork\",\"id\":144,\"provider\":null,\"crash\":null},{\"kind\":\"interrupt_in_tool_call\",\"id\":29,\"prompt\":370,\"reply\":{\"tokens\":1136,\"tools\":[820],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"answered\":true,\"crash\":null},{\"kind\":\"send\",\"id\":30,\"prompt\":1173,\"reply\":{\"tokens\":13686,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"near_full\",\"fraction\":0.93}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"send\",\"id\":33,\"prompt\":20,\"reply\":{\"tokens\":358,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"send\",\"id\":34,\"prompt\":20,\"reply\":{\"tokens\":20,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"send\",\"id\":35,\"prompt\":20,\"reply\":{\"tokens\":299,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"interrupt_in_tool_call\",\"id\":39,\"prompt\":20,\"reply\":{\"tokens\":1710,\"tools\":[1978],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"answered\":true,\"crash\":null}]}") as Simulation.Scenario
}

/**
 * Fixed: a turn without a usage report (missing) made Baton forget the native thread's last report (97 percent
 * full), so the known-full check let a prompt through that the provider rejected as over its window. Without a
 * report the check now uses Baton's calibrated estimate of what the thread holds (ProviderTurnStartService.knownFull).
 */
const missingReportForgetsFull = {
  name: "I. a report near full (0.97), then a turn without a report: the next prompt over the window went to the full native thread (seed 303)",
  category: "truth",
  scenario: JSON.parse("{\"seed\":303,\"providers\":[{\"name\":\"big\",\"window\":1000000,\"autoCompactThreshold\":null,\"inject\":true,\"readThread\":false,\"tokenScale\":1.15,\"requestOverhead\":1650,\"overflowSignal\":\"code\"},{\"name\":\"small\",\"window\":64000,\"autoCompactThreshold\":60000,\"inject\":true,\"readThread\":true,\"tokenScale\":1.19,\"requestOverhead\":2704,\"overflowSignal\":\"code\"},{\"name\":\"plain\",\"window\":200000,\"autoCompactThreshold\":null,\"inject\":false,\"readThread\":true,\"tokenScale\":1.19,\"requestOverhead\":2724,\"overflowSignal\":\"text\"}],\"summariser\":{\"inputWindow\":6000,\"verboseEvery\":5},\"ops\":[{\"kind\":\"create\",\"id\":0,\"provider\":\"small\",\"crash\":null},{\"kind\":\"switch\",\"id\":43,\"to\":\"plain\",\"crash\":null},{\"kind\":\"send\",\"id\":46,\"prompt\":20,\"reply\":{\"tokens\":20,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"near_full\",\"fraction\":0.9700000000000001}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"send\",\"id\":47,\"prompt\":20,\"reply\":{\"tokens\":20,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"missing\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"send\",\"id\":49,\"prompt\":6666,\"reply\":{\"tokens\":20,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null}]}") as Simulation.Scenario
}

/**
 * Fixed: an `/offload` summary stands for every item up to its cut, so owing it to a lane whose native thread saw one
 * of those items (ran it natively, or was delivered it) brings that item a second time (here the first user message,
 * pinned verbatim in the summary). Such a lane is now owed the originals (ContextHandoffDelivery.throughSummary), and
 * its open handoffs are not superseded by the summary (supersedeForSummary).
 */
const summaryToLaneThatSawCovered = [
  {
    name: "J. create on plain, send, switch to big, send, /offload keep 0, switch back: plain was owed the summary of items it ran natively (seed 2302)",
    category: "exactly-once",
    scenario: JSON.parse("{\"seed\":2302,\"providers\":[{\"name\":\"big\",\"window\":1000000,\"autoCompactThreshold\":null,\"inject\":true,\"readThread\":false,\"tokenScale\":1.26,\"requestOverhead\":1672,\"overflowSignal\":\"code\"},{\"name\":\"small\",\"window\":64000,\"autoCompactThreshold\":60000,\"inject\":true,\"readThread\":true,\"tokenScale\":1.27,\"requestOverhead\":2960,\"overflowSignal\":\"code\"},{\"name\":\"plain\",\"window\":200000,\"autoCompactThreshold\":null,\"inject\":false,\"readThread\":false,\"tokenScale\":1.03,\"requestOverhead\":2927,\"overflowSignal\":\"text\"}],\"summariser\":{\"inputWindow\":6000,\"verboseEvery\":5},\"ops\":[{\"kind\":\"create\",\"id\":0,\"provider\":\"plain\",\"crash\":null},{\"kind\":\"send\",\"id\":1,\"prompt\":40,\"reply\":{\"tokens\":49,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"switch\",\"id\":2,\"to\":\"big\",\"crash\":null},{\"kind\":\"send\",\"id\":3,\"prompt\":20,\"reply\":{\"tokens\":49,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"offload\",\"id\":45,\"keepTokens\":0,\"summariserFails\":false,\"crash\":null},{\"kind\":\"switch\",\"id\":11,\"to\":\"plain\",\"crash\":null},{\"kind\":\"send\",\"id\":12,\"prompt\":20,\"reply\":{\"tokens\":20,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null}]}") as Simulation.Scenario
  },
  {
    // Seed 2302's shrunk input with a switch to plain and back before the /offload (written by hand, not shrunk).
    name: "J'. ... with run 2 owed to plain by an open handoff when the /offload runs: the summary did not supersede it (seed 2302)",
    category: "exactly-once",
    scenario: JSON.parse("{\"seed\":2302,\"providers\":[{\"name\":\"big\",\"window\":1000000,\"autoCompactThreshold\":null,\"inject\":true,\"readThread\":false,\"tokenScale\":1.26,\"requestOverhead\":1672,\"overflowSignal\":\"code\"},{\"name\":\"small\",\"window\":64000,\"autoCompactThreshold\":60000,\"inject\":true,\"readThread\":true,\"tokenScale\":1.27,\"requestOverhead\":2960,\"overflowSignal\":\"code\"},{\"name\":\"plain\",\"window\":200000,\"autoCompactThreshold\":null,\"inject\":false,\"readThread\":false,\"tokenScale\":1.03,\"requestOverhead\":2927,\"overflowSignal\":\"text\"}],\"summariser\":{\"inputWindow\":6000,\"verboseEvery\":5},\"ops\":[{\"kind\":\"create\",\"id\":0,\"provider\":\"plain\",\"crash\":null},{\"kind\":\"send\",\"id\":1,\"prompt\":40,\"reply\":{\"tokens\":49,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"switch\",\"id\":2,\"to\":\"big\",\"crash\":null},{\"kind\":\"send\",\"id\":3,\"prompt\":20,\"reply\":{\"tokens\":49,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"switch\",\"id\":5,\"to\":\"plain\",\"crash\":null},{\"kind\":\"switch\",\"id\":6,\"to\":\"big\",\"crash\":null},{\"kind\":\"offload\",\"id\":45,\"keepTokens\":0,\"summariserFails\":false,\"crash\":null},{\"kind\":\"switch\",\"id\":11,\"to\":\"plain\",\"crash\":null},{\"kind\":\"send\",\"id\":12,\"prompt\":20,\"reply\":{\"tokens\":20,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null}]}") as Simulation.Scenario
  }
]

/**
 * Fixed: one 30,852-token turn whose report near the window (0.97) fell 13% short of the truth outweighed, in the
 * token-weighted mean of the inliers, six samples that agreed on the true 1.06: the calibration stayed at 0.950. A
 * sample now weighs at most `fullWeightTokens` (2,048) in the mean (Calibration.estimate).
 */
const largeTurnHeldCalibration = {
  name: "K. a large turn whose report near the window fell short held big's calibration at 0.950 against a true 1.060 (seed 4005)",
  category: "truth",
  scenario: JSON.parse("{\"seed\":4005,\"providers\":[{\"name\":\"big\",\"window\":1000000,\"autoCompactThreshold\":null,\"inject\":true,\"readThread\":true,\"tokenScale\":1.06,\"requestOverhead\":1364,\"overflowSignal\":\"code\"},{\"name\":\"small\",\"window\":64000,\"autoCompactThreshold\":60000,\"inject\":true,\"readThread\":true,\"tokenScale\":1.15,\"requestOverhead\":1493,\"overflowSignal\":\"code\"},{\"name\":\"plain\",\"window\":200000,\"autoCompactThreshold\":null,\"inject\":false,\"readThread\":false,\"tokenScale\":1.16,\"requestOverhead\":2985,\"overflowSignal\":\"text\"}],\"summariser\":{\"inputWindow\":6000,\"verboseEvery\":3},\"ops\":[{\"kind\":\"create\",\"id\":0,\"provider\":\"big\",\"crash\":null},{\"kind\":\"send\",\"id\":1,\"prompt\":16,\"reply\":{\"tokens\":20,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"send\",\"id\":10,\"prompt\":20,\"reply\":{\"tokens\":283,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"send\",\"id\":11,\"prompt\":20,\"reply\":{\"tokens\":20,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"near_full\",\"fraction\":0.93}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"send\",\"id\":12,\"prompt\":1435,\"reply\":{\"tokens\":326,\"tools\":[1119,157,771],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":{\"at\":19,\"inRecoveryAt\":null,\"retry\":false}},{\"kind\":\"race\",\"id\":132,\"outer\":\"offload\",\"prompt\":2122,\"reply\":{\"tokens\":284,\"tools\":[613],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"with\":\"send\",\"to\":\"small\",\"keepTokens\":0},{\"kind\":\"send\",\"id\":14,\"prompt\":20,\"reply\":{\"tokens\":1472,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"send\",\"id\":16,\"prompt\":20,\"reply\":{\"tokens\":1747,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"send\",\"id\":17,\"prompt\":13377,\"reply\":{\"tokens\":13399,\"tools\":[1938],\"reasoning\":false,\"usage\":{\"kind\":\"near_full\",\"fraction\":0.9700000000000001}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"send\",\"id\":21,\"prompt\":20,\"reply\":{\"tokens\":261,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"race\",\"id\":141,\"outer\":\"send\",\"prompt\":6,\"reply\":{\"tokens\":58,\"tools\":[211],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"with\":\"compact\",\"to\":\"small\",\"keepTokens\":2000},{\"kind\":\"send\",\"id\":28,\"prompt\":20,\"reply\":{\"tokens\":15,\"tools\":[2054,1529],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null}]}") as Simulation.Scenario
}

/**
 * Fixed: the second `/offload` of a chain gave its summariser the previous summary with its `[pinned, verbatim]`
 * section; the first user message, clipped there (over 2,000 tokens), was not found by the pinned-item test and was
 * pinned a second time, so the next turn received it twice in one history. The previous summary now goes to the
 * summariser without that section (ThreadOffload.withoutPinned).
 */
const pinnedTwiceInChain = {
  name: "L. /offload keep 300 then keep 0 after a 2,387-token first message: the second summary pinned it twice (seed 13001)",
  category: "exactly-once",
  scenario: JSON.parse("{\"seed\":13001,\"providers\":[{\"name\":\"big\",\"window\":1000000,\"autoCompactThreshold\":null,\"inject\":true,\"readThread\":true,\"tokenScale\":1.25,\"requestOverhead\":1993,\"overflowSignal\":\"code\"},{\"name\":\"small\",\"window\":64000,\"autoCompactThreshold\":60000,\"inject\":true,\"readThread\":false,\"tokenScale\":1.1400000000000001,\"requestOverhead\":1488,\"overflowSignal\":\"code\"},{\"name\":\"plain\",\"window\":200000,\"autoCompactThreshold\":null,\"inject\":false,\"readThread\":true,\"tokenScale\":1.02,\"requestOverhead\":1576,\"overflowSignal\":\"text\"}],\"summariser\":{\"inputWindow\":6000,\"verboseEvery\":3},\"ops\":[{\"kind\":\"create\",\"id\":0,\"provider\":\"plain\",\"crash\":null},{\"kind\":\"race\",\"id\":121,\"outer\":\"send\",\"prompt\":2387,\"reply\":{\"tokens\":1900,\"tools\":[969],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"with\":\"compact\",\"to\":\"small\",\"keepTokens\":300},{\"kind\":\"offload\",\"id\":42,\"keepTokens\":300,\"summariserFails\":false,\"crash\":null},{\"kind\":\"offload\",\"id\":45,\"keepTokens\":0,\"summariserFails\":false,\"crash\":null},{\"kind\":\"send\",\"id\":6,\"prompt\":20,\"reply\":{\"tokens\":20,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null}]}") as Simulation.Scenario
}

/**
 * M (seed 80012): a crash before `injectHistory` left the switch's delivery to big's new native thread `pending`;
 * `/offload` skipped that handoff (its outcome uncertain) and kept the lane's native thread (nothing settled on it),
 * so the next turn reconciled the delivery as not held, returned it to `deferred` and injected the originals the
 * summary had replaced. A `pending` delivery of replaced items now counts as given: the offload replaces the native
 * thread (ThreadOffload.replaceActiveNative), and the next turn's replacement supersedes the uncertain delivery.
 */
const pendingDeliveryAtOffload = {
  name: "M. a crash before injectHistory, then /offload: the next turn injected the originals the summary replaced (seed 80012)",
  category: "exactly-once",
  scenario: JSON.parse("{\"seed\":80012,\"providers\":[{\"name\":\"big\",\"window\":1000000,\"autoCompactThreshold\":null,\"inject\":true,\"readThread\":true,\"tokenScale\":1.12,\"requestOverhead\":1719,\"overflowSignal\":\"code\"},{\"name\":\"small\",\"window\":44000,\"autoCompactThreshold\":42000,\"inject\":true,\"readThread\":false,\"tokenScale\":1.23,\"requestOverhead\":1969,\"overflowSignal\":\"code\"},{\"name\":\"plain\",\"window\":200000,\"autoCompactThreshold\":null,\"inject\":false,\"readThread\":true,\"tokenScale\":1.04,\"requestOverhead\":2937,\"overflowSignal\":\"text\"}],\"summariser\":{\"inputWindow\":6000,\"verboseEvery\":3},\"ops\":[{\"kind\":\"create\",\"id\":0,\"provider\":\"small\",\"crash\":null},{\"kind\":\"send\",\"id\":1,\"prompt\":16,\"reply\":{\"tokens\":20,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"switch\",\"id\":2,\"to\":\"big\",\"crash\":null},{\"kind\":\"send\",\"id\":3,\"prompt\":44,\"reply\":{\"tokens\":18,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":{\"at\":15,\"inRecoveryAt\":null,\"retry\":false}},{\"kind\":\"offload\",\"id\":45,\"keepTokens\":0,\"summariserFails\":false,\"crash\":null},{\"kind\":\"race\",\"id\":125,\"outer\":\"send\",\"prompt\":3,\"reply\":{\"tokens\":1806,\"tools\":[1773],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"with\":\"offload\",\"to\":\"plain\",\"keepTokens\":300}]}") as Simulation.Scenario
}

/**
 * N (seed 100087): an 11,592-token prompt with a deferral pointer inline overflowed small's native thread (51,840 used);
 * the overflow taught the calibration 1.12, yet the retry left out only the pointer and sent the prompt alone to the
 * same native thread (51,840 + 11,592 x 1.12 > 64,000, rejected again). The retry keeps the native thread only when
 * the prompt alone fits its last reported usage at the ratio now in force; otherwise it is replaced
 * (TurnExecution.overflowRecovery).
 */
const promptAloneKnownFull = {
  name: "N. an overflow with inline history retried the prompt alone on a native thread Baton then knew was full (seed 100087)",
  category: "truth",
  scenario: JSON.parse("{\"seed\":100087,\"providers\":[{\"name\":\"big\",\"window\":1000000,\"autoCompactThreshold\":null,\"inject\":true,\"readThread\":true,\"tokenScale\":1.06,\"requestOverhead\":2785,\"overflowSignal\":\"code\"},{\"name\":\"small\",\"window\":64000,\"autoCompactThreshold\":60000,\"inject\":true,\"readThread\":false,\"tokenScale\":1.12,\"requestOverhead\":1321,\"overflowSignal\":\"code\"},{\"name\":\"plain\",\"window\":200000,\"autoCompactThreshold\":null,\"inject\":false,\"readThread\":true,\"tokenScale\":1.01,\"requestOverhead\":2938,\"overflowSignal\":\"text\"}],\"summariser\":{\"inputWindow\":6000,\"verboseEvery\":5},\"ops\":[{\"kind\":\"create\",\"id\":0,\"provider\":\"big\",\"crash\":null},{\"kind\":\"switch\",\"id\":1,\"to\":\"small\",\"crash\":null},{\"kind\":\"race\",\"id\":122,\"outer\":\"send\",\"prompt\":20,\"reply\":{\"tokens\":5620,\"tools\":[125],\"reasoning\":false,\"usage\":{\"kind\":\"near_full\",\"fraction\":0.81}},\"with\":\"switch\",\"to\":\"big\",\"keepTokens\":0},{\"kind\":\"interrupt_before_start\",\"id\":32,\"prompt\":5,\"crash\":null},{\"kind\":\"race\",\"id\":157,\"outer\":\"send\",\"prompt\":10788,\"reply\":{\"tokens\":66,\"tools\":[926],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"with\":\"offload\",\"to\":\"plain\",\"keepTokens\":0}]}") as Simulation.Scenario
}

/**
 * O (seed 80012, its second violation once M was fixed): small ran run 1, a switch to big, /offload keep 0 (small not
 * the active lane: it keeps its native thread), a run on big, a switch back to small (owed the originals), then a
 * second /offload: small-n1 was kept because it held none of this offload's share, though it ran run 1, which the
 * chain's summary covers; the next turn went on there, given the originals. The active lane's check now looks at
 * everything the chain covers (ThreadOffload.replaceActiveNative).
 */
const laneHoldsEarlierShare = {
  name: "O. a second /offload kept the active lane's native thread that ran items the first summary covers (seed 80012)",
  category: "exactly-once",
  scenario: JSON.parse("{\"seed\":80012,\"providers\":[{\"name\":\"big\",\"window\":1000000,\"autoCompactThreshold\":null,\"inject\":true,\"readThread\":true,\"tokenScale\":1.12,\"requestOverhead\":1719,\"overflowSignal\":\"code\"},{\"name\":\"small\",\"window\":44000,\"autoCompactThreshold\":42000,\"inject\":true,\"readThread\":false,\"tokenScale\":1.23,\"requestOverhead\":1969,\"overflowSignal\":\"code\"},{\"name\":\"plain\",\"window\":200000,\"autoCompactThreshold\":null,\"inject\":false,\"readThread\":true,\"tokenScale\":1.04,\"requestOverhead\":2937,\"overflowSignal\":\"text\"}],\"summariser\":{\"inputWindow\":6000,\"verboseEvery\":3},\"ops\":[{\"kind\":\"create\",\"id\":0,\"provider\":\"small\",\"crash\":null},{\"kind\":\"send\",\"id\":1,\"prompt\":16,\"reply\":{\"tokens\":32,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"switch\",\"id\":2,\"to\":\"big\",\"crash\":null},{\"kind\":\"offload\",\"id\":45,\"keepTokens\":0,\"summariserFails\":false,\"crash\":null},{\"kind\":\"race\",\"id\":125,\"outer\":\"send\",\"prompt\":3,\"reply\":{\"tokens\":1806,\"tools\":[1773],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"with\":\"offload\",\"to\":\"plain\",\"keepTokens\":300},{\"kind\":\"interrupt_before_start\",\"id\":6,\"prompt\":272,\"crash\":null},{\"kind\":\"switch\",\"id\":14,\"to\":\"small\",\"crash\":null},{\"kind\":\"offload\",\"id\":54,\"keepTokens\":300,\"summariserFails\":false,\"crash\":null},{\"kind\":\"send\",\"id\":15,\"prompt\":20,\"reply\":{\"tokens\":20,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null}]}") as Simulation.Scenario
}

/**
 * P (seed 140048, 80 steps): small ran one turn, a switch to plain and five turns there (the last raced an /offload
 * whose summariser failed), a switch back to small, then /compact: it compacted small-n1 and injected the deferred
 * handoff, which small rejected as over its window (Baton's ratio 1, small's 1.15). The rejection taught nothing,
 * and a crash right after the read-back lost that attempt: the retried /compact sent the same 44,018-token request
 * again. An injection's overflow now teaches the calibration before the read-back
 * (ProviderCalibration.learnFromOverflow), and the retry plans with it.
 */
const compactOverflowTaughtNothing = {
  name: "P. a /compact retried after a crash sent the injection the provider had just rejected (seed 140048)",
  category: "truth",
  scenario: JSON.parse("{\"seed\":140048,\"providers\":[{\"name\":\"big\",\"window\":1000000,\"autoCompactThreshold\":null,\"inject\":true,\"readThread\":false,\"tokenScale\":1.19,\"requestOverhead\":1829,\"overflowSignal\":\"code\"},{\"name\":\"small\",\"window\":44000,\"autoCompactThreshold\":42000,\"inject\":true,\"readThread\":true,\"tokenScale\":1.15,\"requestOverhead\":1532,\"overflowSignal\":\"code\"},{\"name\":\"plain\",\"window\":200000,\"autoCompactThreshold\":null,\"inject\":false,\"readThread\":false,\"tokenScale\":1.19,\"requestOverhead\":1100,\"overflowSignal\":\"text\"}],\"summariser\":{\"inputWindow\":6000,\"verboseEvery\":5},\"ops\":[{\"kind\":\"create\",\"id\":0,\"provider\":\"small\",\"crash\":null},{\"kind\":\"send\",\"id\":15,\"prompt\":20,\"reply\":{\"tokens\":5667,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"switch\",\"id\":17,\"to\":\"plain\",\"crash\":null},{\"kind\":\"send\",\"id\":18,\"prompt\":20,\"reply\":{\"tokens\":1178,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"send\",\"id\":19,\"prompt\":10180,\"reply\":{\"tokens\":6619,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"send\",\"id\":20,\"prompt\":20,\"reply\":{\"tokens\":2378,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"send\",\"id\":21,\"prompt\":1894,\"reply\":{\"tokens\":20,\"tools\":[2203,1519],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"send\",\"id\":22,\"prompt\":2119,\"reply\":{\"tokens\":64,\"tools\":[936,1634,2209],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"send\",\"id\":23,\"prompt\":16,\"reply\":{\"tokens\":5,\"tools\":[274],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"race\",\"id\":273,\"outer\":\"offload\",\"prompt\":20,\"reply\":{\"tokens\":93,\"tools\":[137],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"with\":\"send\",\"to\":\"small\",\"keepTokens\":0},{\"kind\":\"switch\",\"id\":34,\"to\":\"small\",\"crash\":null},{\"kind\":\"compact\",\"id\":35,\"fault\":null,\"crash\":{\"at\":14,\"inRecoveryAt\":null,\"retry\":true}}]}") as Simulation.Scenario
}

/**
 * Q (seed 220048, 80 steps): a crash after `injectHistory` left small-n2's first delivery (15,355 tokens) `pending`;
 * the next turn start read the native thread back and settled it, but planned with the native thread as read before
 * the read-back (no usage, estimate 0) and never added the delivery to Baton's estimate. That turn brought no usage
 * report, so Baton believed small-n2 held about 19,900 tokens against a true 37,800; a merge-back's injection was
 * rejected at 44,001 and, at the next turn, an injection under the low estimate filled small-n2 to 41,986 and the
 * 2,189-token prompt went over the window (44,263). The read-back now updates the estimate (its usage, else the
 * settled deliveries' tokens) and the turn start plans with the record it wrote (ProviderTurnStartService.reconcile).
 */
const reconciledDeliveryUncounted = {
  name: "Q. a delivery settled by the read-back after a crash stayed out of the estimate: after a turn without a report, injected history filled the native thread and the prompt overflowed (seed 220048)",
  category: "truth",
  scenario: JSON.parse("{\"seed\":220048,\"providers\":[{\"name\":\"big\",\"window\":1000000,\"autoCompactThreshold\":null,\"inject\":true,\"readThread\":false,\"tokenScale\":1.21,\"requestOverhead\":851,\"overflowSignal\":\"code\"},{\"name\":\"small\",\"window\":44000,\"autoCompactThreshold\":42000,\"inject\":true,\"readThread\":true,\"tokenScale\":1.04,\"requestOverhead\":1213,\"overflowSignal\":\"code\"},{\"name\":\"plain\",\"window\":200000,\"autoCompactThreshold\":null,\"inject\":false,\"readThread\":true,\"tokenScale\":1.28,\"requestOverhead\":2820,\"overflowSignal\":\"text\"}],\"summariser\":{\"inputWindow\":6000,\"verboseEvery\":3},\"ops\":[{\"kind\":\"create\",\"id\":0,\"provider\":\"big\",\"crash\":null},{\"kind\":\"race\",\"id\":242,\"outer\":\"send\",\"prompt\":1888,\"reply\":{\"tokens\":77,\"tools\":[1086,129,2290],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"with\":\"switch\",\"to\":\"plain\",\"keepTokens\":2000},{\"kind\":\"switch\",\"id\":3,\"to\":\"small\",\"crash\":null},{\"kind\":\"race\",\"id\":243,\"outer\":\"send\",\"prompt\":20,\"reply\":{\"tokens\":20,\"tools\":[791],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"with\":\"offload\",\"to\":\"plain\",\"keepTokens\":2000},{\"kind\":\"switch\",\"id\":4,\"to\":\"plain\",\"crash\":null},{\"kind\":\"send\",\"id\":6,\"prompt\":15,\"reply\":{\"tokens\":20,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"send\",\"id\":8,\"prompt\":7462,\"reply\":{\"tokens\":2734,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"send\",\"id\":11,\"prompt\":20,\"reply\":{\"tokens\":1601,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"interrupt_in_tool_call\",\"id\":12,\"prompt\":33,\"reply\":{\"tokens\":21,\"tools\":[1029],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"answered\":true,\"crash\":null},{\"kind\":\"interrupt_in_tool_call\",\"id\":18,\"prompt\":5,\"reply\":{\"tokens\":244,\"tools\":[1371],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"answered\":false,\"crash\":null},{\"kind\":\"send\",\"id\":19,\"prompt\":18,\"reply\":{\"tokens\":243,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"send\",\"id\":20,\"prompt\":3,\"reply\":{\"tokens\":31,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"send\",\"id\":21,\"prompt\":76,\"reply\":{\"tokens\":20,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":\"timeout\",\"interruptAt\":null,\"crash\":null},{\"kind\":\"switch\",\"id\":22,\"to\":\"small\",\"crash\":null},{\"kind\":\"send\",\"id\":23,\"prompt\":66,\"reply\":{\"tokens\":20,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":\"refuse\",\"interruptAt\":null,\"crash\":null},{\"kind\":\"send\",\"id\":24,\"prompt\":20,\"reply\":{\"tokens\":20,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":{\"at\":15,\"inRecoveryAt\":null,\"retry\":false}},{\"kind\":\"send\",\"id\":25,\"prompt\":75,\"reply\":{\"tokens\":2287,\"tools\":[110,1320],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"race\",\"id\":265,\"outer\":\"offload\",\"prompt\":14,\"reply\":{\"tokens\":121,\"tools\":[759,2224,1088],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"with\":\"send\",\"to\":\"plain\",\"keepTokens\":0},{\"kind\":\"send\",\"id\":26,\"prompt\":3,\"reply\":{\"tokens\":2989,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":{\"at\":11,\"inRecoveryAt\":null,\"retry\":false}},{\"kind\":\"send\",\"id\":27,\"prompt\":11,\"reply\":{\"tokens\":174,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"interrupt_in_tool_call\",\"id\":28,\"prompt\":40,\"reply\":{\"tokens\":243,\"tools\":[2258],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"answered\":true,\"crash\":null},{\"kind\":\"send\",\"id\":32,\"prompt\":6589,\"reply\":{\"tokens\":20,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":{\"at\":21,\"inRecoveryAt\":null,\"retry\":false}},{\"kind\":\"race\",\"id\":273,\"outer\":\"send\",\"prompt\":76,\"reply\":{\"tokens\":7246,\"tools\":[186,2292,1865],\"reasoning\":false,\"usage\":{\"kind\":\"missing\"}},\"with\":\"compact\",\"to\":\"plain\",\"keepTokens\":300},{\"kind\":\"fork\",\"id\":193,\"provider\":null,\"crash\":null},{\"kind\":\"send\",\"id\":34,\"prompt\":11,\"reply\":{\"tokens\":21,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"send\",\"id\":40,\"prompt\":709,\"reply\":{\"tokens\":2895,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"race\",\"id\":296,\"outer\":\"send\",\"prompt\":9,\"reply\":{\"tokens\":119,\"tools\":[1719],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"with\":\"offload\",\"to\":\"big\",\"keepTokens\":2000},{\"kind\":\"merge\",\"id\":218,\"leave\":true,\"crash\":null},{\"kind\":\"send\",\"id\":59,\"prompt\":10,\"reply\":{\"tokens\":20,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"missing\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"send\",\"id\":60,\"prompt\":2023,\"reply\":{\"tokens\":20,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null}]}") as Simulation.Scenario
}

describe("races: two commands on one thread in flight at once", () => {
  const tool = { tokens: 200, tools: [900], reasoning: false, usage: { kind: "counted" } } as const
  const race = (id: number, outer: "send" | "offload", withKind: "compact" | "offload" | "switch" | "send"): Op =>
    ({ kind: "race", id, outer, prompt: 40, reply: tool, with: withKind, to: "big", keepTokens: 0 })
  it.live("a turn in a provider call refuses /compact, /offload and a switch with RunInProgress; a send inside /offload's summary discards the summary", () =>
    Effect.gen(function*() {
      const scenario: Simulation.Scenario = {
        seed: 1,
        providers: providers(allRead),
        ops: [
          { kind: "create", id: 0, provider: "small", crash: null },
          ...Array.from({ length: 6 }, (_, i) => send(i + 1, { reply: { ...reply, tokens: 400 } })),
          race(10, "send", "compact"),
          race(11, "send", "offload"),
          race(12, "send", "switch"),
          race(13, "offload", "send"),
          send(14)
        ]
      }
      const outcome = yield* Simulation.execute(scenario)
      expect(outcome.violations).toEqual([])
      const raced = outcome.trace.slice(7, 11).map((line) => line.split("  =>  ")[1]!)
      for (const [i, what] of (["compact", "offload", "switch"] as const).entries()) {
        expect(raced[i]).toMatch(new RegExp(`^completed; gen \\d+, used \\d+; ${what}: refused RunInProgress: `))
      }
      // The summary was being written while the thread advanced: it is discarded as stale (issue 12: a typed outcome
      // telling the user to retry, no longer a ConcurrentModification error), the send completed.
      expect(raced[3]).toMatch(/^not offloaded: the conversation changed while the summary was being written.*; send: completed/)
      expect(outcome.trace[11]).toContain("=>  completed")
    }), { timeout: 120_000 })
})

/**
 * R (seed 9101, 40 steps): a stale usage report said big-n1 held 837 tokens while a turn had truly filled it to 352
 * short of its 1,000,000 window. The next turn start injected a missed run's history; the provider rejected it
 * (1,000,107 tokens) and the prompt went alone. That turn's report was stale too (837 again), so the turn start after
 * it sent the same injection, now larger (1,000,158), to the native thread that had just rejected it. A rejection now
 * records the least the native thread holds (`NativeThread.heldAtLeast`: the rejected size less the injection), which
 * later reports do not lower and a compaction clears; the budget and the known-full check take it over a lower report.
 */
const rejectedInjectionResent = {
  name: "R. after an injection was rejected and a stale report followed, the next turn start sent the same injection again (seed 9101)",
  category: "truth",
  scenario: JSON.parse("{\"seed\":9101,\"providers\":[{\"name\":\"big\",\"window\":1000000,\"autoCompactThreshold\":null,\"inject\":true,\"readThread\":true,\"tokenScale\":1.1400000000000001,\"requestOverhead\":837,\"overflowSignal\":\"code\"},{\"name\":\"small\",\"window\":64000,\"autoCompactThreshold\":60000,\"inject\":true,\"readThread\":true,\"tokenScale\":1.24,\"requestOverhead\":1491,\"overflowSignal\":\"code\"},{\"name\":\"plain\",\"window\":200000,\"autoCompactThreshold\":null,\"inject\":false,\"readThread\":true,\"tokenScale\":1.17,\"requestOverhead\":864,\"overflowSignal\":\"text\",\"ackUsage\":{\"missingEvery\":4,\"impossibleEvery\":6},\"modelApi\":true}],\"summariser\":{\"inputWindow\":6000,\"verboseEvery\":3},\"ops\":[{\"kind\":\"create\",\"id\":0,\"provider\":\"plain\",\"crash\":null},{\"kind\":\"switch\",\"id\":6,\"to\":\"big\",\"crash\":null},{\"kind\":\"send\",\"id\":10,\"prompt\":20,\"reply\":{\"tokens\":20,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"stale\",\"lag\":5,\"fillLeaving\":352}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"interrupt_before_start\",\"id\":11,\"prompt\":321,\"crash\":null},{\"kind\":\"send\",\"id\":12,\"prompt\":20,\"reply\":{\"tokens\":20,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"stale\",\"lag\":6,\"fillLeaving\":null}},\"fault\":null,\"interruptAt\":null,\"crash\":null},{\"kind\":\"send\",\"id\":13,\"prompt\":20,\"reply\":{\"tokens\":20,\"tools\":[],\"reasoning\":false,\"usage\":{\"kind\":\"counted\"}},\"fault\":null,\"interruptAt\":null,\"crash\":null}]}") as Simulation.Scenario
}

describe("regressions (shrunk simulation failures, fixed)", () => {
  for (const regression of [...regressions, ...knownViolations, outputProvesRead, interruptRacedTurn, usageJumpCalibration, missingReportForgetsFull, ...summaryToLaneThatSawCovered, largeTurnHeldCalibration, pinnedTwiceInChain, pendingDeliveryAtOffload, promptAloneKnownFull, laneHoldsEarlierShare, compactOverflowTaughtNothing, reconciledDeliveryUncounted, rejectedInjectionResent]) {
    it.live(regression.name, () =>
      Effect.gen(function*() {
        const outcome = yield* Simulation.execute(regression.scenario)
        expect(outcome.violations).toEqual([])
        expect(outcome.executed).toBe(regression.scenario.ops.length)
      }), { timeout: 60_000 })
  }
})


describe("mid-stream provider failures in the simulation", () => {
  // Replies with a tool unit: a failure after 1 item stops before the call, after 2 inside the call.
  const tools = { ...reply, tools: [40] }
  const scenario = (crash: ReturnType<typeof crashAt> | null): Simulation.Scenario => ({
    seed: 77,
    providers: providers({ big: true, small: false, plain: true }),
    ops: [
      { kind: "create", id: 0, provider: "big", crash: null },
      send(1),
      send(2, { reply: tools, fault: ScriptedProvider.failAfterItems(2), crash }),
      { kind: "switch", id: 3, to: "plain", crash: null },
      send(4, { reply: tools, fault: ScriptedProvider.failAfterItems(1, "overflow") }),
      { kind: "switch", id: 5, to: "small", crash: null },
      send(6)
    ]
  })

  it.live("failures after 1 and 2 streamed items, then switches: no violation; both runs fail, the thread goes on", () =>
    Effect.gen(function*() {
      const outcome = yield* Simulation.execute(scenario(null))
      expect(outcome.violations).toEqual([])
      expect(outcome.executed).toBe(7)
      const outcomes = outcome.trace.map((line) => line.split("  =>  ")[1]!.split(/[;(]/)[0]!.trim())
      expect(outcomes.slice(1)).toEqual(["completed", "failed", expect.any(String), "failed", expect.any(String), "completed"])
    }), { timeout: 60_000 })

  it.live("a crash at every durable step of the send whose stream fails mid-way: no violation after restart", () =>
    Effect.gen(function*() {
      const crashed: Array<string> = []
      for (let at = 1; at <= 30; at++) {
        const outcome = yield* Simulation.execute(scenario(crashAt(at, at % 2 === 0)))
        expect([at, outcome.violations]).toEqual([at, []])
        crashed.push(...outcome.crashPoints)
      }
      // The crashes landed on the per-item appends and on both sides of the streamed turn.
      const sites = new Set(crashed.map((p) => p.replace(/^[^:]+: /, "").replace(/#\d+$/, "")))
      for (const site of ["store.insertItemsAfterLast", "before provider.startTurn", "after provider.startTurn"]) expect(sites).toContain(site)
    }), { timeout: 120_000 })
})

describe("provider faults of issue 3 in the simulation", () => {
  const midCall = (id: number, answered: boolean, extra: Partial<Extract<Op, { kind: "interrupt_in_tool_call" }>> = {}): Op =>
    ({ kind: "interrupt_in_tool_call", id, prompt: 20, reply: { ...reply, tools: [40] }, answered, crash: null, ...extra })
  const scenario: Simulation.Scenario = {
    seed: 99,
    providers: providers({ big: true, small: false, plain: false }),
    ops: [
      { kind: "create", id: 0, provider: "big", crash: null },
      send(1),
      midCall(2, true),
      midCall(3, false),
      { kind: "switch", id: 4, to: "plain", crash: null },
      send(5, { fault: "overflow" }),
      send(6, { fault: "timeout" }),
      midCall(7, true),
      { kind: "switch", id: 8, to: "small", crash: null },
      send(9, { fault: "overflow" }),
      send(10),
      midCall(11, true, { crash: crashAt(12, true) })
    ]
  }

  it.live("interrupts inside a tool call (acknowledged or not), timeouts and overflows: no violation, same bytes twice", () =>
    Effect.gen(function*() {
      const a = yield* Simulation.execute(scenario, { keepDump: true })
      expect(a.violations).toEqual([])
      expect(a.executed).toBe(scenario.ops.length)
      const outcomes = a.trace.map((line) => line.split("  =>  ")[1]!.split(/[;(]/)[0]!.trim())
      expect(outcomes).toEqual([
        expect.any(String),
        "completed",
        "interrupted",
        // The unacknowledged interrupt's turn finished late on the replaced native thread: its output is owed to the
        // replacement (hof_000001), so the switch's handoff is the second.
        "interrupted",
        "handoff hof_000002",
        "completed",
        "failed",
        "interrupted",
        expect.any(String),
        "completed",
        "completed",
        expect.any(String)
      ])
      expect(a.dump).toContain("lateOutputOf")
      // Every tool call the interrupted turns left open is answered in the record.
      expect(a.dump).toContain("[interrupted] The user interrupted the turn while this tool call ran")
      const b = yield* Simulation.execute(scenario, { keepDump: true })
      expect(b.dump === a.dump).toBe(true)
      expect(b.trace).toEqual(a.trace)
    }), { timeout: 60_000 })
})

// Tester r35: a message queued behind a run waiting on a client tool call and interrupted first had its prompt
// recorded before that run's call and result (held in its tool wait until the run ends): the run's tool unit was
// split and fell in the queued message's run. The run-order check (InvariantChecks) reports it; the queued prompt now
// owes until the run ahead ends (RunLifecycle, runs.prompt_owed). A crash at every durable step of the operation,
// between the queued run's end and the waiting run's end included: after the restart the client interrupts what is
// left, and the prompt is recorded once, after the waiting run's items.
describe("a message queued behind a run waiting on a client tool call, in the simulation", () => {
  const queueBehind = (id: number, queuedFirst: boolean, crash: ReturnType<typeof crashAt> | null = null): Op =>
    ({ kind: "queue_behind_wait", id, prompt: 20, queuedFirst, crash })
  const scenario = (crash: ReturnType<typeof crashAt> | null): Simulation.Scenario => ({
    seed: 35,
    providers: providers({ big: true, small: false, plain: false }),
    ops: [
      { kind: "create", id: 0, provider: "big", crash: null },
      send(1),
      queueBehind(2, true),
      queueBehind(4, false),
      queueBehind(6, true, crash),
      send(8)
    ]
  })

  it.live("interrupted in both orders: no violation, the queued prompt after the waiting run's call and result", () =>
    Effect.gen(function*() {
      const outcome = yield* Simulation.execute(scenario(null))
      expect(outcome.violations).toEqual([])
    }), { timeout: 60_000 })

  it.live("a crash at every durable step of the queued-first operation: no violation after restart", () =>
    Effect.gen(function*() {
      const crashed: Array<string> = []
      // Up to the operation's last durable step (the first step at which no crash lands ends the loop).
      for (let at = 1; at <= 60; at++) {
        const outcome = yield* Simulation.execute(scenario(crashAt(at)))
        expect([at, outcome.violations]).toEqual([at, []])
        if (outcome.crashes === 0) break
        crashed.push(...outcome.crashPoints)
      }
      expect(crashed.length).toBeGreaterThan(20)
      // The crashes landed on the queued run's mark and on the waiting run's end among others.
      const sites = new Set(crashed.map((p) => p.replace(/^[^:]+: /, "").replace(/#\d+$/, "")))
      for (const site of ["store.setPromptOwed", "store.updateRunEnded"]) expect(sites).toContain(site)
    }), { timeout: 180_000 })
})

// Mutations the simulator's random runs must catch, each pinned to a seed that does (a mutation is a deliberate
// product bug, `OrchestratorConfig.mutations`): the test fails when the seed stops catching it, so the oracle property
// that guards the mechanism cannot pass vacuously. The same seed runs clean on this build. `resume_opens_replay_window`
// is pinned below with its shrunk scenario (seed 13 × 40).
// - `retry_overflow_on_same_native` needs the provider to reject a request Baton could not foresee; before stale
//   usage reports (issue 8) no seed did (0 of 24 × 40). Seed 9 × 40: a stale report (44,220 used) hid that `big`'s
//   native thread was truly filled to 1,310 tokens short of its window; the next 7,496-token prompt overflowed, and the
//   mutation sent it to the same native thread again.
// - `sample_omits_output` (the calibration check) needs one instance with 8 samples and 10,000 tokens of evidence.
//   Stale usage reports do not help it (a stale report breaks the sample it ends and the next one), and no seed
//   caught it with them on (1-4 × 150, 5-12 × 120, 13-24 × 60, 1-12 × 40); with them off, seed 2 × 150 does (the
//   calibration of `small` reaches 2.18 against a true 1.25), so that seed is pinned without them.
// - `owed_outside_unit_of_work` (reviewer r48's `/compact` writing an owed delivery and its event without the thread's
//   lock) needs `/compact` to find history owed with no delivery yet; the simulator appends events only inside a unit
//   of work (`requireUnitOfWork`), so the first such write dies where it happens. Seed 60302 × 60 does.
describe("mutations the simulation catches (pinned seeds)", () => {
  const pinned: ReadonlyArray<{
    readonly mutation: "retry_overflow_on_same_native" | "sample_omits_output" | "owed_outside_unit_of_work"
    readonly seed: number
    readonly steps: number
    readonly features: Simulation.Features
    readonly caught: RegExp
  }> = [
    {
      mutation: "retry_overflow_on_same_native",
      seed: 9,
      steps: 40,
      features: ci,
      caught: /^truth: big-n2 was sent a startTurn request of \d+ tokens \(window 1000000\) after it already rejected one of \d+ tokens, with nothing compacted in between$/
    },
    {
      mutation: "sample_omits_output",
      seed: 2,
      steps: 150,
      features: { ...ci, staleUsage: false },
      caught: /^truth: the calibration of small is \d\.\d{3} after \d+ samples \(\d+ tokens of evidence\), more than 10% from the provider's true ratio 1\.250$/
    },
    {
      mutation: "owed_outside_unit_of_work",
      seed: 60302,
      steps: 60,
      features: ci,
      caught: /^no-wedge: send m\d+ failed: RuntimeException: thread event delivery\.created on \S+ appended outside a unit of work$/
    }
  ]
  for (const { caught, features, mutation, seed, steps } of pinned) {
    it.live(`${mutation}: seed ${seed} × ${steps} reports it under the mutation, and nothing on this build`, () =>
      Effect.gen(function*() {
        const broken = yield* Simulation.runSeed(seed, steps, features, { mutations: new Set([mutation]) })
        expect(broken.violations.filter((v) => caught.test(v))).not.toEqual([])
        const fixed = yield* Simulation.runSeed(seed, steps, features)
        expect(fixed.violations).toEqual([])
        // The provider rejected a request on this build too: the seed has the overflow the mutation mishandles.
        if (mutation === "retry_overflow_on_same_native") expect(fixed.stats.overflowsRejected).toBeGreaterThan(0)
      }), { timeout: 240_000 })
  }
})

// Tester r36: after a restart, an OpenAI-compatible server that reused its response id and answered the same text
// again had that answer skipped as a replay and lost (fixed by `ProviderAdapter.resumeMayReplay`). The simulator never
// restarted a model-API provider whose ids repeat, so it could not find it; its `modelApi` feature does (`plain` plays
// that server, a third of the answers are `Done.`), and the oracle compares what Baton skipped as a replay with what the
// provider replayed. Mutation `resume_opens_replay_window` is the build before the fix.
describe("a model API's resume in the simulation (tester r36)", () => {
  const mutations = new Set(["resume_opens_replay_window"] as const)
  const done = { ...reply, same: true }
  const scenario = (crash: ReturnType<typeof crashAt> | null, between: Op): Simulation.Scenario => ({
    seed: 13,
    providers: providers(allRead).map((p) => p.name === "plain" ? { ...p, modelApi: true } : p),
    ops: [
      { kind: "create", id: 0, provider: "big", crash: null },
      { kind: "switch", id: 1, to: "plain", crash: null },
      send(9, { reply: done }),
      between,
      send(14, { reply: done, crash })
    ]
  })
  // Shrunk from seed 13 × 40 under the mutation: a switch away that crashed before its handoff (the thread stays on
  // `plain`), then an answer equal to the first one, same response id, on the resumed native thread.
  const shrunk = scenario(null, { kind: "switch", id: 13, to: "small", crash: crashAt(3) })
  const lost = /^nothing-lost: run run_r2\.000002 had 1 item\(s\) of its output skipped as a replay \(message ids chatcmpl-[0-9a-f]+\), but its provider replayed 0: an answer was lost$/

  it.live("the seed that found it: seed 13 × 40 reports the lost answer under the mutation, and none on this build", () =>
    Effect.gen(function*() {
      const broken = yield* Simulation.runSeed(13, 40, ci, { mutations })
      expect(broken.violations.some((v) => v.startsWith("nothing-lost: "))).toBe(true)
      const fixed = yield* Simulation.runSeed(13, 40, ci)
      expect(fixed.violations).toEqual([])
    }), { timeout: 120_000 })

  it.live("mutation resume_opens_replay_window: the shrunk scenario's second `Done.` is skipped as a replay and the oracle names it", () =>
    Effect.gen(function*() {
      const broken = yield* Simulation.execute(shrunk, { mutations })
      expect(broken.violations).toHaveLength(1)
      expect(broken.violations[0]).toMatch(lost)
      expect(broken.failedAt).toBe(4)
      const fixed = yield* Simulation.execute(shrunk)
      expect(fixed.violations).toEqual([])
      expect(fixed.executed).toBe(5)
      expect(fixed.trace[4]).toContain("=>  completed")
    }), { timeout: 60_000 })

  it.live("a crash at every durable step of the second send (retried on every other one): no violation after restart", () =>
    Effect.gen(function*() {
      const crashed: Array<string> = []
      let caught = 0
      for (let at = 1; at <= 40; at++) {
        const s = scenario(crashAt(at, at % 2 === 0), { kind: "restart", id: 13 })
        const outcome = yield* Simulation.execute(s)
        expect([at, outcome.violations]).toEqual([at, []])
        if (outcome.crashes === 0) break
        crashed.push(...outcome.crashPoints)
        // The same crash under the mutation: the answer after the restart (the send's, or its retry's) is lost.
        if ((yield* Simulation.execute(s, { mutations })).violations.some((v) => v.startsWith("nothing-lost: "))) caught++
      }
      expect(crashed.length).toBeGreaterThan(10)
      expect(caught).toBeGreaterThan(0)
      const sites = new Set(crashed.map((p) => p.replace(/^[^:]+: /, "").replace(/#\d+$/, "")))
      for (const site of ["before provider.startTurn", "after provider.startTurn", "store.updateRunEnded"]) expect(sites).toContain(site)
    }), { timeout: 180_000 })

  it("--without api: no model-API provider, no alike answers, every other draw of the seed unchanged", () => {
    const without = Simulation.generate(7, 60, { ...ci, modelApi: false })
    const withApi = Simulation.generate(7, 60, ci)
    expect(without.providers.some((p) => p.modelApi === true)).toBe(false)
    expect(withApi.providers.filter((p) => p.modelApi === true).map((p) => p.name)).toEqual(["plain"])
    expect(withApi.ops.some((op) => op.kind === "send" && op.reply.same === true)).toBe(true)
    const strip = (s: Simulation.Scenario) => ({
      ...s,
      providers: s.providers.map(({ modelApi: _, ...p }) => p),
      ops: s.ops.map((op) => op.kind === "send" ? { ...op, reply: (({ same: _, ...r }) => r)(op.reply) } : op)
    })
    expect(strip(withApi)).toEqual(without)
  })
})

// Review: a merge-back while the parent's run was in progress (here waiting on a client tool call, its call held in
// its tool wait) recorded the merge's copies inside that run's span, before its call and result: the record read as
// if the model had seen the merged history first. The run-order check (InvariantChecks) reports it (seeds 6 and 8 of
// the soak with `mergesBehind`, before the fix); the merge now owes its copies until the run ahead ends
// (ThreadLineage, runs.prompt_owed). A crash at every durable step of the merge: after the restart the client
// interrupts the parent's waiting run, and the copies are recorded once, after its items.
describe("a merge-back behind a parent's run waiting on a client tool call, in the simulation", () => {
  const scenario = (crash: ReturnType<typeof crashAt> | null): Simulation.Scenario => ({
    seed: 36,
    providers: providers({ big: true, small: false, plain: false }),
    ops: [
      { kind: "create", id: 0, provider: "big", crash: null },
      send(1),
      { kind: "fork", id: 2, provider: "plain", crash: null },
      send(3),
      { kind: "merge", id: 4, leave: true, behindWait: true, crash },
      send(6)
    ]
  })

  it.live("no violation: the merge's copies after the waiting run's call and result", () =>
    Effect.gen(function*() {
      const outcome = yield* Simulation.execute(scenario(null))
      expect(outcome.violations).toEqual([])
      expect(outcome.trace[4]!.split("  =>  ")[1]).toBe("merged runs 2-2: 2 items (64 tok); parent's waiting run interrupted")
    }), { timeout: 60_000 })

  it.live("a crash at every durable step of the merge: no violation after restart", () =>
    Effect.gen(function*() {
      const crashed: Array<string> = []
      for (let at = 1; at <= 40; at++) {
        const outcome = yield* Simulation.execute(scenario(crashAt(at, at % 2 === 0)))
        expect([at, outcome.violations]).toEqual([at, []])
        if (outcome.crashes === 0) break
        crashed.push(...outcome.crashPoints)
      }
      // Every write of the merge's unit of work: its run, the mark that it owes its copies, the link, the events, the
      // receipt.
      const sites = new Set(crashed.map((p) => p.replace(/^[^:]+: /, "").replace(/#\d+$/, "")))
      expect([...sites].sort()).toEqual(["store.appendEvent", "store.insertLink", "store.insertReceipt", "store.insertRun", "store.setPromptOwed"])
    }), { timeout: 180_000 })
})
