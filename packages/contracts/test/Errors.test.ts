import * as Contracts from "@baton/contracts"
import * as Errors from "../src/Errors.js"
import { HttpApiSchema } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Schema } from "effect"

/** The HTTP status each boundary error must be served with. A new boundary error must be added here. */
const intended: Record<string, number> = {
  ThreadNotFound: 404,
  RunNotFound: 404,
  UnknownProvider: 400,
  InvalidRequest: 400,
  IdempotencyKeyReused: 422,
  TranscriptError: 400,
  RunInProgress: 409,
  ConcurrentModification: 409,
  PersistenceError: 500,
  ProviderError: 502,
  OffloadFailed: 502,
  OffloadOperationNotFound: 404,
  OffloadNotFound: 404,
  OffloadInProgress: 409,
  SubscriberTooSlow: 503,
  ItemNotFound: 404,
  HandoffNotFound: 404,
  NoRunInProgress: 409,
  RunNotWaiting: 409,
  Unauthorized: 401,
  Forbidden: 403,
  PayloadTooLarge: 413,
  UnsupportedMediaType: 415,
  RouteNotFound: 404,
  NotReady: 503,
  LengthRequired: 411
}

/** Every exported error class of a module: a constructor whose instances are `Error`s. */
const errorClasses = (module: Record<string, unknown>) =>
  Object.entries(module).flatMap(([name, value]) =>
    typeof value === "function" && value.prototype instanceof Error ? [[name, value] as const] : []
  )

describe("boundary errors", () => {
  it("every exported error has the status HttpApi reads for it", () => {
    const found = errorClasses(Errors)
    // Every export of Errors.ts is a boundary error class or a schema of one of their fields.
    expect(found.map(([name]) => name).sort()).toEqual(Object.keys(intended).sort())
    for (const [name, cls] of found) {
      expect(Schema.isSchema(cls), name).toBe(true)
      expect([name, HttpApiSchema.getStatusError(cls as unknown as Schema.Schema.Any)]).toEqual([name, intended[name]])
    }
  })

  it("the package exports no error class without a status", () => {
    // An error class added to another contracts module must be listed too (and so carry a status).
    expect(errorClasses(Contracts).map(([name]) => name).sort()).toEqual(Object.keys(intended).sort())
  })

  it("a plain `{ status }` object is not what HttpApi reads (the bug this replaces)", () => {
    class Plain extends Schema.TaggedError<Plain>()("Plain", {}, { status: 404 }) {}
    expect(HttpApiSchema.getStatusError(Plain)).toBe(500)
  })

  it("ProviderError.code accepts only the known codes", () => {
    const decode = Schema.decodeUnknownEither(Errors.ProviderError)
    const base = { _tag: "ProviderError", provider: "codex", operation: "startTurn", reason: "r", retryable: false }
    expect(decode({ ...base, code: "overflow" })._tag).toBe("Right")
    expect(decode({ ...base, code: "context_length_exceeded" })._tag).toBe("Left")
  })
})
