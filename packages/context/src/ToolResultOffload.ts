/**
 * ToolResultOffload: which consumed tool units of a model-visible history to replace with one-line stubs now, and
 * how a stub reads (docs/design.md "Offload", docs/offload.md, issue 11).
 *
 * Owns: the cache-aware decision (tiers mild, aggressive, emergency), the eligibility rules, the stub text and its
 * ref. Pure: no I/O, no clock (the caller passes the time since the previous request). Does not own: where the
 * stubs are applied (a native thread's message list, a handoff), the originals (they stay in the thread and are read
 * back by `thread_read`), nor `/offload` summaries (`OffloadCut`).
 *
 * The decision rule. A stub replaces a unit at position p of the request; the provider's prompt cache then holds
 * nothing from p on, so the next request writes the whole suffix again instead of reading it. With read multiplier
 * r, write multiplier w (of base input), A the tokens of the suffix from p and s the tokens the stubs release in it,
 * flushing costs (w - r)(A - s) once and saves r·s on each of the R requests still expected. The mild tier flushes
 * at a break p only when two things hold: the flush pays over the expected remaining requests, r·s·R > (w - r)(A - s);
 * and the units it stubs have already cost, while eligible, at least the rewrite: r·Σ released·(requests eligible)
 * >= (w - r)(A - s). The second condition is the ski-rental rule (keep renting until the rent paid equals the price
 * of buying): it batches flushes, since a flush pays only the rewrite of the verbatim suffix and waiting lets more
 * units join it, and it costs at most twice the best offline schedule of breaks. Among the breaks that meet both, the
 * one with the largest margin r·s·R - (w - r)(A - s) is taken, and every eligible unit from p on is stubbed (once the
 * cache is broken at p, each further stub only lowers the rewrite): one prefix break per flush. When the cache
 * has expired anyway (the time since the previous request exceeds the TTL) the rewrite costs nothing extra and every
 * eligible unit is stubbed. The aggressive tier ignores the cache near the window; the emergency tier is the
 * aggressive tier when even every eligible unit stubbed leaves the request at or above the window's emergency line:
 * it stubs all of them (every token counts there) and reports the tier, so that the caller summarises (`/offload`)
 * or starts over on a new native thread. Units the model asked to offload (`Unit.requested`, its `offload_context` tool) are stubbed at the next
 * decision whatever the cache costs (the model knows it is done with them; `keepNewestUnits` does not hold them back,
 * a pin or an open call does), and, the cache being broken at the oldest of them, every eligible unit after it rides
 * along (tier `requested`, unless a higher tier already applies).
 */
import * as Render from "./Render.js"

/** One entry of the model-visible history, in request order. `tokens` as the request carries it now. */
export interface HistoryItem {
  /** The item's ref for `thread_read`: its thread position (`seq`). */
  readonly seq: number
  readonly tokens: number
  /** Index into `Situation.units` of the unit this item belongs to. */
  readonly unit: number
  /** Pinned items are never offloaded, and neither is their unit. */
  readonly pinned: boolean
}

/**
 * One unit of the history (`ToolUnits`: a response's calls with their results; every other item a unit of its own).
 *
 * - `isTool`: the unit holds at least one tool call. Only tool units are offloaded.
 * - `answered`: every call of the unit has its result in the history.
 * - `stubbed`: the unit is already a stub (never stubbed again).
 * - `stubTokens`: the tokens of the unit's stub (`stubText`), were it stubbed.
 * - `answeredRequests`: the requests already sent that carried the unit with all its results (0 when unanswered or
 *   answered since the previous request). It tells how long the unit has been paid for since it was consumed.
 * - `requested`: the model asked for the unit to be offloaded (its `offload_context` tool); absent means no.
 */
export interface Unit {
  readonly isTool: boolean
  readonly answered: boolean
  readonly stubbed: boolean
  readonly stubTokens: number
  readonly answeredRequests: number
  readonly requested?: boolean | undefined
}

/**
 * A provider's prompt-cache pricing: multipliers of the base input price, and the cache's time to live
 * (milliseconds; `null` when it is not known to expire within a session).
 */
export interface CachePricing {
  readonly readMultiplier: number
  readonly writeMultiplier: number
  readonly ttlMs: number | null
}

/**
 * Anthropic's prompt caching: reads cost 0.1x and 5-minute writes 1.25x of base input; the default TTL is 5 minutes
 * (docs.anthropic.com, "Prompt caching", pricing table).
 */
export const anthropicPricing: CachePricing = { readMultiplier: 0.1, writeMultiplier: 1.25, ttlMs: 5 * 60_000 }

/**
 * The cache pricing of an instance from its prices (US dollars per million tokens; any unit, only the ratios count):
 * `readMultiplier = cacheRead / input`, `writeMultiplier = cacheWrite / input`, except that a `cacheWrite` of 0 means
 * the provider bills no separate cache write (OpenAI: a prompt not yet cached costs the input price; its instances
 * set `cacheWrite: 0`), so the write multiplier is 1, never 0 (0 made every rewrite look free: the mild tier flushed
 * whenever a unit was eligible). Without an input price (0 or less) Anthropic's multipliers (`anthropicPricing`).
 */
export const pricingOf = (
  prices: { readonly input: number; readonly cacheRead: number; readonly cacheWrite: number },
  ttlMs: number | null = anthropicPricing.ttlMs
): CachePricing =>
  prices.input > 0
    ? { readMultiplier: prices.cacheRead / prices.input, writeMultiplier: prices.cacheWrite > 0 ? prices.cacheWrite / prices.input : 1, ttlMs }
    : { ...anthropicPricing, ttlMs }

/**
 * The policy's settings. Defaults (`defaults`) are stated once here and in docs/offload.md; they are not tuned per
 * session or per file.
 *
 * - `keepNewestUnits`: the newest tool units are never stubbed: the model is still using them.
 * - `aggressiveRatio`: at or above this share of the window, flush the oldest eligible units regardless of cache.
 * - `aggressiveTargetRatio`: the aggressive tier stubs oldest-first until usage is at most this share.
 * - `emergencyRatio`: if stubbing every eligible unit still leaves usage at or above this share, the tier is
 *   `emergency`: every eligible unit is stubbed, and the caller should summarise (`/offload`) or start over.
 * - `minExpectedRequests`: the floor of R, the requests still expected.
 */
export interface Settings {
  readonly keepNewestUnits: number
  readonly aggressiveRatio: number
  readonly aggressiveTargetRatio: number
  readonly emergencyRatio: number
  readonly minExpectedRequests: number
}

/**
 * The defaults and why:
 *
 * - `keepNewestUnits: 3`: Anthropic's `clear_tool_uses` keeps the 3 newest tool uses by default, the provider's own
 *   judgement of what a model still works from (Claude Code's microcompact keeps 5 results). A unit here is a whole
 *   response, with every parallel call, so 3 units hold at least 3 tool uses. With 5, the cost benchmark gives
 *   0.50-0.52 of no management on two Claude Code sessions instead of 0.45 (docs/offload.md).
 * - `aggressiveRatio: 0.85`, `aggressiveTargetRatio: 0.6`: near the window the request must shrink whatever the
 *   cache costs; 0.85 leaves 30,000 tokens of a 200,000 window, room for a response and the largest single tool
 *   output in the real transcripts (51,266 characters); 0.6 makes room for several turns before the next
 *   aggressive flush.
 * - `emergencyRatio: 0.95`: above it, one more response may not fit.
 * - `minExpectedRequests: 10`: R is the number of requests so far (a session that has lasted n requests is, on a
 *   scale-free prior, expected to last about as many more: the Lindy estimate), at least 10 (a single user turn of a
 *   coding agent is typically several tool rounds).
 */
export const defaults: Settings = {
  keepNewestUnits: 3,
  aggressiveRatio: 0.85,
  aggressiveTargetRatio: 0.6,
  emergencyRatio: 0.95,
  minExpectedRequests: 10
}

/**
 * What a thread or a provider instance may override of `Settings` (issue 11 item 4): any subset; absent fields keep
 * the base's value.
 */
export type SettingsOverrides = { readonly [K in keyof Settings]?: Settings[K] | undefined }

/** `base` with every field `overrides` sets replaced. Does not check the result (`problems` does). */
export const withOverrides = (base: Settings, overrides: SettingsOverrides | undefined): Settings => {
  if (overrides === undefined) return base
  const out: { -readonly [K in keyof Settings]: Settings[K] } = { ...base }
  for (const key of Object.keys(base) as Array<keyof Settings>) {
    const value = overrides[key]
    if (value !== undefined) out[key] = value
  }
  return out
}

/**
 * What is wrong with `settings`, one sentence per problem naming the field (empty when they are usable):
 * `keepNewestUnits` and `minExpectedRequests` whole numbers (>= 0 and >= 1), the ratios in (0, 1] with
 * `aggressiveTargetRatio < aggressiveRatio <= emergencyRatio`.
 */
export const problems = (settings: Settings): ReadonlyArray<string> => {
  const out: Array<string> = []
  if (!Number.isInteger(settings.keepNewestUnits) || settings.keepNewestUnits < 0) {
    out.push(`keepNewestUnits must be a whole number >= 0 (got ${settings.keepNewestUnits})`)
  }
  if (!Number.isInteger(settings.minExpectedRequests) || settings.minExpectedRequests < 1) {
    out.push(`minExpectedRequests must be a whole number >= 1 (got ${settings.minExpectedRequests})`)
  }
  for (const key of ["aggressiveRatio", "aggressiveTargetRatio", "emergencyRatio"] as const) {
    const v = settings[key]
    if (!(v > 0 && v <= 1)) out.push(`${key} must be in (0, 1] (got ${v})`)
  }
  if (!(settings.aggressiveTargetRatio < settings.aggressiveRatio)) {
    out.push(`aggressiveTargetRatio (${settings.aggressiveTargetRatio}) must be below aggressiveRatio (${settings.aggressiveRatio})`)
  }
  if (!(settings.aggressiveRatio <= settings.emergencyRatio)) {
    out.push(`aggressiveRatio (${settings.aggressiveRatio}) must not exceed emergencyRatio (${settings.emergencyRatio})`)
  }
  return out
}

/**
 * What the policy decides on.
 *
 * - `items`, `units`: the model-visible history as the next request will carry it (without the system prompt).
 * - `systemTokens`: the system prompt and tool definitions (never offloaded; counted in usage).
 * - `windowTokens`: the model's context window.
 * - `requestsSoFar`: requests sent in this session (R's estimate).
 * - `msSinceLastRequest`: time since the previous request (`null`: unknown or no previous request; then the cache is
 *   assumed warm unless `requestsSoFar` is 0).
 */
export interface Situation {
  readonly items: ReadonlyArray<HistoryItem>
  readonly units: ReadonlyArray<Unit>
  readonly systemTokens: number
  readonly windowTokens: number
  readonly pricing: CachePricing
  readonly requestsSoFar: number
  readonly msSinceLastRequest: number | null
}

/**
 * The tiers: `none` (nothing to do), `mild` (cache-aware), `requested` (the model asked, `Unit.requested`),
 * `aggressive` (near the window), `emergency` (hand over).
 */
export type Tier = "none" | "mild" | "requested" | "aggressive" | "emergency"

/**
 * A decision. `units`: indices into `Situation.units` to stub now, ascending (empty for `none`; for `emergency`, every
 * eligible unit and every unit the model asked for).
 * Tokens are of the whole request (system prompt included) before and after the stubs. `rewriteCost` and
 * `expectedSavings` are in base-input-token equivalents (`(w - r)(A - s)` and `r·s·R`); `breakEvenRequests` is the
 * number of later requests after which the flush has paid for itself (0 when the cache was cold).
 */
export interface Decision {
  readonly tier: Tier
  readonly units: ReadonlyArray<number>
  readonly tokensBefore: number
  readonly tokensAfter: number
  readonly rewriteCost: number
  readonly expectedSavings: number
  readonly breakEvenRequests: number
  /** Why `none` or `emergency` (for logs and the dry run); `""` otherwise. */
  readonly reason: string
}

/** An eligible unit. */
export interface Candidate {
  readonly unit: number
  /** Position in `items` of the unit's first item: where the stub breaks the cache. */
  readonly first: number
  /** Tokens the stub releases (unit tokens minus stub tokens, > 0). */
  readonly released: number
  /**
   * Requests the unit has been carried while eligible: since it was answered and the `keepNewestUnits`-th newer tool
   * unit appeared (that unit's `answeredRequests`).
   */
  readonly eligibleRequests: number
}

/**
 * The eligible units in order of first position: tool units, answered, not stubbed, with no pinned item, not among
 * the newest `keepNewestUnits` tool units, whose stub is smaller than the unit.
 */
export const eligible = (situation: Situation, settings: Settings = defaults): ReadonlyArray<Candidate> => {
  const { items, units } = situation
  const first = new Array<number>(units.length).fill(-1)
  const last = new Array<number>(units.length).fill(-1)
  const tokens = new Array<number>(units.length).fill(0)
  const pinned = new Array<boolean>(units.length).fill(false)
  items.forEach((item, i) => {
    if (first[item.unit] === -1) first[item.unit] = i
    last[item.unit] = i
    tokens[item.unit] += item.tokens
    if (item.pinned) pinned[item.unit] = true
  })
  // The newest tool units by their last item (a unit's result may arrive after a later unit started).
  const toolUnits = units.map((u, index) => ({ u, index })).filter(({ index, u }) => u.isTool && first[index] !== -1)
  const byRecency = [...toolUnits].sort((a, b) => last[b.index]! - last[a.index]!)
  const newest = new Set(byRecency.slice(0, settings.keepNewestUnits).map((x) => x.index))
  const rank = new Map(byRecency.map((x, k) => [x.index, k]))
  const out: Array<Candidate> = []
  for (const { index, u } of toolUnits) {
    if (!u.answered || u.stubbed || pinned[index] || newest.has(index)) continue
    if (u.stubTokens >= tokens[index]!) continue
    const pusher = byRecency[rank.get(index)! - settings.keepNewestUnits]!.u
    out.push({
      unit: index,
      first: first[index]!,
      released: tokens[index]! - u.stubTokens,
      eligibleRequests: Math.min(u.answeredRequests, pusher.answeredRequests)
    })
  }
  return out.sort((a, b) => a.first - b.first)
}

const none = (tokens: number, reason: string): Decision => ({
  tier: "none",
  units: [],
  tokensBefore: tokens,
  tokensAfter: tokens,
  rewriteCost: 0,
  expectedSavings: 0,
  breakEvenRequests: 0,
  reason
})

/**
 * The units the model asked to offload (`Unit.requested`) that may be stubbed: tool units, answered, not stubbed, with
 * no pinned item, whose stub is smaller than the unit. `keepNewestUnits` does not apply (the model said it is done).
 */
export const requestedCandidates = (situation: Situation): ReadonlyArray<Candidate> => {
  const { items, units } = situation
  const first = new Array<number>(units.length).fill(-1)
  const tokens = new Array<number>(units.length).fill(0)
  const pinned = new Array<boolean>(units.length).fill(false)
  items.forEach((item, i) => {
    if (first[item.unit] === -1) first[item.unit] = i
    tokens[item.unit] += item.tokens
    if (item.pinned) pinned[item.unit] = true
  })
  const out: Array<Candidate> = []
  units.forEach((u, index) => {
    if (u.requested !== true || !u.isTool || !u.answered || u.stubbed || pinned[index] || first[index] === -1) return
    if (u.stubTokens >= tokens[index]!) return
    out.push({ unit: index, first: first[index]!, released: tokens[index]! - u.stubTokens, eligibleRequests: u.answeredRequests })
  })
  return out
}

/**
 * Decides what to stub before the next request (see the module docblock for the rule). Total: never fails; an empty
 * history, no eligible unit or a flush that does not pay gives tier `none`.
 */
export const decide = (situation: Situation, settings: Settings = defaults): Decision => {
  const base = decideByCache(situation, settings)
  const asked = requestedCandidates(situation)
  if (asked.length === 0) return base
  // The cache breaks at the oldest asked unit: every eligible unit from there on rides along, as do the base tier's.
  const from = Math.min(...asked.map((c) => c.first))
  const byUnit = new Map<number, Candidate>()
  for (const c of asked) byUnit.set(c.unit, c)
  for (const c of eligible(situation, settings)) if (c.first >= from || base.units.includes(c.unit)) byUnit.set(c.unit, c)
  const picked = [...byUnit.values()].sort((a, b) => a.first - b.first)
  const tier = base.tier === "aggressive" || base.tier === "emergency" ? base.tier : "requested"
  return { ...summarise(situation, settings, picked, tier, isCold(situation)), reason: base.tier === "emergency" ? base.reason : "" }
}

/** The decision stubbing `picked` (ascending by `first`, non-empty), its cost in the module docblock's terms. */
const summarise = (situation: Situation, settings: Settings, picked: ReadonlyArray<Candidate>, tier: Tier, cold: boolean): Decision => {
  const { items, pricing } = situation
  const before = situation.systemTokens + items.reduce((n, i) => n + i.tokens, 0)
  const r = pricing.readMultiplier
  const w = pricing.writeMultiplier
  const R = Math.max(situation.requestsSoFar, settings.minExpectedRequests)
  const s = picked.reduce((n, c) => n + c.released, 0)
  const A = items.slice(picked[0]!.first).reduce((n, i) => n + i.tokens, 0)
  const rewriteCost = cold ? 0 : (w - r) * (A - s)
  const perRequest = r * s
  return {
    tier,
    units: picked.map((c) => c.unit).sort((a, b) => a - b),
    tokensBefore: before,
    tokensAfter: before - s,
    rewriteCost,
    expectedSavings: perRequest * R,
    breakEvenRequests: perRequest === 0 ? Infinity : rewriteCost / perRequest,
    reason: ""
  }
}

/** The provider's cache holds nothing of the history: no request yet, or the previous one is older than the TTL. */
const isCold = (situation: Situation) =>
  situation.requestsSoFar === 0 || (situation.pricing.ttlMs !== null && situation.msSinceLastRequest !== null &&
    situation.msSinceLastRequest > situation.pricing.ttlMs)

/** `decide` without the model's requests: the cache-aware tiers alone. */
const decideByCache = (situation: Situation, settings: Settings): Decision => {
  const { items, pricing, windowTokens } = situation
  const historyTokens = items.reduce((n, i) => n + i.tokens, 0)
  const before = situation.systemTokens + historyTokens
  const candidates = eligible(situation, settings)
  const totalRelease = candidates.reduce((n, c) => n + c.released, 0)
  const r = pricing.readMultiplier
  const w = pricing.writeMultiplier
  const R = Math.max(situation.requestsSoFar, settings.minExpectedRequests)
  // suffix[i]: tokens of items[i..].
  const suffix = new Array<number>(items.length + 1).fill(0)
  for (let i = items.length - 1; i >= 0; i--) suffix[i] = suffix[i + 1]! + items[i]!.tokens

  const chosen = (fromIndex: number, toIndex: number, tier: Tier, cold: boolean): Decision =>
    summarise(situation, settings, candidates.slice(fromIndex, toIndex), tier, cold)

  if (before >= settings.aggressiveRatio * windowTokens) {
    if (before - totalRelease >= settings.emergencyRatio * windowTokens) {
      const reason = `stubbing every eligible unit leaves ${before - totalRelease} of ${windowTokens} tokens: summarise (/offload)`
      if (candidates.length === 0) return { ...none(before, reason), tier: "emergency" }
      return { ...chosen(0, candidates.length, "emergency", false), reason }
    }
    if (candidates.length > 0) {
      const target = settings.aggressiveTargetRatio * windowTokens
      let after = before
      let k = 0
      while (k < candidates.length && after > target) after -= candidates[k++]!.released
      // Once the cache breaks at the oldest, the later eligible units ride along only if that pays (mild rule).
      let end = k
      const cut = suffix[candidates[0]!.first]!
      let s = candidates.slice(0, k).reduce((n, c) => n + c.released, 0)
      for (let j = k; j < candidates.length; j++) {
        s += candidates[j]!.released
        if (r * s * R > (w - r) * (cut - s)) end = j + 1
      }
      return chosen(0, end, "aggressive", false)
    }
  }
  if (candidates.length === 0) return none(before, "no eligible unit")
  if (isCold(situation)) return chosen(0, candidates.length, "mild", true)
  // The break at candidate j stubs candidates[j..]: margin = r·s·R - (w - r)(A - s), rent = r·Σ released·eligible.
  let best = -1
  let bestMargin = 0
  let s = 0
  let rent = 0
  for (let j = candidates.length - 1; j >= 0; j--) {
    s += candidates[j]!.released
    rent += r * candidates[j]!.released * candidates[j]!.eligibleRequests
    const A = suffix[candidates[j]!.first]!
    const rewrite = (w - r) * (A - s)
    const margin = r * s * R - rewrite
    if (margin > bestMargin && rent >= rewrite) {
      bestMargin = margin
      best = j
    }
  }
  if (best === -1) return none(before, "no flush pays for its cache rewrite yet, or its units have not yet cost as much")
  return chosen(best, candidates.length, "mild", false)
}

/**
 * The history after `decision`: each stubbed unit's items are replaced by one item at the position of its first
 * item (`seq` of that item, `tokens` the unit's `stubTokens`), and the unit is marked `stubbed`. Every other item and
 * unit is unchanged. For callers that keep a running view and for the tests.
 */
export const apply = (situation: Situation, decision: Decision): Situation => {
  const chosen = new Set(decision.units)
  const seen = new Set<number>()
  const items: Array<HistoryItem> = []
  for (const item of situation.items) {
    if (!chosen.has(item.unit)) {
      items.push(item)
    } else if (!seen.has(item.unit)) {
      seen.add(item.unit)
      items.push({ seq: item.seq, tokens: situation.units[item.unit]!.stubTokens, unit: item.unit, pinned: false })
    }
  }
  const units = situation.units.map((u, i) => chosen.has(i) ? { ...u, stubbed: true } : u)
  return { ...situation, items, units }
}

/** One call of a unit as its stub line shows it (`Render.StubCall`). */
export type StubCall = Render.StubCall

/** The most characters of a call's arguments a stub line shows (`Render.maxArgumentChars`). */
export const maxArgumentChars = Render.maxArgumentChars

/** A call's arguments as one short line (`Render.shortArguments`). */
export const shortArguments = Render.shortArguments

/**
 * The ref of a set of thread positions in `thread_read`'s syntax (`ThreadRead.parseRefs`): runs of consecutive seqs
 * as `#a-#b`, single ones as `#a`, joined with `", "` (`Render.refsOf`, never joined across a gap: a stub names
 * exactly its unit). `seqs` need not be sorted.
 */
export const refOf = (seqs: ReadonlyArray<number>): string => Render.refsOf(seqs, Number.POSITIVE_INFINITY).refs

/** The stub of a unit (`Render.stubText`): the same bytes in a handoff and in a provider's message list. */
export const stubText = Render.stubText

/** The ref a stub names (`stubText`'s header), or `null` if `text` is not a stub. */
export const refOfStub = (text: string): string | null => {
  const match = /^\[offloaded, thread_read ([^\]]+)\]/.exec(text)
  return match === null ? null : match[1]!
}
