/**
 * The provider-instance configuration: the schema accepts the documented examples (docs/providers.md) and names the
 * field it rejects; the key is read from the named environment variable into a `Redacted` that never prints; the
 * adapter built from a config sends the key only in its auth header.
 */
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Layer, Option, Redacted, Schema } from "effect"
import { NativeMessageLog } from "../src/NativeMessageLog.js"
import * as ModelProviders from "../src/ModelProviders.js"
import { apiKey, ModelProviderConfig } from "../src/ProviderConfig.js"
import type { ProviderInstance } from "@baton/contracts"
import { collect, fixtureLines, frame, httpLayer, logOn, loopback, sqliteFile, sse } from "./support/Loopback.js"

const anthropic = {
  kind: "anthropic-messages",
  baseUrl: "https://api.anthropic.com",
  model: "claude-sonnet-4-5",
  apiKeyEnv: "ANTHROPIC_API_KEY",
  contextWindow: 200000,
  autoCompactThreshold: 180000,
  maxOutputTokens: 32000,
  prices: { input: 3, cacheWrite: 3.75, cacheRead: 0.3, output: 15 }
}

describe("ProviderConfig", () => {
  it("decodes the documented example and rejects a bad field by name", () => {
    const decoded = Schema.decodeUnknownSync(ModelProviderConfig)(anthropic)
    expect(decoded.contextWindow).toBe(200000)
    const bad = Schema.decodeUnknownEither(ModelProviderConfig)({ ...anthropic, baseUrl: "api.anthropic.com" })
    expect(bad._tag).toBe("Left")
    expect(String(bad._tag === "Left" ? bad.left.message : "")).toContain("baseUrl")
    const negative = Schema.decodeUnknownEither(ModelProviderConfig)({ ...anthropic, prices: { ...anthropic.prices, output: -1 } })
    expect(negative._tag === "Left" ? negative.left.message : "").toContain("output")
  })

  it.effect("the key is read from the named variable into a Redacted that prints as <redacted>; an unset variable fails", () =>
    Effect.gen(function*() {
      const config = yield* Schema.decodeUnknown(ModelProviderConfig)(anthropic)
      const key = yield* apiKey(config).pipe(Effect.withConfigProvider(ConfigProvider.fromMap(new Map([["ANTHROPIC_API_KEY", "sk-ant-secret"]]))))
      expect(Option.map(key, Redacted.value)).toEqual(Option.some("sk-ant-secret"))
      expect(String(Option.getOrThrow(key))).toBe("<redacted>")
      expect(JSON.stringify(key)).not.toContain("sk-ant-secret")
      const missing = yield* Effect.flip(apiKey(config).pipe(Effect.withConfigProvider(ConfigProvider.fromMap(new Map()))))
      expect(missing._op).toBe("MissingData")
      const { apiKeyEnv: _named, ...keyless } = config
      expect(yield* apiKey(keyless)).toEqual(Option.none())
    }))

  it.scoped("fromConfig builds the adapter of the config's kind; the key travels only in its header", () =>
    Effect.gen(function*() {
      const loop = yield* loopback
      const file = yield* sqliteFile
      const log = yield* logOn(file)
      loop.enqueue(sse(frame("openai-chat", fixtureLines("openai-chat/openai-text.chunks.txt"))))
      const config = yield* Schema.decodeUnknown(ModelProviderConfig)({
        ...anthropic,
        kind: "openai-chat",
        baseUrl: `${loop.url}/v1`,
        model: "qwen3-coder",
        apiKeyEnv: "LOCAL_KEY"
      })
      const adapter = yield* ModelProviders.fromConfig("local" as ProviderInstance, config).pipe(
        Effect.provide(Layer.succeed(NativeMessageLog, log)),
        Effect.withConfigProvider(ConfigProvider.fromMap(new Map([["LOCAL_KEY", "sk-local"]])))
      )
      const { nativeRef } = yield* adapter.startThread()
      const { events } = yield* collect(adapter.startTurn({ nativeRef, runId: "r", prompt: "hi", inlineHistory: null }))
      expect(events.at(-1)?._tag).toBe("turn_ended")
      expect(loop.requests[0]!.headers.authorization).toBe("Bearer sk-local")
      expect(loop.requests[0]!.body).not.toContain("sk-local")
    }).pipe(Effect.provide(httpLayer)))
})
