/**
 * `GatewayOffload`'s pure parts on hand-made bodies (regressions found by the long Claude Code acceptance,
 * GatewayClaudeCodeLong.test.ts): a consumed hidden `thread_read` round is stubbed like any tool unit, its stub
 * naming what it read (the gateway's own rounds are not in the thread, the originals are); and a continuation carries
 * the agent's messages breakpoint on its last block, so the upstream caches the hidden round; a tool result holding an
 * image is never stubbed (the thread records it as `[image]`: thread_read could not give it back).
 */
import { ToolResultOffload } from "@baton/context"
import { describe, expect, it } from "@effect/vitest"
import * as GatewayChatOffload from "../src/GatewayChatOffload.js"
import * as GatewayMedia from "../src/GatewayMedia.js"
import * as GatewayOffload from "../src/GatewayOffload.js"
import * as GatewayResponsesOffload from "../src/GatewayResponsesOffload.js"

const bp = { type: "ephemeral" }
const big = (tag: string) => `${tag}: ${"0123456789 ".repeat(800)}`
const toolUnit = (id: string, name: string, input: Record<string, unknown>, output: string) => [
  { role: "assistant", content: [{ type: "tool_use", id, name, input }] },
  { role: "user", content: [{ type: "tool_result", tool_use_id: id, content: output }] }
]

/** A conversation: a prompt, tool units (one of them a hidden thread_read round), the agent's newest message. */
const body = (read: Record<string, unknown>, mixed = false) => ({
  model: "claude-x",
  system: [{ type: "text", text: "You are a coding agent.", cache_control: bp }],
  tools: [{ name: "Bash", input_schema: { type: "object" } }],
  messages: [
    { role: "user", content: [{ type: "text", text: "go" }] },
    ...toolUnit("toolu_1", "Bash", { command: "seq 1 9" }, big("one")),
    mixed
      ? { role: "assistant", content: [{ type: "tool_use", id: "toolu_r1", name: "thread_read", input: read }, { type: "tool_use", id: "toolu_x", name: "Bash", input: {} }] }
      : { role: "assistant", content: [{ type: "tool_use", id: "toolu_r1", name: "thread_read", input: read }] },
    {
      role: "user",
      content: [
        { type: "tool_result", tool_use_id: "toolu_r1", content: `[tool_result Bash toolu_1 #3]\n${big("one")}` },
        ...(mixed ? [{ type: "tool_result", tool_use_id: "toolu_x", content: "x" }] : [])
      ]
    },
    ...toolUnit("toolu_2", "Bash", { command: "ls" }, big("two")),
    ...toolUnit("toolu_3", "Bash", { command: "ls" }, big("three")),
    ...toolUnit("toolu_4", "Bash", { command: "ls" }, big("four")),
    ...toolUnit("toolu_5", "Bash", { command: "ls" }, big("five")),
    { role: "user", content: [{ type: "text", text: "and now?", cache_control: bp }] }
  ]
})

const count = (text: string) => Math.ceil(text.length / 4)

/** The rewrite of `b` at the window's edge, as the gateway counts it (every eligible unit is stubbed). */
const rewrite = (b: Record<string, unknown>) =>
  GatewayOffload.rewrite({
    body: b,
    offloaded: [],
    settings: ToolResultOffload.defaults,
    windowTokens: GatewayMedia.jsonTokens(count, b),
    prices: { input: 3, cacheRead: 0.3, cacheWrite: 3.75 },
    requestsSoFar: 20,
    msSinceLastRequest: 1_000,
    count
  })

type Block = Record<string, unknown>
const resultOf = (out: Record<string, unknown>, id: string) =>
  (out.messages as Array<{ content: Array<Block> }>).flatMap((m) => m.content).find((b) => b.type === "tool_result" && b.tool_use_id === id)!

describe("GatewayOffload", () => {
  it("readRefOf: a thread_read call's refs as a stub's ref, or null when they cannot be one", () => {
    expect(GatewayOffload.readRefOf({ refs: "tool:toolu_1" })).toBe("tool:toolu_1")
    expect(GatewayOffload.readRefOf({ refs: " tool:a,tool:b  #3-#5", limit: 100 })).toBe("tool:a, tool:b, #3-#5")
    expect(GatewayOffload.readRefOf({ refs: "not a ref!" })).toBeNull()
    expect(GatewayOffload.readRefOf({ refs: "tool:a]" })).toBeNull()
    expect(GatewayOffload.readRefOf({ itemIds: ["itm_1"] })).toBeNull()
    expect(GatewayOffload.readRefOf("tool:a")).toBeNull()
  })

  it("a consumed hidden thread_read round is stubbed, its stub naming what it read; the flush reports that ref", () => {
    const out = rewrite(body({ refs: "tool:toolu_1", limit: 32_000 }))
    expect(out.offloaded).toContain("toolu_r1")
    const stub = resultOf(out.body, "toolu_r1")
    expect(ToolResultOffload.refOfStub(String(stub.content))).toBe("tool:toolu_1")
    expect(String(stub.content)).toContain("thread_read")
    expect(out.flush!.refs).toContain("tool:toolu_1")
    expect(out.flush!.refs).not.toContain("tool:toolu_r1")
    // The agent's own units as before: `tool:<id>`.
    expect(ToolResultOffload.refOfStub(String(resultOf(out.body, "toolu_2").content))).toBe("tool:toolu_2")
  })

  it("a thread_read round whose refs cannot be named is never stubbed", () => {
    const out = rewrite(body({ refs: "???" }))
    expect(out.offloaded).not.toContain("toolu_r1")
    expect(String(resultOf(out.body, "toolu_r1").content)).toContain("[tool_result Bash toolu_1 #3]")
    expect(out.offloaded).toContain("toolu_2")
  })

  it("a consumed round of thread_read beside the agent's own call is stubbed: the read naming what it read, the agent's call by its tool: ref", () => {
    const out = rewrite(body({ refs: "tool:toolu_1" }, true))
    expect(out.offloaded).toEqual(expect.arrayContaining(["toolu_r1", "toolu_x", "toolu_2"]))
    expect(ToolResultOffload.refOfStub(String(resultOf(out.body, "toolu_r1").content))).toBe("tool:toolu_1")
    expect(ToolResultOffload.refOfStub(String(resultOf(out.body, "toolu_x").content))).toBe("tool:toolu_x")
    expect(out.flush!.refs).toEqual(expect.arrayContaining(["tool:toolu_1", "tool:toolu_x"]))
  })

  it("an expansion that ends with the gateway's answers (thread_read beside the agent's call) is joined with the agent's next user message", () => {
    const a = { role: "assistant", content: [{ type: "text", text: "Looking." }, { type: "tool_use", id: "toolu_x", name: "Bash", input: {} }] }
    const full = { role: "assistant", content: [a.content[0], { type: "tool_use", id: "toolu_r", name: "thread_read", input: { refs: "tool:toolu_1" } }, a.content[1]] }
    const answers = { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_r", content: "the original" }] }
    const plan = (next: Record<string, unknown>, after: ReadonlyArray<unknown> = []) =>
      GatewayOffload.rewrite({
        body: { model: "claude-x", messages: [{ role: "user", content: "go" }, a, next, ...after] },
        offloaded: [],
        settings: ToolResultOffload.defaults,
        windowTokens: 1_000_000,
        prices: { input: 3, cacheRead: 0.3, cacheWrite: 3.75 },
        requestsSoFar: 1,
        msSinceLastRequest: 1_000,
        count,
        expansions: { [JSON.stringify(a)]: [full, answers] },
        fingerprint: (m) => JSON.stringify(m)
      }).body.messages as Array<Record<string, unknown>>
    const result = { type: "tool_result", tool_use_id: "toolu_x", content: "x", cache_control: bp }
    // The agent's newest message: the answers first, then its own blocks as sent.
    expect(plan({ role: "user", content: [result] })).toEqual([{ role: "user", content: "go" }, full, { role: "user", content: [answers.content[0], result] }])
    // A string content becomes a text block after them; a later request joins them the same way (not the newest).
    const later = plan({ role: "user", content: "stop" }, [{ role: "assistant", content: [{ type: "text", text: "ok" }] }, { role: "user", content: "next" }])
    expect(later.slice(1, 3)).toEqual([full, { role: "user", content: [answers.content[0], { type: "text", text: "stop" }] }])
    expect(later).toHaveLength(5)
    // A next entry that cannot hold them (not a user message): the answers go out as a message of their own.
    expect(plan({ role: "assistant", content: [{ type: "text", text: "?" }] }, [{ role: "user", content: "next" }]).slice(1, 4)).toEqual([
      full,
      answers,
      { role: "assistant", content: [{ type: "text", text: "?" }] }
    ])
  })

  it("withMovedBreakpoint: the messages' last breakpoint moves to the last block; system and tools keep theirs", () => {
    const sent = {
      system: [{ type: "text", text: "s", cache_control: bp }],
      messages: [
        { role: "user", content: [{ type: "text", text: "a", cache_control: bp }] },
        { role: "assistant", content: [{ type: "text", text: "b" }] },
        { role: "user", content: [{ type: "text", text: "c" }, { type: "text", text: "d", cache_control: { type: "ephemeral", ttl: "1h" } }] },
        { role: "assistant", content: [{ type: "tool_use", id: "r", name: "thread_read", input: {} }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "r", content: "x" }, { type: "tool_result", tool_use_id: "s", content: "y" }] }
      ]
    }
    const out = GatewayOffload.withMovedBreakpoint(sent) as typeof sent
    expect(out.system).toEqual(sent.system)
    expect(out.messages.slice(0, 2)).toEqual(sent.messages.slice(0, 2))
    expect(out.messages[2]).toEqual({ role: "user", content: [{ type: "text", text: "c" }, { type: "text", text: "d" }] })
    expect(out.messages[4]!.content).toEqual([
      { type: "tool_result", tool_use_id: "r", content: "x" },
      { type: "tool_result", tool_use_id: "s", content: "y", cache_control: { type: "ephemeral", ttl: "1h" } }
    ])
    // The body sent is not touched (the record keeps the round without the breakpoint).
    expect(sent.messages[2]!.content[1]).toHaveProperty("cache_control")
    expect(sent.messages[4]!.content[1]).not.toHaveProperty("cache_control")
    // Without a breakpoint in the messages, nothing is added.
    const plain = { messages: [{ role: "user", content: [{ type: "text", text: "a" }] }] }
    expect(GatewayOffload.withMovedBreakpoint(plain)).toBe(plain)
  })

  it("a tool result with an image (Anthropic block, Responses part) goes out as sent at a flush that stubs its neighbours", () => {
    const image = { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo".repeat(3_000) } }
    const anthropic = {
      model: "claude-x",
      tools: [{ name: "Read", input_schema: { type: "object" } }],
      messages: [
        { role: "user", content: "go" },
        ...toolUnit("toolu_img", "Read", { file_path: "shot.png" }, "unused").map((m, i) =>
          i === 1 ? { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_img", content: [image] }] } : m
        ),
        ...["two", "three", "four", "five"].flatMap((tag) => toolUnit(`toolu_${tag}`, "Bash", { command: "ls" }, big(tag))),
        { role: "user", content: "and now?" }
      ]
    }
    const out = rewrite(anthropic)
    expect(out.flush?.refs).toEqual(["tool:toolu_two"])
    expect(resultOf(out.body, "toolu_img").content).toEqual([image])
    expect(String(resultOf(out.body, "toolu_two").content)).toContain("[offloaded, thread_read tool:toolu_two]")

    const unit = (id: string, output: unknown) => [
      { type: "function_call", call_id: id, name: "view_image", arguments: "{}" },
      { type: "function_call_output", call_id: id, output }
    ]
    const picture = [{ type: "input_image", image_url: `data:image/png;base64,${"iVBOR".repeat(6_000)}` }]
    const responses = {
      model: "gpt-x",
      tools: [{ type: "function", name: "view_image" }],
      input: [
        { type: "message", role: "user", content: [{ type: "input_text", text: "go" }] },
        ...unit("call_img", picture),
        ...["two", "three", "four", "five"].flatMap((tag) => unit(`call_${tag}`, big(tag))),
        { type: "message", role: "user", content: [{ type: "input_text", text: "and now?" }] }
      ]
    }
    const planned = GatewayOffload.plan(GatewayResponsesOffload.shape, {
      body: responses,
      offloaded: [],
      settings: ToolResultOffload.defaults,
      windowTokens: GatewayMedia.jsonTokens(count, responses),
      prices: { input: 3, cacheRead: 0.3, cacheWrite: 0 },
      requestsSoFar: 20,
      msSinceLastRequest: 1_000,
      count
    })
    expect(planned.flush?.refs).toEqual(["tool:call_two"])
    expect((planned.body.input as Array<Block>)[2]).toEqual({ type: "function_call_output", call_id: "call_img", output: picture })
  })

  it("Chat Completions: a consumed hidden thread_read round, alone or beside the agent's call, is stubbed naming what it read; a result with an image never", () => {
    const unit = (id: string, output: unknown) => [
      { role: "assistant", content: null, tool_calls: [{ id, type: "function", function: { name: "bash", arguments: JSON.stringify({ command: "ls" }) } }] },
      { role: "tool", tool_call_id: id, content: output }
    ]
    const read = (mixed: boolean) => [
      {
        role: "assistant",
        content: "Let me look.",
        tool_calls: [
          { id: "call_r1", type: "function", function: { name: "thread_read", arguments: JSON.stringify({ refs: "tool:call_1", limit: 32_000 }) } },
          ...(mixed ? [{ id: "call_x", type: "function", function: { name: "bash", arguments: "{}" } }] : [])
        ]
      },
      { role: "tool", tool_call_id: "call_r1", content: `[tool_result bash call_1 #3]\n${big("one")}` },
      ...(mixed ? [{ role: "tool", tool_call_id: "call_x", content: "x" }] : [])
    ]
    const picture = [{ type: "text", text: big("img") }, { type: "image_url", image_url: { url: `data:image/png;base64,${"iVBOR".repeat(6_000)}` } }]
    const chat = (mixed: boolean) => ({
      model: "gpt-x",
      tools: [{ type: "function", function: { name: "bash", parameters: { type: "object" } } }],
      messages: [
        { role: "system", content: "You are a coding agent." },
        { role: "user", content: "go" },
        ...unit("call_img", picture),
        ...unit("call_1", big("one")),
        ...read(mixed),
        ...["two", "three", "four", "five"].flatMap((tag) => unit(`call_${tag}`, big(tag))),
        { role: "user", content: [{ type: "text", text: "and now?" }] }
      ]
    })
    const planned = (b: Record<string, unknown>) =>
      GatewayOffload.plan(GatewayChatOffload.shape, {
        body: b,
        offloaded: [],
        settings: ToolResultOffload.defaults,
        windowTokens: GatewayMedia.jsonTokens(count, b),
        prices: { input: 1.25, cacheRead: 0.125, cacheWrite: 0 },
        requestsSoFar: 20,
        msSinceLastRequest: 1_000,
        count
      })
    const toolOf = (out: GatewayOffload.Output, id: string) => (out.body.messages as Array<Block>).find((m) => m.role === "tool" && m.tool_call_id === id)!
    const out = planned(chat(false))
    expect(out.offloaded).toContain("call_r1")
    expect(ToolResultOffload.refOfStub(String(toolOf(out, "call_r1").content))).toBe("tool:call_1")
    expect(out.flush!.refs).toContain("tool:call_1")
    expect(out.flush!.refs).not.toContain("tool:call_r1")
    expect(ToolResultOffload.refOfStub(String(toolOf(out, "call_two").content))).toBe("tool:call_two")
    // The result with an image goes out as sent; the system prompt stays first; thread_read is offered as a function.
    expect(toolOf(out, "call_img").content).toEqual(picture)
    expect((out.body.messages as Array<Block>)[0]).toEqual({ role: "system", content: "You are a coding agent." })
    expect((out.body.tools as Array<{ function: { name: string } }>).map((t) => t.function.name)).toEqual(["bash", "thread_read"])
    // Beside the agent's own call (the gateway answers such reads on this wire too): stubbed alike, the agent's call
    // by its tool: ref.
    const mixed = planned(chat(true))
    expect(mixed.offloaded).toEqual(expect.arrayContaining(["call_r1", "call_x", "call_two"]))
    expect(ToolResultOffload.refOfStub(String(toolOf(mixed, "call_r1").content))).toBe("tool:call_1")
    expect(ToolResultOffload.refOfStub(String(toolOf(mixed, "call_x").content))).toBe("tool:call_x")
  })
})
