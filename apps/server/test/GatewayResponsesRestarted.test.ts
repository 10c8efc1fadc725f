/**
 * `/v1/responses` whose upstream stream restarts its answer: a `response.created` of another response mid-stream (a
 * stream spliced after a retry upstream). The reply recorded is the second response's alone, as the Anthropic
 * dialect keeps the second message of a restarted `message_start` (GatewayRestartedMessage.test.ts). The streams are
 * recorded OpenAI Responses traffic (../shared/provider-fixtures, served as `event: <type>\ndata: <json>\n\n`).
 */
import { HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Fs from "node:fs"
import { fileURLToPath } from "node:url"
import * as GatewayResponses from "../src/GatewayResponses.js"
import { adminToken, client, raw } from "./helpers.js"
import { withResponsesGateway } from "./support/ModelServer.js"

/** `../shared/provider-fixtures/openai-responses/` beside the repository. */
const fixtures = fileURLToPath(new URL("../../../../shared/provider-fixtures/openai-responses/", import.meta.url))
const fixtureLines = (file: string) => Fs.readFileSync(`${fixtures}${file}`, "utf8").split("\n").filter((l) => l.trim() !== "")
const framed = (lines: ReadonlyArray<string>) => lines.map((l) => `event: ${(JSON.parse(l) as { type: string }).type}\ndata: ${l}\n\n`).join("")
const typeOf = (line: string) => (JSON.parse(line) as { type: string }).type

/** A recorded response: a reasoning item (output 0), then a `local_shell_call` (output 1), then `response.completed`. */
const shell = fixtureLines("openai-local-shell-tool.1.chunks.txt")
/** Another recorded response: one `custom_tool_call` (output 0), then `response.completed`. */
const custom = fixtureLines("openai-custom-tool.1.chunks.txt")
/** `shell`'s first attempt, cut before `response.completed` (both its items done). */
const shellCut = shell.slice(0, shell.findIndex((l) => typeOf(l) === "response.completed"))

/** The outcome of `GatewayResponses.replyAssembler` fed `text` in pieces of 61 bytes. */
const assemble = (text: string) => {
  const assembler = GatewayResponses.replyAssembler()
  const bytes = new TextEncoder().encode(text)
  for (let i = 0; i < bytes.length; i += 61) assembler.push(bytes.slice(i, i + 61))
  return assembler.outcome()
}

describe("GatewayResponses.replyAssembler, a restarted answer", () => {
  it("a response.created of another response mid-stream: the reply is the second response's alone", () => {
    const alone = assemble(framed(custom))
    expect(alone._tag).toBe("completed")
    expect(alone._tag === "completed" && alone.reply.messages.map((m) => (m.message as { type: string }).type)).toEqual(["custom_tool_call"])
    // Before: the first attempt's local_shell_call (its output 1, which the second response did not reach) stayed in
    // the reply after the second response's custom_tool_call.
    expect(assemble(framed([...shellCut, ...custom]))).toEqual(alone)
  })

  it("a repeated response.created of the same response changes nothing", () => {
    const created = shell.find((l) => typeOf(l) === "response.created")!
    const firstDone = shell.findIndex((l) => typeOf(l) === "response.output_item.done")
    const repeated = [...shell.slice(0, firstDone + 1), created, ...shell.slice(firstDone + 1)]
    const whole = assemble(framed(shell))
    expect(whole._tag === "completed" && whole.reply.messages.map((m) => (m.message as { type: string }).type)).toEqual(["reasoning", "local_shell_call"])
    expect(assemble(framed(repeated))).toEqual(whole)
  })

  it("a restart after the first response's response.completed, the second cut before its own: the answer is unfinished", () => {
    const customCut = custom.filter((l) => typeOf(l) !== "response.completed")
    // Before: "completed", the reply the first response's items with the second's custom_tool_call over output 0.
    expect(assemble(framed([...shell, ...customCut]))._tag).toBe("unfinished")
  })
})

const withGateway = withResponsesGateway

describe("Gateway, OpenAI Responses: a restarted stream", () => {
  it.live("passes the spliced stream through and records the second response's items only", () =>
    withGateway((upstream) =>
      Effect.gen(function*() {
        const body = framed([...shellCut, ...custom])
        upstream.enqueue({ status: 200, contentType: "text/event-stream", body })
        const request = { model: "gpt-x", stream: true, input: [{ type: "message", role: "user", content: [{ type: "input_text", text: "hi" }] }] }
        const answer = yield* raw(HttpClientRequest.post("/v1/responses").pipe(
          HttpClientRequest.setHeaders({ accept: "text/event-stream", authorization: `Bearer ${adminToken}`, "thread-id": "thread-r" }),
          HttpClientRequest.bodyText(JSON.stringify(request), "application/json")
        ))
        expect(answer.status).toBe(200)
        expect(answer.text).toBe(body)

        const api = yield* client()
        const threadId = (yield* api.threads.list({ urlParams: {} })).threads[0]!.id
        const items = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
        const runs = (yield* api.runs.list({ path: { threadId }, urlParams: {} })).runs
        expect(runs.map((r) => r.status)).toEqual(["completed"])
        // Before: the first attempt's local_shell_call was recorded too, after the custom tool call.
        expect(items.map((i) => [i.kind, i.messageId])).toEqual([["user_message", "user@0.0"], ["tool_call", "ct_abc123def456"]])
      })
    ))
})
