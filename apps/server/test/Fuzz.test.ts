/**
 * The fuzz test of issue 7 ("bad input never hurts"): 10,000 random and mutated requests over real HTTP on loopback
 * against the real API (SQLite file and the real Postgres), generated with fast-check from a printed seed
 * (`BATON_FUZZ_SEED=<n>` replays a run). Valid requests of every endpoint are interleaved with their mutations
 * (a field of the wrong type, deleted or added; huge, malformed and lone-surrogate strings; invalid UTF-8 bytes; a
 * truncated, oversized, deeply nested or missing body; odd, missing and duplicate headers including `Content-Type`
 * and `Authorization`; bad paths and ids; bad query parameters including thread cursors; another method), plus raw
 * malformed HTTP over a socket. For every response it asserts:
 *
 * - no status is 5xx;
 * - an answer arrives within `answerTimeoutMs` (a hang is a failure: a liveness check, not a timing assertion);
 * - an error (4xx) body is JSON with a `_tag` and a `message`, also where Node refuses a request before the API sees
 *   it (malformed HTTP, oversized headers, an unknown `Expect`: `Server.listener` answers those in the same shape);
 * - nothing a refused request carried was written: each request carries a distinctive marker (`zq<n>qz`, n decimal) in its
 *   strings, headers and ids, and at the end no marker of a 4xx request appears in any table of the database,
 *   while every marker of an accepted `POST /threads` or message does (so the check can fail).
 *
 * Client-side concurrency keeps it inside a minute on two loaded cores.
 */
import { Harness } from "@baton/testing"
import { HttpServer } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { afterAll, describe, expect, it } from "@effect/vitest"
import { Effect, FastCheck as fc } from "effect"
import * as Fs from "node:fs"
import * as Http from "node:http"
import * as Net from "node:net"
import * as Os from "node:os"
import * as Path from "node:path"
import { adminToken, readToken, serve } from "./helpers.js"

/**
 * Requests sent per dialect: `batches` property runs of `batchSize` requests each (5,000 per dialect, 10,000 in all;
 * `BATON_FUZZ_BATCHES=200` sends 10,000 on each).
 */
const batchSize = 50
const batches = Number(process.env.BATON_FUZZ_BATCHES ?? 100)
/** Requests in flight at once. */
const concurrency = 16
/** How long one request may take before it counts as a hang, in milliseconds. */
const answerTimeoutMs = 15_000
/** The server's body limit here (small, so that oversized bodies are cheap to send). */
const maxBodyBytes = 256 * 1024

// ---- requests as data (what fast-check generates and prints)

/** A reference to an id the server issued earlier (resolved when the request is sent, `index` modulo the pool). */
interface Ref {
  readonly $ref: "thread" | "run" | "item" | "handoff" | "key" | "cursor"
  readonly index: number
}
type Json = null | boolean | number | string | Ref | ReadonlyArray<Json> | { readonly [key: string]: Json }
type Body =
  | { readonly kind: "none" }
  | { readonly kind: "json"; readonly value: Json; readonly edit?: ByteEdit; readonly chunked?: boolean }
  | { readonly kind: "text"; readonly text: string }
/** An edit of the encoded body: invalid UTF-8 bytes inserted at a fraction of its length, or a truncation. */
type ByteEdit =
  | { readonly op: "insert"; readonly at: number; readonly bytes: ReadonlyArray<number> }
  | { readonly op: "truncate"; readonly at: number }

/** One HTTP request. Any string may hold `{{M}}`, replaced by the request's marker when it is sent. */
interface Spec {
  readonly template: string
  readonly mutations: ReadonlyArray<string>
  readonly method: string
  readonly path: ReadonlyArray<string | Ref>
  readonly query: ReadonlyArray<readonly [string, string | Ref]>
  readonly headers: ReadonlyArray<readonly [string, string | Ref]>
  readonly body: Body
}
/** Malformed HTTP written on a socket as latin1 (`{{M}}` replaced), answered by Node's parser or the app. */
interface RawSpec {
  readonly template: "raw"
  readonly bytes: string
}
type Request = Spec | RawSpec
const isRaw = (r: Request): r is RawSpec => "bytes" in r

const M = "{{M}}"
const ref = (kind: Ref["$ref"]) => fc.nat(1000).map((index): Ref => ({ $ref: kind, index }))
const isRef = (v: unknown): v is Ref => typeof v === "object" && v !== null && "$ref" in v && "index" in v

const json = (body: Json): Body => ({ kind: "json", value: body })
const write = (template: string, path: Spec["path"], body: Json, key: boolean): Spec => ({
  template,
  mutations: [],
  method: "POST",
  path,
  query: [],
  headers: [["authorization", `Bearer ${adminToken}`], ["content-type", "application/json"], ...(key ? [["idempotency-key", `k-${M}`] as const] : [])],
  body: json(body)
})
const read = (template: string, path: Spec["path"], query: Spec["query"] = [], token = adminToken): Spec => ({
  template,
  mutations: [],
  method: "GET",
  path,
  query,
  headers: [["authorization", `Bearer ${token}`]],
  body: { kind: "none" }
})
const opt = <A>(arb: fc.Arbitrary<A>) => fc.option(arb, { nil: undefined })
const defined = <A extends Record<string, unknown>>(o: A) =>
  Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as { readonly [key: string]: Json }
const provider = fc.constantFrom("codex", "claude")
const prompt = fc.oneof(
  fc.constant(`hello ${M}`),
  fc.string({ maxLength: 60 }).map((s) => `${s} ${M}`),
  fc.string({ unit: "binary", maxLength: 60 }).map((s) => `${M} ${s}`)
)
const seqParam = fc.oneof(fc.constantFrom("0", "1", "2", "5"), fc.nat(40).map(String))
const limitParam = fc.constantFrom("1", "2", "10", "100", "500")
const queryOf = (...pairs: ReadonlyArray<readonly [string, string | Ref | undefined]>) =>
  pairs.filter((p): p is readonly [string, string | Ref] => p[1] !== undefined)

/** A valid request of every endpoint (ids drawn from what the server issued). */
const validRequest: fc.Arbitrary<Spec> = fc.oneof(
  { weight: 3, arbitrary: fc.tuple(opt(fc.constant(`t ${M}`)), provider, fc.boolean()).map(([title, p, key]) => write("threads.create", ["threads"], defined({ title, providerInstance: p }), key)) },
  { weight: 8, arbitrary: fc.tuple(ref("thread"), prompt, fc.boolean()).map(([t, text, key]) => write("messages.send", ["threads", t, "messages"], { text }, key)) },
  { weight: 1, arbitrary: fc.tuple(ref("thread"), provider, fc.boolean()).map(([t, p, key]) => write("threads.switch", ["threads", t, "switch"], { providerInstance: p }, key)) },
  { weight: 1, arbitrary: fc.tuple(ref("thread"), opt(fc.nat(4)), opt(provider), fc.boolean()).map(([t, atRunSeq, p, key]) => write("threads.fork", ["threads", t, "fork"], defined({ atRunSeq, providerInstance: p, title: `f ${M}` }), key)) },
  { weight: 1, arbitrary: fc.tuple(ref("thread"), fc.boolean()).map(([t, key]) => write("threads.merge", ["threads", t, "merge"], {}, key)) },
  { weight: 1, arbitrary: fc.tuple(ref("thread"), fc.boolean()).map(([t, key]) => write("threads.compact", ["threads", t, "compact"], {}, key)) },
  { weight: 1, arbitrary: fc.tuple(ref("thread"), opt(fc.nat(20_000)), fc.boolean()).map(([t, keepTokens, key]) => write("threads.offload", ["threads", t, "offload"], defined({ keepTokens }), key)) },
  { weight: 1, arbitrary: fc.tuple(ref("thread"), opt(ref("run")), fc.boolean()).map(([t, runId, key]) => write("threads.interrupt", ["threads", t, "interrupt"], defined({ runId }), key)) },
  { weight: 1, arbitrary: fc.tuple(ref("thread"), ref("run"), fc.boolean()).map(([t, r, key]) => write("runs.toolResults", ["threads", t, "runs", r, "tool-results"], { results: [{ toolCallId: "call_1", output: `out ${M}` }] }, key)) },
  { weight: 2, arbitrary: fc.tuple(opt(limitParam), opt(ref("cursor"))).map(([limit, cursor]) => read("threads.list", ["threads"], queryOf(["limit", limit], ["cursor", cursor]))) },
  { weight: 2, arbitrary: fc.tuple(ref("thread"), fc.boolean()).map(([t, ro]) => read("threads.get", ["threads", t], [], ro ? readToken : adminToken)) },
  { weight: 2, arbitrary: fc.tuple(ref("run"), opt(fc.constantFrom("0", "50", "1000"))).map(([r, waitMs]) => read("runs.get", ["runs", r], queryOf(["waitMs", waitMs]))) },
  { weight: 1, arbitrary: fc.tuple(ref("thread"), opt(seqParam), opt(limitParam)).map(([t, a, l]) => read("runs.list", ["threads", t, "runs"], queryOf(["afterSeq", a], ["limit", l]))) },
  { weight: 2, arbitrary: fc.tuple(ref("thread"), opt(seqParam), opt(limitParam)).map(([t, a, l]) => read("items.list", ["threads", t, "items"], queryOf(["afterSeq", a], ["limit", l]))) },
  { weight: 2, arbitrary: fc.tuple(ref("item"), opt(fc.nat(100).map(String)), opt(fc.constantFrom("1", "10", "65536"))).map(([i, o, l]) => read("items.get", ["items", i], queryOf(["offset", o], ["limit", l]))) },
  { weight: 1, arbitrary: ref("thread").map((t) => read("handoffs.list", ["threads", t, "handoffs"])) },
  { weight: 1, arbitrary: ref("handoff").map((h) => read("handoffs.get", ["handoffs", h])) },
  { weight: 1, arbitrary: ref("thread").map((t) => read("handoffs.summaries", ["threads", t, "handoff-summaries"])) },
  { weight: 1, arbitrary: fc.tuple(ref("handoff"), fc.constantFrom("items", "omitted"), opt(fc.nat(30).map(String)), opt(limitParam)).map(([h, list, o, l]) => read("handoffs.itemIds", ["handoffs", h, "item-ids"], queryOf(["list", list], ["offset", o], ["limit", l]))) },
  { weight: 1, arbitrary: fc.tuple(ref("thread"), opt(seqParam), opt(seqParam)).map(([t, after, last]) => ({ ...read("events.thread", ["threads", t, "events"], queryOf(["follow", "false"], ["after", after])), ...(last === undefined ? {} : { headers: [["authorization", `Bearer ${adminToken}`], ["last-event-id", last]] as const }) })) },
  { weight: 1, arbitrary: opt(fc.nat(200).map(String)).map((after) => read("events.all", ["events"], queryOf(["follow", "false"], ["after", after]))) },
  { weight: 1, arbitrary: fc.constantFrom("healthz", "readyz", "openapi.json").map((p) => read(`health.${p}`, [p])) }
)

/** Lone surrogates, controls, BOM, bidi overrides and ordinary characters, as UTF-16 code units. */
const anyCodeUnit = fc.oneof(
  fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)),
  fc.constantFrom("\ud800", "\udfff", "\u0000", "\ufeff", "\u202e", "\ufffd", "\"", "\\", "/", "%", "a")
)
/** Strings a field should never be hurt by: edge lengths, huge, malformed Unicode, look-alike numbers. */
const evilString = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom("", " ", "\u0000", "\ud800", "\udfff", "a\ud800b", "\u202e", "\ufeff", "%00", "%ff", "..", "\\", "\"", "null", "NaN", "-1", "1e309", "0x1", "[]", "{}", "true", "\r\n", "\t", "CODEX", "codex ", "zq0qz") },
  { weight: 4, arbitrary: fc.string({ unit: anyCodeUnit, maxLength: 40 }) },
  { weight: 2, arbitrary: fc.string({ unit: "binary", maxLength: 200 }) },
  { weight: 2, arbitrary: fc.constantFrom(40, 41, 199, 200, 201, 500, 501, 1_000, 5_000).map((n) => "a".repeat(n)) },
  { weight: 1, arbitrary: fc.integer({ min: 100_000, max: 300_000 }).map((n) => "x".repeat(n)) }
).chain((s) => fc.constantFrom(s, `${s}${M}`, `${M}${s}`))

const wrongType: fc.Arbitrary<Json> = fc.oneof(
  fc.constantFrom<Json>(null, true, false, 0, -1, 1.5, 1e308, -0, 2_147_483_648, 2 ** 53 + 2, [], {}, [M], { x: M }),
  fc.integer().map((n): Json => n),
  fc.double({ noNaN: true, noDefaultInfinity: true }).map((n): Json => n),
  fc.jsonValue({ maxDepth: 3 }).map((v) => v as Json)
)

const invalidUtf8 = fc.constantFrom<ReadonlyArray<number>>(
  [0xff],
  [0xfe, 0xff],
  [0x80],
  [0xc0, 0xaf],
  [0xc3],
  [0xe2, 0x82],
  [0xed, 0xa0, 0x80],
  [0xf4, 0x90, 0x80, 0x80],
  [0xf8, 0x88, 0x80, 0x80, 0x80],
  [0xf0, 0x9f, 0x98]
)

const headerValue = fc.oneof(
  fc.constantFrom(
    `Bearer ${adminToken}`,
    `Bearer ${readToken}`,
    `Bearer wrong-${M}`,
    `Basic ${adminToken}`,
    `bearer ${adminToken}`,
    `Bearer  ${adminToken}`,
    "Bearer",
    "Bearer ",
    "",
    `Bearer ${adminToken}\u00ff`,
    "application/json",
    "application/json; charset=utf-8",
    "APPLICATION/JSON",
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "application/json, text/plain",
    "application/jsonx",
    "application/x+json",
    ";",
    "-1",
    "99999999999999999999",
    "1e3",
    " 7",
    `k-${M}`,
    `key with spaces ${M}`,
    `k\u00e9-${M}`,
    "gzip",
    "100-continue",
    "close"
  ),
  fc.string({ maxLength: 30 }).map((s) => `${s}${M}`),
  fc.constantFrom(201, 1_000, 8_000).map((n) => `Bearer ${"a".repeat(n)}`),
  ref("key")
)
const headerName = fc.constantFrom(
  "authorization",
  "authorization",
  "content-type",
  "content-type",
  "idempotency-key",
  "idempotency-key",
  "last-event-id",
  "transfer-encoding",
  "accept",
  "accept-encoding",
  "expect",
  "connection",
  "origin",
  `x-${"a".repeat(10)}`,
  "cookie"
)

const badSegment = fc.oneof(
  fc.constantFrom("", "%00", "%ff", "%zz", "%", "..", ".", "%2e%2e", "%2F", "a%2Fb", "%ED%A0%80", "%C0%AF", "%E2%82%AC", "\u00ff\u00fe", ";", "*", "thr_0", "run_1", "THREADS", "threads", "#frag", "?x=1", M, `thr_${M}`),
  fc.constantFrom(200, 201, 2_000, 7_000).map((n) => `${M}${"b".repeat(n)}`),
  fc.string({ unit: anyCodeUnit, maxLength: 20 }).map((s) => `${encodeURIComponent(s.replace(/[\ud800-\udfff]/g, "x"))}${M}`),
  ref("thread"),
  ref("run"),
  ref("item"),
  ref("handoff")
)

const cursorOf = (text: string) => Buffer.from(text, "utf8").toString("base64url")
const badQueryValue = fc.oneof(
  fc.constantFrom("", "-1", "0", "1.5", "1e3", "NaN", "Infinity", "-Infinity", "99999999999999999999", "1e20", "2147483647", "2147483648", "4294967296", "9007199254740993", "0x10", " 1", "1 ", "%00", "%ff", "%zz", "true", "false", "yes", "[]", M, "a".repeat(1_001), "60000", "60001"),
  fc.constantFrom(
    cursorOf(`["2020-01-01T00:00:00.000Z","thr_1"]`),
    cursorOf(`["\\u0000","x"]`),
    cursorOf(`["x","\\u0000"]`),
    cursorOf(`["\\ud800","x"]`),
    cursorOf(`[1,2]`),
    cursorOf(`["a"]`),
    cursorOf(`{}`),
    cursorOf(`"x"`),
    cursorOf(`["%","_"]`),
    cursorOf(`["${M}","${M}"]`),
    cursorOf("not json"),
    "!!!",
    "====",
    "a"
  ),
  fc.tuple(fc.string({ unit: anyCodeUnit, maxLength: 20 }), fc.string({ unit: anyCodeUnit, maxLength: 20 })).map(([a, b]) => cursorOf(JSON.stringify([a, b]))),
  fc.nat().map(String),
  ref("cursor")
)
const queryKey = fc.constantFrom("limit", "cursor", "afterSeq", "after", "offset", "waitMs", "follow", "x", "LIMIT", "limit[]", "")

const pick = <A>(list: ReadonlyArray<A>, n: number): A | undefined => list.length === 0 ? undefined : list[n % list.length]

/** Mutations that send a large body (a tenth of the rest's weight: they cost the most to send and to refuse). */
const largeBody: fc.Arbitrary<(spec: Spec) => Spec> = fc.oneof(
  fc.integer({ min: 0, max: 4_096 }).map((extra) => (spec: Spec) => note({ ...spec, body: { kind: "text", text: `{"text":"${"o".repeat(maxBodyBytes + extra)}${M}"}` } }, "oversized body")),
  fc.constantFrom(33, 100, 10_000, 100_000).map((depth) => (spec: Spec) => note({ ...spec, body: { kind: "text", text: `${"[".repeat(depth)}"${M}"${"]".repeat(depth)}` } }, `nested ${depth}`))
)

/** Mutations of a request's fields, headers, path, method and query, each as data (named in the request). */
const smallMutation: fc.Arbitrary<(spec: Spec) => Spec> = fc.oneof(
  fc.tuple(fc.nat(), wrongType).map(([n, value]) => setField("wrong type", n, () => value)),
  fc.nat().map((n) => setField("delete field", n, () => undefined)),
  fc.tuple(fc.nat(), evilString).map(([n, s]) => setField("evil string", n, () => s)),
  fc.tuple(fc.constantFrom("x", "extra", "__proto__", "constructor", "commandId", "TEXT", M), wrongType).map(([key, value]) => (spec: Spec) =>
    spec.body.kind === "json" && typeof spec.body.value === "object" && spec.body.value !== null && !Array.isArray(spec.body.value)
      ? note({ ...spec, body: { ...spec.body, value: { ...(spec.body.value as object), [key]: value } } }, `add field ${key}`)
      : spec
  ),
  wrongType.map((value) => (spec: Spec) => note({ ...spec, body: json(value) }, "replace body")),
  fc.tuple(fc.double({ min: 0, max: 1, noNaN: true }), invalidUtf8).map(([at, bytes]) => (spec: Spec) =>
    note({ ...spec, body: { ...toJson(spec.body), edit: { op: "insert", at, bytes } } }, `invalid UTF-8 ${bytes.map((b) => b.toString(16)).join(" ")}`)
  ),
  fc.double({ min: 0, max: 1, noNaN: true }).map((at) => (spec: Spec) => note({ ...spec, body: { ...toJson(spec.body), edit: { op: "truncate", at } } }, "truncate body")),
  fc.constantFrom("", "{", "{\"text\":", "[", "nul", "{\"text\":\"a\"}}", "{'text':'a'}", "{\"text\":\"\\ud800\"}", "{\"text\":\"\\u0000\"}", "\u0000", "{\"text\":\"a\",\"text\":\"b\"}", "{\"providerInstance\":\"codex\",}").map((text) => (spec: Spec) =>
    note({ ...spec, body: { kind: "text", text } }, `raw body ${JSON.stringify(text)}`)
  ),
  fc.constant((spec: Spec) => note({ ...spec, body: { kind: "none" } }, "no body")),
  fc.constant((spec: Spec) => note({ ...spec, body: { ...toJson(spec.body), chunked: true } }, "chunked body")),
  fc.tuple(headerName, opt(headerValue), fc.boolean()).map(([name, value, add]) => (spec: Spec) =>
    note({
      ...spec,
      headers: add && value !== undefined ? [...spec.headers, [name, value]] : [...spec.headers.filter(([n]) => n !== name), ...(value === undefined ? [] : [[name, value] as const])]
    }, `${add ? "add" : value === undefined ? "delete" : "set"} header ${name}`)
  ),
  fc.tuple(fc.nat(), badSegment).map(([n, segment]) => (spec: Spec) => {
    const at = n % spec.path.length
    return note({ ...spec, path: spec.path.map((s, i) => (i === at ? segment : s)) }, `path segment ${at}`)
  }),
  fc.constantFrom("trailing slash", "double slash", "extra segment", "upper case", "dot segments", "drop segment").map((kind) => (spec: Spec) =>
    note({
      ...spec,
      path: kind === "trailing slash"
        ? [...spec.path, ""]
        : kind === "double slash"
        ? ["", ...spec.path]
        : kind === "extra segment"
        ? [...spec.path, `x${M}`]
        : kind === "upper case"
        ? spec.path.map((s) => (typeof s === "string" ? s.toUpperCase() : s))
        : kind === "dot segments"
        // (An earlier "drop segment" may have left no segment: seed 892116962 sent an undefined one.)
        ? [...spec.path.slice(0, 1), "..", ...spec.path]
        : spec.path.slice(0, -1)
    }, kind)
  ),
  fc.array(badSegment, { minLength: 1, maxLength: 4 }).map((path) => (spec: Spec) => note({ ...spec, path }, "random path")),
  fc.constantFrom("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD").map((method) => (spec: Spec) => note({ ...spec, method }, `method ${method}`)),
  fc.tuple(queryKey, badQueryValue, fc.constantFrom("set", "add", "delete")).map(([key, value, mode]) => (spec: Spec) =>
    note({
      ...spec,
      query: mode === "add"
        ? [...spec.query, [key, value]]
        : mode === "delete"
        ? spec.query.filter(([k]) => k !== key)
        : [...spec.query.filter(([k]) => k !== key), [key, value]]
    }, `${mode} query ${key}`)
  ),
  fc.tuple(fc.nat(), badQueryValue).map(([n, value]) => (spec: Spec) => {
    const key = pick(spec.query, n)?.[0]
    return key === undefined ? spec : note({ ...spec, query: spec.query.map(([k, v]) => [k, k === key ? value : v] as const) }, `bad query ${key}`)
  })
)

/** One mutation of a request (about one in forty sends a large body). */
const mutation = fc.oneof({ weight: 1, arbitrary: largeBody }, { weight: 40, arbitrary: smallMutation })

function note(spec: Spec, name: string): Spec {
  return { ...spec, mutations: [...spec.mutations, name] }
}
function toJson(body: Body): Body & { readonly kind: "json" } {
  return body.kind === "json" ? body : { kind: "json", value: body.kind === "text" ? body.text : {} }
}
/** Sets (or deletes, when `value()` is undefined) the `n`-th field of a JSON object body (nested values too). */
function setField(name: string, n: number, value: () => Json | undefined) {
  return (spec: Spec): Spec => {
    if (spec.body.kind !== "json" || typeof spec.body.value !== "object" || spec.body.value === null || Array.isArray(spec.body.value) || isRef(spec.body.value)) {
      return spec
    }
    const fields = spec.body.value as { readonly [key: string]: Json }
    const key = pick(Object.keys(fields), n)
    if (key === undefined) return spec
    const v = value()
    const next = Object.fromEntries(Object.entries(fields).filter(([k]) => k !== key || v !== undefined).map(([k, old]) => [k, k === key ? v! : old]))
    return note({ ...spec, body: { ...spec.body, value: next } }, `${name} ${key}`)
  }
}

/** Malformed HTTP on a socket: request lines, header lines, lengths and encodings Node's parser must refuse. */
const rawRequest: fc.Arbitrary<RawSpec> = fc.constantFrom(
  `GET /threads/\u00ff\u00fe${M} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${adminToken}\r\n\r\n`,
  `GET /threads/a b${M} HTTP/1.1\r\nHost: x\r\n\r\n`,
  `GET /threads HTTP/1.1\r\nHost: x\r\nno-colon-${M}\r\n\r\n`,
  `GET /threads HTTP/1.1\r\nHost: x\r\nBad Header: ${M}\r\n\r\n`,
  `POST /threads HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${adminToken}\r\nContent-Type: application/json\r\nContent-Length: abc\r\n\r\n{}`,
  `POST /threads HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${adminToken}\r\nContent-Type: application/json\r\nContent-Length: -1\r\n\r\n{}`,
  `POST /threads HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${adminToken}\r\nContent-Type: application/json\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{} `,
  `POST /threads HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${adminToken}\r\nContent-Type: application/json\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`,
  `POST /threads HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${adminToken}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n`,
  `POST /threads HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${adminToken}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n`,
  `GET /threads HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(20_000)}\r\n\r\n`,
  `GET /threads HTTP/1.0\r\nAuthorization: Bearer ${adminToken}\r\n\r\n`,
  `GET /threads HTTP/2.0\r\nHost: x\r\n\r\n`,
  `GET /threads HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${adminToken}\r\n folded: ${M}\r\n\r\n`,
  `FOO /threads HTTP/1.1\r\nHost: x\r\n\r\n`,
  `get /threads HTTP/1.1\r\nHost: x\r\n\r\n`,
  `GET http://example.com/threads HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${adminToken}\r\n\r\n`,
  `GET * HTTP/1.1\r\nHost: x\r\n\r\n`,
  `GET /threads HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${adminToken}\u0000\r\n\r\n`,
  `\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n`,
  `GARBAGE${M}\r\n\r\n`
).map((bytes) => ({ template: "raw", bytes }))

const request: fc.Arbitrary<Request> = fc.oneof(
  { weight: 25, arbitrary: validRequest },
  { weight: 75, arbitrary: fc.tuple(validRequest, fc.array(mutation, { minLength: 1, maxLength: 3 })).map(([spec, ms]) => ms.reduce((s, m) => m(s), spec)) },
  { weight: 2, arbitrary: rawRequest }
)

// ---- sending

/** The ids the server issued so far (refs resolve into them). */
interface Pool {
  readonly thread: Array<string>
  readonly run: Array<string>
  readonly item: Array<string>
  readonly handoff: Array<string>
  readonly key: Array<string>
  readonly cursor: Array<string>
}

interface Outcome {
  readonly request: Request
  readonly marker: string
  readonly status: number | null
  readonly contentType: string | undefined
  readonly text: string
  readonly failure: string | null
  /** Whether the body sent carried the marker (so an accepted write must have stored it). */
  readonly bodyHasMarker: boolean
}

let markerCount = 0
const resolve = (pool: Pool, r: Ref, marker: string) => pick(pool[r.$ref], r.index) ?? `none-${marker}`
const fill = (pool: Pool, marker: string) => (v: string | Ref) => (isRef(v) ? resolve(pool, v, marker) : v.split(M).join(marker))
/** Node refuses characters outside `\x21-\xff` in a request target: percent-encode them. */
const target = (s: string) => s.replace(/[^\x21-\xff]/g, (c) => encodeURIComponent(c.replace(/[\ud800-\udfff]/, "\ufffd")))
/** Node refuses characters outside tab, `\x20-\x7e` and `\x80-\xff` in a header value. */
const headerText = (s: string) => s.replace(/[^\t\x20-\x7e\x80-\xff]/g, "?")

const encodeBody = (pool: Pool, marker: string, body: Body): Buffer | null => {
  if (body.kind === "none") return null
  if (body.kind === "text") return Buffer.from(body.text.split(M).join(marker), "utf8")
  const text = JSON.stringify(body.value, (_key, v: unknown) =>
    isRef(v) ? resolve(pool, v, marker) : typeof v === "string" ? v.split(M).join(marker) : v) ?? "null"
  const bytes = Buffer.from(text, "utf8")
  if (body.edit === undefined) return bytes
  const at = Math.floor(body.edit.at * bytes.length)
  return body.edit.op === "truncate" ? bytes.subarray(0, at) : Buffer.concat([bytes.subarray(0, at), Buffer.from(body.edit.bytes), bytes.subarray(at)])
}

/** The first 4 MiB of an answer are kept; an event stream is closed once its head arrived. */
const keepChars = 4 * 1024 * 1024

const sendHttp = (port: number, agent: Http.Agent, pool: Pool, spec: Spec, marker: string, retried = false): Promise<Outcome> =>
  new Promise<Outcome>((done) => {
    const f = fill(pool, marker)
    const path = "/" + spec.path.map((s) => target(f(s))).join("/")
    const query = spec.query.map(([k, v]) => `${target(k)}=${target(f(v))}`).join("&")
    const headers: Record<string, Array<string>> = {}
    for (const [name, value] of spec.headers) (headers[name] ??= []).push(headerText(f(value)))
    const body = encodeBody(pool, marker, spec.body)
    const chunked = spec.body.kind === "json" && spec.body.chunked === true
    if (chunked) headers["transfer-encoding"] = ["chunked"]
    else if (body !== null) headers["content-length"] = [String(body.length)]
    let settled = false
    const finish = (o: Omit<Outcome, "request" | "marker" | "bodyHasMarker">) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      done({ request: spec, marker, bodyHasMarker: body !== null && body.includes(marker), ...o })
    }
    const req = Http.request({ host: "127.0.0.1", port, method: spec.method, path: query === "" ? path : `${path}?${query}`, headers, agent })
    const timer = setTimeout(() => {
      finish({ status: null, contentType: undefined, text: "", failure: `no answer within ${answerTimeoutMs} ms` })
      req.destroy()
    }, answerTimeoutMs)
    req.on("error", (e) => {
      // A kept-alive socket the server closed as the agent handed it to this request ("socket hang up" before any
      // answer): the request never reached the server. Sent again once on a new socket, as Node's documentation
      // advises for `req.reusedSocket` (seed 893430933 on Postgres hit it on main).
      if (req.reusedSocket && !retried && !settled) {
        settled = true
        clearTimeout(timer)
        void sendHttp(port, agent, pool, spec, marker, true).then(done)
        return
      }
      finish({ status: null, contentType: undefined, text: "", failure: `request failed: ${e.message}` })
    })
    req.on("response", (res) => {
      const contentType = res.headers["content-type"]
      if ((contentType ?? "").startsWith("text/event-stream")) {
        finish({ status: res.statusCode ?? null, contentType, text: "", failure: null })
        res.destroy()
        return
      }
      let text = ""
      res.setEncoding("utf8")
      res.on("data", (chunk: string) => {
        if (text.length < keepChars) text += chunk
      })
      res.on("end", () => finish({ status: res.statusCode ?? null, contentType, text, failure: null }))
      res.on("error", (e) => finish({ status: res.statusCode ?? null, contentType, text, failure: `answer broken: ${e.message}` }))
    })
    if (body === null) req.end()
    else if (chunked) {
      req.write(body)
      req.end()
    } else req.end(body)
  })

const sendRaw = (port: number, spec: RawSpec, marker: string) =>
  new Promise<Outcome>((done) => {
    const socket = Net.connect(port, "127.0.0.1")
    let answer = ""
    let settled = false
    const finish = (failure: string | null) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      socket.destroy()
      const status = /^HTTP\/1\.[01] (\d{3})/.exec(answer)
      const head = answer.split("\r\n\r\n")[0] ?? ""
      const contentType = /\r\ncontent-type: ([^\r]*)/i.exec(head)?.[1]
      done({
        request: spec,
        marker,
        status: status === null ? null : Number(status[1]),
        contentType,
        text: answer.slice(head.length + 4),
        failure: failure ?? (status === null ? `no HTTP answer: ${JSON.stringify(answer.slice(0, 80))}` : null),
        bodyHasMarker: false
      })
    }
    const timer = setTimeout(() => finish(`no answer within ${answerTimeoutMs} ms`), answerTimeoutMs)
    socket.setEncoding("latin1")
    socket.on("data", (chunk: string) => {
      answer += chunk
      // One answer is enough: the connection may be kept open after a complete one.
      const head = answer.indexOf("\r\n\r\n")
      const length = /\r\ncontent-length: (\d+)/i.exec(answer.slice(0, head))
      if (head >= 0 && length !== null && answer.length >= head + 4 + Number(length[1])) finish(null)
    })
    socket.on("end", () => finish(null))
    socket.on("close", () => finish(null))
    socket.on("error", (e) => (answer === "" ? finish(`socket failed: ${e.message}`) : finish(null)))
    socket.write(Buffer.from(spec.bytes.split(M).join(marker), "latin1"))
  })

/** Learns ids from an accepted answer (new threads, runs, handoffs, items, cursors, keys) for later refs. */
const learn = (pool: Pool, outcome: Outcome, spec: Spec, marker: string) => {
  if (outcome.status === null || outcome.status >= 300 || !(outcome.contentType ?? "").startsWith("application/json")) return
  const body = parseObject(outcome.text)
  if (body === null) return
  const add = (list: Array<string>, v: unknown) => {
    if (typeof v === "string" && list.length < 2_000 && !list.includes(v)) list.push(v)
  }
  add(pool.thread, body.threadId)
  add(pool.run, body.runId)
  add(pool.handoff, body.handoffId)
  add(pool.cursor, body.nextCursor)
  if (Array.isArray(body.runs)) for (const r of body.runs as Array<{ id?: unknown }>) add(pool.run, r.id)
  if (Array.isArray(body.items)) for (const i of body.items as Array<{ id?: unknown }>) add(pool.item, i.id)
  if (Array.isArray(body.handoffs)) for (const h of body.handoffs as Array<{ id?: unknown }>) add(pool.handoff, h.id)
  if (spec.headers.some(([n, v]) => n === "idempotency-key" && v === `k-${M}`)) add(pool.key, `k-${marker}`)
}

/** What is wrong with one answer, or null. */
const fault = (o: Outcome): string | null => {
  if (o.failure !== null) return o.failure
  if (o.status === null) return "no status"
  if (o.status >= 500) return `status ${o.status}`
  const head = !isRaw(o.request) && o.request.method === "HEAD"
  if (o.status >= 400 && !head) {
    if (!(o.contentType ?? "").startsWith("application/json")) return `error ${o.status} is not JSON (${o.contentType})`
    const body = parseObject(o.text)
    if (body === null || typeof body._tag !== "string" || body._tag === "") return `error ${o.status} has no _tag`
    if (typeof body.message !== "string") return `error ${o.status} ${body._tag} has no message`
  }
  return null
}
const parseObject = (text: string): Record<string, unknown> | null => {
  try {
    const v: unknown = JSON.parse(text)
    return typeof v === "object" && v !== null ? v as Record<string, unknown> : null
  } catch {
    return null
  }
}

/** Runs `tasks` with at most `n` at once. */
const pooled = async <A>(n: number, tasks: ReadonlyArray<() => Promise<A>>) => {
  const results: Array<A> = new Array(tasks.length)
  let next = 0
  await Promise.all(Array.from({ length: Math.min(n, tasks.length) }, async () => {
    while (next < tasks.length) {
      const i = next++
      results[i] = await tasks[i]!()
    }
  }))
  return results
}

/** Every marker in every table of the database (the whole database as text). */
const markersInDatabase = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const tables = yield* sql.onDialectOrElse({
    pg: () => sql<{ name: string }>`SELECT table_name AS name FROM information_schema.tables WHERE table_schema = current_schema()`,
    orElse: () => sql<{ name: string }>`SELECT name FROM sqlite_master WHERE type = 'table'`
  })
  const found = new Set<string>()
  for (const { name } of tables) {
    const rows = yield* sql`SELECT * FROM ${sql(name)}`
    for (const m of JSON.stringify(rows).matchAll(/zq\d+qz/g)) found.add(m[0])
  }
  return { found, tables: tables.map((t) => t.name) }
})

const describeRequest = (o: Outcome) =>
  JSON.stringify({ marker: o.marker, request: o.request, status: o.status, answer: o.text.slice(0, 300) }, (_k, v: unknown) =>
    typeof v === "string" && v.length > 300 ? `${v.slice(0, 100)}…(${v.length} chars)` : v)

// Fixed: on Postgres, a client that closed a live event stream (or any request) mid-statement interrupted the
// statement, and `@effect/sql-pg` cancelled it with `pg_cancel_backend(pid)` through the pool; queued behind a busy
// pool, the cancel landed on another request's statement (57014, a 500: `threads.insert`, `threads.get`,
// `ThreadService.queueRun`; seed 873480020). Baton's Postgres statements are uninterruptible now
// (`Database.layerPg`; regression test `PgCancel.test.ts`): both suites cut live streams.
describe.each([["SQLite file", "sqlite"], ["Postgres", Harness.postgres]] as const)("fuzz on %s", (_label, dialect) => {
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-fuzz-"))
  afterAll(() => Fs.rmSync(dir, { recursive: true, force: true }))

  it.live(`${batchSize * batches} random and mutated requests: no 5xx, no hang, typed JSON errors, nothing of a refused request written`, () =>
    Effect.gen(function*() {
      const server = yield* HttpServer.HttpServer
      const port = (server.address as HttpServer.TcpAddress).port
      const agent = new Http.Agent({ keepAlive: true, maxSockets: concurrency })
      const pool: Pool = { thread: [], run: [], item: [], handoff: [], key: [], cursor: [] }
      const outcomes: Array<Outcome> = []
      const seed = Number(process.env.BATON_FUZZ_SEED ?? Date.now() % 2_147_483_647)
      const send = async (r: Request) => {
        const marker = `zq${markerCount++}qz`
        const o = isRaw(r) ? await sendRaw(port, r, marker) : await sendHttp(port, agent, pool, r, marker)
        outcomes.push(o)
        if (!isRaw(r)) learn(pool, o, r, marker)
        return o
      }
      const started = Date.now()
      let batchCount = 0
      // State first: threads with runs, items, a switch handoff and a page cursor, all over HTTP.
      yield* Effect.promise(async () => {
        const providers = ["codex", "claude", "codex", "claude", "codex", "codex"]
        await pooled(concurrency, providers.map((p) => () => send(write("setup", ["threads"], { title: `t ${M}`, providerInstance: p }, true))))
        for (const t of pool.thread) await send({ ...write("setup", ["threads", t, "messages"], { text: `first ${M}` }, true) })
        await pooled(concurrency, pool.run.map((r) => () => send(read("setup", ["runs", r], [["waitMs", "5000"]]))))
        await pooled(concurrency, pool.thread.map((t) => () => send(read("setup", ["threads", t, "items"]))))
        for (const t of pool.thread.slice(0, 2)) {
          for (const p of ["claude", "codex"]) await send(write("setup", ["threads", t, "switch"], { providerInstance: p }, true))
        }
        await send(read("setup", ["threads"], [["limit", "2"]]))
      })
      expect(pool.item.length).toBeGreaterThan(0)
      expect(pool.handoff.length).toBeGreaterThan(0)
      expect(pool.cursor.length).toBeGreaterThan(0)

      const check = yield* Effect.promise(() =>
        fc.check(
          fc.asyncProperty(fc.array(request, { minLength: batchSize, maxLength: batchSize }), async (batch) => {
            await pooled(concurrency, batch.map((r) => () => send(r)))
            if (++batchCount % 40 === 0) console.log(`${batchCount} batches, ${outcomes.length} requests, ${Date.now() - started} ms`)
          }),
          { seed, numRuns: batches, interruptAfterTimeLimit: 240_000 }
        )
      )
      agent.destroy()
      // The property itself throws only when the client failed (not the server): say how.
      expect(check.failed ? `seed ${seed}: ${"errorInstance" in check ? String(check.errorInstance) : "interrupted"}` : null).toBeNull()
      // Every faulty answer, one per kind of request and fault, with the seed that replays the run.
      const faults = new Map<string, string>()
      for (const o of outcomes) {
        const why = fault(o)
        if (why === null) continue
        const kind = `${why.replace(/\d{4,}/g, "N").slice(0, 60)} ${isRaw(o.request) ? "raw" : `${o.request.method} ${o.request.template} ${o.request.mutations.join(",")}`}`
        if (!faults.has(kind)) faults.set(kind, `${why}: ${describeRequest(o)}`)
      }
      expect([...faults.values()].slice(0, 20), `seed ${seed} (BATON_FUZZ_SEED=${seed} replays it): ${faults.size} kinds of fault`).toEqual([])
      const elapsed = Date.now() - started

      const { found, tables } = yield* markersInDatabase
      expect(tables).toEqual(expect.arrayContaining(["threads", "runs", "items", "thread_events", "command_receipts", "handoffs"]))
      const refused = outcomes.filter((o) => o.status !== null && o.status >= 400 && o.status < 500)
      const written = refused.filter((o) => found.has(o.marker))
      expect(written.map(describeRequest)).toEqual([])
      // The check can fail: what an accepted message or thread carried is in the database.
      const accepted = outcomes.filter((o) =>
        (o.status === 201 || o.status === 202) && o.bodyHasMarker &&
        (o.request.template === "messages.send" || o.request.template === "threads.create")
      )
      expect(accepted.length).toBeGreaterThan(50)
      expect(accepted.filter((o) => !found.has(o.marker)).map(describeRequest)).toEqual([])

      const statuses = new Map<number, number>()
      for (const o of outcomes) statuses.set(o.status ?? 0, (statuses.get(o.status ?? 0) ?? 0) + 1)
      console.log(`fuzz (${dialect}, seed ${seed}): ${outcomes.length} requests in ${elapsed} ms; statuses ${JSON.stringify(Object.fromEntries(statuses))}; ${refused.length} refused`)
      expect(outcomes.length).toBeGreaterThanOrEqual(batchSize * batches * 0.9)
    }).pipe(Effect.provide(serve(Harness.make([
      { name: "codex", window: 44_000, autoCompactThreshold: 42_000, inject: true },
      { name: "claude", window: 200_000, inject: false }
    ], { db: dialect === "sqlite" ? Path.join(dir, "baton.sqlite") : dialect, config: { interruptTimeoutMillis: 500 } }), { maxBodyBytes }))), 300_000)
})
