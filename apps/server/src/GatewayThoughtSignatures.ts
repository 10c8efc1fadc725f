/**
 * GatewayThoughtSignatures: Gemini's thought signatures across a switched conversation's requests (issue 14 item 4,
 * docs/gateway.md "Gemini's thought signatures").
 *
 * Gemini 3 on Google's OpenAI-compatible endpoint returns an opaque signature on the first tool call of each step
 * (`tool_calls[].extra_content.google.thought_signature`) and refuses a later request whose history has that step's
 * call without it: HTTP 400 "Function call is missing a thought_signature in functionCall parts". An agent switched to
 * such an upstream (Claude Code speaking Anthropic Messages, Codex speaking Responses) gets the call in its own
 * protocol, which has no place for the signature, and sends the call back without it: before this module, the first
 * tool round after a switch to Gemini 3 worked and the second was refused.
 *
 * - **Remembered:** the switched path records each answered call's `extra_content` under the call id the agent got
 *   (`recordAnswer` for a whole answer, with the upstream's id and Anthropic's safe form of it; `recordAssistant` for a
 *   streamed one, whose ids are the agent's already), per thread, in a bounded memo (`make`, the newest
 *   `capacity` calls of the process).
 * - **Given back:** `restore` puts the remembered `extra_content` back on every call of an outgoing Chat Completions
 *   body for a Gemini model that has none.
 * - **Otherwise the documented bypass:** for a Gemini model (`isGemini`), an assistant message whose calls still carry
 *   no signature (calls another model made before the switch, or remembered by a process that has restarted since) gets
 *   Google's value for histories Gemini did not produce, `skip_thought_signature_validator`, on its first call (Google's
 *   "Thought signatures" guide: the bypass for conversations transferred from another model or with injected calls).
 *   The request validates; the model does not get its earlier reasoning back for those calls.
 *
 * Other models get no `extra_content` the agent did not send, not even a remembered one of a Gemini call earlier in the
 * same thread (an OpenAI server may refuse unknown message fields).
 */
import { isRecord } from "./GatewayDialect.js"
import * as GatewaySwitch from "./GatewaySwitch.js"

type Json = Record<string, unknown>

/** Google's documented signature for calls Gemini did not make (its thought-signatures guide). */
export const bypassSignature = "skip_thought_signature_validator"

/** Whether `model` (the outgoing body's `model`) names a Gemini model, which validates thought signatures. */
export const isGemini = (model: unknown): boolean => typeof model === "string" && /gemini/i.test(model)

/** Remembered `extra_content` of answered calls, by thread and call id (see the module docblock). */
export interface Memo {
  /** Remembers `extra` for the call `callId` of thread `scope` (the oldest call forgotten past the capacity). */
  readonly remember: (scope: string, callId: string, extra: Json) => void
  /** The `extra_content` remembered for the call, if any (it becomes the newest). */
  readonly recall: (scope: string, callId: string) => Json | undefined
  /** How many calls are remembered (at most the capacity). */
  readonly size: () => number
}

/**
 * A memo of the newest `capacity` calls' `extra_content` (default 20,000: a signature is a few hundred bytes to a few
 * KB, so at most tens of MB), least recently used forgotten first.
 */
export const make = (capacity = 20_000): Memo => {
  const entries = new Map<string, Json>()
  const key = (scope: string, callId: string) => `${scope}\u0000${callId}`
  return {
    remember: (scope, callId, extra) => {
      const k = key(scope, callId)
      entries.delete(k)
      entries.set(k, extra)
      if (entries.size > capacity) entries.delete(entries.keys().next().value!)
    },
    recall: (scope, callId) => {
      const k = key(scope, callId)
      const extra = entries.get(k)
      if (extra !== undefined) {
        entries.delete(k)
        entries.set(k, extra)
      }
      return extra
    },
    size: () => entries.size
  }
}

/** A call's thought signature (`extra_content.google.thought_signature`), if it has one. */
const signatureOf = (call: unknown): string | undefined => {
  const extra = isRecord(call) && isRecord(call.extra_content) ? call.extra_content : undefined
  const google = extra !== undefined && isRecord(extra.google) ? extra.google : undefined
  return google !== undefined && typeof google.thought_signature === "string" && google.thought_signature !== "" ? google.thought_signature : undefined
}

/**
 * Remembers the `extra_content` of each call of `assistant` (a streamed answer's assembled assistant messages,
 * `GatewaySwitchWire.Translator.assistant`: Chat Completions messages whose call ids are the ones the agent got) under
 * thread `scope`. Calls without an id or without `extra_content`, and messages of another shape, are skipped.
 */
export const recordAssistant = (memo: Memo, scope: string, assistant: ReadonlyArray<unknown>): void => {
  for (const m of assistant) {
    for (const c of isRecord(m) && Array.isArray(m.tool_calls) ? m.tool_calls : []) {
      if (!isRecord(c) || !isRecord(c.extra_content) || typeof c.id !== "string" || c.id === "") continue
      memo.remember(scope, c.id, c.extra_content)
    }
  }
}

/**
 * Remembers the calls' `extra_content` of a whole Chat Completions answer (`choices[0].message.tool_calls`) under
 * thread `scope`, each under the upstream's id and under Anthropic's safe form of it (`GatewaySwitch.toolUseId`: the
 * id an Anthropic agent got; an OpenAI agent got the upstream's). A call without an id got a fresh one that is not
 * known here: its signature is not remembered (the bypass covers it).
 */
export const recordAnswer = (memo: Memo, scope: string, answer: unknown): void => {
  const choice = isRecord(answer) && Array.isArray(answer.choices) && isRecord(answer.choices[0]) ? answer.choices[0] : {}
  const message = isRecord(choice.message) ? choice.message : {}
  for (const c of Array.isArray(message.tool_calls) ? message.tool_calls : []) {
    if (!isRecord(c) || !isRecord(c.extra_content) || typeof c.id !== "string" || c.id === "") continue
    memo.remember(scope, c.id, c.extra_content)
    const safe = GatewaySwitch.toolUseId(c.id)
    if (safe !== c.id) memo.remember(scope, safe, c.extra_content)
  }
}

/**
 * The outgoing Chat Completions `body` with, when the body's model is a Gemini model, the remembered `extra_content` of
 * thread `scope` (`null`: none) on each assistant call that has none and the bypass signature on the first call of each
 * assistant message whose calls still carry none (see the module docblock); another model's body as it is. The same object when nothing
 * changes; otherwise a copy (the input is not modified). A body without Chat `messages` is returned as it is.
 */
export const restore = (memo: Memo, scope: string | null, body: Json): Json => {
  // Only a Gemini model gets anything: a thread switched from Gemini to another model keeps its memo, and that model's
  // server may refuse the field (before, its calls went out with Gemini's signatures).
  if (!Array.isArray(body.messages) || !isGemini(body.model)) return body
  let changed = false
  const messages = body.messages.map((m) => {
    if (!isRecord(m) || m.role !== "assistant" || !Array.isArray(m.tool_calls) || m.tool_calls.length === 0) return m
    let calls = m.tool_calls.map((c) => {
      if (!isRecord(c) || c.extra_content !== undefined || scope === null || typeof c.id !== "string") return c
      const extra = memo.recall(scope, c.id)
      return extra === undefined ? c : { ...c, extra_content: extra }
    })
    if (!calls.some((c) => signatureOf(c) !== undefined) && isRecord(calls[0])) {
      const first = calls[0]
      const extra = isRecord(first.extra_content) ? first.extra_content : {}
      const google = isRecord(extra.google) ? extra.google : {}
      calls = [{ ...first, extra_content: { ...extra, google: { ...google, thought_signature: bypassSignature } } }, ...calls.slice(1)]
    }
    if (calls.every((c, i) => c === (m.tool_calls as Array<unknown>)[i])) return m
    changed = true
    return { ...m, tool_calls: calls }
  })
  return changed ? { ...body, messages } : body
}
