/**
 * Acceptance (issue 9, item 2): the client's tools through the HTTP API. The real server on loopback, its provider an
 * Anthropic Messages adapter aimed at a loopback server speaking the Anthropic wire (SSE), scripted to call the
 * client's tool twice in parallel for five rounds and then answer. The client posts each round's results with
 * `POST /threads/{id}/runs/{runId}/tool-results`. Asserted: the run completes; its items are exactly the prompt, five
 * rounds of (call, call, result, result) and the answer; every request body Baton sent pairs each `tool_use` with
 * its `tool_result` in the next message and carries the user's prompt byte-identical.
 */
import { type ProviderInstance, type RunView } from "@baton/contracts"
import { TokenCounter } from "@baton/context"
import { RunDriver } from "@baton/orchestration"
import { Database, NativeMessageStore } from "@baton/persistence"
import { AnthropicMessages } from "@baton/providers"
import { Server } from "@baton/server"
import { Harness } from "@baton/testing"
import { HttpClient } from "@effect/platform"
import { NodeHttpClient, NodeHttpServer } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { Context, Duration, Effect, Layer, Option, Redacted } from "effect"
import * as Fs from "node:fs"
import * as Http from "node:http"
import type { AddressInfo } from "node:net"
import * as Os from "node:os"
import * as Path from "node:path"
import { adminToken, get, post, raw, readToken } from "./helpers.js"

/** A loopback Anthropic Messages server: each request gets the next scripted SSE body; bodies are kept as sent. */
const anthropicLoopback = Effect.acquireRelease(
  Effect.async<{ readonly server: Http.Server; readonly url: string; readonly bodies: Array<string>; readonly replies: Array<ReadonlyArray<string>> }>((resume) => {
    const bodies: Array<string> = []
    const replies: Array<ReadonlyArray<string>> = []
    const server = Http.createServer((req, res) => {
      const parts: Array<Buffer> = []
      req.on("data", (c: Buffer) => parts.push(c))
      req.on("end", () => {
        bodies.push(Buffer.concat(parts).toString("utf8"))
        const reply = replies.shift()
        if (reply === undefined) {
          res.writeHead(500, { "content-type": "application/json" })
          res.end(`{"type":"error","error":{"type":"api_error","message":"no scripted reply"}}`)
          return
        }
        res.writeHead(200, { "content-type": "text/event-stream" })
        res.end(reply.map((line) => `event: ${JSON.parse(line).type}\ndata: ${line}\n\n`).join(""))
      })
    })
    server.listen(0, "127.0.0.1", () =>
      resume(Effect.succeed({ server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, bodies, replies })))
  }),
  ({ server }) => Effect.async<void>((resume) => {
    server.closeAllConnections()
    server.close(() => resume(Effect.void))
  })
)

const usage = `"usage":{"input_tokens":50,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}`

/** Round `r`: the model calls `read_file` twice in one message (two `tool_use` blocks). */
const parallelCalls = (r: number): ReadonlyArray<string> => [
  `{"type":"message_start","message":{"id":"msg_${r}","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5",${usage}}}`,
  ...["a", "b"].flatMap((x, index) => [
    `{"type":"content_block_start","index":${index},"content_block":{"type":"tool_use","id":"toolu_${r}${x}","name":"read_file","input":{}}}`,
    `{"type":"content_block_delta","index":${index},"delta":{"type":"input_json_delta","partial_json":"{\\"path\\":\\"${x}${r}.ts\\"}"}}`,
    `{"type":"content_block_stop","index":${index}}`
  ]),
  `{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":40}}`,
  `{"type":"message_stop"}`
]

const finalText: ReadonlyArray<string> = [
  `{"type":"message_start","message":{"id":"msg_final","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5",${usage}}}`,
  `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
  `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"All ten files read."}}`,
  `{"type":"content_block_stop","index":0}`,
  `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":6}}`,
  `{"type":"message_stop"}`
]

const readFile = {
  name: "read_file",
  description: "Reads a file of the client's workspace",
  inputSchema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] }
}

/** A fresh temporary directory for the scope. */
const tempDir = Effect.acquireRelease(
  Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-client-tools-"))),
  (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
)

interface Block {
  readonly type: string
  readonly id?: string
  readonly tool_use_id?: string
  readonly text?: string
}
interface Message {
  readonly role: string
  readonly content: string | ReadonlyArray<Block>
}

describe("client tools over HTTP (Anthropic Messages wire on loopback)", () => {
  it.live("a tool loop of 5 rounds with 2 parallel calls each: waiting, results posted, continued; the run completes with calls and results paired", () =>
    Effect.gen(function*() {
      const provider = yield* anthropicLoopback
      const dir = yield* tempDir
      const file = Path.join(dir, "baton.sqlite")
      // The adapter keeps its native thread (the message log) in the same database file, on its own connection.
      const log = yield* Effect.flatMap(Layer.build(Database.layerSqlite(file)), (context) => Effect.provide(NativeMessageStore.make, context))
      // Built in the test's scope: the client's dispatcher must outlive this line.
      const http = Context.get(yield* Layer.build(NodeHttpClient.layerUndici), HttpClient.HttpClient)
      let refs = 0
      const adapter = AnthropicMessages.make({
        instance: "claude" as ProviderInstance,
        config: {
          kind: "anthropic-messages",
          baseUrl: provider.url,
          model: "claude-sonnet-4-5",
          contextWindow: 200_000,
          autoCompactThreshold: null,
          maxOutputTokens: 4_096,
          prices: { input: 3, cacheWrite: 3.75, cacheRead: 0.3, output: 15 },
          maxRetries: 0
        },
        apiKey: Option.some(Redacted.make("sk-test-key")),
        log,
        http,
        retryBaseMillis: 10,
        newRef: () => `claude-ref-${++refs}`
      })
      for (let r = 1; r <= 5; r++) provider.replies.push(parallelCalls(r))
      provider.replies.push(finalText)

      const layer = Server.httpLayer({
        tokens: { admin: Redacted.make(adminToken), read: Redacted.make(readToken) },
        maxBodyBytes: 2 * 1024 * 1024
      }).pipe(
        Layer.provideMerge(NodeHttpServer.layerTest),
        Layer.provideMerge(RunDriver.RunDriver.Default),
        Layer.provideMerge(Harness.makeLayer([adapter], TokenCounter.make(), file, {}, "http"))
      )
      yield* Effect.gen(function*() {
        const created = yield* raw(post("/threads", { title: "tools", providerInstance: "claude", tools: [readFile] }))
        expect(created.status).toBe(201)
        const threadId = String(created.body!.threadId)
        // The snapshot lists the thread's declared tools (found by a fresh-tester review: it did not).
        const snapshot = yield* raw(get(`/threads/${threadId}`))
        expect(snapshot.body!.tools).toEqual([{ name: readFile.name, description: readFile.description }])
        const plain = yield* raw(post("/threads", { title: "no tools", providerInstance: "claude" }))
        expect((yield* raw(get(`/threads/${String(plain.body!.threadId)}`))).body!.tools).toEqual([])
        const prompt = "Compare the files pairwise \u{1F50D} — \"exactly\" as they are\n\tplease"
        const sent = yield* raw(post(`/threads/${threadId}/messages`, { text: prompt }))
        expect(sent.status).toBe(202)
        const runId = String(sent.body!.runId)
        const view = (path: string) => Effect.map(raw(get(path)), (r) => r.body as unknown as RunView & { run: { status: string } })

        const firstAnswers: Array<unknown> = []
        for (let r = 1; r <= 5; r++) {
          // Poll the run until it waits for this round's calls.
          let waiting = yield* view(`/runs/${runId}`)
          for (let i = 0; !(waiting.run.status === "waiting" && waiting.openToolCalls.some((c) => c.toolCallId === `toolu_${r}a`)); i++) {
            if (i > 1_000 || ["completed", "failed", "interrupted"].includes(waiting.run.status)) {
              throw new Error(`round ${r}: the run never waited (${waiting.run.status}: ${waiting.run.failureCode} ${waiting.run.failureReason})`)
            }
            yield* Effect.sleep(Duration.millis(10))
            waiting = yield* view(`/runs/${runId}`)
          }
          expect(waiting.openToolCalls).toEqual([
            { toolCallId: `toolu_${r}a`, name: "read_file", arguments: `{"path":"a${r}.ts"}` },
            { toolCallId: `toolu_${r}b`, name: "read_file", arguments: `{"path":"b${r}.ts"}` }
          ])
          const path = `/threads/${threadId}/runs/${runId}/tool-results`
          if (r === 1) {
            // Read-only tokens cannot post; a result for an unknown call is 400 naming it.
            expect((yield* raw(post(path, { results: [] }, readToken))).status).toBe(403)
            const unknown = yield* raw(post(path, { results: [{ toolCallId: "toolu_1a", output: "x" }, { toolCallId: "toolu_zz", output: "y" }] }))
            expect(unknown.status).toBe(400)
            expect(String(unknown.body!.message)).toContain(`no open tool call has the id "toolu_zz"`)
            expect(String(unknown.body!.message)).toContain(`no result for the open call "toolu_1b"`)
          }
          const posted = yield* raw(post(path, {
            results: [{ toolCallId: `toolu_${r}a`, output: `contents of a${r}.ts` }, { toolCallId: `toolu_${r}b`, output: `contents of b${r}.ts`, isError: r === 3 }],
            commandId: `results-${r}`
          }))
          expect(posted.status).toBe(202)
          // The same command again answers as the first time.
          const repeated = yield* raw(post(path, {
            results: [{ toolCallId: `toolu_${r}a`, output: `contents of a${r}.ts` }, { toolCallId: `toolu_${r}b`, output: `contents of b${r}.ts`, isError: r === 3 }],
            commandId: `results-${r}`
          }))
          expect(repeated.status).toBe(202)
          expect(repeated.body!.runId).toBe(runId)
          firstAnswers.push(posted.body)
        }
        const done = yield* view(`/runs/${runId}?waitMs=10000`)
        expect([done.run.status, done.run.failureCode]).toEqual(["completed", null])
        // A repeated command id answers what the first request answered, however the run went on since (found by a
        // fresh-tester review: the repeat answered the run's status now, `completed`).
        expect(firstAnswers[4]).toMatchObject({ runId, threadId, status: "waiting" })
        const repeatedLate = yield* raw(post(`/threads/${threadId}/runs/${runId}/tool-results`, {
          results: [{ toolCallId: "toolu_5a", output: "contents of a5.ts" }, { toolCallId: "toolu_5b", output: "contents of b5.ts", isError: false }],
          commandId: "results-5"
        }))
        expect([repeatedLate.status, repeatedLate.body]).toEqual([202, firstAnswers[4]])
        expect(done.openToolCalls).toEqual([])
        // Results for a run that is not waiting (here: completed) are 409.
        const late = yield* raw(post(`/threads/${threadId}/runs/${runId}/tool-results`, { results: [{ toolCallId: "toolu_5a", output: "x" }] }))
        // (Regression, found by the fuzz test: the 409 body lacked the `message` every error body carries.)
        expect([late.status, late.body]).toEqual([409, {
          _tag: "RunNotWaiting",
          runId,
          status: "completed",
          message: `run ${runId} is not waiting for tool results (it is completed); results are accepted only while the run is waiting`
        }])

        // The record: the prompt, five rounds of two calls then their two results, the answer.
        const expected: Array<[string, string | null, string, boolean]> = [["user_message", null, prompt, false]]
        for (let r = 1; r <= 5; r++) {
          expected.push(
            ["tool_call", `toolu_${r}a`, `{"path":"a${r}.ts"}`, false],
            ["tool_call", `toolu_${r}b`, `{"path":"b${r}.ts"}`, false],
            ["tool_result", `toolu_${r}a`, `contents of a${r}.ts`, false],
            ["tool_result", `toolu_${r}b`, `contents of b${r}.ts`, r === 3]
          )
        }
        expected.push(["assistant_message", null, "All ten files read.", false])
        expect(done.items.map((i) => [i.kind, i.toolCallId, i.text, i.isError])).toEqual(expected)
        const events = yield* raw(get(`/threads/${threadId}/events?follow=false`))
        const types = events.text.split("\n").filter((l) => l.startsWith("event: ")).map((l) => l.slice(7))
        expect(types.filter((t) => t === "run.waiting").length).toBe(5)
        expect(types.filter((t) => t === "run.tool_results_recorded").length).toBe(5)

        // Golden: six requests; each pairs every tool_use with a tool_result in the next message, in order, and
        // carries the prompt byte-identical.
        expect(provider.bodies.length).toBe(6)
        provider.bodies.forEach((body, k) => {
          expect(body).toContain(JSON.stringify(prompt))
          const parsed = JSON.parse(body) as { messages: ReadonlyArray<Message>; tools: ReadonlyArray<{ name: string }> }
          expect(parsed.tools.map((t) => t.name)).toContain("read_file")
          const first = parsed.messages[0]!
          const blocks = typeof first.content === "string" ? [{ type: "text", text: first.content }] : first.content
          expect(blocks.filter((b) => b.type === "text").at(-1)!.text).toBe(prompt)
          expect(parsed.messages.length).toBe(1 + 2 * k)
          for (let m = 1; m < parsed.messages.length; m += 2) {
            const assistant = parsed.messages[m]!
            const user = parsed.messages[m + 1]!
            const round = (m + 1) / 2
            expect(assistant.role).toBe("assistant")
            expect(user.role).toBe("user")
            const uses = (assistant.content as ReadonlyArray<Block>).filter((b) => b.type === "tool_use").map((b) => b.id)
            const answers = (user.content as ReadonlyArray<Block>).filter((b) => b.type === "tool_result").map((b) => b.tool_use_id)
            expect(uses).toEqual([`toolu_${round}a`, `toolu_${round}b`])
            expect(answers).toEqual(uses)
          }
        })
      }).pipe(Effect.provide(layer))
    }).pipe(Effect.scoped), { timeout: 60_000 })
})
