/**
 * `pnpm bench:cost [--json] [paths...]`: the cost benchmark of issue 11 (see `CostReplay.ts` for the model and the
 * formula). Replays every Claude Code and pi transcript under `../shared/transcripts/raw/` (or the files and folders
 * given) request by request under no management, Baton and the field's policies; prints a table per session (or one
 * JSON document with `--json`), sensitivity runs and recoverability. Progress goes to stderr.
 */
import { TokenCounter } from "@baton/context"
import { ThreadRead } from "@baton/orchestration"
import { TranscriptImporter } from "@baton/transcripts"
import { Either } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import * as CostReplay from "./CostReplay.js"

const args = process.argv.slice(2)
const json = args.includes("--json")
const given = args.filter((a) => a !== "--json")
const root = path.resolve(import.meta.dirname, "..", "..", "shared", "transcripts", "raw")
const defaultRoots = [path.join(root, "claude-code"), path.join(root, "pi")]

const filesUnder = (p: string): Array<string> =>
  fs.statSync(p).isDirectory()
    ? fs.readdirSync(p).sort().flatMap((name) => filesUnder(path.join(p, name)))
    : /\.jsonl$/.test(p) ? [p] : []

const files = (given.length > 0 ? given : defaultRoots).flatMap((p) => filesUnder(path.resolve(p)))
const counter = TokenCounter.make()
const memo = new Map<string, number>()
const count = (text: string) => {
  if (text.length > 200) return counter.count(text)
  let n = memo.get(text)
  if (n === undefined) memo.set(text, n = counter.count(text))
  return n
}

const log = (line: string) => process.stderr.write(`${line}\n`)
const started = Date.now()

const sessions: Array<CostReplay.Session> = []
for (const file of files) {
  const text = fs.readFileSync(file, "utf8")
  const imported = TranscriptImporter.importText(file, text, { skipInvalid: true })
  if (Either.isLeft(imported)) {
    log(`skip ${file}: ${imported.left.reason}`)
    continue
  }
  const times = CostReplay.responseTimes(text)
  const name = path.relative(given.length > 0 ? process.cwd() : root, file)
  for (const thread of imported.right.threads) {
    sessions.push(CostReplay.sessionOf(imported.right.threads.length > 1 ? `${name}#${thread.threadKey}` : name, thread, count, times))
  }
  log(`imported ${name} (${((Date.now() - started) / 1000).toFixed(1)} s)`)
}

interface Outcome {
  readonly weighted: Record<string, number>
  readonly breaks: Record<string, number>
  readonly ratioNone: number
  readonly ratioBest: number
  readonly bestField: string
}

const runAll = (session: CostReplay.Session, options: CostReplay.RunOptions, onBaton?: (r: CostReplay.RunResult) => void): Outcome => {
  const policies = [CostReplay.none, CostReplay.baton(), ...CostReplay.fieldPolicies()]
  const weighted: Record<string, number> = {}
  const breaks: Record<string, number> = {}
  for (const policy of policies) {
    const result = CostReplay.run(session, policy, options, count)
    weighted[policy.name] = result.weighted
    breaks[policy.name] = result.prefixBreaks
    if (policy.name === "baton") onBaton?.(result)
  }
  const field = CostReplay.fieldPolicies().map((p) => p.name)
  const bestField = field.reduce((a, b) => weighted[b]! < weighted[a]! ? b : a)
  return {
    weighted,
    breaks,
    ratioNone: weighted.none === 0 ? 1 : weighted.baton! / weighted.none!,
    ratioBest: weighted[bestField] === 0 ? 1 : weighted.baton! / weighted[bestField]!,
    bestField
  }
}

/** Reads a stubbed unit back by the ref its stub names, as `thread_read` parses refs. */
const recovered = (session: CostReplay.Session, unit: number): boolean => {
  const ref = CostReplay.stubRef(session, unit)
  if (ref === null) return false
  const refs = ThreadRead.parseRefs(ref)
  if (Either.isLeft(refs)) return false
  const read = refs.right.flatMap((r) => r._tag === "range" ? session.items.slice(r.from - 1, r.to) : [])
  const original = [...session.units[unit]!.seqs].sort((a, b) => a - b).map((s) => session.items[s - 1]!)
  return read.length === original.length && read.every((item, i) => item.text === original[i]!.text && item.seq === original[i]!.seq)
}

const sensitivity: ReadonlyArray<[string, CostReplay.RunOptions]> = [
  ["ttl5m", { ...CostReplay.mainRun, ttlMs: 5 * 60_000 }],
  ["tokens1.3", { ...CostReplay.mainRun, tokenScale: 1.3 }],
  ["system26k", { ...CostReplay.mainRun, systemTokens: 26_000 }]
]

const report = sessions.map((session) => {
  let stubbed = 0
  let ok = 0
  const main = runAll(session, CostReplay.mainRun, (result) => {
    for (const unit of result.stubbedUnits) {
      stubbed++
      if (recovered(session, unit)) ok++
    }
  })
  const runs = Object.fromEntries(sensitivity.map(([label, options]) => [label, runAll(session, options)]))
  log(`replayed ${session.name}: ${session.requests.length} requests (${((Date.now() - started) / 1000).toFixed(1)} s)`)
  return { session, main, runs, stubbed, ok }
})

const fmt = (n: number) => Math.round(n).toLocaleString("en-US")
const ratio = (n: number) => n.toFixed(2)

if (json) {
  process.stdout.write(`${JSON.stringify({
    formula: "weighted input = 0.1 x cache read + 1.25 x cache write (tokens, o200k); cache write = input - cache read",
    sessions: report.map(({ main, ok, runs, session, stubbed }) => ({
      name: session.name,
      requests: session.requests.length,
      weighted: Object.fromEntries(Object.entries(main.weighted).map(([k, v]) => [k, Math.round(v)])),
      prefixBreaks: main.breaks,
      recoverability: { stubbed, readBack: ok },
      sensitivity: Object.fromEntries(Object.entries(runs).map(([label, o]) => [label, {
        weighted: Object.fromEntries(Object.entries(o.weighted).map(([k, v]) => [k, Math.round(v)])),
        batonOverNone: o.ratioNone,
        batonOverBestField: o.ratioBest
      }]))
    }))
  }, null, 2)}\n`)
} else {
  const names = ["none", "baton", ...CostReplay.fieldPolicies().map((p) => p.name)]
  const lines = [
    `| session | requests | ${names.join(" | ")} | baton/none | baton/best field | breaks (baton / best field) | recovered |`,
    `| --- | ---: | ${names.map(() => "---:").join(" | ")} | ---: | ---: | --- | --- |`,
    ...report.map(({ main, ok, session, stubbed }) =>
      `| ${session.name} | ${session.requests.length} | ${names.map((n) => fmt(main.weighted[n]!)).join(" | ")} | ${ratio(main.ratioNone)} | ${ratio(main.ratioBest)} (${main.bestField}) | ${main.breaks.baton} / ${main.breaks[main.bestField]} | ${ok}/${stubbed} |`
    ),
    "",
    `| session (prefix breaks) | ${names.join(" | ")} |`,
    `| --- | ${names.map(() => "---:").join(" | ")} |`,
    ...report.map(({ main, session }) => `| ${session.name} | ${names.map((n) => main.breaks[n]).join(" | ")} |`),
    "",
    `| session | ${sensitivity.map(([l]) => `${l} baton/none | ${l} baton/best`).join(" | ")} |`,
    `| --- | ${sensitivity.map(() => "---: | ---:").join(" | ")} |`,
    ...report.map(({ runs, session }) =>
      `| ${session.name} | ${sensitivity.map(([l]) => `${ratio(runs[l]!.ratioNone)} | ${ratio(runs[l]!.ratioBest)} (${runs[l]!.bestField})`).join(" | ")} |`
    )
  ]
  process.stdout.write(`${lines.join("\n")}\n`)
}

const long = report.filter((r) => r.session.requests.length >= 100)
const allRuns = report.flatMap((r) => [r.main])
const failures = [
  ...long.filter((r) => r.main.ratioNone > 0.5).map((r) => `${r.session.name}: baton/none ${ratio(r.main.ratioNone)} > 0.5`),
  ...long.filter((r) => r.main.ratioBest > 0.8).map((r) => `${r.session.name}: baton/best field ${ratio(r.main.ratioBest)} > 0.8`),
  ...report.filter((r) => r.main.ratioNone > 1).map((r) => `${r.session.name}: baton above none`),
  ...report.filter((r) => r.ok !== r.stubbed).map((r) => `${r.session.name}: ${r.stubbed - r.ok} stubs not recovered`)
]
log(`${allRuns.length} sessions, ${long.length} with >= 100 requests, ${((Date.now() - started) / 1000).toFixed(1)} s`)
log(failures.length === 0 ? "targets met on every session" : `targets missed:\n  ${failures.join("\n  ")}`)
process.exitCode = failures.length === 0 ? 0 : 1
