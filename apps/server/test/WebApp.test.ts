/**
 * The dashboard is served by the server itself: `/` and the app's own paths (`/ui/*`) answer its `index.html`,
 * `/assets/*` its files with the content type of their extension, and none of it shadows the API (an API path keeps
 * its 401, an unknown path its JSON `RouteNotFound`, a path climbing out of the dist is refused). Without a build, `/`
 * says how to make one. `GET /session` tells a client which role its token has.
 */
import { Harness } from "@baton/testing"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { get, raw, readToken, serve } from "./helpers.js"

const providers = [{ name: "codex" as const, window: 200_000, inject: true }]

/** A dist directory as Vite lays it out: `index.html` and hashed files under `assets/`. */
const makeDist = () => {
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-web-"))
  Fs.mkdirSync(Path.join(dir, "assets"))
  Fs.writeFileSync(Path.join(dir, "index.html"), "<!doctype html><title>Baton</title><div id=root></div>")
  Fs.writeFileSync(Path.join(dir, "assets", "index-abc123.js"), "console.log('baton')")
  Fs.writeFileSync(Path.join(dir, "assets", "index-abc123.css"), "body{margin:0}")
  Fs.writeFileSync(Path.join(Os.tmpdir(), "baton-web-secret.txt"), "secret")
  return dir
}

describe("the dashboard's routes", () => {
  const dist = makeDist()

  it.live("serve index.html at / and /ui/*, assets with their content types, and never shadow the API", () =>
    Effect.gen(function*() {
      const root = yield* raw(get("/", null))
      expect([root.status, root.headers["content-type"], root.text]).toEqual([200, "text/html; charset=utf-8", Fs.readFileSync(Path.join(dist, "index.html"), "utf8")])
      const deep = yield* raw(get("/ui/threads/thr_123", null))
      expect([deep.status, deep.text]).toEqual([200, root.text])
      // The app's root under /ui, with and without the slash (the API's JSON 404 before: review r18).
      for (const path of ["/ui", "/ui/"]) {
        const app = yield* raw(get(path, null))
        expect([path, app.status, app.text]).toEqual([path, 200, root.text])
      }
      const js = yield* raw(get("/assets/index-abc123.js", null))
      expect([js.status, js.headers["content-type"], js.text]).toEqual([200, "text/javascript; charset=utf-8", "console.log('baton')"])
      const css = yield* raw(get("/assets/index-abc123.css", null))
      expect([css.status, css.headers["content-type"]]).toEqual([200, "text/css; charset=utf-8"])

      // The API keeps its answers: no token is 401 JSON, not the app's page.
      const threads = yield* raw(get("/threads", null))
      expect([threads.status, threads.body?._tag]).toEqual([401, "Unauthorized"])
      const unknown = yield* raw(get("/no-such-route", null))
      expect([unknown.status, unknown.body?._tag]).toEqual([404, "RouteNotFound"])
      const missing = yield* raw(get("/assets/nope.js", null))
      expect([missing.status, missing.body?._tag]).toEqual([404, "RouteNotFound"])
      const climbing = yield* raw(get("/assets/..%2F..%2Fbaton-web-secret.txt", null))
      expect([climbing.status, climbing.body?._tag]).toEqual([404, "RouteNotFound"])
    }).pipe(Effect.provide(serve(Harness.make(providers), { webDir: dist }))))

  it.live("without a build, / answers 503 saying how to build it", () =>
    Effect.gen(function*() {
      const root = yield* raw(get("/", null))
      expect(root.status).toBe(503)
      expect(root.headers["content-type"]).toMatch(/^text\/html/)
      expect(root.text).toContain("The Baton dashboard is not built")
      expect(root.text).toContain("pnpm build:web")
    }).pipe(Effect.provide(serve(Harness.make(providers), { webDir: Path.join(dist, "absent") }))))
})

describe("GET /session", () => {
  it.live("answers the role of the token; 401 without one", () =>
    Effect.gen(function*() {
      const admin = yield* raw(get("/session"))
      expect([admin.status, admin.body]).toEqual([200, { role: "admin" }])
      const read = yield* raw(get("/session", readToken))
      expect([read.status, read.body]).toEqual([200, { role: "read" }])
      const none = yield* raw(get("/session", null))
      expect([none.status, none.body?._tag]).toEqual([401, "Unauthorized"])
    }).pipe(Effect.provide(serve(Harness.make(providers)))))
})
