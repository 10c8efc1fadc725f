/**
 * `Expect: 100-continue` (curl sends it for every body over 1 MiB): a body the server refuses before reading it (over
 * the limit: 413) is refused at once, without `100 Continue` first. Node answered every such request `100 Continue`
 * before the API saw it, inviting the client to upload the whole body (the guard then drained up to 64 MiB of it, or
 * waited 5 s for it) only to be refused (new user b44srv). A body the server reads still gets its `100 Continue`,
 * sent when the server starts reading it, and the request is served as without the header.
 */
import { Harness } from "@baton/testing"
import { HttpServer } from "@effect/platform"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Data, Effect } from "effect"
import * as Net from "node:net"
import { adminToken, get, raw, serve } from "./helpers.js"

/** A request that got no (further) answer within the test's limit. */
class NoAnswer extends Data.TaggedError("NoAnswer")<{ readonly seen: string }> {}

const providers = () => Harness.make([{ name: "codex", window: 44_000, inject: true }])

/**
 * Sends the head of `POST path` with `Expect: 100-continue` and `Content-Length: declared`, and sends `body` only once
 * the server has answered `100 Continue` (as a client that waits for it does). Resolves with every status line
 * answered until a final one (not 1xx), in order. Fails with `NoAnswer` after 4 s.
 */
const expecting = (port: number, path: string, declared: number, body: string) =>
  Effect.async<ReadonlyArray<string>, NoAnswer>((resume) => {
    const socket = Net.connect(port, "127.0.0.1", () => {
      socket.write(
        `POST ${path} HTTP/1.1\r\nHost: x\r\nauthorization: Bearer ${adminToken}\r\ncontent-type: application/json\r\n` +
          `Expect: 100-continue\r\nContent-Length: ${declared}\r\n\r\n`
      )
    })
    let answer = ""
    let sent = false
    const lines = () => answer.split("\r\n").filter((l) => l.startsWith("HTTP/1.1 "))
    const timer = setTimeout(() => {
      socket.destroy()
      resume(Effect.fail(new NoAnswer({ seen: answer })))
    }, 4_000)
    socket.on("data", (chunk) => {
      answer += chunk.toString("latin1")
      const seen = lines()
      if (!sent && seen[0] === "HTTP/1.1 100 Continue") {
        sent = true
        socket.write(body)
      }
      if (seen.some((l) => !l.startsWith("HTTP/1.1 1"))) {
        clearTimeout(timer)
        socket.destroy()
        resume(Effect.succeed(seen))
      }
    })
    socket.on("error", () => undefined)
    return Effect.sync(() => {
      clearTimeout(timer)
      socket.destroy()
    })
  })

describe("SQLite", () => {
  beforeAll(() => Harness.useDb(Harness.dialects[0]![1]))

  it.live("a body declared over the limit is answered 413 at once, without 100 Continue; nothing is written", () =>
    Effect.gen(function*() {
      const server = yield* HttpServer.HttpServer
      const port = (server.address as HttpServer.TcpAddress).port
      const body = JSON.stringify({ providerInstance: "codex", title: "x".repeat(10_000) })
      const lines = yield* expecting(port, "/threads", body.length, body)
      expect(lines).toEqual(["HTTP/1.1 413 Payload Too Large"])
      // A body within the limit: 100 Continue, then the request is served.
      const small = JSON.stringify({ providerInstance: "codex", title: "expect" })
      expect(yield* expecting(port, "/threads", small.length, small)).toEqual(["HTTP/1.1 100 Continue", "HTTP/1.1 201 Created"])
      const listed = yield* raw(get("/threads"))
      expect((listed.body?.["threads"] as ReadonlyArray<{ readonly title: string }>).map((t) => t.title)).toEqual(["expect"])
    }).pipe(Effect.provide(serve(providers(), { maxBodyBytes: 4096 }))), 60_000)
})
