/**
 * The line `baton threads` prints per thread and the heading of `baton thread show` hold a title any client set
 * (`POST /threads`, a gateway conversation's first prompt): before, a title with a newline broke the list's one line
 * per thread into two, its terminal escapes (ESC) reached the terminal as they were, and a title cut at 60 UTF-16 units
 * could end in half an emoji.
 */
import type { Thread, ThreadId } from "@baton/contracts"
import { DateTime } from "effect"
import { describe, expect, it } from "vitest"
import * as Format from "../src/Format.js"

const thread = (title: string): Thread => ({
  id: "thr_1" as ThreadId,
  title,
  activeProviderThreadId: null,
  createdAt: DateTime.unsafeMake("2026-12-06T08:00:00Z"),
  updatedAt: DateTime.unsafeMake("2026-12-06T08:00:00Z")
})

// eslint-disable-next-line no-control-regex
const control = /[\u0000-\u001f\u007f-\u009f]/

describe("a thread's title in the CLI's lines", () => {
  it("is one line without control characters, whatever the title holds", () => {
    const title = "line1\nline2\ttab \u001b[31mRED\u001b[0m\r\u009bx"
    const line = Format.threadLine(thread(title), 1, 2)
    expect(line).not.toMatch(control)
    expect(line.endsWith(" line1 line2 tab  [31mRED [0m x")).toBe(true)
    const shown = Format.threadShow(thread(title), [], [], [], 0)
    expect(shown.split("\n")[0]).toBe("thread thr_1: line1 line2 tab  [31mRED [0m x")
  })

  it("is cut at 60 characters without splitting a surrogate pair", () => {
    const line = Format.threadLine(thread(`${"a".repeat(59)}🎉 and more`), 1, 2)
    expect(line.endsWith(`${"a".repeat(59)}🎉`)).toBe(true)
    expect(line).not.toMatch(/[\ud800-\udbff](?![\udc00-\udfff])/)
  })
})
