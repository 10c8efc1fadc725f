/**
 * Interleaved A/B of two Baton servers under a noisy machine: the `serve-baton` role of `bench/server-load.ts` in each
 * worktree, both up at once, driven alternately in short bursts by one client (C closed loops of
 * `POST /threads/{id}/messages` + `GET /runs/{id}?waitMs=60000`; the order swapped each round), so both see the same
 * load; prints each server's turns and CPU per turn (its `/__bench/overhead` counter) over all bursts.
 *
 *   SIDES='[{"name":"main","dir":"/work/wt-base","env":{}},{"name":"branch","dir":"/work/wt-branch","env":{}}]' \
 *     C=10 BURST=3 ROUNDS=6 node bench/server-ab.mjs
 */
import { spawn } from "node:child_process"
const token = "bench-token-0123456789abcdef"
const sides = JSON.parse(process.env.SIDES) // [{name, dir, env}]
const C = Number(process.env.C ?? 10), BURST = Number(process.env.BURST ?? 3), ROUNDS = Number(process.env.ROUNDS ?? 8)
const start = (side, i) => new Promise((resolve, reject) => {
  const child = spawn(process.execPath, ["--import", "tsx", `${side.dir}/bench/server-load.ts`, "serve-baton", "--db", `/tmp/baton-server-ab-${i}-${Date.now()}.sqlite`], {
    cwd: side.dir, env: { ...process.env, ...side.env, BATON_TOKEN: token, BATON_CONFIG: "", BATON_DATA_DIR: "", BATON_DATABASE_URL: "", BATON_PORT: "", BATON_HOST: "" }, stdio: ["ignore", "pipe", "pipe"] })
  let out = ""
  child.stdout.on("data", (c) => { out += c; const m = /listening on (http:\/\/\S+)/.exec(out); if (m) resolve({ url: m[1], child }) })
  child.on("exit", (code) => reject(new Error(`exit ${code}`)))
})
const H = { authorization: `Bearer ${token}`, "content-type": "application/json" }
const j = async (url, init = {}) => (await fetch(url, { ...init, headers: { ...H, ...init.headers } })).json()
let key = 0
const burst = async (s, threads) => {
  const before = (await j(`${s.url}/__bench/overhead`)).cpuMicros
  const until = Date.now() + BURST * 1000
  let turns = 0
  await Promise.all(threads.map(async (t) => {
    while (Date.now() < until) {
      const k = `k${++key}`
      const r = await j(`${s.url}/threads/${t}/messages`, { method: "POST", body: JSON.stringify({ text: k }), headers: { "idempotency-key": k } })
      const v = await j(`${s.url}/runs/${r.runId}?waitMs=60000`)
      if (v.run?.status === "completed") turns++
    }
  }))
  const after = (await j(`${s.url}/__bench/overhead`)).cpuMicros
  return { cpu: (after - before) / 1000, turns }
}
const servers = []
for (const [i, side] of sides.entries()) servers.push({ ...side, ...(await start(side, i)), cpu: 0, turns: 0, per: [] })
for (const s of servers) {
  s.threads = []
  for (let i = 0; i < C; i++) s.threads.push((await j(`${s.url}/threads`, { method: "POST", body: JSON.stringify({ providerInstance: "codex" }) })).threadId)
  await burst(s, s.threads) // warm-up
}
for (let r = 0; r < ROUNDS; r++) {
  const order = r % 2 === 0 ? servers : [...servers].reverse()
  for (const s of order) { const b = await burst(s, s.threads); s.cpu += b.cpu; s.turns += b.turns; s.per.push((b.cpu / b.turns).toFixed(2)) }
}
for (const s of servers) {
  console.log(`${s.name}: C=${C} ${s.turns} turns in ${ROUNDS}x${BURST}s, ${(s.turns / (ROUNDS * BURST)).toFixed(1)} turns/s, CPU ${(s.cpu / s.turns).toFixed(2)} ms/turn (bursts: ${s.per.join(" ")})`)
  s.child.kill("SIGTERM")
}
