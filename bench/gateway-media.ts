/**
 * The gateway's count of a message holding a large inline PDF (`GatewayMedia.jsonTokens`): the time it takes, by PDF
 * layout and size, against counting the same message as text (what the gateway did before documents were known).
 *
 * PDFs are built by `apps/server/test/support/Media.ts` (valid: `qpdf --check`): `PAGES` (30) pages and one image of
 * random samples making up the size, in the clear (PDF 1.4) and packed in compressed object streams (PDF 1.5, the
 * inflate path), plus a damaged file (a PDF header over random bytes: the whole file scanned, no page found, the size
 * fallback). Each case: the median of `RUNS` (5) counts of a fresh, not interned message (the memo would answer a
 * repeated interned one at once), and of `pdfPages` alone (the rest is the message's JSON, serialised and searched as
 * for any message). `TEXT=1` also times the count as text, once per size (seconds for large files).
 * Run: `npx tsx bench/gateway-media.ts` (`SIZES_MB=1,5,30`).
 */
import { TokenCounter } from "@baton/context"
import * as Crypto from "node:crypto"
import { performance } from "node:perf_hooks"
import * as GatewayMedia from "../apps/server/src/GatewayMedia.js"
import * as Media from "../apps/server/test/support/Media.js"

const pages = Number(process.env.PAGES ?? 30)
const runs = Number(process.env.RUNS ?? 5)
const sizes = (process.env.SIZES_MB ?? "1,5,30").split(",").map(Number)
const counter = TokenCounter.make()

const median = (xs: ReadonlyArray<number>) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

const message = (base64: string) => ({
  role: "user",
  content: [{ type: "tool_result", tool_use_id: "toolu_1", content: [{ type: "document", source: { type: "base64", media_type: "application/pdf", data: base64 } }] }]
})

for (const mb of sizes) {
  const bytes = mb * 1024 * 1024
  const cases: ReadonlyArray<readonly [string, Buffer]> = [
    ["classic", Media.pdf(pages, { layout: "classic", imageBytes: bytes })],
    ["packed", Media.pdf(pages, { layout: "packed", imageBytes: bytes })],
    ["damaged", Buffer.concat([Buffer.from("%PDF-1.7\n"), Crypto.randomBytes(bytes)])]
  ]
  for (const [layout, file] of cases) {
    const base64 = file.toString("base64")
    const times: Array<number> = []
    const scans: Array<number> = []
    let tokens = 0
    let found: number | undefined
    for (let i = 0; i < runs; i++) {
      const value = message(base64)
      const start = performance.now()
      tokens = GatewayMedia.jsonTokens(counter.count, value)
      times.push(performance.now() - start)
      const scan = performance.now()
      found = GatewayMedia.pdfPages(base64)
      scans.push(performance.now() - scan)
    }
    console.log(
      `${mb} MB ${layout}: ${tokens.toLocaleString("en-US")} tokens (pages ${found ?? "not found"}), jsonTokens median ${median(times).toFixed(1)} ms, of which pdfPages ${median(scans).toFixed(1)} ms`
    )
  }
  if (process.env.TEXT === "1") {
    const text = JSON.stringify(message(cases[1]![1].toString("base64")))
    const start = performance.now()
    const tokens = counter.count(text)
    console.log(`${mb} MB as text: ${tokens.toLocaleString("en-US")} tokens, ${(performance.now() - start).toFixed(0)} ms`)
  }
}
