/**
 * The provider registry: the configured instances by name. `layer` builds it from adapters created by the app.
 */
import { UnknownProvider } from "@baton/contracts"
import { Effect, Layer } from "effect"
import { ProviderRegistry, type ProviderAdapterShape } from "./ProviderAdapter.js"

export { ProviderRegistry }

/** A registry over the given adapters. Fails `get` with `UnknownProvider` listing the configured names. */
export const make = (adapters: ReadonlyArray<ProviderAdapterShape>) => {
  const byName = new Map(adapters.map((a) => [a.instance as string, a]))
  const instances = adapters.map((a) => a.instance)
  return ProviderRegistry.of({
    instances,
    get: (name) => {
      const adapter = byName.get(name)
      return adapter === undefined
        ? Effect.fail(new UnknownProvider({ provider: name, known: instances }))
        : Effect.succeed(adapter)
    }
  })
}

export const layer = (adapters: ReadonlyArray<ProviderAdapterShape>) => Layer.succeed(ProviderRegistry, make(adapters))
