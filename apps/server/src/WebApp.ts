/**
 * WebApp: serves the built dashboard (`apps/web`, built by `pnpm build:web` into `apps/web/dist`) from the server
 * itself, so the browser loads nothing from anywhere else.
 *
 * Routes, none of which any API endpoint uses, so the dashboard never shadows the API:
 * - `GET /`, `GET /ui`, `GET /ui/` and `GET /ui/*` answer `index.html` (`/ui/*` is the single-page app's own paths:
 *   the fallback a reload of `/ui/threads/<id>` needs);
 * - `GET /assets/*` answers the built file with the content type of its extension (hashed names: cached for a year).
 *
 * A path that climbs out of the dist directory or names no file is the API's 404 `RouteNotFound`. When the dist is
 * missing, `/` and `/ui/*` answer 503 with a page saying how to build it. It does not own the build.
 */
import { HttpApiBuilder, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Effect, Option } from "effect"
import * as Fs from "node:fs/promises"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"

/**
 * Where the built dashboard is by default: `apps/web/dist` of this repository, found from this module's location
 * (`apps/server/src/`, or the CLI's test bundle at `apps/cli/.test-bundle/`: both two levels below the repository).
 * `BATON_WEB_DIR` overrides it.
 */
export const defaultDir = (): string =>
  process.env["BATON_WEB_DIR"] ?? fileURLToPath(new URL("../../web/dist/", import.meta.url))

/** Content types by extension, for what Vite emits (anything else is `application/octet-stream`). */
export const contentTypes: Readonly<Record<string, string>> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".json": "application/json",
  ".map": "application/json",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
  ".woff2": "font/woff2",
  ".txt": "text/plain; charset=utf-8"
}

/** The page `/` answers (503) while the dashboard is not built: what to run. */
export const notBuiltPage = (dir: string) =>
  `<!doctype html><html><head><meta charset="utf-8"><title>Baton: dashboard not built</title></head><body>
<h1>The Baton dashboard is not built</h1>
<p>No <code>index.html</code> in <code>${dir.replace(/[<>&]/g, "")}</code>. Build it from the repository with
<code>pnpm build:web</code> (<code>pnpm start</code> builds it before serving), then reload this page.</p>
<p>The API is served as usual: <a href="/docs">/docs</a>, <a href="/openapi.json">/openapi.json</a>.</p>
</body></html>`

const read = (file: string) =>
  Effect.tryPromise(() => Fs.readFile(file)).pipe(Effect.option)

const notFound = HttpServerResponse.empty({ status: 404 })

/** `index.html` of `dir` (no cache: it names the current hashed assets), or the 503 page saying how to build it. */
const index = (dir: string) =>
  Effect.map(read(Path.join(dir, "index.html")), Option.match({
    onNone: () => HttpServerResponse.html(notBuiltPage(dir)).pipe(HttpServerResponse.setStatus(503)),
    onSome: (bytes) =>
      HttpServerResponse.uint8Array(bytes, { contentType: contentTypes[".html"]!, headers: { "cache-control": "no-cache" } })
  }))

/** A file under `dir/assets`, or the 404 the guard turns into `RouteNotFound` (also for `..` and encoded escapes). */
const asset = (dir: string) =>
  Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
    const assets = Path.join(dir, "assets")
    let name: string
    try {
      name = decodeURIComponent(request.url.split("?")[0]!.slice("/assets/".length))
    } catch (_malformed) {
      return Effect.succeed(notFound)
    }
    const file = Path.resolve(assets, name)
    if (name === "" || name.includes("\u0000") || !file.startsWith(assets + Path.sep)) return Effect.succeed(notFound)
    return Effect.map(read(file), Option.match({
      onNone: () => notFound,
      onSome: (bytes) =>
        HttpServerResponse.uint8Array(bytes, {
          contentType: contentTypes[Path.extname(file)] ?? "application/octet-stream",
          headers: { "cache-control": "public, max-age=31536000, immutable" }
        })
    }))
  })

/** The dashboard's routes on the API's router, serving the build in `dir` (default `defaultDir()`). */
export const layer = (dir: string = defaultDir()) =>
  HttpApiBuilder.Router.use((router) =>
    Effect.all([
      router.get("/", index(dir)),
      // `/ui` and `/ui/` too (one route: the router ignores a trailing slash; the wildcard needs a segment): a user's
      // `/ui/` or a browser's `/ui/threads/..` answered the API's JSON 404 (review r18); the app shows its thread list.
      router.get("/ui", index(dir)),
      router.get("/ui/*", index(dir)),
      router.get("/assets/*", asset(dir))
    ], { discard: true })
  )
