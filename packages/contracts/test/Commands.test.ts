import { Commands, type CommandId, type ThreadId } from "@baton/contracts"
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
