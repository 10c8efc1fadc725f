/**
 * The thread's actions, for the admin token only: send a message, switch provider, `/compact`, `/offload` (its dry
 * run shown first: `GET /threads/{id}/tool-result-offload`, then the summarising `/offload` on confirmation),
 * interrupt, fork, merge back. Each shows what the API answered in its own words: the error's `message`, or the
 * result's `reason` and fields.
 */
import { useState } from "react"
import { post, get, type Result } from "./api.js"

interface Outcome {
  readonly action: string
  readonly result: Result<unknown>
}

/** The answer in the API's words: an error's `message`; a result's `reason` if it has one, else its plain fields. */
const describe = (o: Outcome): string => {
  if (!o.result.ok) return `${o.result.tag}: ${o.result.message}`
  const value = o.result.value
  if (typeof value !== "object" || value === null) return String(value)
  const fields = value as Record<string, unknown>
  if (typeof fields["reason"] === "string") return fields["reason"]
  return Object.entries(fields)
    .filter(([, v]) => v === null || ["string", "number", "boolean"].includes(typeof v))
    .map(([k, v]) => `${k}: ${String(v)}`)
    .join(", ")
}

export function Actions(props: {
  readonly threadId: string
  readonly providers: ReadonlyArray<string>
  readonly onDone: () => void
  readonly navigate: (threadId: string) => void
}) {
  const [text, setText] = useState("")
  const [provider, setProvider] = useState("")
  const [keepTokens, setKeepTokens] = useState("8000")
  const [preview, setPreview] = useState<Outcome | null>(null)
  const [outcome, setOutcome] = useState<Outcome | null>(null)
  const [busy, setBusy] = useState(false)
  const base = `/threads/${encodeURIComponent(props.threadId)}`

  const run = async (action: string, f: () => Promise<Result<unknown>>) => {
    setBusy(true)
    const result = await f()
    setOutcome({ action, result })
    setBusy(false)
    props.onDone()
    return result
  }

  return (
    <section className="actions" data-testid="actions">
      <form onSubmit={(e) => {
        e.preventDefault()
        if (text.trim() === "") return
        void run("send", () => post(`${base}/messages`, { text })).then((r) => r.ok && setText(""))
      }}>
        <textarea aria-label="message" rows={2} value={text} onChange={(e) => setText(e.target.value)} placeholder="message" />
        <button type="submit" disabled={busy}>Send</button>
      </form>
      <div className="row">
        <input aria-label="provider" list="providers" value={provider} onChange={(e) => setProvider(e.target.value)} placeholder="provider instance" />
        <datalist id="providers">{props.providers.map((p) => <option key={p} value={p} />)}</datalist>
        <button disabled={busy || provider === ""} onClick={() => void run("switch", () => post(`${base}/switch`, { providerInstance: provider }))}>Switch</button>
        <button disabled={busy} onClick={() => void run("compact", () => post(`${base}/compact`))}>/compact</button>
        <button disabled={busy} onClick={() => void run("interrupt", () => post(`${base}/interrupt`))}>Interrupt</button>
        <button disabled={busy} onClick={() => void run("fork", () => post(`${base}/fork`, provider === "" ? {} : { providerInstance: provider }))
          .then((r) => r.ok && props.navigate((r.value as { readonly threadId: string }).threadId))}>Fork</button>
        <button disabled={busy} onClick={() => void run("merge back", () => post(`${base}/merge`))}>Merge back</button>
      </div>
      <div className="row">
        <label>keep tokens <input aria-label="keep tokens" value={keepTokens} onChange={(e) => setKeepTokens(e.target.value)} size={7} /></label>
        <button disabled={busy} onClick={() => {
          setBusy(true)
          void get(`${base}/tool-result-offload`).then((result) => {
            setPreview({ action: "offload preview", result })
            setBusy(false)
          })
        }}>/offload: preview</button>
        <button disabled={busy || preview === null} onClick={() =>
          void run("offload", () => post(`${base}/offload`, { keepTokens: Number(keepTokens) })).then(() => setPreview(null))}>/offload: confirm</button>
      </div>
      {preview !== null && (
        <div className="outcome" data-testid="offload-preview">
          <strong>offload preview:</strong> {preview.result.ok ? "" : describe(preview)}
          {preview.result.ok && <pre>{JSON.stringify(preview.result.value, null, 1)}</pre>}
        </div>
      )}
      {outcome !== null && (
        <div className={outcome.result.ok ? "outcome" : "outcome error"} data-testid="outcome" data-action={outcome.action} data-ok={String(outcome.result.ok)}>
          <strong>{outcome.action}:</strong> <span data-testid="outcome-words">{describe(outcome)}</span>
          <details><summary>answer</summary><pre>{JSON.stringify(outcome.result.ok ? outcome.result.value : outcome.result.body, null, 1)}</pre></details>
        </div>
      )}
    </section>
  )
}
