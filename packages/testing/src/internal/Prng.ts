/**
 * A small seeded PRNG (mulberry32) and the draws the simulation needs. Same seed, same sequence, on every platform;
 * `Math.random` is never used, so a seed names one run.
 */

export interface Prng {
  /** A float in [0, 1). */
  readonly next: () => number
  /** An integer in [min, max] (both inclusive). */
  readonly int: (min: number, max: number) => number
  /** `true` with probability `p`. */
  readonly chance: (p: number) => boolean
  /** One element of a non-empty array. */
  readonly pick: <A>(xs: ReadonlyArray<A>) => A
  /** One value by weight: `[[weight, value], ...]`, weights need not sum to 1. */
  readonly weighted: <A>(choices: ReadonlyArray<readonly [number, A]>) => A
}

/** mulberry32 over a 32-bit seed. */
export const make = (seed: number): Prng => {
  let a = seed >>> 0
  const next = () => {
    a = (a + 0x6D2B79F5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  const int = (min: number, max: number) => min + Math.floor(next() * (max - min + 1))
  return {
    next,
    int,
    chance: (p) => next() < p,
    pick: (xs) => xs[Math.floor(next() * xs.length)]!,
    weighted: (choices) => {
      const total = choices.reduce((n, [w]) => n + w, 0)
      let x = next() * total
      for (const [w, value] of choices) {
        if (x < w) return value
        x -= w
      }
      return choices[choices.length - 1]![1]
    }
  }
}

/** Mixes two integers into one 32-bit seed (for per-operation streams that do not shift when others are removed). */
export const mix = (a: number, b: number) => {
  let h = Math.imul(a ^ 0x9E3779B9, 0x85EBCA6B) ^ b
  h = Math.imul(h ^ (h >>> 13), 0xC2B2AE35)
  return (h ^ (h >>> 16)) >>> 0
}
