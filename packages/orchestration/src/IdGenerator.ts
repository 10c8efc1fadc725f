/**
 * IdGenerator: mints ids for new records. `layerRandom` (UUIDv4, the default) and `layerSequential` (a per-prefix
 * counter, for deterministic replays and simulations: same inputs, same ids, same bytes).
 */
import { Context, Layer } from "effect"
import { randomUUID } from "node:crypto"

export interface IdGeneratorShape {
  /** A new id `<prefix>_<suffix>`, e.g. `run_3f2a…`. */
  readonly next: (prefix: string) => string
}

export class IdGenerator extends Context.Tag("@baton/orchestration/IdGenerator")<IdGenerator, IdGeneratorShape>() {}

export const layerRandom = Layer.succeed(IdGenerator, { next: (prefix) => `${prefix}_${randomUUID()}` })

/** Ids `<prefix>_<namespace><n>` with `n` counting per prefix from 1. */
export const makeSequential = (namespace = ""): IdGeneratorShape => {
  const counters = new Map<string, number>()
  return {
    next: (prefix) => {
      const n = (counters.get(prefix) ?? 0) + 1
      counters.set(prefix, n)
      return `${prefix}_${namespace}${String(n).padStart(6, "0")}`
    }
  }
}

export const layerSequential = (namespace = "") => Layer.sync(IdGenerator, () => makeSequential(namespace))
