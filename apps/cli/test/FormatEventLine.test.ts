/**
 * The lines `baton events` and `baton send` print per event, and the run's closing line, hold text from outside:
 * a provider's failure reason (a proxy's HTML error page, cut at 300 characters, newlines and all), a retry's reason,
 * a title in a `thread.created` payload. Review r36b: the title fix (FormatThreadLine.test) left these printed as
 * they were: a newline split `events`' one line per event, an ESC or a C1 CSI (which `JSON.stringify` does not
 * escape) reached the terminal, and the payload's cut at 119 UTF-16 units could end in half an emoji.
 */
import { type RunView, ThreadEvent } from "@baton/contracts"
import { Schema } from "effect"
import { describe, expect, it } from "vitest"
import * as Format from "../src/Format.js"

const event = (seq: number, type: string, payload: Record<string, unknown>): ThreadEvent =>
  Schema.decodeUnknownSync(ThreadEvent)({
    eventId: `evt_${seq}`,
    threadId: "thr_1",
    seq,
    globalSeq: seq,
    commandId: null,
    createdAt: "2026-12-06T08:00:00.000Z",
    type,
    payload
  })

// eslint-disable-next-line no-control-regex
const control = /[\u0000-\u001f\u007f-\u009f]/
const halfPair = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/

const page = "Anthropic answered HTTP 502: <html>\r\n<head><title>502 Bad Gateway</title></head>\n\u001b[2J\u009b2J</html>"

describe("an event's line in the CLI", () => {
  it("is one line without control characters whatever the provider's reason holds", () => {
    const failed = Format.eventLine(event(5, "run.failed", { runId: "run_1", stopPoint: "after_provider", code: "provider_unavailable", reason: page }), false)
    expect(failed).not.toMatch(control)
    expect(failed).toContain("Anthropic answered HTTP 502: <html> <head><title>502 Bad Gateway</title></head> [2J 2J</html>")
    const retry = Format.retryLine({ attempt: 1, delayMs: 2_000, httpStatus: 502, reason: page })
    expect(retry).not.toMatch(control)
  })

  it("shows a payload as JSON without C1 controls and cut without splitting a surrogate pair", () => {
    // `{"title":"` is 10 units: the emoji straddles the cut at 119.
    const title = `\u009b${"a".repeat(107)}🎉 and more`
    const line = Format.eventLine(event(1, "thread.created", { title }), false)
    expect(line).not.toMatch(control)
    expect(line).not.toMatch(halfPair)
  })

  it("ends a run on one line with the reason", () => {
    const view = { run: { seq: 1, status: "failed", failureCode: "provider_unavailable", failureReason: page }, items: [] } as unknown as RunView
    const head = Format.runReply(view).split("\n")
    expect(head).toHaveLength(1)
    expect(head[0]).not.toMatch(control)
  })
})
