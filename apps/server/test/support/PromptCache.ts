/**
 * A model of Anthropic's prompt cache for loopback upstreams (issue 14's Claude Code acceptance): the usage an
 * Anthropic Messages request would be billed, computed from the request itself, so a test can compare what two ways
 * of sending the same session cost. The upstream plays the provider; this is its cache.
 *
 * The model (Anthropic's "Prompt caching" docs: a cache entry is the whole prefix up to a `cache_control`
 * breakpoint, in the order tools, system, messages; a request reads the longest prefix it shares with an entry):
 *
 * - A request is a sequence of blocks in prefix order: each tool definition, each `system` block (a string system is
 *   one text block), each content block of each message (a string content is one text block). A block's identity is
 *   its JSON without `cache_control` (moving a breakpoint does not change the content); its tokens are
 *   `ceil(chars / 4)` of that JSON (an approximation of a tokenizer: the upstream plays the provider, and both runs
 *   of a comparison are counted the same way). The message's role is part of its first block's identity.
 * - Entries are written at breakpoints: after a request, the prefix ending at each block carrying `cache_control` is
 *   in the cache (keyed by a hash chain over the blocks, so an entry is the exact prefix).
 * - `cacheRead`: the tokens of the longest prefix of the request that ends where an earlier request had a breakpoint
 *   (an entry). `cacheWrite`: the tokens from there up to the request's last breakpoint (nothing when the last
 *   breakpoint is inside the read prefix). `input`: the rest (after the last breakpoint, or everything without one).
 *
 * Simplifications, the same for every request so they do not favour either side: no time to live (a session here
 * lasts well under Anthropic's 5 minutes), no minimum cacheable length (1,024 tokens on Sonnet), no 20-block
 * look-back limit (Anthropic checks for hits at most 20 blocks before each breakpoint; Claude Code moves its
 * breakpoint by one or two messages per request, well within it), the model is not part of the key (one model).
 */
import * as Crypto from "node:crypto"

/** Billed input tokens of one request (output is the upstream's own business). */
export interface CacheUsage {
  readonly input: number
  readonly cacheWrite: number
  readonly cacheRead: number
}

/** One block of a request in prefix order: its identity (JSON without `cache_control`) and whether it is a breakpoint. */
export interface Block {
  readonly json: string
  readonly breakpoint: boolean
}

const isRecord = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

const blockOf = (value: unknown, prefix = ""): Block => {
  if (!isRecord(value)) return { json: prefix + JSON.stringify(value), breakpoint: false }
  const { cache_control, ...rest } = value
  return { json: prefix + JSON.stringify(rest), breakpoint: cache_control !== undefined && cache_control !== null }
}

/** The blocks of an Anthropic Messages request body, in the cache's prefix order (tools, system, messages). */
export const blocksOf = (body: Record<string, unknown>): ReadonlyArray<Block> => {
  const out: Array<Block> = []
  if (Array.isArray(body.tools)) for (const t of body.tools) out.push(blockOf(t))
  if (typeof body.system === "string") out.push(blockOf({ type: "text", text: body.system }))
  else if (Array.isArray(body.system)) for (const s of body.system) out.push(blockOf(s))
  if (Array.isArray(body.messages)) {
    for (const m of body.messages) {
      if (!isRecord(m)) continue
      const role = `${String(m.role)}:`
      const content = typeof m.content === "string" ? [{ type: "text", text: m.content }] : Array.isArray(m.content) ? m.content : []
      content.forEach((b, i) => out.push(blockOf(b, i === 0 ? role : "")))
    }
  }
  return out
}

/** Tokens of a block (`ceil(chars / 4)` of its identity). */
export const tokensOf = (block: Block) => Math.ceil(block.json.length / 4)

/** A prompt cache (see the module docblock): `usage` bills a request and writes its breakpoints' entries. */
export interface PromptCache {
  readonly usage: (body: Record<string, unknown>) => CacheUsage
  /** Entries written so far. */
  readonly size: () => number
}

/** An empty cache. */
export const make = (): PromptCache => {
  const entries = new Set<string>()
  return {
    size: () => entries.size,
    usage: (body) => {
      const blocks = blocksOf(body)
      let hash = ""
      let total = 0
      let read = 0
      let lastBreakpoint = -1
      const written: Array<string> = []
      for (const b of blocks) {
        hash = Crypto.createHash("sha256").update(hash).update("\u0000").update(b.json).digest("hex")
        total += tokensOf(b)
        if (entries.has(hash)) read = total
        if (b.breakpoint) {
          lastBreakpoint = total
          written.push(hash)
        }
      }
      for (const h of written) entries.add(h)
      const cacheWrite = Math.max(0, lastBreakpoint - read)
      return { cacheRead: read, cacheWrite, input: total - read - cacheWrite }
    }
  }
}

/** The weighted input of usages: 0.1 x cache read + 1.25 x cache write (Anthropic's multipliers of base input). */
export const weighted = (usages: ReadonlyArray<CacheUsage>) =>
  usages.reduce((n, u) => n + 0.1 * u.cacheRead + 1.25 * u.cacheWrite, 0)
