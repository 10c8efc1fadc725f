/**
 * Sim seed 55017 × 200, shrunk to 15 operations: a turn whose completion crashed while it recorded the usage report
 * (step 26, `store.recordNativeUsage`) reached the provider (the run is recovered `after_provider`, "process restarted
 * during the provider turn"), but the native thread's record kept the report from before that turn. The next turn
 * start planned with it and sent 10,264 tokens of owed history (13,100 in the provider's units) into a native thread
 * that turn had filled: the provider counted 44,176 of 44,000 and rejected it; the oracle named a request Baton could
 * have known would not fit. Restart recovery now treats such a turn as one that reported no usage: the stale report
 * is dropped and the estimate grows by what the record holds of the turn (RunRecovery). Found at stop 46; it
 * reproduced at stop 45's end (`3dc537f`) as well.
 */
import { Simulation } from "@baton/testing"
import { expect, it } from "@effect/vitest"
import { Effect } from "effect"

const seed55017: Simulation.Scenario = {"seed":55017,"providers":[{"name":"big","window":1000000,"autoCompactThreshold":null,"inject":true,"readThread":true,"tokenScale":1.1,"requestOverhead":2607,"overflowSignal":"code"},{"name":"small","window":44000,"autoCompactThreshold":42000,"inject":false,"readThread":true,"tokenScale":1.28,"requestOverhead":2995,"overflowSignal":"code","ackUsage":{"missingEvery":3,"impossibleEvery":7}},{"name":"plain","window":200000,"autoCompactThreshold":null,"inject":false,"readThread":true,"tokenScale":1.01,"requestOverhead":1454,"overflowSignal":"text","modelApi":true}],"summariser":{"inputWindow":6000,"verboseEvery":5},"ops":[{"kind":"create","id":0,"provider":"big","crash":null},{"kind":"fork","id":463,"provider":"small","crash":null},{"kind":"send","id":96,"prompt":20,"reply":{"tokens":20,"tools":[],"reasoning":false,"usage":{"kind":"counted"}},"fault":null,"interruptAt":null,"crash":null},{"kind":"send","id":98,"prompt":20,"reply":{"tokens":348,"tools":[],"reasoning":false,"usage":{"kind":"counted"},"same":false},"fault":null,"interruptAt":null,"crash":null},{"kind":"interrupt_in_tool_call","id":122,"prompt":20,"reply":{"tokens":162,"tools":[2471],"reasoning":false,"usage":{"kind":"near_full","fraction":0.91}},"answered":true,"crash":null},{"kind":"compact","id":123,"fault":null,"crash":{"at":4,"inRecoveryAt":null,"retry":false}},{"kind":"switch","id":124,"to":"big","crash":null},{"kind":"send","id":125,"prompt":6,"reply":{"tokens":2446,"tools":[1150,982,866],"reasoning":false,"usage":{"kind":"counted"}},"fault":null,"interruptAt":null,"crash":null},{"kind":"fork","id":525,"provider":null,"crash":null},{"kind":"merge","id":526,"leave":true,"behindWait":false,"crash":null},{"kind":"send","id":127,"prompt":4,"reply":{"tokens":2781,"tools":[],"reasoning":false,"usage":{"kind":"counted"}},"fault":null,"interruptAt":null,"crash":null},{"kind":"switch","id":132,"to":"small","crash":null},{"kind":"send","id":133,"prompt":18740,"reply":{"tokens":20,"tools":[1528],"reasoning":false,"usage":{"kind":"counted"},"same":false},"fault":null,"interruptAt":null,"crash":{"at":26,"inRecoveryAt":null,"retry":false}},{"kind":"interrupt_before_start","id":134,"prompt":1071,"crash":null},{"kind":"race","id":734,"outer":"send","prompt":20,"reply":{"tokens":210,"tools":[1165],"reasoning":true,"usage":{"kind":"counted"}},"with":"offload","to":"plain","keepTokens":300}]}

for (const dialect of ["sqlite", "postgres"] as const) {
  it.live(`sim seed 55017, shrunk (${dialect}): after a crash that lost a turn's usage report, the next turn start does not plan with the report of before it`, () =>
    Effect.gen(function*() {
      const outcome = yield* Simulation.execute(seed55017, { digest: false, dialect })
      // The turn whose completion crashed, then the turn start that planned after it.
      expect(outcome.trace[12]).toContain("crashed at step 26 (store.recordNativeUsage)")
      expect(outcome.trace[14]).toMatch(/=> {2}completed/)
      expect(outcome.violations).toEqual([])
    }), { timeout: 120_000 })
}
