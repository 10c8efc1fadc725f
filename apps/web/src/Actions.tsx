/**
 * The thread's actions, for the admin token only: send a message, switch provider, `/compact`, `/offload` (its dry
 * run shown first: `POST /threads/{id}/offload` with `dryRun: true` and the keep-tokens given, then, on confirmation,
 * the same `/offload` for real), interrupt (the run in progress the page shows, by id), fork, merge back. Each shows
 * what the API answered in its own words: the error's `message`, or the result's `message` or `reason`, else its
 * fields.
 */
import { useRef, useState } from "react"
import { post, type Result } from "./api.js"
import type { RunJson } from "./types.js"

interface Outcome {
  readonly action: string
  readonly result: Result<unknown>
}

/** `text` on one line, at most 300 characters (a refused value is quoted in the issue, up to 1,000 characters). */
const oneLine = (text: string) => {
  const line = text.replace(/\s+/g, " ")
  return line.length > 300 ? `${line.slice(0, 300)}…` : line
}

/**
 * The answer in the API's words: an error's `message` (a schema refusal's `issues`: each field and why); a result's `message` (the line the API writes for the user,
 * e.g. `/offload`'s) with its `reason` when the message does not already say it, or the `reason` alone, else its
 * plain fields.
 */
export const describe = (o: Outcome): string => {
  if (!o.result.ok) {
    // A schema refusal's `message` is the whole schema as a tree; its `issues` name the field and say why.
    const issues = (o.result.body as { readonly issues?: ReadonlyArray<{ readonly path?: ReadonlyArray<unknown>; readonly message?: string }> } | null)?.issues
    if (Array.isArray(issues) && issues.length > 0) {
      return `${o.result.tag}: ${issues.map((i) => `${(i.path ?? []).join(".")}: ${oneLine(i.message ?? "")}`).join("; ")}`
    }
    return `${o.result.tag}: ${o.result.message}`
  }
  const value = o.result.value
  if (typeof value !== "object" || value === null) return String(value)
  const fields = value as Record<string, unknown>
  const message = fields["message"]
  const reason = fields["reason"]
  if (typeof message === "string") return typeof reason === "string" && !message.includes(reason) ? `${message} (${reason})` : message
  if (typeof reason === "string") return reason
  return Object.entries(fields)
    .filter(([, v]) => v === null || ["string", "number", "boolean"].includes(typeof v))
    .map(([k, v]) => `${k}: ${String(v)}`)
    .join(", ")
}

/**
 * The `keepTokens` field of `/offload` from what the user typed: nothing for an empty box (the server's default), a
 * number for digits, else the text itself, so that the API refuses it naming the field instead of the page sending
 * `0` (`Number("")`) or `null` (`NaN`) and offloading everything.
 */
export const keepTokensField = (typed: string): { readonly keepTokens?: number | string } => {
  const trimmed = typed.trim()
  if (trimmed === "") return {}
  return { keepTokens: /^\d+$/.test(trimmed) ? Number(trimmed) : trimmed }
}

/**
 * A fresh idempotency key (`commandId`, 1..200 printable ASCII): 128 random bits in hex. `crypto.getRandomValues`
 * rather than `randomUUID`, which a page served over plain HTTP beyond loopback (`--host`) does not have.
 */
export const newCommandId = (): string =>
  `web-${Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("")}`

export function Actions(props: {
  readonly threadId: string
  readonly providers: ReadonlyArray<string>
  /**
   * The run in progress as the page holds it (`runInProgress`), `null`: none. Interrupt names it (`runId`): a click
   * again after a lost answer is the same command for the same run, a click for a later run a new one.
   */
  readonly runInProgress: Pick<RunJson, "id" | "seq"> | null
  readonly onDone: () => void
  readonly navigate: (threadId: string) => void
}) {
  const [text, setText] = useState("")
  // The message's idempotency key: kept while the text is unchanged, so sending it again after an answer that never
  // came (the server restarting, a cut connection) answers the first run instead of queueing the message twice.
  const [sendKey, setSendKey] = useState(newCommandId)
  const [provider, setProvider] = useState("")
  const [keepTokens, setKeepTokens] = useState("8000")
  // The dry run of `/offload` and the keep-tokens box it was asked with: "confirm" runs exactly what was previewed.
  const [preview, setPreview] = useState<(Outcome & { readonly keepTokens: string }) | null>(null)
  const [outcome, setOutcome] = useState<Outcome | null>(null)
  const [busy, setBusy] = useState(false)
  const base = `/threads/${encodeURIComponent(props.threadId)}`

  // The idempotency key of each command whose answer never came (status 0: a restart, a cut connection), by action and
  // payload: the same command clicked again carries the same key, so the server answers its first result (one fork,
  // not two). A command that was answered, yes or no, gets a new key next time. An interrupt's payload names the run
  // it stops: clicked again for a later run it is another command (before, the key of a lost interrupt was sent again
  // and the server answered the earlier run's receipt, leaving the run in progress running).
  const unanswered = useRef(new Map<string, string>())
  const command = (action: string, path: string, payload: Record<string, unknown>) => run(action, async () => {
    const at = `${path} ${JSON.stringify(payload)}`
    const key = unanswered.current.get(at) ?? newCommandId()
    unanswered.current.set(at, key)
    const result = await post(path, { ...payload, commandId: key })
    if (result.status !== 0) unanswered.current.delete(at)
    return result
  })

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
        void run("send", () => post(`${base}/messages`, { text, commandId: sendKey })).then((r) => {
          if (!r.ok) return
          setText("")
          setSendKey(newCommandId())
        })
      }}>
        <textarea aria-label="message" rows={2} value={text} onChange={(e) => {
          setText(e.target.value)
          // Another text is another command (the API refuses a key reused for another payload).
          if (e.target.value !== text) setSendKey(newCommandId())
        }} placeholder="message" />
        <button type="submit" disabled={busy || text.trim() === ""} title={text.trim() === "" ? "type a message first" : undefined}>Send</button>
      </form>
      <div className="row">
        <input aria-label="provider" list="providers" value={provider} onChange={(e) => setProvider(e.target.value)} placeholder="provider instance" />
        <datalist id="providers">{props.providers.map((p) => <option key={p} value={p} />)}</datalist>
        <button disabled={busy || provider === ""} onClick={() => void command("switch", `${base}/switch`, { providerInstance: provider })}>Switch</button>
        <button disabled={busy} onClick={() => void command("compact", `${base}/compact`, {})}>/compact</button>
        <button disabled={busy} data-action="interrupt" data-run-id={props.runInProgress?.id ?? ""}
          title={props.runInProgress === null ? "the thread's run in progress, if any" : `interrupt run ${props.runInProgress.seq}`}
          onClick={() => void command("interrupt", `${base}/interrupt`, props.runInProgress === null ? {} : { runId: props.runInProgress.id })}>Interrupt</button>
        <button disabled={busy} onClick={() => void command("fork", `${base}/fork`, provider === "" ? {} : { providerInstance: provider })
          .then((r) => r.ok && props.navigate((r.value as { readonly threadId: string }).threadId))}>Fork</button>
        <button disabled={busy} onClick={() => void command("merge back", `${base}/merge`, {})}>Merge back</button>
      </div>
      <div className="row">
        <label>keep tokens <input aria-label="keep tokens" value={keepTokens} placeholder="default" onChange={(e) => {
          setKeepTokens(e.target.value)
          // A preview of another keep-tokens value no longer says what "confirm" would do.
          setPreview(null)
        }} size={7} /></label>
        <button disabled={busy} onClick={() => {
          setBusy(true)
          const asked = keepTokens
          void post(`${base}/offload`, { ...keepTokensField(asked), dryRun: true }).then((result) => {
            setPreview({ action: "offload preview", result, keepTokens: asked })
            setBusy(false)
          })
        }}>/offload: preview</button>
        <button disabled={busy || preview === null || !preview.result.ok} onClick={() => {
          const asked = preview!.keepTokens
          void command("offload", `${base}/offload`, keepTokensField(asked)).then(() => setPreview(null))
        }}>/offload: confirm</button>
      </div>
      {preview !== null && (
        <div className={preview.result.ok ? "outcome" : "outcome error"} data-testid="offload-preview" data-ok={String(preview.result.ok)}>
          <strong>offload preview:</strong> <span data-testid="offload-preview-words">{describe(preview)}</span>
          {preview.result.ok && <details><summary>answer</summary><pre>{JSON.stringify(preview.result.value, null, 1)}</pre></details>}
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
