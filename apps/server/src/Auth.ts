/**
 * Auth: the `Authorization` middleware of the API (declared in contracts) — bearer tokens compared in constant time.
 * The admin token may do anything; the read-only token only `GET` (and `HEAD`). 401 without a token or with one the
 * server does not know, 403 for the read-only token on a write. Tokens are compared as SHA-256 digests with
 * `crypto.timingSafeEqual` (equal lengths whatever the input), and never logged or echoed: the error bodies say
 * what was wrong, not what was sent.
 */
import { Api, Forbidden, Unauthorized } from "@baton/contracts"
import { HttpApiBuilder, HttpServerRequest } from "@effect/platform"
import { Effect, Layer, Redacted } from "effect"
import * as Crypto from "node:crypto"

/** The tokens the server accepts. */
export interface Tokens {
  readonly admin: Redacted.Redacted<string>
  readonly read: Redacted.Redacted<string> | null
}

/** The role a valid token grants. */
export type Role = "admin" | "read"

/** The SHA-256 of a token (tokens are compared as digests, see `sameToken`). */
export const digest = (text: string) => Crypto.createHash("sha256").update(text, "utf8").digest()

/** Whether `presented` equals `expected`, in time independent of where they differ (both hashed to 32 bytes). */
export const sameToken = (presented: Buffer, expected: Buffer) => Crypto.timingSafeEqual(presented, expected)

/**
 * The role of an `Authorization` header value (`Bearer <token>`, scheme case-insensitive), or why it grants none.
 * Both tokens are compared whatever the first comparison says, so the time does not tell which one matched.
 */
export const roleOf = (header: string | undefined, tokens: { readonly admin: Buffer; readonly read: Buffer | null }): Verdict => {
  if (header === undefined || header.trim() === "") return { _tag: "denied", reason: "no bearer token" }
  const match = /^bearer\s+(\S+)\s*$/i.exec(header)
  if (match === null) return { _tag: "denied", reason: "the Authorization header is not a bearer token" }
  return roleOfToken(match[1]!, tokens)
}

/**
 * The role of a token sent bare in a key header `name` (the gateway's `x-api-key`), or why it grants none, naming that
 * header: an empty value, or one holding whitespace or a comma (no token does; a header sent twice arrives as its
 * values joined with ", "), is refused as such. It was refused as "the Authorization header is not a bearer token"
 * when no Authorization header had been sent (the value went through `roleOf` as `Bearer <value>`).
 */
export const roleOfKey = (name: string, value: string, tokens: { readonly admin: Buffer; readonly read: Buffer | null }): Verdict => {
  if (value.trim() === "") return { _tag: "denied", reason: `the ${name} header is empty` }
  if (/[\s,]/.test(value)) {
    return { _tag: "denied", reason: `the ${name} header is not one token (it holds a space or a comma; a header sent twice arrives as its values joined by ", ")` }
  }
  return roleOfToken(value, tokens)
}

/** What a presented token grants, or why it grants none. */
export type Verdict =
  | { readonly _tag: "granted"; readonly role: Role }
  | { readonly _tag: "denied"; readonly reason: string }

/** The role `token` grants (compared as digests, both tokens whatever the first comparison says), else "unknown token". */
const roleOfToken = (token: string, tokens: { readonly admin: Buffer; readonly read: Buffer | null }): Verdict => {
  const presented = digest(token)
  const isAdmin = sameToken(presented, tokens.admin)
  const isRead = tokens.read !== null && sameToken(presented, tokens.read)
  return isAdmin
    ? { _tag: "granted", role: "admin" }
    : isRead
    ? { _tag: "granted", role: "read" }
    : { _tag: "denied", reason: "unknown token" }
}

const readMethods = new Set(["GET", "HEAD"])

/** The SHA-256 digests of `tokens`, as `roleOf` compares them. */
export const digestsOf = (tokens: Tokens) => ({
  admin: digest(Redacted.value(tokens.admin)),
  read: tokens.read === null ? null : digest(Redacted.value(tokens.read))
})

/**
 * The `session` group over `tokens`: `GET /session` answers the role of the presented token (the middleware has
 * already refused a missing or unknown one with 401).
 */
export const sessionLayer = (tokens: Tokens) => {
  const digests = digestsOf(tokens)
  return HttpApiBuilder.group(Api.BatonApi, "session", (handlers) =>
    Effect.succeed(handlers.handle("get", () =>
      Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
        const verdict = roleOf(request.headers.authorization, digests)
        return verdict._tag === "granted"
          ? Effect.succeed({ role: verdict.role })
          : Effect.fail(new Unauthorized({ reason: verdict.reason }))
      }))))
}

/** The `Authorization` middleware over `tokens`. */
export const layer = (tokens: Tokens) => {
  const digests = digestsOf(tokens)
  return Layer.succeed(
    Api.Authorization,
    Api.Authorization.of({
      // The raw header is read (not the decoded value) so that a header without the `Bearer ` scheme is refused.
      bearer: () =>
        Effect.flatMap(HttpServerRequest.HttpServerRequest, (request): Effect.Effect<void, Unauthorized | Forbidden> => {
          const verdict = roleOf(request.headers.authorization, digests)
          if (verdict._tag === "denied") return Effect.fail(new Unauthorized({ reason: verdict.reason }))
          if (verdict.role === "read" && !readMethods.has(request.method)) {
            return Effect.fail(new Forbidden({ reason: `the read-only token may not ${request.method}; use the admin token` }))
          }
          return Effect.void
        })
    })
  )
}
