/**
 * Scripted provider instance specs: what the apps (the CLI's `--providers`, the server's config file and
 * `BATON_PROVIDERS`) say about each provider instance, and the scripted adapters built from them.
 *
 * The text form is `NAME:WINDOW[:AUTOCOMPACT][:inject|:noinject]`, comma-separated. NAME is a provider instance
 * name, WINDOW and AUTOCOMPACT token counts (digits, `_` or `,` separators not allowed inside a spec list, so use
 * plain digits or a `k` suffix: `44k`). The JSON form is `ProviderSpecJson`.
 */
import { InvalidRequest, type ProviderInstance } from "@baton/contracts"
import { Budget, type TokenCounter } from "@baton/context"
import { Either, Schema } from "effect"
import * as ScriptedProvider from "./ScriptedProvider.js"

export interface ProviderSpec {
  readonly name: string
  readonly window: number
  readonly autoCompactThreshold: number | null
  readonly inject: boolean
}

/** The replay's default: a small-window provider that injects natively, and a large one that does not. */
export const defaultProviders = "codex:44000:42000:inject,claude:200000:noinject"

/** The scripted provider instance names this build knows how to configure. */
export const knownProviderNames = ["codex", "claude", "openai", "anthropic", "pi", "openhands", "gemini", "scripted"] as const

const tokens = (text: string) => {
  const m = /^(\d+)(k)?$/i.exec(text)
  return m === null ? null : Number(m[1]) * (m[2] === undefined ? 1 : 1000)
}

/** The largest window accepted, in tokens: far above any model's, small enough to be stored exactly. */
export const maxWindow = 100_000_000

/**
 * A warning for a spec that can never deliver history at turn start (`Budget.turnStartWarning` under the default
 * policy): its effective window is at most the reserve floor plus the minimum useful budget (16,000 + 1,024 tokens),
 * so owed history is always deferred and only `/compact` drains it. `null` when the spec is fine.
 */
export const warning = (spec: ProviderSpec): string | null =>
  Budget.turnStartWarning({ name: spec.name, window: spec.window, autoCompactThreshold: spec.autoCompactThreshold, canInject: spec.inject })

/** Parses a `--providers` value. Fails with `InvalidRequest` naming the bad spec and why. */
export const parse = (value: string): Either.Either<ReadonlyArray<ProviderSpec>, InvalidRequest> => {
  const specs: Array<ProviderSpec> = []
  const parts = value.split(",").map((s) => s.trim()).filter((s) => s.length > 0)
  if (parts.length === 0) return Either.left(new InvalidRequest({ reason: "--providers: no provider given" }))
  for (const part of parts) {
    const fields = part.split(":")
    const [name, windowText, ...rest] = fields
    const bad = (why: string) => Either.left(new InvalidRequest({ reason: `--providers: "${part}": ${why}` }))
    if (name === undefined || !(knownProviderNames as ReadonlyArray<string>).includes(name)) {
      return bad(`unknown provider "${name ?? ""}" (known: ${knownProviderNames.join(", ")})`)
    }
    if (specs.some((s) => s.name === name)) return bad(`provider "${name}" given twice`)
    const window = windowText === undefined ? null : tokens(windowText)
    if (window === null || window < 1_000 || window > maxWindow) {
      return bad(`WINDOW must be a token count from 1000 to ${maxWindow} (e.g. 44000 or 44k)`)
    }
    let autoCompactThreshold: number | null = null
    let inject: boolean | null = null
    for (const field of rest) {
      if (field === "inject" || field === "noinject") {
        if (inject !== null) return bad("give inject or noinject once")
        inject = field === "inject"
      } else {
        const t = tokens(field)
        if (t === null) return bad(`"${field}" is neither AUTOCOMPACT tokens nor inject/noinject`)
        if (autoCompactThreshold !== null) return bad("give AUTOCOMPACT once")
        if (t < 1_000) return bad(`AUTOCOMPACT ${t} is below 1000 tokens`)
        if (t > window) return bad(`AUTOCOMPACT ${t} exceeds WINDOW ${window}`)
        autoCompactThreshold = t
      }
    }
    specs.push({ name, window, autoCompactThreshold, inject: inject ?? true })
  }
  return Either.right(specs)
}

/**
 * One provider instance in JSON (the server's config file): `name` one of `knownProviderNames`; `window` and
 * `autoCompactThreshold` in tokens (1,000 to `maxWindow`; the threshold at most the window); `inject` whether
 * the instance takes history natively (default true); `kind` the adapter (only `scripted` in this build).
 */
export const ProviderSpecJson = Schema.Struct({
  kind: Schema.optional(Schema.Literal("scripted")),
  name: Schema.Literal(...knownProviderNames),
  window: Schema.Int.pipe(Schema.between(1_000, maxWindow)),
  autoCompactThreshold: Schema.optional(Schema.Int.pipe(Schema.between(1_000, maxWindow))),
  inject: Schema.optional(Schema.Boolean)
}).pipe(Schema.filter((p) =>
  p.autoCompactThreshold === undefined || p.autoCompactThreshold <= p.window ||
  { path: ["autoCompactThreshold"], message: `autoCompactThreshold ${p.autoCompactThreshold} exceeds window ${p.window}` }
))
export type ProviderSpecJson = typeof ProviderSpecJson.Type

/** The spec of a JSON entry (defaults applied). */
export const fromJson = (p: ProviderSpecJson): ProviderSpec => ({
  name: p.name,
  window: p.window,
  autoCompactThreshold: p.autoCompactThreshold ?? null,
  inject: p.inject ?? true
})

/** One scripted adapter per spec, all playing back `script` and counting with `counter`. */
export const scripted = (
  specs: ReadonlyArray<ProviderSpec>,
  script: ScriptedProvider.Script,
  counter: TokenCounter.TokenCounterShape
): ReadonlyArray<ScriptedProvider.ScriptedProvider> =>
  specs.map((spec) =>
    ScriptedProvider.make({
      instance: spec.name as ProviderInstance,
      contextWindow: spec.window,
      autoCompactThreshold: spec.autoCompactThreshold,
      injectHistory: spec.inject
    }, script, counter)
  )
