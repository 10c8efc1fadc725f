/**
 * The protocol Baton speaks, checked against the pinned binary: `codex app-server generate-json-schema --experimental`
 * is run, pruned to the definitions Baton uses (`prune`: the methods below, their params and results, and every
 * definition they reference), and compared with `src/codex/protocol/codex-app-server.subset.json`. A Codex version
 * that renames a method or changes a shape Baton relies on fails here as a diff (`BATON_UPDATE_FIXTURES=1` rewrites
 * the file; read the diff, then adapt `CodexProtocol.ts`). Also: every method and notification name Baton uses is one
 * the binary declares.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import * as ChildProcess from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { Method, Notification, ThreadResponse } from "../src/codex/CodexProtocol.js"
import { binary, normalise } from "./support/CodexLoopback.js"

const subsetFile = fileURLToPath(new URL("../src/codex/protocol/codex-app-server.subset.json", import.meta.url))

/** The definitions Baton reads or sends (their references are followed). */
const keep = [
  "InitializeParams", "InitializeResponse",
  "ThreadStartParams", "ThreadStartResponse", "ThreadResumeParams", "ThreadResumeResponse",
  "ThreadForkParams", "ThreadForkResponse", "TurnStartParams", "TurnStartResponse",
  "TurnInterruptParams", "TurnInterruptResponse", "ThreadInjectItemsParams", "ThreadInjectItemsResponse",
  "ThreadCompactStartParams", "ThreadCompactStartResponse", "ThreadReadParams", "ThreadReadResponse",
  "ThreadTokenUsageUpdatedNotification", "TurnStartedNotification", "TurnCompletedNotification",
  "ItemStartedNotification", "ItemCompletedNotification", "ErrorNotification", "AgentMessageDeltaNotification",
  "ContextCompactedNotification", "ThreadStartedNotification", "DynamicToolCallParams", "DynamicToolCallResponse"
]

type Json = null | boolean | number | string | ReadonlyArray<Json> | { readonly [key: string]: Json }
const read = (file: string) => JSON.parse(Fs.readFileSync(file, "utf8")) as { readonly [key: string]: Json }

/** `dir`'s schema bundle pruned to `keep`: `{ methods: { method: params definition }, definitions }`, keys sorted. */
const prune = (dir: string) => {
  const v2 = read(Path.join(dir, "codex_app_server_protocol.v2.schemas.json"))["definitions"] as Record<string, Json>
  const v1 = read(Path.join(dir, "codex_app_server_protocol.schemas.json"))["definitions"] as Record<string, Json>
  const lookup = (name: string): Json => {
    if (name in v2) return v2[name]!
    if (name in v1) return v1[name]!
    for (const file of [Path.join(dir, "v2", `${name}.json`), Path.join(dir, `${name}.json`)]) if (Fs.existsSync(file)) return read(file)
    throw new Error(`no definition ${name}`)
  }
  const out: Record<string, Json> = {}
  const walk = (value: Json): Json => {
    if (Array.isArray(value)) return value.map(walk)
    if (value !== null && typeof value === "object") {
      const copy: Record<string, Json> = {}
      for (const [key, v] of Object.entries(value)) {
        if (key === "definitions" || key === "$schema") continue
        if (key === "$ref" && typeof v === "string" && v.startsWith("#/definitions/")) {
          const name = v.slice("#/definitions/".length).replace(/^v2\//, "")
          copy[key] = `#/definitions/${name}`
          add(name)
        } else copy[key] = walk(v as Json)
      }
      return copy
    }
    return value
  }
  const add = (name: string) => {
    if (name in out) return
    out[name] = null
    out[name] = walk(lookup(name))
  }
  for (const name of keep) add(name)
  const methods: Record<string, string> = {}
  for (const file of ["ClientRequest", "ServerNotification", "ServerRequest"]) {
    for (const variant of read(Path.join(dir, `${file}.json`))["oneOf"] as ReadonlyArray<{ properties: { method: { enum: [string] }; params?: { $ref?: string } } }>) {
      const name = (variant.properties.params?.$ref ?? "").split("/").at(-1) ?? ""
      if (keep.includes(name)) methods[variant.properties.method.enum[0]] = name
    }
  }
  return stringify({ methods, definitions: out })
}

/** JSON with object keys sorted, one-space indent, and a final newline. */
const stringify = (value: unknown) => {
  const sort = (v: unknown): unknown =>
    Array.isArray(v) ? v.map(sort) : v !== null && typeof v === "object" ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, sort((v as Record<string, unknown>)[k])])) : v
  return JSON.stringify(sort(value), null, 1) + "\n"
}

describe("the Codex app-server protocol of the pinned binary", () => {
  it.live("generate-json-schema, pruned to what Baton speaks, equals the kept subset; Baton's method names exist", () =>
    Effect.acquireUseRelease(
      Effect.sync(() => Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-codex-schema-"))),
      (dir) =>
        Effect.sync(() => {
          ChildProcess.execFileSync(binary(), ["app-server", "generate-json-schema", "--experimental", "--out", dir], { stdio: "ignore", env: { ...process.env, CODEX_HOME: dir } })
          const generated = prune(dir)
          if (process.env["BATON_UPDATE_FIXTURES"] === "1") Fs.writeFileSync(subsetFile, generated)
          expect(generated).toBe(Fs.readFileSync(subsetFile, "utf8"))
          const methods = Object.keys((JSON.parse(generated) as { methods: Record<string, string> }).methods)
          const declared = new Set([...methods, ...listed(dir)])
          for (const name of [...Object.values(Method), ...Object.values(Notification).filter((n) => n !== Notification.initialized)]) {
            expect(declared.has(name), name).toBe(true)
          }
        }),
      (dir) => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true }))
    ))
})

describe("thread/fork in the kept subset (what Baton's forkThread sends and reads)", () => {
  const subset = JSON.parse(Fs.readFileSync(subsetFile, "utf8")) as {
    readonly methods: Record<string, string>
    readonly definitions: Record<string, { readonly properties: Record<string, unknown>; readonly required?: ReadonlyArray<string> }>
  }
  it("takes the parent's threadId (the only required member) and the settings Baton sends; answers the new thread and its model", () => {
    expect(subset.methods[Method.threadFork]).toBe("ThreadForkParams")
    const params = subset.definitions["ThreadForkParams"]!
    expect(params.required).toEqual(["threadId"])
    for (const sent of ["threadId", "cwd", "approvalPolicy", "sandbox", "model", "excludeTurns"]) expect(Object.keys(params.properties), sent).toContain(sent)
    const result = subset.definitions["ThreadForkResponse"]!
    expect(result.required).toEqual(expect.arrayContaining(["thread", "model"]))
    expect(result.properties["thread"]).toEqual({ $ref: "#/definitions/Thread" })
    const thread = subset.definitions["Thread"]!
    expect(thread.required).toContain("id")
    expect(Object.keys(thread.properties)).toEqual(expect.arrayContaining(["id", "path", "forkedFromId"]))
  })

  it.effect("the recorded thread/fork answer (fixtures/codex/adapter-fork.jsonl) decodes with Baton's ThreadResponse: a new id, forked from the parent's", () =>
    Effect.gen(function*() {
      const lines = Fs.readFileSync(fileURLToPath(new URL("./fixtures/codex/adapter-fork.jsonl", import.meta.url)), "utf8").split("\n")
      const request = lines.findIndex((l) => l.startsWith("-> ") && l.includes(`"method":"${Method.threadFork}"`))
      const id = (JSON.parse(lines[request]!.slice(3)) as { id: number }).id
      const answer = lines.find((l) => l.startsWith("<- ") && l.startsWith(`<- {"id":${id},`))!
      const result = (JSON.parse(answer.slice(3)) as { result: { thread: { forkedFromId: string | null } } }).result
      const decoded = yield* Schema.decodeUnknown(ThreadResponse)(result)
      expect(decoded.model).toBe("gpt-loopback")
      expect(result.thread.forkedFromId).not.toBeNull()
    }))
})

/** Every method name the bundle declares (requests, notifications, server requests). */
const listed = (dir: string) =>
  ["ClientRequest", "ServerNotification", "ServerRequest", "ClientNotification"].flatMap((file) =>
    (read(Path.join(dir, `${file}.json`))["oneOf"] as ReadonlyArray<{ properties: { method: { enum: [string] } } }>).map((v) => v.properties.method.enum[0])
  )

// Found when a full run under load failed the fork fixture: Codex wrote the turn/started notification before the
// turn/start result, the recording had them the other way round.
describe("fixtures of the JSON-RPC exchanges", () => {
  it("do not depend on the order in which Codex writes a response and the notifications of the same moment", () => {
    const request = { direction: "out" as const, line: JSON.stringify({ id: 8, method: "turn/start", params: { threadId: "t" } }) }
    const result = { direction: "in" as const, line: JSON.stringify({ id: 8, result: { turn: { id: "u" } } }) }
    const started = { direction: "in" as const, line: JSON.stringify({ method: "turn/started", params: { threadId: "t", turn: { id: "u" } } }) }
    const next = { direction: "out" as const, line: JSON.stringify({ id: 9, method: "turn/interrupt", params: { threadId: "t", turnId: "u" } }) }
    const one = normalise([request, result, started, next], "/home")
    expect(normalise([request, started, result, next], "/home")).toBe(one)
    expect(one.split("\n").map((l) => l.slice(0, 2) + (l === "" ? "" : ` ${(JSON.parse(l.slice(3)) as { method?: string }).method ?? "result"}`)))
      .toEqual(["-> turn/start", "<- result", "<- turn/started", "-> turn/interrupt", ""])
  })
})
