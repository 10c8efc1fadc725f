import { describe, expect, it } from "@effect/vitest"
import { FastCheck as fc, String as Str } from "effect"
import { memo, names } from "../src/internal/Names.js"

// The SQL client's name transforms are memoised: they must answer what effect's `String.camelToSnake` and
// `String.snakeToCamel` answer, for a name seen the first time, seen again, and past the cache's limit.
describe("Names", () => {
  // Names as the code spells them (camelCase) and as SQL returns them (snake_case; `snakeToCamel` itself throws on a
  // trailing underscore, which no column has).
  const camel = fc.stringMatching(/^[a-z][a-zA-Z0-9]{0,30}$/)
  const snake = fc.stringMatching(/^[a-z][a-z0-9]{0,8}(_[a-z0-9]{1,8}){0,4}$/)

  it.prop("transformQueryNames and transformResultNames agree with camelToSnake and snakeToCamel, first and repeated calls", [fc.array(camel, { minLength: 1, maxLength: 20 }), fc.array(snake, { minLength: 1, maxLength: 20 })], ([camels, snakes]) => {
    for (const round of [1, 2]) {
      for (const id of camels) expect([round, names.transformQueryNames(id)]).toEqual([round, Str.camelToSnake(id)])
      for (const id of snakes) expect([round, names.transformResultNames(id)]).toEqual([round, Str.snakeToCamel(id)])
    }
  })

  it("past its limit a memo still answers every name as the function does, and keeps its first answers", () => {
    let calls = 0
    const counted = memo((name) => {
      calls++
      return Str.camelToSnake(name)
    }, 2)
    expect(["providerThreadId", "runId", "createdAt", "createdAt", "providerThreadId"].map(counted))
      .toEqual(["provider_thread_id", "run_id", "created_at", "created_at", "provider_thread_id"])
    // `createdAt` came after the limit: transformed each time; the first two once each.
    expect(calls).toBe(4)
  })
})
