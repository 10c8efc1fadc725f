/**
 * Items and random conversations for the context tests. Ids are `itm_<n>` in thread order; call ids `call_<n>`.
 */
import type { ItemKind, ToolCallState } from "@baton/contracts"
import { FastCheck as fc } from "effect"
import * as Render from "../src/Render.js"
import type * as Selection from "../src/Selection.js"
import * as TokenCounter from "../src/TokenCounter.js"

export const counter = TokenCounter.make()

export type TestItem = Selection.SelectableItem

export interface ItemSpec {
  readonly kind: ItemKind
  readonly text?: string
  readonly toolCallId?: string | null
  readonly toolName?: string | null
  readonly messageId?: string | null
  readonly isError?: boolean
  readonly toolCallState?: ToolCallState | null
  /** Overrides the computed cost. */
  readonly tokens?: number
}

/** Items from specs: ids `itm_1..`, `seq` 1.., `tokens` = `Render.itemTokens` unless given. */
export const items = (specs: ReadonlyArray<ItemSpec>): Array<TestItem> =>
  specs.map((spec, i) => {
    const base = {
      id: `itm_${i + 1}`,
      seq: i + 1,
      kind: spec.kind,
      text: spec.text ?? `${spec.kind} ${i + 1}`,
      toolCallId: spec.toolCallId ?? null,
      toolName: spec.toolName ?? (spec.toolCallId ? "bash" : null),
      messageId: spec.messageId ?? null,
      isError: spec.isError ?? false,
      toolCallState: spec.toolCallState ?? (spec.kind === "tool_call" ? "answered" : null)
    }
    return { ...base, tokens: spec.tokens ?? Render.itemTokens(counter, base) }
  })

export const user = (text: string): ItemSpec => ({ kind: "user_message", text })
export const assistant = (text: string, messageId: string | null = null): ItemSpec => ({
  kind: "assistant_message",
  text,
  messageId
})
export const call = (toolCallId: string, messageId: string | null = null, text = "{}"): ItemSpec => ({
  kind: "tool_call",
  toolCallId,
  messageId,
  text
})
export const result = (toolCallId: string, text = "ok"): ItemSpec => ({ kind: "tool_result", toolCallId, text })

const words = fc.lorem({ maxCount: 12 })
const text = fc.oneof(
  { weight: 6, arbitrary: words },
  { weight: 1, arbitrary: fc.string({ unit: "grapheme", maxLength: 40 }) },
  { weight: 1, arbitrary: fc.lorem({ mode: "sentences", maxCount: 8 }) }
)

/**
 * One assistant response: optional reasoning and text, up to three tool calls, their results either after all calls
 * or each right after its call (Claude Code's layout); some calls get no result (dangling) and some responses carry
 * no message id.
 */
const response = fc.record({
  reasoning: fc.option(text, { nil: undefined }),
  message: fc.option(text, { nil: undefined }),
  calls: fc.array(fc.record({ args: words, output: text, answered: fc.boolean(), isError: fc.boolean() }), {
    maxLength: 3
  }),
  interleaved: fc.boolean(),
  withMessageId: fc.integer({ min: 0, max: 4 }).map((n) => n > 0)
})

const event = fc.oneof(
  { weight: 3, arbitrary: text.map((t) => ({ type: "user" as const, text: t })) },
  { weight: 6, arbitrary: response.map((r) => ({ type: "response" as const, ...r })) },
  { weight: 1, arbitrary: text.map((t) => ({ type: "orphan" as const, text: t })) },
  { weight: 1, arbitrary: text.map((t) => ({ type: "summary" as const, text: t })) }
)

/** A random conversation in thread order with unique tool call ids and exact `tokens`. */
export const conversation = (maxEvents = 12): fc.Arbitrary<Array<TestItem>> =>
  fc.array(event, { maxLength: maxEvents }).map((events) => {
    const specs: Array<ItemSpec> = []
    let calls = 0
    events.forEach((e, k) => {
      switch (e.type) {
        case "user":
          specs.push(user(e.text))
          break
        case "summary":
          specs.push({ kind: "summary", text: e.text })
          break
        case "orphan":
          specs.push(result(`orphan_${k}`, e.text))
          break
        case "response": {
          const messageId = e.withMessageId ? `msg_${k}` : null
          if (e.reasoning !== undefined) specs.push({ kind: "reasoning", text: e.reasoning, messageId })
          if (e.message !== undefined) specs.push(assistant(e.message, messageId))
          const pending: Array<ItemSpec> = []
          for (const c of e.calls) {
            const id = `call_${++calls}`
            specs.push({ ...call(id, messageId, c.args), toolCallState: c.answered ? "answered" : "dangling" })
            if (!c.answered) continue
            const r: ItemSpec = { ...result(id, c.output), isError: c.isError }
            if (e.interleaved) specs.push(r)
            else pending.push(r)
          }
          specs.push(...pending)
        }
      }
    })
    return items(specs)
  })
