/**
 * Commit-to-client latency of the live event stream (issue 13's "a live event reaches the page within 100 ms", without
 * the browser): `npx tsx bench/sse-latency.ts URL TOKEN [SENDS]` against a running `baton serve` (scripted provider).
 * Creates a thread on instance `claude`, follows `GET /threads/{id}/events`, sends SENDS (default 15) messages one after
 * another and prints, for every event received, its arrival time minus its `createdAt` (stamped inside the appending
 * transaction, before its commit: an upper bound of commit-to-client), median / p95 / max and the median per type.
 * Same machine, same clock. Timings are printed, never asserted.
 */
const [url, token, sendsArg] = process.argv.slice(2)
if (url === undefined || token === undefined) {
  console.error("usage: npx tsx bench/sse-latency.ts URL TOKEN [SENDS]")
  process.exit(2)
}
const sends = Number(sendsArg ?? 15)
const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" }

const main = async () => {
  const created = await (await fetch(`${url}/threads`, { method: "POST", headers, body: JSON.stringify({ title: "sse latency", providerInstance: "claude" }) })).json() as { threadId: string }
  const response = await fetch(`${url}/threads/${created.threadId}/events`, { headers: { ...headers, accept: "text/event-stream" } })
  const reader = response.body!.getReader()
  const decoder = new TextDecoder()
  const seen: Array<{ type: string; ms: number }> = []
  let buffer = ""
  void (async () => {
    for (;;) {
      const { value, done } = await reader.read()
      if (done) return
      const now = Date.now()
      buffer += decoder.decode(value, { stream: true })
      for (let end = buffer.indexOf("\n\n"); end >= 0; end = buffer.indexOf("\n\n")) {
        const data = buffer.slice(0, end).split("\n").find((l) => l.startsWith("data:"))
        buffer = buffer.slice(end + 2)
        if (data === undefined) continue
        const event = JSON.parse(data.slice(5)) as { type: string; createdAt: string }
        seen.push({ type: event.type, ms: now - Date.parse(event.createdAt) })
      }
    }
  })()
  await new Promise((r) => setTimeout(r, 500))
  seen.length = 0
  for (let i = 0; i < sends; i++) {
    const { runId } = await (await fetch(`${url}/threads/${created.threadId}/messages`, { method: "POST", headers, body: JSON.stringify({ text: `message ${i}` }) })).json() as { runId: string }
    await fetch(`${url}/runs/${runId}?waitMs=30000`, { headers })
  }
  await new Promise((r) => setTimeout(r, 300))
  const q = (xs: ReadonlyArray<number>, p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))]
  const byType: Record<string, number | undefined> = {}
  for (const type of new Set(seen.map((s) => s.type))) byType[type] = q(seen.filter((s) => s.type === type).map((s) => s.ms), 0.5)
  const all = seen.map((s) => s.ms)
  console.log(JSON.stringify({ events: all.length, median: q(all, 0.5), p95: q(all, 0.95), max: Math.max(...all), medianByType: byType }))
  process.exit(0)
}

main().catch((e: unknown) => {
  console.error(e)
  process.exit(1)
})
