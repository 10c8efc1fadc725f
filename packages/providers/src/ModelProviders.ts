/**
 * ModelProviders: builds the adapter a `ModelProviderConfig` describes (its kind picks the dialect), reading its key
 * from the environment variable the config names. The app (the server) calls it for each configured instance and
 * hands the adapters to `ProviderRegistry.layer`; it provides the `HttpClient` (e.g. `NodeHttpClient.layerUndici`)
 * and the `NativeMessageLog` (`@baton/persistence` `NativeMessageStore.make`).
 */
import type { ProviderInstance } from "@baton/contracts"
import { HttpClient } from "@effect/platform"
import { type ConfigError, Effect } from "effect"
import * as AnthropicMessages from "./AnthropicMessages.js"
import type * as ModelApiAdapter from "./ModelApiAdapter.js"
import { NativeMessageLog } from "./NativeMessageLog.js"
import * as OpenAiChat from "./OpenAiChat.js"
import * as OpenAiResponses from "./OpenAiResponses.js"
import type { ProviderAdapterShape } from "./ProviderAdapter.js"
import { apiKey, type ModelProviderConfig } from "./ProviderConfig.js"

/** The adapter of `instance` as `config` describes it. Fails with `ConfigError` when the key's variable is unset. */
export const fromConfig = (
  instance: ProviderInstance,
  config: ModelProviderConfig
): Effect.Effect<ProviderAdapterShape, ConfigError.ConfigError, HttpClient.HttpClient | NativeMessageLog> =>
  Effect.gen(function*() {
    const key = yield* apiKey(config)
    const http = yield* HttpClient.HttpClient
    const log = yield* NativeMessageLog
    const options = { instance, config, apiKey: key, http, log }
    switch (config.kind) {
      case "anthropic-messages":
        return AnthropicMessages.make(options)
      case "openai-responses":
        return OpenAiResponses.make(options)
      case "openai-chat":
        return OpenAiChat.make(options)
    }
  })

/**
 * The adapter of `options` (the key already read, e.g. at the server's start): the dialect its `config.kind` names.
 * Does not fail; errors surface per request as `ProviderError`.
 */
export const make = (options: ModelApiAdapter.ModelApiOptions): ProviderAdapterShape => {
  switch (options.config.kind) {
    case "anthropic-messages":
      return AnthropicMessages.make(options)
    case "openai-responses":
      return OpenAiResponses.make(options)
    case "openai-chat":
      return OpenAiChat.make(options)
  }
}
