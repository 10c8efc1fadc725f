/**
 * ProviderConfig: the configuration of one model-API provider instance (docs/providers.md), as the server's config
 * file declares it. Owns the schema and reading the API key from the environment; does not own the config file
 * itself (the server reads it) nor pricing a run (the cost step multiplies `TurnTokens` by `prices`).
 *
 * An endpoint or a key never comes from a request: `baseUrl` and `apiKeyEnv` are configuration only, and the key is
 * read once into a `Redacted` that prints as `<redacted>` in logs, errors and spans.
 */
import { Config, type ConfigError, Effect, Option, type Redacted, Schema } from "effect"

/** The wire protocol of an instance. */
export const ModelApiKind = Schema.Literal("anthropic-messages", "openai-responses", "openai-chat")
export type ModelApiKind = typeof ModelApiKind.Type

const NonNegative = Schema.Number.pipe(Schema.nonNegative())
const PositiveInt = Schema.Int.pipe(Schema.positive())

/**
 * Prices in US dollars per million tokens: uncached `input`, `cacheWrite` (Anthropic bills a 5-minute write at 1.25x
 * input), `cacheRead` (0.1x input on Anthropic, 0.1x-0.5x on OpenAI), `output` (reasoning included).
 */
export const Prices = Schema.Struct({
  input: NonNegative,
  cacheWrite: NonNegative,
  cacheRead: NonNegative,
  output: NonNegative
})
export type Prices = typeof Prices.Type

/**
 * One provider instance:
 * - `kind`: the wire protocol; `baseUrl`: the API root without the path (`https://api.anthropic.com`,
 *   `https://api.openai.com/v1`, `http://127.0.0.1:8000/v1` for vLLM/llama.cpp/Ollama/LM Studio);
 * - `model`: the model id sent with every request;
 * - `apiKeyEnv`: the *name* of the environment variable holding the key (absent: no key, as local servers accept);
 * - `contextWindow`, `autoCompactThreshold`, `maxOutputTokens`: tokens (`autoCompactThreshold` null: Baton never
 *   compacts this instance by itself);
 * - `prices`: per million tokens (see `Prices`);
 * - `maxRetries`: how many times a 429/529/5xx answer is retried (default 4); `systemPrompt`: the lane's system
 *   prompt (default none), sent first in every request so it stays in the cached prefix;
 * - `media`: whether the model reads inline images and files (default true); `false`: a provider switch to this
 *   (OpenAI) instance sends each as a one-line text instead (a text-only model on vLLM or llama.cpp refuses image
 *   parts: every request of a conversation holding a screenshot would fail).
 */
export const ModelProviderConfig = Schema.Struct({
  kind: ModelApiKind,
  baseUrl: Schema.String.pipe(Schema.pattern(/^https?:\/\/[^\s]+$/)),
  model: Schema.NonEmptyString,
  apiKeyEnv: Schema.optional(Schema.NonEmptyString),
  contextWindow: PositiveInt,
  autoCompactThreshold: Schema.NullOr(PositiveInt),
  maxOutputTokens: PositiveInt,
  prices: Prices,
  maxRetries: Schema.optional(Schema.Int.pipe(Schema.between(0, 10))),
  systemPrompt: Schema.optional(Schema.String),
  media: Schema.optional(Schema.Boolean)
})
export type ModelProviderConfig = typeof ModelProviderConfig.Type

/**
 * Reads the instance's key from the environment variable `apiKeyEnv` names, as a `Redacted` (never logged).
 * `Option.none()` when the config names no variable. Fails with `ConfigError` when the variable is named but unset.
 */
export const apiKey = (config: ModelProviderConfig): Effect.Effect<Option.Option<Redacted.Redacted>, ConfigError.ConfigError> =>
  config.apiKeyEnv === undefined ? Effect.succeed(Option.none()) : Effect.map(Config.redacted(config.apiKeyEnv), Option.some)
