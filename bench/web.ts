/// <reference lib="dom" />
/**
 * The dashboard's performance figures (issue 13): `pnpm bench:web` (from the repository root; `BENCH_ITEMS`, default
 * 10000; `BENCH_LATENCY_RUNS`, default 30; `BATON_CHROMIUM`, default /usr/bin/chromium).
 *
 * 1. **JS shipped**: builds apps/web (`pnpm build:web`) and sums the gzipped size (zlib level 9) of every script in
 *    `apps/web/dist/assets` (the page loads all of them).
 * 2. **Open a 10,000-item thread**: `baton serve` on a temp SQLite file; a thread of BENCH_ITEMS items (scripted runs
 *    of a prompt and an answer, posted through the API); Chromium opens `/ui/threads/<id>` with the token in
 *    sessionStorage. Timed from the navigation start, inside the page (a script the context adds; `performance.now()`
 *    at each step, so no driver round trip is in the figures): the first rows rendered; interactive (as soon as the
 *    first rows are there, a scroll of the virtualised list to its middle renders the rows there and a click on one
 *    opens the drawer with the item's text); the server's fold of the event log in the page (`timelineMs`: the
 *    occupancy charts' data); every item paged in; `breakdown`: when the document, the script and the first
 *    screen's requests started and ended. The server is the one that filled the thread, or a fresh one on a kept
 *    `BENCH_DB` (then nothing warmed it: the first open after a start, the worst case). `BENCH_DRIVEN=1` times the
 *    same steps from here through Playwright instead, as this benchmark did before 2026-12-03 (the driver's round
 *    trips then count too).
 * 3. **Live event latency**: with the thread open, BENCH_LATENCY_RUNS messages are sent through the API one after
 *    another; for each event the page received, `receivedAt` (the page's `Date.now()` when the reader handed it on)
 *    minus the time of the event's commit (`liveLatencyMs.fromCommit`: the served process runs with
 *    `bench/support/commit-clock.mjs`, which logs the time each `COMMIT` that wrote events returned), and minus its
 *    `createdAt` (stamped when the event was appended, before its commit: in a long unit of work, its whole length
 *    earlier; an upper bound, the figures this benchmark printed before 2026-12-04). Same machine, same clock.
 *    Measured once the page has folded the whole stored log (`eventLogReplayedMs`, from the navigation start: the
 *    server's `/timeline` fold, then the tail). `PROFDIR=DIR` writes a CPU profile of the served process there.
 *
 * `BENCH_PROVIDERS` replaces the server's providers (default `claude:1000000:noinject`; a database whose thread was
 * switched to another provider needs it too). `BENCH_DB=FILE` keeps the SQLite file (filled on the first run, reused by the next ones: the fill takes minutes).
 *
 * Prints one JSON document. Timings are measured here, never asserted in tests (STYLE.md, Tests).
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import * as Zlib from "node:zlib"
import { chromium, type Page } from "playwright-core"

const repo = fileURLToPath(new URL("../", import.meta.url))
const items = Number(process.env["BENCH_ITEMS"] ?? 10_000)
const latencyRuns = Number(process.env["BENCH_LATENCY_RUNS"] ?? 30)
const token = "bench-admin-token-0123456789"

const quantile = (xs: ReadonlyArray<number>, q: number) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!
}

/** Median, p95 and max of `xs` (not empty), in its unit. */
const stats = (xs: ReadonlyArray<number>) => ({ median: quantile(xs, 0.5), p95: quantile(xs, 0.95), max: Math.max(...xs) })

const serve = (db: string, commitLog: string) =>
  new Promise<{ child: ChildProcess; url: string }>((resolve, reject) => {
    const child = spawn(process.execPath, [...(process.env["PROFDIR"] ? ["--cpu-prof", "--cpu-prof-dir", process.env["PROFDIR"]] : []), "--import", "./bench/support/commit-clock.mjs", "--import", "tsx", "apps/cli/src/bin.ts", "serve", "--port", "0", "--db", db], {
      cwd: repo,
      env: { ...process.env, BENCH_COMMIT_LOG: commitLog, BATON_TOKEN: token, BATON_PROVIDERS: process.env["BENCH_PROVIDERS"] ?? "claude:1000000:noinject", BATON_DATABASE_URL: "", BATON_CONFIG: "" },
      stdio: ["ignore", "pipe", "inherit"]
    })
    let out = ""
    child.stdout!.setEncoding("utf8").on("data", (c: string) => {
      out += c
      const found = /listening on (http:\/\/\S+)/.exec(out)
      if (found !== null) resolve({ child, url: found[1]! })
    })
    child.on("close", (code) => reject(new Error(`baton serve exited ${code}`)))
  })

/**
 * `BENCH_DRIVEN=1`: the open timed the way this benchmark did before 2026-12-03, each step driven from here through
 * Playwright (wait for the first rows, then scroll, wait, click, wait, each a round trip to the page), so the figure
 * includes the driver's round trips; kept to compare with the figures measured that way.
 */
const driven = process.env["BENCH_DRIVEN"] === "1"

const drivenOpen = async (page: Page) => {
  await page.waitForSelector("[data-testid=item-row]")
  const firstRows = await page.evaluate(() => performance.now())
  await page.getByTestId("conversation").evaluate((el) => {
    el.scrollTop = el.scrollHeight / 2
  })
  await page.waitForFunction(() => {
    const rows = Array.from(document.querySelectorAll("[data-testid=item-row]"))
    return rows.length > 0 && rows.every((r) => r.getBoundingClientRect().height > 0)
  })
  await page.locator("[data-testid=item-row] button").nth(3).click()
  await page.waitForFunction(() => (document.querySelector("[data-testid=drawer-text]")?.textContent ?? "") !== "")
  return { firstRows, interactive: await page.evaluate(() => performance.now()) }
}

const main = async () => {
  execFileSync("pnpm", ["build:web"], { cwd: repo, stdio: "inherit" })
  const assets = Path.join(repo, "apps", "web", "dist", "assets")
  const scripts = Fs.readdirSync(assets).filter((f) => f.endsWith(".js"))
  const gzipBytes = scripts.reduce((n, f) => n + Zlib.gzipSync(Fs.readFileSync(Path.join(assets, f)), { level: 9 }).length, 0)
  const rawBytes = scripts.reduce((n, f) => n + Fs.statSync(Path.join(assets, f)).size, 0)

  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-bench-web-"))
  const kept = process.env["BENCH_DB"]
  const reuse = kept !== undefined && Fs.existsSync(kept)
  const commitLog = Path.join(dir, "commits.txt")
  const server = await serve(kept ?? Path.join(dir, "baton.sqlite"), commitLog)
  const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" }
  const call = async <A>(method: string, path: string, body?: unknown) =>
    (await (await fetch(server.url + path, { method, headers, ...(body === undefined ? {} : { body: JSON.stringify(body) }) })).json()) as A
  try {
    const existing = reuse ? (await call<{ threads: Array<{ id: string; title: string }> }>("GET", "/threads")).threads.find((t) => t.title === "10,000 items") : undefined
    const { threadId } = existing !== undefined
      ? { threadId: existing.id }
      : await call<{ threadId: string }>("POST", "/threads", { title: "10,000 items", providerInstance: "claude" })
    const fillStart = Date.now()
    let last = ""
    for (let sent = 0; existing === undefined && sent < items / 2; sent += 25) {
      const batch = await Promise.all(Array.from({ length: Math.min(25, items / 2 - sent) }, (_, i) =>
        call<{ runId: string }>("POST", `/threads/${threadId}/messages`, { text: `message ${sent + i}: ${"lorem ipsum ".repeat(8)}` })))
      last = batch[batch.length - 1]!.runId
    }
    for (; last !== "";) {
      const run = await call<{ run: { status: string } }>("GET", `/runs/${last}?waitMs=60000`)
      if (run.run.status !== "queued" && run.run.status !== "running" && run.run.status !== "starting") break
    }
    const snapshot = await call<{ totals: { items: number; runs: number } }>("GET", `/threads/${threadId}`)
    const fillMs = Date.now() - fillStart

    const browser = await chromium.launch({ executablePath: process.env["BATON_CHROMIUM"] ?? "/usr/bin/chromium", args: ["--no-sandbox"] })
    const context = await browser.newContext({ viewport: { width: 1400, height: 900 } })
    await context.addInitScript((t) => sessionStorage.setItem("baton.token", t), token)
    const page = await context.newPage()
    const errors: Array<string> = []
    page.on("console", (m) => void (m.type() === "error" && errors.push(m.text())))
    // Interactive, timed inside the page (no driver round trip in the figure): as soon as the first rows are there,
    // scroll the list to its middle, wait for the rows there, click one and wait for the drawer to show its text.
    // A string, not a function: tsx would wrap the function's inner names in a helper the page does not have.
    if (!driven) await context.addInitScript(`
      window.__bench = {}
      const frame = () => new Promise((r) => requestAnimationFrame(() => r()))
      const until = async (ready) => {
        while (!ready()) await frame()
      }
      void (async () => {
        await until(() => document.querySelector("[data-testid=item-row]") !== null)
        window.__bench.firstRows = performance.now()
        const scroller = document.querySelector("[data-testid=conversation]")
        scroller.scrollTop = scroller.scrollHeight / 2
        await until(() => {
          const rows = Array.from(document.querySelectorAll("[data-testid=item-row]"))
          return rows.length > 3 && rows.every((r) => r.getBoundingClientRect().height > 0)
        })
        document.querySelectorAll("[data-testid=item-row] button")[3].click()
        await until(() => (document.querySelector("[data-testid=drawer-text]")?.textContent ?? "") !== "")
        window.__bench.interactive = performance.now()
      })()
    `)
    await page.goto(`${server.url}/ui/threads/${threadId}`)
    const { firstRows, interactive } = driven ? await drivenOpen(page) : await (async () => {
      await page.waitForFunction(() => (window as unknown as { __bench: Record<string, number> }).__bench["interactive"] !== undefined, undefined, { timeout: 60_000 })
        .catch(async (e) => {
          throw new Error(`the page did not become interactive: ${JSON.stringify(await page.evaluate(() => (window as unknown as { __bench: unknown }).__bench))}, console errors: ${JSON.stringify(errors)}`, { cause: e })
        })
      return await page.evaluate(() => (window as unknown as { __bench: { firstRows: number; interactive: number } }).__bench)
    })()
    // Where the first second goes: the document, the script and the first screen's requests ([start, end], ms from
    // the navigation start; the first request of each path).
    const breakdown = await page.evaluate(() => {
      const nav = performance.getEntriesByType("navigation")[0] as PerformanceNavigationTiming | undefined
      const out: Record<string, [number, number]> = {}
      if (nav !== undefined) {
        out["document"] = [Math.round(nav.requestStart), Math.round(nav.responseEnd)]
        out["domContentLoaded"] = [Math.round(nav.domContentLoadedEventStart), Math.round(nav.domContentLoadedEventEnd)]
      }
      for (const r of performance.getEntriesByType("resource") as Array<PerformanceResourceTiming>) {
        const name = new URL(r.name).pathname.replace(/\/threads\/[^/]+/, "/threads/:id").replace(/\/assets\/.*/, "/assets/*")
        if (out[name] === undefined && r.startTime < 3000) out[name] = [Math.round(r.startTime), Math.round(r.responseEnd)]
      }
      return out
    })
    await page.waitForFunction((n) => document.querySelector(".conversation h2")?.textContent?.includes(`${n.toLocaleString("en-US")} items`) === true && document.querySelector(".conversation h2")?.textContent?.includes("loading") === false, snapshot.totals.items, { timeout: 60_000 })
    const allItems = await page.evaluate(() => performance.now())
    // When the page had the server's fold (the occupancy charts' data); absent on a page that predates it.
    const timelineAt = await page.evaluate(() => (window as unknown as { __baton?: { timelineAt?: number } }).__baton?.timelineAt ?? null)

    // Live latency: the events of each sent message, commit (upper bound: createdAt) to page, once the page has
    // caught up with the stored log (its replay would otherwise queue the live events behind it).
    const stored = await (await fetch(`${server.url}/threads/${threadId}/events?follow=false`, { headers })).text()
    const lastSeq = Number([...stored.matchAll(/^id: ?(\d+)$/gm)].pop()?.[1] ?? 0)
    await page.waitForFunction((seq) =>
      ((window as unknown as { __baton?: { lastSeq?: number } }).__baton?.lastSeq ?? 0) >= seq, lastSeq, { timeout: 120_000 })
    const caughtUp = await page.evaluate(() => performance.now())
    // The same events followed from here over SSE (no browser): separates the server's share of the latency (commit
    // to the bytes on the socket) from the page's (parsing, the main thread busy with rendering).
    const follower = new AbortController()
    const direct: Array<{ seq: number; globalSeq: number; type: string; createdAt: string; receivedAt: number }> = []
    const followed = fetch(`${server.url}/threads/${threadId}/events?after=${lastSeq}`, { headers, signal: follower.signal })
      .then(async (response) => {
        const decoder = new TextDecoder()
        let buffer = ""
        for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
          const receivedAt = Date.now()
          buffer += decoder.decode(chunk, { stream: true })
          let end: number
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            const data = /^data: ?(.*)$/m.exec(buffer.slice(0, end))?.[1]
            buffer = buffer.slice(end + 2)
            if (data !== undefined) {
              const e = JSON.parse(data) as { seq: number; globalSeq: number; type: string; createdAt: string }
              direct.push({ seq: e.seq, globalSeq: e.globalSeq, type: e.type, createdAt: e.createdAt, receivedAt })
            }
          }
        }
      })
      .catch(() => undefined)
    const sendStart = Date.now()
    for (let i = 0; i < latencyRuns; i++) {
      const { runId } = await call<{ runId: string }>("POST", `/threads/${threadId}/messages`, { text: `live ${i}` })
      await call("GET", `/runs/${runId}?waitMs=30000`)
    }
    await page.waitForTimeout(500)
    const received = await page.evaluate((n) =>
      (window as unknown as { __baton: { received: Array<{ seq: number; createdAt: string; receivedAt: number }> } }).__baton.received
        .filter((e) => Date.parse(e.createdAt) >= n), sendStart)
    const latencies = received.map((e) => e.receivedAt - Date.parse(e.createdAt))
    follower.abort()
    await followed
    const directLatencies = direct.filter((e) => Date.parse(e.createdAt) >= sendStart).map((e) => e.receivedAt - Date.parse(e.createdAt))
    const directBySeq = new Map(direct.map((e) => [e.seq, e]))
    // From the commit (bench/support/commit-clock.mjs: the time the COMMIT that made the event durable returned).
    const committedAt = new Map(Fs.readFileSync(commitLog, "utf8").split("\n").filter((l) => l !== "").map((l) => {
      const [seq, at] = l.split(" ")
      return [Number(seq), Number(at)] as const
    }))
    const commitOf = (seq: number) => committedAt.get(directBySeq.get(seq)?.globalSeq ?? -1)
    const fromCommit = received.flatMap((e) => {
      const at = commitOf(e.seq)
      return at === undefined ? [] : [e.receivedAt - at]
    })
    const directFromCommit = direct.filter((e) => Date.parse(e.createdAt) >= sendStart).flatMap((e) => {
      const at = committedAt.get(e.globalSeq)
      return at === undefined ? [] : [e.receivedAt - at]
    })
    // The slowest events to the page, with what the node follower saw of each (ms from createdAt).
    const slowest = [...received].sort((a, b) => (b.receivedAt - Date.parse(b.createdAt)) - (a.receivedAt - Date.parse(a.createdAt))).slice(0, 5)
      .map((e) => ({
        seq: e.seq,
        type: (e as { type?: string }).type ?? directBySeq.get(e.seq)?.type,
        page: e.receivedAt - Date.parse(e.createdAt),
        direct: directBySeq.has(e.seq) ? directBySeq.get(e.seq)!.receivedAt - Date.parse(e.createdAt) : null,
        pageFromCommit: commitOf(e.seq) === undefined ? null : e.receivedAt - commitOf(e.seq)!
      }))
    await browser.close()

    console.log(JSON.stringify({
      machine: `${Os.cpus().length} cores, ${Os.cpus()[0]?.model ?? "?"}`,
      js: { files: scripts.length, rawBytes, gzipBytes, gzipKB: Math.round(gzipBytes / 1024 * 10) / 10 },
      thread: { items: snapshot.totals.items, runs: snapshot.totals.runs, fillMs },
      open: {
        timedBy: driven ? "the driver (BENCH_DRIVEN=1)" : "the page",
        firstRowsMs: Math.round(firstRows),
        interactiveMs: Math.round(interactive),
        allItemsMs: Math.round(allItems),
        timelineMs: timelineAt === null ? null : Math.round(timelineAt),
        breakdown,
        eventLogReplayedMs: Math.round(caughtUp),
        loadAverage: Os.loadavg().map((x) => Math.round(x * 10) / 10)
      },
      liveLatencyMs: {
        fromCommit: fromCommit.length === 0 ? null : {
          events: fromCommit.length,
          ...stats(fromCommit),
          direct: directFromCommit.length === 0 ? null : {
            ...stats(directFromCommit)
          }
        },
        fromCreatedAt: "the figures below: from the event's createdAt (an upper bound of the time from its commit)",
        events: latencies.length,
        ...stats(latencies),
        direct: directLatencies.length === 0 ? null : {
          events: directLatencies.length,
          ...stats(directLatencies)
        },
        slowest
      },
      consoleErrors: errors
    }, null, 2))
  } finally {
    server.child.kill("SIGTERM")
    Fs.rmSync(dir, { recursive: true, force: true })
  }
}

main().catch((e: unknown) => {
  console.error(e)
  process.exit(1)
})
