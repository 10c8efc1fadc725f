/**
 * The Chat Completions to Responses switch with a real Chat Completions agent (issue 14 items 4 and 5,
 * `GatewaySwitchOpenAi`): the pi coding agent (`test/support/Pi.ts`, as in `GatewaySwitchAnthropicPi.test.ts`) run
 * headless through `baton serve`'s gateway with a model routed to a loopback OpenAI Responses upstream scripted to lead
 * it through tool rounds (bash, write, read beside a parallel bash, a long `seq` output). pi reads Baton's converted
 * `chat.completion.chunk`s: it runs every call and ends with the model's last text; the upstream receives Responses
 * requests carrying pi's history (its calls as `function_call` items answered by `function_call_output` items with
 * the same ids); the thread holds every message once, one completed run per request with the Responses usage.
 */
import type { Item } from "@baton/contracts"
import { HttpServer } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { adminToken, client } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"
import * as Pi from "./support/Pi.js"

const usage = { input: 900, cacheWrite: 0, cacheRead: 2_000, output: 40 }

/** The scripted session in `dir`: five model requests, four of them tool rounds, in the Responses stream. */
const script = (dir: string) => [
  ModelApi.answer("openai-responses", "Running echo.", usage, [{ id: "call_1", name: "bash", arguments: JSON.stringify({ command: "echo hello-from-pi" }) }]),
  ModelApi.answer("openai-responses", "", usage, [{ id: "call_2", name: "write", arguments: JSON.stringify({ path: Path.join(dir, "note.txt"), content: "line one\nline two\n" }) }]),
  ModelApi.answer("openai-responses", "", usage, [
    { id: "call_3", name: "read", arguments: JSON.stringify({ path: Path.join(dir, "note.txt") }) },
    { id: "call_4", name: "bash", arguments: JSON.stringify({ command: "ls" }) }
  ]),
  ModelApi.answer("openai-responses", "", usage, [{ id: "call_5", name: "bash", arguments: JSON.stringify({ command: "seq 1 3000" }) }]),
  ModelApi.answer("openai-responses", "All done.", usage)
]

type SentItem = { readonly type?: string; readonly role?: string; readonly call_id?: string; readonly name?: string; readonly output?: string; readonly content?: ReadonlyArray<{ text: string }> }
type Sent = { readonly model: string; readonly instructions?: string; readonly stream?: boolean; readonly store?: boolean; readonly tools: ReadonlyArray<{ name: string }>; readonly input: ReadonlyArray<SentItem> }

describe("Gateway, a provider switch with the real pi agent (Chat Completions agent, openai-responses upstream)", () => {
  it.live("pi completes a tool-using session on a model routed to a Responses instance; the upstream gets Responses requests of pi's history; the thread holds every message once", () =>
    Effect.scoped(Effect.gen(function*() {
      const upstream = yield* ModelApi.start
      const dir = Fs.realpathSync(Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-pi-openai-switch-")))
      upstream.enqueue(...script(dir))
      const settings = yield* settingsFor(
        [instance("responses", "openai-responses", upstream)],
        { TEST_MODEL_KEY: marker },
        undefined,
        { gateway: { routes: [{ model: "o*", provider: "responses" }] } }
      )
      yield* Effect.gen(function*() {
        const server = yield* HttpServer.HttpServer
        const port = (server.address as HttpServer.TcpAddress).port
        const via = yield* Pi.run({ baseUrl: `http://127.0.0.1:${port}/v1`, apiKey: adminToken, model: "o4-pi", cwd: dir, prompt: "do the thing" })

        // pi ran every call and ended with the model's last text.
        expect(via.lastText).toBe("All done.")
        expect(Fs.readFileSync(Path.join(dir, "note.txt"), "utf8")).toBe("line one\nline two\n")
        const results = via.messages.filter((m) => m.role === "toolResult").map((m) => [m.toolCallId, m.content.map((c) => c.text ?? "").join("")] as const)
        expect(results.map(([id]) => id)).toEqual(["call_1", "call_2", "call_3", "call_4", "call_5"])
        expect(results[0]![1].trim()).toBe("hello-from-pi")
        expect(results[2]![1]).toContain("line one")
        const calls = via.messages.flatMap((m) => m.content.filter((c) => c.type === "toolCall").map((c) => [c.id, c.name, c.arguments]))
        expect(calls).toEqual([
          ["call_1", "bash", { command: "echo hello-from-pi" }],
          ["call_2", "write", { path: Path.join(dir, "note.txt"), content: "line one\nline two\n" }],
          ["call_3", "read", { path: Path.join(dir, "note.txt") }],
          ["call_4", "bash", { command: "ls" }],
          ["call_5", "bash", { command: "seq 1 3000" }]
        ])

        // The upstream got Responses requests: Baton's key, pi's history converted, the prompt first.
        expect(upstream.requests.length).toBe(5)
        const sent = upstream.requests.map((r) => JSON.parse(r.body) as Sent)
        upstream.requests.forEach((r) => {
          expect(r.url).toBe("/v1/responses")
          expect(r.headers["authorization"]).toBe(`Bearer ${marker}`)
        })
        for (const body of sent) {
          expect(body.model).toBe("o4-pi")
          expect(body.stream).toBe(true)
          expect(body.store).toBe(false)
          expect(typeof body.instructions).toBe("string")
          expect(body.tools.map((t) => t.name)).toEqual(expect.arrayContaining(["bash", "read", "write", "thread_read"]))
          expect(body.input[0]).toEqual({ type: "message", role: "user", content: [{ type: "input_text", text: "do the thing" }] })
        }
        // Each call goes back as a function_call answered by its function_call_output, the same ids; pi's output as it was.
        const last = sent.at(-1)!
        const uses = last.input.filter((i) => i.type === "function_call").map((i) => i.call_id)
        const answered = last.input.filter((i) => i.type === "function_call_output").map((i) => i.call_id)
        expect(uses).toEqual(["call_1", "call_2", "call_3", "call_4", "call_5"])
        expect(answered).toEqual(uses)
        expect(last.input.find((i) => i.type === "function_call_output" && i.call_id === "call_5")!.output).toBe(results[4]![1])
        // Every request extends the previous one (nothing to fit in a 200,000-token window).
        for (let i = 1; i < sent.length; i++) expect(sent[i]!.input.slice(0, sent[i - 1]!.input.length)).toEqual(sent[i - 1]!.input)

        // One thread, one completed run per request with the usage the upstream reported (cached tokens as reads).
        const api = yield* client()
        const threads = (yield* api.threads.list({ urlParams: {} })).threads
        expect(threads.length).toBe(1)
        const threadId = threads[0]!.id
        const page = yield* api.runs.list({ path: { threadId }, urlParams: {} })
        expect(page.runs.map((r) => r.status)).toEqual(["completed", "completed", "completed", "completed", "completed"])
        expect(page.costs.map((c) => [c.inputTokens, c.cacheWriteTokens, c.cacheReadTokens, c.outputTokens, c.providerInstance])).toEqual(page.runs.map(() => [900, 0, 2_000, 40, "responses"]))

        // Every message exactly once: the prompt, each call and its result, the assistant's texts.
        const items: ReadonlyArray<Item> = (yield* api.items.list({ path: { threadId }, urlParams: { limit: 500 } })).items
        expect(items.filter((i) => i.kind === "user_message").map((i) => i.text)).toEqual(["do the thing"])
        for (const id of ["call_1", "call_2", "call_3", "call_4", "call_5"]) {
          expect(items.filter((i) => i.kind === "tool_call" && i.toolCallId === id).length).toBe(1)
          expect(items.filter((i) => i.kind === "tool_result" && i.toolCallId === id).length).toBe(1)
        }
        expect(items.filter((i) => i.kind === "assistant_message").map((i) => i.text)).toEqual(["Running echo.", "All done."])
        expect(items.length).toBe(1 + 5 * 2 + 2)
      }).pipe(Effect.provide(serveSettings(settings)))
    })), { timeout: 180_000 })
})
