import { Api, Commands, type CommandId, type ThreadId } from "@baton/contracts"
import { describe, expect, it } from "@effect/vitest"
import { Either, ParseResult, Schema } from "effect"

const decode = Schema.decodeUnknownEither(Commands.SendMessage)
const send = (text: string) => ({ _tag: "SendMessage", commandId: "cmd_1", threadId: "thr_1", text })
const messages = (text: string) =>
  Either.match(decode(send(text)), {
    onLeft: (e) => ParseResult.ArrayFormatter.formatErrorSync(e).map((i) => `${i.path.join(".")}: ${i.message}`),
    onRight: () => []
  })

describe("Commands.SendMessage.text", () => {
  it("rejects a lone surrogate, naming its index", () => {
    expect(messages("a\uD800b")).toEqual(["text: the prompt is not well-formed Unicode: lone surrogate at index 1"])
    expect(messages("\uDC00")).toEqual(["text: the prompt is not well-formed Unicode: lone surrogate at index 0"])
    expect(messages("ok\uD83D")).toEqual(["text: the prompt is not well-formed Unicode: lone surrogate at index 2"])
  })

  it("accepts well-formed text, surrogate pairs included, unchanged", () => {
    expect(messages("a\uD83D\uDE00b")).toEqual([])
    expect(Either.getOrThrow(decode(send("héllo 😀"))).text).toBe("héllo 😀")
  })

  it("make validates too", () => {
    expect(() =>
      Commands.SendMessage.make({ commandId: "c" as CommandId, threadId: "t" as ThreadId, text: "\uD800" })
    ).toThrow("lone surrogate at index 0")
  })
})

// Found by a tester: tool declarations and tool results took NUL and lone surrogates that prompts refuse (a lone
// surrogate was stored altered, U+FFFD, so the record no longer matched what the model saw), and a client tool
// named thread_read was offered beside Baton's own.
describe("client tools and tool results: storable text, no reserved name", () => {
  const errors = <A, I>(schema: Schema.Schema<A, I>, value: unknown) =>
    Either.match(Schema.decodeUnknownEither(schema)(value), {
      onLeft: (e) => ParseResult.ArrayFormatter.formatErrorSync(e).map((i) => `${i.path.join(".")}: ${i.message}`),
      onRight: () => []
    })
  const tool = (extra: object) => ({ name: "run_tests", description: "runs the tests", inputSchema: { type: "object" }, ...extra })
  const results = (output: string) => ({ _tag: "SubmitToolResults", commandId: "c", threadId: "t", runId: "r", results: [{ toolCallId: "toolu_1", output }] })

  it("a tool result's output with a NUL or a lone surrogate is refused, naming where", () => {
    expect(errors(Commands.SubmitToolResults, results("a\u0000"))).toEqual([
      "results.0.output: the tool result's output contains a NUL character (U+0000) at index 1, which cannot be stored"
    ])
    expect(errors(Commands.SubmitToolResults, results("lone \uD800 here"))).toEqual([
      "results.0.output: the tool result's output is not well-formed Unicode: lone surrogate at index 5"
    ])
    expect(errors(Commands.SubmitToolResults, results("ok \uD83D\uDE00"))).toEqual([])
  })

  it("a tool's description or inputSchema (keys and values, nested) with a NUL or a lone surrogate is refused", () => {
    expect(errors(Commands.ClientTools, [tool({ description: "x\u0000" })])).toEqual([
      "0.description: the tool's description contains a NUL character (U+0000) at index 1, which cannot be stored"
    ])
    expect(errors(Commands.ClientTools, [tool({ inputSchema: { type: "object", properties: { a: { description: "\uDC00" } } } })])).toEqual([
      "0.inputSchema: the tool's inputSchema is not well-formed Unicode: lone surrogate at index 0"
    ])
    expect(errors(Commands.ClientTools, [tool({ inputSchema: { ["k\u0000"]: 1 } })]).length).toBe(1)
    expect(errors(Commands.ClientTools, [tool({})])).toEqual([])
  })

  it("a client tool may not be named thread_read (Baton's own)", () => {
    expect(errors(Commands.ClientTools, [tool({ name: "thread_read" })])).toEqual([
      "0.name: \"thread_read\" is Baton's own tool (it reads omitted history back); give the client's tool another name"
    ])
  })
})

// Found by a user: whitespace-only text was accepted by the API and `baton send` (a run queued of "   \n\t") while the
// dashboard's Send button refused it. The API's entry (`MessageText`) refuses it; the orchestrator's command does not.
describe("Api.SendMessagePayload.text (MessageText)", () => {
  const payload = Schema.decodeUnknownEither(Api.SendMessagePayload)
  const issues = (text: string) =>
    Either.match(payload({ text }), {
      onLeft: (e) => ParseResult.ArrayFormatter.formatErrorSync(e).map((i) => `${i.path.join(".")}: ${i.message}`),
      onRight: () => []
    })

  it("refuses whitespace only, naming the field, whichever whitespace (what the dashboard's text.trim() refuses)", () => {
    for (const text of ["   \n\t", " ", "\r\n", "\u00a0", "\u2028\u3000", "\ufeff"]) {
      expect(issues(text)).toEqual(["text: the message is blank (only whitespace): write something to send"])
    }
  })

  it("keeps a message with whitespace around its words unchanged", () => {
    const text = "  \n\tfix it \u00a0\n\n"
    expect(Either.getOrThrow(payload({ text })).text).toBe(text)
    // A character trim() does not remove (U+200B ZERO WIDTH SPACE) is not whitespace here, as on the dashboard.
    expect(issues("\u200b")).toEqual([])
  })

  it("the orchestrator's SendMessage still takes a blank prompt (a replayed transcript's empty turn is sent as \" \")", () => {
    expect(messages(" ")).toEqual([])
    expect(Commands.isBlank(" \n")).toBe(true)
  })
})
