/**
 * `/v1/chat/completions` with offload (same protocol): the upstream's chunks are held from the first delta of a
 * `thread_read` call on. Text that comes in a held chunk (after the call began: some OpenAI-compatible servers stream
 * text after a call) is the agent's: when the hop's calls are all `thread_read` (answered, continued), it goes on before
 * the continuation's chunks and counts as text the agent got. Before, it was dropped with the calls, and at the round
 * limit the agent got Baton's note (`readLimitNote`) as though the model had said nothing.
 */
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as GatewayChat from "../src/GatewayChat.js"
import { readLimitNote } from "../src/GatewayOffload.js"
import { adminToken, client, raw } from "./helpers.js"
import { withChatGateway } from "./support/ChatGateway.js"
import * as ModelApi from "./support/ModelApi.js"

type Json = Record<string, unknown>

/** A streamed hop: a `thread_read` call begins, then `text` in a chunk of its own, the call's arguments, the finish. */
const readThenText = (hop: number, text: string): ModelApi.Reply => {
  const chunk = (choices: ReadonlyArray<Json>, extra: Json = {}) =>
    `data: ${JSON.stringify({ id: `chatcmpl-${hop}`, object: "chat.completion.chunk", created: 1, model: "m", choices, ...extra })}\n\n`
  const at = (delta: Json, finish: unknown = null) => chunk([{ index: 0, delta, finish_reason: finish }])
  return {
    status: 200,
    contentType: "text/event-stream",
    body: [
      at({ role: "assistant", content: "" }),
      at({ tool_calls: [{ index: 0, id: `call_r${hop}`, type: "function", function: { name: "thread_read", arguments: "" } }] }),
      ...(text === "" ? [] : [at({ content: text })]),
      at({ tool_calls: [{ index: 0, function: { arguments: JSON.stringify({ refs: "#1", offset: hop }) } }] }),
      at({}, "tool_calls"),
      chunk([], { usage: { prompt_tokens: 100, completion_tokens: 20 } }),
      "data: [DONE]\n\n"
    ].join("")
  }
}

const ask = (session: string) =>
  raw(HttpClientRequest.post("/v1/chat/completions").pipe(
    HttpClientRequest.setHeaders({ authorization: `Bearer ${adminToken}`, "x-session-id": session }),
    HttpClientRequest.bodyText(JSON.stringify({
      model: "m-1",
      stream: true,
      tools: [{ type: "function", function: { name: "bash", description: "Run", parameters: { type: "object", properties: {} } } }],
      messages: [{ role: "user", content: "look back" }]
    }), "application/json")
  ))

/** The message the agent assembles from the stream. */
const assembled = (text: string): Json => {
  const assembler = GatewayChat.replyAssembler()
  assembler.push(new TextEncoder().encode(text))
  const outcome = assembler.outcome()
  if (outcome._tag !== "completed") throw new Error(`the stream did not complete: ${JSON.stringify(outcome)}`)
  return outcome.reply.messages[0]!.message as Json
}

describe("Gateway Chat Completions offload, text in chunks held behind a thread_read call", () => {
  it.live("reaches the agent before the continuation's text", () =>
    withChatGateway("m-*", (chat) =>
      Effect.gen(function*() {
        chat.enqueue(readThenText(0, "Checking. "), ModelApi.answer("openai-chat", "Done.", { input: 50, cacheWrite: 0, cacheRead: 0, output: 10 }))
        const answer = yield* ask("held-1")
        expect(answer.status).toBe(200)
        expect(chat.requests).toHaveLength(2)
        expect(answer.text).not.toContain("thread_read")
        // Before the fix: "Done." (the held text dropped).
        expect(assembled(answer.text)).toEqual({ role: "assistant", content: "Checking. Done." })
        const api = yield* client()
        const threads = (yield* api.threads.list({ urlParams: {} })).threads
        const runs = (yield* api.runs.list({ path: { threadId: threads[0]!.id }, urlParams: {} })).runs
        const view = yield* api.runs.get({ path: { runId: runs[0]!.id }, urlParams: {} })
        expect(view.cost).toMatchObject({ inputTokens: 150, outputTokens: 30 })
      })), { timeout: 60_000 })

  it.live("counts as text the agent got: at the round limit, no note after it", () =>
    withChatGateway("m-*", (chat) =>
      Effect.gen(function*() {
        for (let hop = 0; hop < 9; hop++) chat.enqueue(readThenText(hop, hop === 0 ? "Checking." : ""))
        const answer = yield* ask("held-2")
        expect(answer.status).toBe(200)
        expect(chat.requests).toHaveLength(9)
        expect(answer.text).not.toContain("thread_read")
        // Before the fix: Baton's note alone (the text dropped, the answer taken as empty).
        expect(answer.text).not.toContain(readLimitNote.slice(0, 20))
        expect(assembled(answer.text)).toEqual({ role: "assistant", content: "Checking." })
      })), { timeout: 60_000 })
})
