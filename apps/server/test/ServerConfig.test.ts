/**
 * The server's configuration: a config file validated whole (errors name the field's path), environment variables
 * over the file, flags over both, and the admin token file created once with mode 0600.
 */
import { ToolResultOffload } from "@baton/context"
import { ServerConfig } from "@baton/server"
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Option, Redacted } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"

const tempDir = () => Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-config-"))

/** Resolves with `env` as the only environment and `file` (JSON) as the config file. */
const resolveWith = (options: { readonly file?: unknown; readonly env?: Record<string, string>; readonly flags?: ServerConfig.ServeFlags }) => {
  const dir = tempDir()
  const config = Path.join(dir, "baton.json")
  if (options.file !== undefined) Fs.writeFileSync(config, typeof options.file === "string" ? options.file : JSON.stringify(options.file))
  return ServerConfig.resolve({
    ...(options.file === undefined ? {} : { config }),
    ...options.flags
  }).pipe(
    Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries({ BATON_DATA_DIR: dir, ...options.env })))),
    Effect.map((settings) => ({ settings, dir, config }))
  )
}

const failure = (options: Parameters<typeof resolveWith>[0]) =>
  Effect.map(Effect.flip(resolveWith(options)), (e) => e.message.replace(/^.*baton\.json: /, "baton.json: "))

describe("ServerConfig", () => {
  // Found by a user: `--host ::ffff:127.0.0.1` (IPv4-mapped loopback) was warned about as beyond loopback, and a host
  // name starting with "127." was taken for loopback.
  it("isLoopback: 127.0.0.0/8, ::1 and IPv4-mapped 127.0.0.0/8 in any spelling, localhost; nothing else", () => {
    const loopback = [
      "127.0.0.1", "127.0.0.2", "127.255.255.254", "localhost", "LocalHost", "::1", "[::1]", "0:0:0:0:0:0:0:1",
      "::ffff:127.0.0.1", "::ffff:7f00:1", "::FFFF:127.9.8.7", "[::ffff:127.0.0.1]", "0:0:0:0:0:ffff:7f00:0001",
      "::ffff:7fff:ffff"
    ]
    const beyond = [
      "0.0.0.0", "::", "[::]", "192.168.1.10", "10.0.0.1", "128.0.0.1", "::2", "::ffff:192.168.1.10", "::ffff:c0a8:10a",
      "::ffff:0.0.0.0", "::ffff:8000:1", "::127.0.0.1", "fe80::1%lo", "127.example.com", "example.com", "localhost.example.com"
    ]
    expect(loopback.filter((h) => !ServerConfig.isLoopback(h))).toEqual([])
    expect(beyond.filter((h) => ServerConfig.isLoopback(h))).toEqual([])
  })

  it.effect("defaults: loopback on 8787, SQLite in the data dir, the default providers, a generated token file (0600)", () =>
    Effect.gen(function*() {
      const { dir, settings } = yield* resolveWith({})
      expect([settings.host, settings.port]).toEqual(["127.0.0.1", 8787])
      expect(settings.database).toEqual({ _tag: "sqlite", path: Path.join(dir, "baton.sqlite") })
      expect(settings.providers.map((p) => p.name)).toEqual(["codex", "claude"])
      expect(settings.limits.maxBodyBytes).toBe(2 * 1024 * 1024)
      const tokenFile = Path.join(dir, "token")
      expect(settings.auth.source).toEqual({ _tag: "file", path: tokenFile, created: true, madeDirectory: null, held: null })
      expect(Fs.statSync(tokenFile).mode & 0o777).toBe(0o600)
      expect(Fs.readFileSync(tokenFile, "utf8").trim()).toBe(Redacted.value(settings.auth.adminToken))
      expect(Redacted.value(settings.auth.adminToken)).toMatch(/^[A-Za-z0-9_-]{43}$/)
      // The token never shows in the settings' printed form.
      expect(JSON.stringify(settings)).not.toContain(Redacted.value(settings.auth.adminToken))
      expect(settings.auth.readToken).toBeNull()
    }))

  it.effect("a config file sets everything; the environment overrides it; flags override both", () =>
    Effect.gen(function*() {
      const file = {
        host: "127.0.0.2",
        port: 9000,
        database: { url: "postgres://baton@127.0.0.1:5432/baton" },
        providers: [{ name: "codex", window: 100_000, autoCompactThreshold: 90_000 }, { name: "claude", window: 200_000, inject: false }],
        auth: { token: "file-admin-token-0123456789", readToken: "file-read-token-0123456789" },
        limits: { maxBodyBytes: 65_536, shutdownTimeoutMs: 1_000 }
      }
      const fromFile = (yield* resolveWith({ file })).settings
      expect([fromFile.host, fromFile.port, fromFile.database]).toEqual(["127.0.0.2", 9000, { _tag: "postgres", url: "postgres://baton@127.0.0.1:5432/baton" }])
      expect(fromFile.providers).toEqual([
        { name: "codex", window: 100_000, autoCompactThreshold: 90_000, inject: true },
        { name: "claude", window: 200_000, autoCompactThreshold: null, inject: false }
      ])
      expect([Redacted.value(fromFile.auth.adminToken), fromFile.auth.source._tag]).toEqual(["file-admin-token-0123456789", "config"])
      expect(fromFile.limits).toMatchObject({ maxBodyBytes: 65_536, shutdownTimeoutMs: 1_000 })

      const env = {
        BATON_PORT: "9100",
        BATON_TOKEN: "env-admin-token-0123456789",
        BATON_READ_TOKEN: "env-read-token-0123456789",
        BATON_DATABASE_URL: "postgres://other@127.0.0.1:5432/x",
        BATON_PROVIDERS: "pi:16000",
        BATON_MAX_BODY_BYTES: "4096"
      }
      const fromEnv = (yield* resolveWith({ file, env })).settings
      expect([fromEnv.port, fromEnv.database, fromEnv.providers.map((p) => p.name), fromEnv.limits.maxBodyBytes])
        .toEqual([9100, { _tag: "postgres", url: "postgres://other@127.0.0.1:5432/x" }, ["pi"], 4096])
      expect([Redacted.value(fromEnv.auth.adminToken), Redacted.value(fromEnv.auth.readToken!), fromEnv.auth.source._tag])
        .toEqual(["env-admin-token-0123456789", "env-read-token-0123456789", "env"])

      const fromFlags = (yield* resolveWith({ file, env, flags: { port: 0, host: "localhost", db: "/tmp/x.sqlite" } })).settings
      expect([fromFlags.host, fromFlags.port, fromFlags.database]).toEqual(["localhost", 0, { _tag: "sqlite", path: "/tmp/x.sqlite" }])
    }))

  it.effect("tracing: off by default, on from the file, BATON_TRACING overriding it; a bad value named", () =>
    Effect.gen(function*() {
      expect((yield* resolveWith({})).settings.tracing).toBe(false)
      expect((yield* resolveWith({ file: { tracing: true } })).settings.tracing).toBe(true)
      expect((yield* resolveWith({ file: { tracing: true }, env: { BATON_TRACING: "off" } })).settings.tracing).toBe(false)
      expect((yield* resolveWith({ env: { BATON_TRACING: "1" } })).settings.tracing).toBe(true)
      expect((yield* resolveWith({ env: { BATON_TRACING: "TRUE" } })).settings.tracing).toBe(true)
      expect(yield* failure({ env: { BATON_TRACING: "yes" } })).toBe("BATON_TRACING: expected 1, true, on, 0, false or off, got \"yes\"")
      expect(yield* failure({ file: { tracing: "on" } })).toBe("baton.json: tracing: Expected boolean, actual \"on\"")
    }))

  it.effect("a bad config file is refused whole, naming each field's path", () =>
    Effect.gen(function*() {
      expect(yield* failure({ file: "{ not json" })).toMatch(/^baton\.json: not valid JSON/)
      expect(yield* failure({ file: { port: "80" } })).toBe("baton.json: port: Expected number, actual \"80\"")
      expect(yield* failure({ file: { prot: 80 } })).toBe("baton.json: prot: is unexpected, expected: \"host\" | \"port\" | \"database\" | \"providers\" | \"auth\" | \"limits\" | \"offload\" | \"gateway\" | \"tracing\"")
      expect(yield* failure({ file: { providers: [{ name: "codex", window: 44_000 }, { name: "codex", window: 500 }] } }))
        .toBe("baton.json: providers[1].window: Expected a number between 1000 and 100000000, actual 500")
      expect(yield* failure({ file: { providers: [{ name: "codex", window: 44_000, autoCompactThreshold: 50_000 }] } }))
        .toBe("baton.json: providers[0].autoCompactThreshold: autoCompactThreshold 50000 exceeds window 44000")
      expect(yield* failure({ file: { providers: [{ name: "codex", window: 44_000 }, { name: "codex", window: 50_000 }] } }))
        .toBe("baton.json: providers[1].name: \"codex\" given twice")
      expect(yield* failure({ file: { auth: { token: "short" } } }))
        .toBe("baton.json: auth.token: a token is 16 to 512 printable ASCII characters without spaces")
      expect(yield* failure({ file: { limits: { maxBodyBytes: 10 } } }))
        .toBe("baton.json: limits.maxBodyBytes: Expected a number between 1024 and 1073741824, actual 10")
      expect(yield* failure({ env: { BATON_PORT: "http" } })).toBe("BATON_PORT: expected an integer from 0 to 65535, got \"http\"")
      // Decimal digits only: `Number` read these as 80, 1,000,000 and 4,096.
      expect(yield* failure({ env: { BATON_PORT: "0x50" } })).toBe("BATON_PORT: expected an integer from 0 to 65535, got \"0x50\"")
      expect(yield* failure({ env: { BATON_MAX_BODY_BYTES: "1e6" } })).toBe("BATON_MAX_BODY_BYTES: expected an integer from 1024 to 1073741824, got \"1e6\"")
      expect(yield* failure({ env: { BATON_MAX_BODY_BYTES: "0b1000000000000" } }))
        .toBe("BATON_MAX_BODY_BYTES: expected an integer from 1024 to 1073741824, got \"0b1000000000000\"")
      expect(yield* failure({ env: { BATON_TOKEN: "same-token-0123456789", BATON_READ_TOKEN: "same-token-0123456789" } }))
        .toBe("auth: the read-only token must differ from the admin token")
    }))

  it.effect("model-API instances: free names, the key read from the variable named (never printed), errors naming the field", () =>
    Effect.gen(function*() {
      const claude = {
        kind: "anthropic-messages",
        name: "claude-main",
        baseUrl: "https://api.anthropic.com",
        model: "claude-sonnet-4-5",
        apiKeyEnv: "ANTHROPIC_API_KEY",
        contextWindow: 200_000,
        autoCompactThreshold: 180_000,
        maxOutputTokens: 32_000,
        prices: { input: 3, cacheWrite: 3.75, cacheRead: 0.3, output: 15 }
      }
      const local = { ...claude, kind: "openai-chat", name: "local", baseUrl: "http://127.0.0.1:8000/v1", apiKeyEnv: undefined, toolResultOffload: false }
      const file = { providers: [claude, local, { name: "codex", window: 44_000 }] }
      const { settings } = yield* resolveWith({ file, env: { ANTHROPIC_API_KEY: "sk-ant-secret-value-0123" } })
      expect(settings.providers.map((p) => p.name)).toEqual(["claude-main", "local", "codex"])
      const [first, second, third] = settings.providers
      expect(ServerConfig.isModelInstance(first!) && ServerConfig.isModelInstance(second!) && !ServerConfig.isModelInstance(third!)).toBe(true)
      if (!ServerConfig.isModelInstance(first!) || !ServerConfig.isModelInstance(second!)) return
      expect([first.config.kind, first.config.model, first.toolResultOffload, Option.map(first.apiKey, Redacted.value)])
        .toEqual(["anthropic-messages", "claude-sonnet-4-5", { enabled: true, settings: ToolResultOffload.defaults }, Option.some("sk-ant-secret-value-0123")])
      expect([second.toolResultOffload.enabled, Option.isNone(second.apiKey)]).toEqual([false, true])
      expect(ServerConfig.windowOf(first)).toEqual({ window: 200_000, autoCompactThreshold: 180_000 })
      // The key never shows in the settings' printed form.
      expect(JSON.stringify(settings)).not.toContain("sk-ant-secret-value-0123")
      expect(String(first.apiKey)).not.toContain("sk-ant-secret-value-0123")

      const one = (entry: unknown) => failure({ file: { providers: [{ name: "codex", window: 44_000 }, entry] }, env: { ANTHROPIC_API_KEY: "k" } })
      expect(yield* one({ ...claude, baseUrl: "ftp://x" }))
        .toBe("baton.json: providers[1].baseUrl: Expected a string matching the pattern ^https?:\\/\\/[^\\s]+$, actual \"ftp://x\"")
      expect(yield* one({ ...claude, baseUrl: "https://api.anthropic.com/v1/messages" }))
        .toBe("baton.json: providers[1].baseUrl: baseUrl is the API root without the endpoint's path (Baton appends it): https://api.anthropic.com/v1/messages")
      expect(yield* one({ ...claude, name: "Claude Main" }))
        .toBe("baton.json: providers[1].name: a provider name is a lowercase letter then up to 39 of a-z, 0-9, _ and -")
      expect(yield* one({ ...claude, prices: { input: 3 } }))
        .toBe("baton.json: providers[1].prices.cacheWrite: is missing; providers[1].prices.cacheRead: is missing; providers[1].prices.output: is missing")
      expect(yield* one({ ...claude, kind: "gemini" }))
        .toBe("baton.json: providers[1].kind: expected one of \"scripted\", \"codex\", \"anthropic-messages\", \"openai-responses\", \"openai-chat\", actual \"gemini\"")
      expect(yield* one({ ...claude, autoCompactThreshold: 300_000 }))
        .toBe("baton.json: providers[1].autoCompactThreshold: autoCompactThreshold 300000 exceeds contextWindow 200000")
      expect(yield* one({ ...claude, maxOutputTokens: 200_000 }))
        .toBe("baton.json: providers[1].maxOutputTokens: maxOutputTokens 200000 must be below contextWindow 200000")
      expect(yield* one({ ...claude, name: "codex" })).toBe("baton.json: providers[1].name: \"codex\" given twice")
      expect(yield* one({ ...claude, media: "no" })).toBe("baton.json: providers[1].media: Expected boolean, actual \"no\"")
      // Tool-result offload: true, false, or on/off with the policy's settings (issue 11 item 4); bad ones named.
      const tuned = yield* resolveWith({ file: { providers: [{ ...claude, toolResultOffload: { keepNewestUnits: 1, aggressiveRatio: 0.9 } }] }, env: { ANTHROPIC_API_KEY: "k" } })
      const only = tuned.settings.providers[0]!
      expect(ServerConfig.isModelInstance(only) && only.toolResultOffload)
        .toEqual({ enabled: true, settings: { ...ToolResultOffload.defaults, keepNewestUnits: 1, aggressiveRatio: 0.9 } })
      expect(yield* one({ ...claude, toolResultOffload: { aggressiveRatio: 0.5 } }))
        .toBe("baton.json: providers[1].toolResultOffload: aggressiveTargetRatio (0.6) must be below aggressiveRatio (0.5)")
      expect(yield* one({ ...claude, toolResultOffload: { keepNewestUnits: -2 } })).toMatch(/^baton\.json: providers\[1\]\.toolResultOffload/)
      expect(yield* one({ ...claude, toolResultOffload: { pinnedItemIds: [] } })).toMatch(/^baton\.json: providers\[1\]\.toolResultOffload/)
      // The /offload summariser: a model-API instance of the file, named.
      const withSummariser = yield* resolveWith({ file: { providers: [claude], offload: { summariser: "claude-main" } }, env: { ANTHROPIC_API_KEY: "k" } })
      expect(withSummariser.settings.offload).toEqual({ summariser: "claude-main" })
      expect(yield* failure({ file: { providers: [claude, { name: "codex", window: 44_000 }], offload: { summariser: "codex" } }, env: { ANTHROPIC_API_KEY: "k" } }))
        .toBe("baton.json: offload.summariser: \"codex\" is not a model-API provider instance of this config (one of \"claude-main\")")
      // The automatic /offload: a threshold in 0.05..1, defaults filled in; a bad one named.
      const withAuto = yield* resolveWith({ file: { providers: [claude], offload: { auto: { thresholdRatio: 0.8 } } }, env: { ANTHROPIC_API_KEY: "k" } })
      expect(withAuto.settings.offload).toEqual({ summariser: null, auto: { thresholdRatio: 0.8, keepTokens: null, approvalMode: "server-policy" } })
      expect(yield* failure({ file: { providers: [claude], offload: { auto: { thresholdRatio: 1.5 } } }, env: { ANTHROPIC_API_KEY: "k" } }))
        .toMatch(/^baton\.json: offload\.auto\.thresholdRatio: /)
      // The gateway's routes: each names an anthropic-messages instance of the file (issue 14), checked at start.
      const withGateway = yield* resolveWith({ file: { providers: [claude], gateway: { routes: [{ model: "claude-*", provider: "claude-main" }] } }, env: { ANTHROPIC_API_KEY: "k" } })
      expect(withGateway.settings.gateway).toEqual({ routes: [{ model: "claude-*", provider: "claude-main" }], maxBodyBytes: 32 * 1024 * 1024 })
      expect(yield* failure({ file: { providers: [claude, { name: "codex", window: 44_000 }], gateway: { routes: [{ model: "claude-*", provider: "claude-main" }, { model: "x", provider: "codex" }] } }, env: { ANTHROPIC_API_KEY: "k" } }))
        .toBe("baton.json: gateway.routes[1].provider: \"codex\" is not an anthropic-messages, openai-responses or openai-chat provider instance of this config (one of \"claude-main\")")
      // ... or an openai-responses instance (the Responses endpoint, for Codex).
      const openai = { ...claude, kind: "openai-responses", name: "openai-main", baseUrl: "https://api.openai.com/v1", model: "gpt-5", apiKeyEnv: "OPENAI_API_KEY" }
      const withResponses = yield* resolveWith({
        file: { providers: [claude, openai], gateway: { routes: [{ model: "claude-*", provider: "claude-main" }, { model: "gpt-*", provider: "openai-main" }] } },
        env: { ANTHROPIC_API_KEY: "k", OPENAI_API_KEY: "k" }
      })
      expect(withResponses.settings.gateway?.routes).toEqual([{ model: "claude-*", provider: "claude-main" }, { model: "gpt-*", provider: "openai-main" }])
      // A key variable named but unset (or empty) stops the start, naming the variable.
      for (const env of [{}, { ANTHROPIC_API_KEY: "" }]) {
        expect(yield* failure({ file: { providers: [claude] }, env }))
          .toBe("baton.json: providers[0].apiKeyEnv: the environment variable ANTHROPIC_API_KEY (the key of provider \"claude-main\") is not set")
      }
    }))

  it.effect("codex instances: kind codex with its binary, CODEX_HOME, model, window and threshold; bad fields named", () =>
    Effect.gen(function*() {
      const home = tempDir()
      const codex = { kind: "codex", name: "codex-real", codexHome: home, model: "gpt-5-codex", contextWindow: 44_000, autoCompactThreshold: 42_000 }
      const { settings } = yield* resolveWith({ file: { providers: [codex, { name: "scripted", window: 1_000 }] } })
      const [first, second] = settings.providers
      expect(ServerConfig.isCodexInstance(first!) && !ServerConfig.isCodexInstance(second!) && !ServerConfig.isModelInstance(first!)).toBe(true)
      if (!ServerConfig.isCodexInstance(first!)) return
      expect(first.config).toEqual({ kind: "codex", codexHome: home, model: "gpt-5-codex", contextWindow: 44_000, autoCompactThreshold: 42_000 })
      expect(ServerConfig.windowOf(first)).toEqual({ window: 44_000, autoCompactThreshold: 42_000 })
      const one = (entry: unknown) => failure({ file: { providers: [entry] } })
      expect(yield* one({ ...codex, autoCompactThreshold: 50_000 }))
        .toBe("baton.json: providers[0].autoCompactThreshold: autoCompactThreshold 50000 exceeds contextWindow 44000")
      expect(yield* one({ ...codex, baseUrl: "http://x" })).toMatch(/^baton\.json: providers\[0\]\.baseUrl: is unexpected/)
      expect(yield* one({ ...codex, contextWindow: 0 })).toMatch(/^baton\.json: providers\[0\]\.contextWindow: /)
      // A CODEX_HOME that does not exist is said at start (found by a review: Codex said it only at the first turn,
      // its cause cut off by a backtrace).
      expect(yield* one({ ...codex, codexHome: `${home}/missing` }))
        .toBe(`baton.json: providers[0].codexHome: ${home}/missing is not a directory (Codex's CODEX_HOME must exist)`)
      // So is a binary that is missing or not executable (found by a review: said only at the first message).
      expect(yield* one({ ...codex, binary: `${home}/no-codex` }))
        .toBe(`baton.json: providers[0].binary: ${home}/no-codex is not an executable file`)
      Fs.writeFileSync(`${home}/plain`, "not a program")
      expect(yield* one({ ...codex, binary: `${home}/plain` }))
        .toBe(`baton.json: providers[0].binary: ${home}/plain is not an executable file`)
    }))

  it.effect("the token file is created once and read back on the next start", () =>
    Effect.gen(function*() {
      const dir = tempDir()
      const file = Path.join(dir, "nested", "token")
      const first = yield* ServerConfig.tokenFromFile(file)
      const second = yield* ServerConfig.tokenFromFile(file)
      expect([first.created, second.created, second.token]).toEqual([true, false, first.token])
      Fs.writeFileSync(file, "tiny\n")
      expect((yield* Effect.flip(ServerConfig.tokenFromFile(file))).message).toBe(
        `${file}: the token file holds no usable token (16 to 512 printable ASCII characters)`
      )
    }))

  it.effect("a token file another serve process wrote after this one looked is read, not refused (four serve processes on one directory: EEXIST)", () => Effect.gen(function*() {
    const dir = tempDir()
    const file = Path.join(dir, "token")
    const won = yield* ServerConfig.createTokenFile(file)
    // The loser of the race: it found no file, then creates one.
    const lost = yield* ServerConfig.createTokenFile(file)
    expect([won.created, lost.created, lost.token]).toEqual([true, false, won.token])
    expect(Fs.readFileSync(file, "utf8")).toBe(`${won.token}\n`)
    expect((Fs.statSync(file).mode & 0o777).toString(8)).toBe("600")
    // Nothing of either attempt is left beside it.
    expect(Fs.readdirSync(dir)).toEqual(["token"])
  }))

  // Two `baton serve` on a fresh data directory: A created the token file, B read A's token from it and serves with
  // it, then A could not start. A's cleanup removed the file B's clients read the token from (b48srv).
  it.effect("a serve that cannot start leaves the token file another serve read and holds (released: removed)", () =>
    Effect.gen(function*() {
      const dir = tempDir()
      const file = Path.join(dir, "data", "token")
      const a = yield* ServerConfig.tokenFromFile(file)
      const b = yield* ServerConfig.tokenFromFile(file)
      expect([a.created, b.created, b.token]).toEqual([true, false, a.token])
      const sourceA = { _tag: "file" as const, path: file, created: a.created, madeDirectory: a.madeDirectory, held: a.held }
      yield* ServerConfig.removeCreatedTokenFile(sourceA, a.token)
      expect(Fs.readFileSync(file, "utf8")).toBe(`${a.token}\n`)
      // B stops: its hold goes; A's cleanup now removes the file and the directory it made, nothing left behind. The
      // mark of a process that is gone (killed) holds nothing and is swept.
      yield* ServerConfig.releaseTokenFile({ _tag: "file", path: file, created: b.created, madeDirectory: b.madeDirectory, held: b.held })
      Fs.writeFileSync(`${file}.in-use.999999999.0a0b`, "")
      yield* ServerConfig.removeCreatedTokenFile(sourceA, a.token)
      expect(Fs.readdirSync(dir)).toEqual([])
    }))

  it.effect("a serve that cannot start leaves a token file that no longer holds its token", () =>
    Effect.gen(function*() {
      const dir = tempDir()
      const file = Path.join(dir, "token")
      const a = yield* ServerConfig.tokenFromFile(file)
      // Meanwhile the file was removed and another serve wrote its own.
      Fs.rmSync(file)
      const other = yield* ServerConfig.tokenFromFile(file)
      yield* ServerConfig.removeCreatedTokenFile({ _tag: "file", path: file, created: true, madeDirectory: null, held: null }, a.token)
      expect(Fs.readFileSync(file, "utf8")).toBe(`${other.token}\n`)
      expect(Fs.readdirSync(dir)).toEqual(["token"])
    }))
})
