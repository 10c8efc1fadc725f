/**
 * The dashboard's Interrupt after a lost answer, in a real browser: Chromium (playwright-core, `/usr/bin/chromium`)
 * against a real `baton serve` on loopback (a temp SQLite file, a random port) whose provider instance is an
 * Anthropic Messages adapter aimed at a loopback upstream that calls the client's tool on every request, so each run
 * stays `waiting` (in progress) until it is interrupted.
 *
 * Found by the previous session: an interrupt whose answer never reached the page kept its idempotency key, so a
 * click on Interrupt for the next run in progress sent that key again and the server answered the first run's
 * receipt: the run in progress went on. The page now names the run it interrupts (`runId`): clicked again for the
 * same run, the same command (its first answer); for a later run, a new one.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { type ChildProcess, spawn } from "node:child_process"
import * as Fs from "node:fs"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { type Browser, chromium } from "playwright-core"

const repo = fileURLToPath(new URL("../../../", import.meta.url))
const cli = Path.join(repo, "apps", "cli", ".test-bundle", "bin.cjs")
const chromiumPath = process.env["BATON_CHROMIUM"] ?? "/usr/bin/chromium"
const admin = "admin-token-0123456789abcdef"

interface Served {
  readonly url: string
  readonly stop: () => Promise<void>
}

/** `baton serve` on a SQLite file with `config` (port 0: a free one), resolved once it prints its "listening on" line. */
const serve = (db: string, config: string) =>
  new Promise<Served>((resolve, reject) => {
    const env: Record<string, string> = { ...process.env as Record<string, string>, BATON_TOKEN: admin, BATON_DATABASE_URL: "", BATON_CONFIG: "", INTERRUPT_UPSTREAM_KEY: "sk-upstream-0123456789" }
    delete env["BATON_PROVIDERS"]
    const child: ChildProcess = spawn(process.execPath, [cli, "serve", "--port", "0", "--db", db, "--config", config], { cwd: repo, env, stdio: ["ignore", "pipe", "pipe"] })
    const exited = new Promise<void>((done) => child.on("close", () => done()))
    void exited.then(() => reject(new Error(`baton serve exited: ${stderr}`)))
    let stdout = ""
    let stderr = ""
    const timer = setTimeout(() => reject(new Error(`baton serve did not listen within 60 s: ${stderr}`)), 60_000)
    child.stderr!.setEncoding("utf8").on("data", (chunk: string) => void (stderr += chunk))
    child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
      stdout += chunk
      const found = /listening on (http:\/\/\S+)/.exec(stdout)
      if (found === null) return
      clearTimeout(timer)
      resolve({ url: found[1]!, stop: () => (child.kill("SIGTERM"), exited) })
    })
  })

/** A loopback Anthropic Messages upstream: every request is answered (SSE) with a call of the client's `read_file`. */
const upstream = () =>
  new Promise<{ readonly url: string; readonly close: () => Promise<void> }>((resolve) => {
    let n = 0
    const usage = `"usage":{"input_tokens":50,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}`
    const server = Http.createServer((req, res) => {
      req.resume().on("end", () => {
        n++
        const lines = [
          `{"type":"message_start","message":{"id":"msg_${n}","type":"message","role":"assistant","content":[],"model":"claude-x",${usage}}}`,
          `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_${n}","name":"read_file","input":{}}}`,
          `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\\"path\\":\\"a${n}.ts\\"}"}}`,
          `{"type":"content_block_stop","index":0}`,
          `{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":10}}`,
          `{"type":"message_stop"}`
        ]
        res.writeHead(200, { "content-type": "text/event-stream" })
        res.end(lines.map((line) => `event: ${JSON.parse(line).type}\ndata: ${line}\n\n`).join(""))
      })
    })
    server.listen(0, "127.0.0.1", () =>
      resolve({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => new Promise((done) => server.close(() => done())) }))
  })

/** A JSON call of the API with the admin token: the status and the body. */
const api = async <A>(base: string, method: "GET" | "POST", path: string, body?: unknown) => {
  const response = await fetch(base + path, {
    method,
    headers: { authorization: `Bearer ${admin}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) })
  })
  return { status: response.status, body: await response.json() as A }
}

describe("the dashboard's Interrupt after a lost answer", () => {
  let dir: string
  let server: Served
  let model: { readonly url: string; readonly close: () => Promise<void> }
  let browser: Browser

  beforeAll(async () => {
    dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-dashboard-interrupt-"))
    model = await upstream()
    const config = Path.join(dir, "baton.json")
    Fs.writeFileSync(config, JSON.stringify({
      limits: { shutdownTimeoutMs: 1000 },
      providers: [{
        kind: "anthropic-messages", name: "anthropic", baseUrl: model.url, model: "claude-x", apiKeyEnv: "INTERRUPT_UPSTREAM_KEY",
        contextWindow: 200_000, autoCompactThreshold: null, maxOutputTokens: 4_096, maxRetries: 0,
        prices: { input: 3, cacheWrite: 3.75, cacheRead: 0.3, output: 15 }
      }]
    }))
    server = await serve(Path.join(dir, "baton.sqlite"), config)
    browser = await chromium.launch({ executablePath: chromiumPath, args: ["--no-sandbox"] })
  }, 120_000)

  afterAll(async () => {
    await browser?.close()
    await server?.stop()
    await model?.close()
    Fs.rmSync(dir, { recursive: true, force: true })
  })

  /** Sends `text` and returns its run once it waits for the client's tool results (in progress). */
  const waitingRun = async (threadId: string, text: string) => {
    const sent = await api<{ runId: string }>(server.url, "POST", `/threads/${threadId}/messages`, { text })
    expect(sent.status).toBe(202)
    for (let i = 0; ; i++) {
      const { body } = await api<{ run: { status: string; failureReason: string | null } }>(server.url, "GET", `/runs/${sent.body.runId}`)
      if (body.run.status === "waiting") return sent.body.runId
      if (i > 600 || ["completed", "failed", "interrupted"].includes(body.run.status)) throw new Error(`the run never waited: ${JSON.stringify(body.run)}`)
      await new Promise((r) => setTimeout(r, 50))
    }
  }
  const statusOf = async (runId: string) => (await api<{ run: { status: string } }>(server.url, "GET", `/runs/${runId}`)).body.run.status

  it("a click for the next run in progress interrupts that run; a click again after its lost answer is the same command", async () => {
    const created = await api<{ threadId: string }>(server.url, "POST", "/threads", {
      title: "interrupt",
      providerInstance: "anthropic",
      tools: [{ name: "read_file", description: "Reads a file", inputSchema: { type: "object", properties: { path: { type: "string" } } } }]
    })
    expect(created.status).toBe(201)
    const threadId = created.body.threadId
    const first = await waitingRun(threadId, "first")

    const context = await browser.newContext({ viewport: { width: 1400, height: 900 } })
    await context.addInitScript((t) => sessionStorage.setItem("baton.token", t), admin)
    const page = await context.newPage()
    const errors: Array<string> = []
    page.on("console", (m) => void (m.type() === "error" && errors.push(m.text())))
    page.on("pageerror", (e) => void errors.push(`pageerror: ${e.message}`))
    const sent: Array<{ readonly runId?: string; readonly commandId: string }> = []
    page.on("request", (r) => void (r.method() === "POST" && r.url().endsWith("/interrupt") && sent.push(JSON.parse(r.postData() ?? "{}"))))
    // The first two interrupts (the first click for each run) reach the server but their answers never reach the page.
    let requests = 0
    await page.route(`**/threads/${threadId}/interrupt`, async (route) => {
      if (++requests > 2) return route.continue()
      await route.fetch()
      await route.abort("connectionreset")
    })
    await page.goto(`${server.url}/ui/threads/${threadId}`)
    await page.waitForSelector("[data-testid=connection]:text('open')")

    const interrupt = page.locator("button[data-action=interrupt]")
    /** Clicks Interrupt and resolves once its request failed on the page, after the server answered it. */
    const clickLost = async () => {
      const failed = page.waitForEvent("requestfailed", (r) => r.method() === "POST" && r.url().endsWith("/interrupt"))
      await interrupt.click()
      await failed
    }
    await page.waitForSelector(`button[data-action=interrupt][data-run-id='${first}']`)
    await clickLost()
    await page.waitForSelector("[data-testid=outcome][data-action=interrupt][data-ok=false]")
    expect(await statusOf(first)).toBe("interrupted")

    // The next message's run waits for its tool results: the page shows it in progress, and Interrupt names it.
    const second = await waitingRun(threadId, "second")
    await page.waitForSelector(`button[data-action=interrupt][data-run-id='${second}']`)
    // From here the page does not learn that the run ended (its reads of the runs and the snapshot are refused), as
    // when the answer is lost with the connection: the run is still in progress as far as it knows.
    const base = new URL(`${server.url}/threads/${threadId}`).pathname
    await page.route((url) => url.pathname === base || url.pathname === `${base}/runs`, (route) =>
      route.request().method() === "GET" ? route.abort("connectionreset") : route.continue())
    // The first click's failed outcome is still on the page: wait for this click's own lost answer (the server has
    // answered it), not for the outcome element.
    await clickLost()
    await page.waitForSelector("[data-testid=outcome][data-action=interrupt][data-ok=false]")
    expect(await statusOf(second)).toBe("interrupted")
    // Clicked again: the same command for the same run (its first answer, the run as it ended).
    await interrupt.click()
    await page.waitForSelector("[data-testid=outcome][data-action=interrupt][data-ok=true]")
    const answered = JSON.parse(await page.locator("[data-testid=outcome] pre").textContent() ?? "{}") as { id: string; status: string }
    // Before: the second click sent the first interrupt's key again, the server answered the first run, and the
    // second run went on waiting.
    expect([answered.id, answered.status]).toEqual([second, "interrupted"])
    expect(await statusOf(second)).toBe("interrupted")
    expect(sent.map((s) => s.runId)).toEqual([first, second, second])
    expect(sent[2]!.commandId).toBe(sent[1]!.commandId)
    expect(sent[1]!.commandId).not.toBe(sent[0]!.commandId)
    await context.close()
    expect(errors.filter((e) => !/ERR_CONNECTION_RESET|Failed to load resource/.test(e))).toEqual([])
  })
})
