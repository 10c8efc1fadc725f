/**
 * A body declared over the limit that is sent slowly, or not at all, is still answered 413: the guard drains what
 * arrives for a bounded time and then answers and closes the connection (new user r35: no answer came, the
 * connection held open as long as the client kept it). The gateway likewise answers a chunked body that goes past
 * its limit and never ends (it was read and discarded for as long as it came).
 */
import { Harness } from "@baton/testing"
import { HttpServer } from "@effect/platform"
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { Data, Effect, Layer } from "effect"
import * as Net from "node:net"
import * as BodyDrain from "../src/BodyDrain.js"
import { adminToken, serve } from "./helpers.js"
import * as ModelApi from "./support/ModelApi.js"
import { instance, marker, serveSettings, settingsFor } from "./support/ModelServer.js"

/** A request that got no answer within the test's limit (a hang). */
class NoAnswer extends Data.TaggedError("NoAnswer")<{ readonly declared: number }> {}

const providers = () => Harness.make([{ name: "codex", window: 44_000, inject: true }])

/**
 * The drain bound here, in milliseconds: short, since every test waits it out (each request below is answered once it
 * has passed, 5 s by default); still 15 periods of `keepSending`'s 20 ms, so a client that keeps sending is drained
 * for a while before it is answered, as with the default.
 */
const drainBound = Layer.succeed(BodyDrain.DrainTimeout, 300)

/** Sends the head of an admin's POST declaring `declared` bytes and `sent` bytes of it; resolves with the first line answered. */
const firstLine = (port: number, declared: number, sent: number) =>
  Effect.async<string>((resume) => {
    const socket = Net.connect(port, "127.0.0.1", () => {
      // With the admin token: without one the body is refused 401 before its length is looked at (AuthBeforeBody.test).
      socket.write(
        `POST /threads HTTP/1.1\r\nHost: x\r\nauthorization: Bearer ${adminToken}\r\ncontent-type: application/json\r\n` +
          `Content-Length: ${declared}\r\n\r\n${"x".repeat(sent)}`
      )
    })
    let answer = ""
    socket.on("data", (chunk) => {
      answer += chunk.toString("latin1")
      if (answer.includes("\r\n")) {
        resume(Effect.succeed(answer.slice(0, answer.indexOf("\r\n"))))
        socket.destroy()
      }
    })
    socket.on("error", () => resume(Effect.succeed(answer)))
    return Effect.sync(() => socket.destroy())
  })

describe("SQLite", () => {
  beforeAll(() => Harness.useDb(Harness.dialects[0]![1]))

  it.live("a body declared over the limit and not sent whole is answered 413, not held open", () =>
    Effect.gen(function*() {
      const server = yield* HttpServer.HttpServer
      const port = (server.address as HttpServer.TcpAddress).port
      for (const sent of [0, 1000]) {
        const line = yield* firstLine(port, 100_000, sent).pipe(
          Effect.timeoutFail({ duration: "20 seconds", onTimeout: () => new NoAnswer({ declared: 100_000 }) })
        )
        expect(line).toBe("HTTP/1.1 413 Payload Too Large")
      }
    }).pipe(Effect.provide(serve(providers(), { maxBodyBytes: 4096 }).pipe(Layer.provide(drainBound)))), 60_000)
})

/** The head of a gateway POST with the admin token and `framing` (`Content-Length: N` or `Transfer-Encoding: chunked`). */
const gatewayHead = (framing: string) =>
  `POST /v1/messages HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\nx-api-key: ${adminToken}\r\n${framing}\r\n\r\n`

/** One chunk of 16 KiB of a chunked body. */
const chunkOf16KiB = `${(16_384).toString(16)}\r\n${"x".repeat(16_384)}\r\n`

/**
 * Sends `head`, then `piece` every 20 ms for as long as the socket takes it; resolves with the answer's first line:
 * as soon as one has come (`until: "answered"`), or once the server has ended the connection (`until: "closed"`).
 * Fails with `NoAnswer` after 20 s.
 */
const keepSending = (port: number, head: string, piece: string, until: "answered" | "closed") =>
  Effect.async<string>((resume) => {
    const socket = Net.connect(port, "127.0.0.1", () => void socket.write(head))
    const feed = setInterval(() => socket.writable && socket.write(piece), 20)
    let answer = ""
    const done = () => {
      clearInterval(feed)
      resume(Effect.succeed(answer.slice(0, answer.indexOf("\r\n"))))
    }
    socket.on("data", (data) => {
      answer += data.toString("latin1")
      if (until === "answered" && answer.includes("\r\n")) {
        done()
        socket.destroy()
      }
    })
    if (until === "closed") {
      socket.once("end", done)
      socket.once("close", done)
    }
    socket.on("error", () => undefined)
    return Effect.sync(() => {
      clearInterval(feed)
      socket.destroy()
    })
  }).pipe(Effect.timeoutFail({ duration: "20 seconds", onTimeout: () => new NoAnswer({ declared: -1 }) }))

/**
 * Runs `f` with the port of a server whose gateway routes `claude-*` to a loopback Anthropic upstream (its
 * `maxBodyBytes` 64 KiB), then checks that nothing reached the upstream.
 */
const withGateway = <E, R>(f: (port: number) => Effect.Effect<void, E, R>) =>
  Effect.scoped(Effect.gen(function*() {
    const upstream = yield* ModelApi.start
    const settings = yield* settingsFor([instance("anthropic", "anthropic-messages", upstream)], { TEST_MODEL_KEY: marker }, undefined, {
      gateway: { routes: [{ model: "claude-*", provider: "anthropic" }], maxBodyBytes: 65_536 }
    })
    return yield* Effect.gen(function*() {
      const server = yield* HttpServer.HttpServer
      yield* f((server.address as HttpServer.TcpAddress).port)
      expect(upstream.requests.length).toBe(0)
    }).pipe(Effect.provide(serveSettings(settings).pipe(Layer.provide(drainBound))))
  }))

describe("Gateway", () => {
  it.live("a chunked body that goes past gateway.maxBodyBytes and never ends is answered 413", () =>
    withGateway((port) =>
      Effect.gen(function*() {
        const line = yield* keepSending(port, gatewayHead("Transfer-Encoding: chunked"), chunkOf16KiB, "answered")
        expect(line).toBe("HTTP/1.1 413 Payload Too Large")
      })
    ), 60_000)

  it.live("after that 413 the connection is closed: a client still sending is not read on and on", () =>
    withGateway((port) =>
      Effect.gen(function*() {
        const closed = yield* keepSending(port, gatewayHead("Transfer-Encoding: chunked"), chunkOf16KiB, "closed")
        expect(closed).toBe("HTTP/1.1 413 Payload Too Large")
      })
    ), 60_000)

  it.live("a body declared over gateway.maxBodyBytes and sent slowly: 413, then the connection is closed", () =>
    withGateway((port) =>
      Effect.gen(function*() {
        // The client keeps sending a little at a time: node read it on for as long as the declared gigabyte kept coming.
        const closed = yield* keepSending(port, gatewayHead("Content-Length: 1000000000"), "x".repeat(1000), "closed")
        expect(closed).toBe("HTTP/1.1 413 Payload Too Large")
        // A body over the limit sent whole at once (an agent's long history) is answered as soon as it has come.
        const whole = yield* Effect.async<string>((resume) => {
          const body = JSON.stringify({ model: "claude-x", messages: [{ role: "user", content: "x".repeat(100_000) }] })
          const socket = Net.connect(port, "127.0.0.1", () => void socket.write(`${gatewayHead(`Content-Length: ${body.length}`)}${body}`))
          let answer = ""
          socket.on("data", (data) => {
            answer += data.toString("latin1")
            if (answer.includes("request_too_large")) {
              resume(Effect.succeed(answer.slice(0, answer.indexOf("\r\n"))))
              socket.destroy()
            }
          })
          socket.on("error", () => undefined)
          return Effect.sync(() => socket.destroy())
        }).pipe(Effect.timeoutFail({ duration: "4 seconds", onTimeout: () => new NoAnswer({ declared: 100_000 }) }))
        expect(whole).toBe("HTTP/1.1 413 Payload Too Large")
      })
    ), 60_000)
})
