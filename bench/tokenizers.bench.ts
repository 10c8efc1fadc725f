/**
 * Tokenizer benchmark: gpt-tokenizer vs js-tiktoken on o200k_base, over real transcript text, and the counter
 * `@baton/context` ships (`TokenCounter.make()`: gpt-tokenizer with two repairs, see
 * packages/context/src/internal/O200k.ts).
 *
 * Reads `../shared/transcripts/raw/pi/before-compaction.jsonl` (or the file given) as UTF-8 and counts tokens line by
 * line (each JSONL line is one string to count, close to how Baton counts one rendered item at a time). Prints:
 *
 * - throughput in MB/s (10^6 UTF-8 bytes of input per second), best of N passes: "fresh" passes clear
 *   gpt-tokenizer's merge cache first (text never seen before, Baton's case when an item is written), "repeat"
 *   passes count the same text again with the cache warm; js-tiktoken has no cache;
 * - the one-off load time of each library (module import, rank table, first call);
 * - agreement of per-line counts with js-tiktoken, the port of OpenAI's tiktoken used as the reference;
 * - two known divergences: text holding U+FEFF (gpt-tokenizer 3.4.0 overcounts it) and one long pre-token (30,000
 *   unpunctuated CJK characters, quadratic in both libraries' merge loops).
 *
 * Special tokens are counted as plain text everywhere (gpt-tokenizer `disallowedSpecial: new Set()`, js-tiktoken
 * `encode(text, [], [])`): a transcript that quotes `<|endoftext|>` is history to count, not a control token.
 *
 * Run from the repository root: `npx tsx bench/tokenizers.bench.ts [path/to/file.jsonl] [passes]`.
 */
import { readFileSync } from "node:fs"
import { performance } from "node:perf_hooks"
import { fileURLToPath } from "node:url"

const defaultInput = fileURLToPath(
  new URL("../../shared/transcripts/raw/pi/before-compaction.jsonl", import.meta.url)
)
const inputPath = process.argv[2] ?? defaultInput
const passes = Number(process.argv[3] ?? 5)

const lines = readFileSync(inputPath, "utf8").split("\n").filter((line) => line.length > 0)
const megabytes = lines.reduce((sum, line) => sum + Buffer.byteLength(line, "utf8"), 0) / 1_000_000

interface Candidate {
  readonly name: string
  readonly loadMs: number
  readonly count: (text: string) => number
  /** Forget memoised work, so the next pass sees the text for the first time. */
  readonly reset: () => void
}

const load = async (
  name: string,
  init: () => Promise<Omit<Candidate, "name" | "loadMs">>
): Promise<Candidate> => {
  const start = performance.now()
  const candidate = await init()
  candidate.count("warm up")
  return { name, loadMs: performance.now() - start, ...candidate }
}

const timed = <A>(f: () => A): { readonly value: A; readonly seconds: number } => {
  const start = performance.now()
  const value = f()
  return { value, seconds: (performance.now() - start) / 1000 }
}

const countLines = (count: (text: string) => number): Array<number> => lines.map((line) => count(line))

let clearGptTokenizerCache = (): void => {}
const candidates: ReadonlyArray<Candidate> = [
  await load("js-tiktoken 1.0.21", async () => {
    const { Tiktoken } = await import("js-tiktoken/lite")
    const { default: o200k } = await import("js-tiktoken/ranks/o200k_base")
    const encoder = new Tiktoken(o200k)
    // No count-only API, and no cache to reset.
    return { count: (text) => encoder.encode(text, [], []).length, reset: () => {} }
  }),
  await load("gpt-tokenizer 3.4.0", async () => {
    const { clearMergeCache, countTokens } = await import("gpt-tokenizer/encoding/o200k_base")
    clearGptTokenizerCache = clearMergeCache
    const plainText = { disallowedSpecial: new Set<string>() }
    return { count: (text) => countTokens(text, plainText), reset: clearMergeCache }
  }),
  // Loads effect and @baton/contracts too; gpt-tokenizer is already loaded (the same module instance underneath,
  // hence the same cache to clear).
  await load("@baton/context counter", async () => {
    const { TokenCounter } = await import("@baton/context")
    return { count: TokenCounter.make().count, reset: () => clearGptTokenizerCache() }
  })
]

console.log(`input: ${inputPath}`)
console.log(`       ${lines.length} lines, ${megabytes.toFixed(3)} MB UTF-8, best of ${passes} passes, o200k_base`)
console.log("")

// Passes go round-robin over the libraries, so machine noise and heap growth do not favour whichever runs first.
const results = candidates.map((candidate) => ({
  candidate,
  counts: [] as Array<number>,
  fresh: Number.POSITIVE_INFINITY,
  repeat: Number.POSITIVE_INFINITY
}))
for (let pass = 0; pass < passes; pass++) {
  for (const result of results) {
    result.candidate.reset()
    const fresh = timed(() => countLines(result.candidate.count))
    result.counts = fresh.value
    result.fresh = Math.min(result.fresh, fresh.seconds)
    result.repeat = Math.min(result.repeat, timed(() => countLines(result.candidate.count)).seconds)
  }
}

const reference = results[0]!
const pad = (s: string, n: number) => s.padEnd(n)
console.log(
  `${pad("library", 26)}${pad("load ms", 9)}${pad("fresh MB/s", 12)}${pad("repeat MB/s", 13)}${pad("tokens", 9)}` +
    "lines agreeing with js-tiktoken"
)
for (const { candidate, counts, fresh, repeat } of results) {
  const agreeing = counts.filter((count, i) => count === reference.counts[i]).length
  console.log(
    `${pad(candidate.name, 26)}${pad(candidate.loadMs.toFixed(0), 9)}${pad((megabytes / fresh).toFixed(2), 12)}` +
      `${pad((megabytes / repeat).toFixed(2), 13)}${pad(String(counts.reduce((a, b) => a + b, 0)), 9)}` +
      `${agreeing}/${lines.length}`
  )
}

console.log("")
for (const text of ["quoted <|endoftext|> and <|endofprompt|> stay text", "\uFEFFusing System;"]) {
  const counts = results.map(({ candidate }) => `${candidate.name} ${candidate.count(text)}`)
  console.log(`${JSON.stringify(text)}: ${counts.join(", ")}`)
}

const unpunctuatedCjk = (length: number): string =>
  Array.from({ length }, (_, i) => String.fromCodePoint(0x4e00 + ((i * 7919) % 20902))).join("")
for (const length of [2_000, 30_000]) {
  const text = unpunctuatedCjk(length)
  const timings = results.map(({ candidate }) => {
    // js-tiktoken needs 67 s for 8,000 such characters; 30,000 would take many minutes.
    if (length > 2_000 && candidate === reference.candidate) return `${candidate.name} skipped`
    candidate.reset()
    const run = timed(() => candidate.count(text))
    return `${candidate.name} ${run.value} tokens in ${(run.seconds * 1000).toFixed(0)} ms`
  })
  console.log(`${length} unpunctuated CJK characters (one pre-token): ${timings.join(", ")}`)
}
