/**
 * The `baton` command as a user runs it: a real process, real files. Bad input prints one line naming the problem,
 * exits 2 and writes nothing.
 */
import { describe, expect, it } from "@effect/vitest"
import { execFile } from "node:child_process"
import * as Fs from "node:fs"
import * as Net from "node:net"
import * as Os from "node:os"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { batonArgs } from "./support/CliEntry.js"

const repo = fileURLToPath(new URL("../../../", import.meta.url))
const raw = Path.join(repo, "../shared/transcripts/raw")

const baton = (args: ReadonlyArray<string>) =>
  new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
    execFile(process.execPath, batonArgs(args), { cwd: repo, env: { ...process.env, BATON_DATA_DIR: "" } }, (error, stdout, stderr) => {
      resolve({ code: error === null ? 0 : (error.code as number), stdout, stderr })
    })
  })

const tmp = () => Fs.mkdtempSync(Path.join(Os.tmpdir(), "baton-cli-"))

describe("baton (process)", () => {
  it("runs from source as `pnpm baton` does (tsx), the way the other CLI tests' bundle is built from", async () => {
    const result = await new Promise<{ code: number; stdout: string }>((resolve) => {
      execFile(process.execPath, ["--import", "tsx", "apps/cli/src/bin.ts", "--help"], { cwd: repo }, (error, stdout) =>
        resolve({ code: error === null ? 0 : (error.code as number), stdout }))
    })
    expect(result.code).toBe(0)
    for (const command of ["replay", "demo", "serve", "offload", "tool-results"]) expect(result.stdout).toContain(command)
  })

  it("replays, lists and shows a thread, and rejects bad input with exit 2 writing nothing", async () => {
    const dir = tmp()
    const db = Path.join(dir, "baton.sqlite")
    const truncated = Path.join(dir, "truncated.jsonl")
    const lines = Fs.readFileSync(Path.join(raw, "pi/large-session.jsonl"), "utf8").split("\n")
    Fs.writeFileSync(truncated, lines.slice(0, 40).join("\n") + "\n" + lines[40]!.slice(0, 50))

    const notSqlite = Path.join(dir, "notes.txt")
    Fs.writeFileSync(notSqlite, "these are not the droids\n".repeat(100))
    const [missing, broken, badProvider, ok, badSeed, badDb, directory] = await Promise.all([
      baton(["replay", Path.join(dir, "nope.jsonl"), "--db", db]),
      baton(["replay", truncated, "--db", db]),
      baton(["replay", Path.join(raw, "pi/large-session.jsonl"), "--providers", "codex:44000,gpt9:1000", "--db", db]),
      baton(["replay", Path.join(raw, "swe-agent/pydicom__pydicom-1458.traj"), "--db", Path.join(dir, "ok.sqlite")]),
      baton(["replay", Path.join(raw, "pi/large-session.jsonl"), "--seed", "x", "--json", "--db", db]),
      baton(["threads", "--db", notSqlite]),
      baton(["replay", raw, "--db", db])
    ])
    for (const r of [missing, broken, badProvider, badSeed, badDb, directory]) {
      expect(r.code).toBe(2)
      // With --json, stdout is the one JSON document naming the failure as stderr's line does.
      expect(r.stdout).toBe(r === badSeed ? `{"error":{"code":"usage","message":"--seed: expected an integer in decimal digits, got 'x'"}}\n` : "")
      expect(r.stderr.trim().split("\n")).toHaveLength(1)
    }
    expect(missing.stderr).toBe(`baton: ${Path.join(dir, "nope.jsonl")}: file not found\n`)
    expect(broken.stderr).toMatch(new RegExp(`^baton: ${truncated}:41: truncated record`))
    expect(badProvider.stderr).toContain(`unknown provider "gpt9"`)
    expect(badSeed.stderr).toBe("baton: --seed: expected an integer in decimal digits, got 'x'\n")
    expect(badDb.stderr).toMatch(/^baton: .*(file is not a database|not a database)/)
    expect(directory.stderr).toBe(`baton: ${raw} is a directory; give one transcript file\n`)
    expect(Fs.existsSync(db)).toBe(false)

    expect(ok.code).toBe(0)
    expect(ok.stdout).toContain("invariants: all hold")
    expect(ok.stdout).toMatch(/^run {4}1 codex/m)

    const okDb = Path.join(dir, "ok.sqlite")
    const threads = await baton(["threads", "--db", okDb])
    expect(threads.code).toBe(0)
    const threadId = threads.stdout.split(/\s+/)[0]!
    expect(threadId).toMatch(/^thr_/)
    const [show, handoffs, unknown, noDb] = await Promise.all([
      baton(["thread", "show", threadId, "--db", okDb]),
      baton(["handoffs", threadId, "--db", okDb]),
      baton(["thread", "show", "thr_unknown", "--db", okDb]),
      baton(["threads", "--db", Path.join(dir, "absent.sqlite")])
    ])
    expect(show.code).toBe(0)
    expect(show.stdout).toContain(`thread ${threadId}`)
    expect(show.stdout).toContain("provider codex (active)")
    expect(handoffs.code).toBe(0)
    expect(unknown.code).toBe(2)
    expect(unknown.stderr).toBe("baton: thread thr_unknown not found (list threads with `baton threads`)\n")
    expect(noDb.code).toBe(2)
    // `--json` in-process: the documents the server serves (they had no `--json`: b47srv); `thread` alone is refused.
    const [threadsJson, showJson, bare] = await Promise.all([
      baton(["threads", "--db", okDb, "--json"]),
      baton(["thread", "show", threadId, "--db", okDb, "--json"]),
      baton(["thread"])
    ])
    const listed = JSON.parse(threadsJson.stdout) as { threads: Array<{ id: string; totals: { runs: number; items: number } }> }
    expect([threadsJson.code, listed.threads.map((t) => t.id)]).toEqual([0, [threadId]])
    const shown = JSON.parse(showJson.stdout) as { thread: { id: string }; totals: { runs: number; items: number } }
    expect([showJson.code, shown.thread.id, shown.totals]).toEqual([0, threadId, listed.threads[0]!.totals])
    expect(shown.totals.runs).toBeGreaterThan(0)
    expect(bare).toEqual({
      code: 2,
      stdout: "",
      stderr: "baton: `baton thread` needs a subcommand: `baton thread show THREAD-ID` or `baton thread create --provider P` (see `baton thread --help`)\n"
    })
    expect(Fs.existsSync(Path.join(dir, "absent.sqlite"))).toBe(false)
    Fs.rmSync(dir, { recursive: true, force: true })
  }, 300_000)

  // Found by a user: a transcript whose recorded prompt Baton refuses to send (a NUL, a lone surrogate, more than 1 MiB)
  // created its thread, then died on a schema dump (`{ readonly _tag: "SendMessage"; ... }`), exit 2 with the thread
  // left in the database. It is bad input at the prompt's line, found before the database is opened.
  it("a recorded prompt Baton would refuse is bad input at its line, exit 2, nothing written", async () => {
    const dir = tmp()
    const session = JSON.stringify({ type: "session", id: "s1", timestamp: "2025-11-20T23:33:50.805Z", cwd: "/x" })
    const user = (text: string) => JSON.stringify({ type: "message", message: { role: "user", content: [{ type: "text", text }] } })
    const cases = [
      ["nul", "hello\u0000world", "the prompt contains a NUL character (U+0000) at index 5, which cannot be stored"],
      ["surrogate", "hi \ud800 there", "the prompt is not well-formed Unicode: lone surrogate at index 3"],
      ["long", "x".repeat(1_048_577), "the prompt is 1048577 characters, more than the 1048576 Baton takes in one message"]
    ] as const
    const results = await Promise.all(cases.map(([name, text]) => {
      const file = Path.join(dir, `${name}.jsonl`)
      Fs.writeFileSync(file, [session, user("fine"), user(text)].join("\n") + "\n")
      return baton(["replay", file, "--json", "--db", Path.join(dir, `${name}.sqlite`)])
    }))
    expect(results.map((r) => [r.code, r.stderr])).toEqual(cases.map(([name, , reason]) =>
      [2, `baton: ${Path.join(dir, `${name}.jsonl`)}:3: ${reason}: Baton refuses such a prompt, so this transcript cannot be replayed as recorded\n`]))
    for (const [name] of cases) expect(Fs.existsSync(Path.join(dir, `${name}.sqlite`))).toBe(false)
    expect(JSON.parse(results[0]!.stdout)).toEqual({ error: { code: "bad_input", message: results[0]!.stderr.slice("baton: ".length, -1) } })
    Fs.rmSync(dir, { recursive: true, force: true })
  }, 120_000)

  // Found by a user: `baton offload T --keep-tokens abc` printed `'abc' is not a integer` and a blank line, without
  // the `baton:` every other error has and without naming the option; so did every command line @effect/cli itself
  // refuses (a value that does not parse, a missing argument or option, an unknown option or subcommand).
  it("a command line that does not parse is one `baton:` line (the option named when its value is wrong), exit 2", async () => {
    const cases: ReadonlyArray<readonly [ReadonlyArray<string>, string]> = [
      [["offload", "thr_x", "--keep-tokens", "abc"], "baton: --keep-tokens: expected a number of tokens in decimal digits, got 'abc'"],
      [["offload", "thr_x", "--keep-tokens=1.5"], "baton: --keep-tokens: expected a number of tokens in decimal digits, got '1.5'"],
      // `Number` read these as 1000 and 16: every integer flag takes decimal digits only, as --port does.
      [["offload", "thr_x", "--keep-tokens", "1e3"], "baton: --keep-tokens: expected a number of tokens in decimal digits, got '1e3'"],
      [["replay", "x.jsonl", "--seed", "1e3"], "baton: --seed: expected an integer in decimal digits, got '1e3'"],
      [["replay", "x.jsonl", "--switch-every", "0x10"], "baton: --switch-every: expected an integer (0: never) in decimal digits, got '0x10'"],
      [["offload-control", "thr_x", "--keep-newest", "many"], "baton: --keep-newest: expected a number of tool units in decimal digits, got 'many'"],
      [["replay", "x.jsonl", "--interrupt-rate", "often"], "baton: --interrupt-rate: 'often' is not a float"],
      [["serve", "--port", "http"], "baton: --port: expected an integer from 0 to 65535 in decimal digits, got 'http'"],
      [["thread", "create"], "baton: Expected to find option: '--provider'"],
      [["send", "thr_x"], "baton: Missing argument <text>"],
      [["threads", "--bogus"], "baton: Received unknown argument: '--bogus'"],
      [["frobnicate"], "baton: Invalid subcommand for baton - use one of 'replay', 'demo', 'threads', 'thread', 'handoffs', " +
        "'send', 'switch', 'compact', 'offload', 'offload-control', 'tool-results', 'events', 'serve'"]
    ]
    const results = await Promise.all(cases.map(([args]) => baton(args)))
    expect(results.map((r) => [r.code, r.stdout, r.stderr])).toEqual(cases.map(([, line]) => [2, "", `${line}\n`]))
  })

  // Issue 15: `--json` prints exactly one JSON document on stdout, an exit 2 included (it printed nothing).
  it("with --json, bad input (exit 2) is one JSON error document on stdout beside the `baton:` line on stderr, in every --json command", async () => {
    const dir = tmp()
    const needsServer = (name: string) => `\`baton ${name}\` talks to a Baton server: pass --server URL before the command (or set BATON_SERVER)`
    const cases: ReadonlyArray<readonly [ReadonlyArray<string>, "bad_input" | "usage", string]> = [
      [["replay", Path.join(dir, "nope.jsonl"), "--json", "--db", Path.join(dir, "b.sqlite")], "bad_input", `${Path.join(dir, "nope.jsonl")}: file not found`],
      [["replay", Path.join(raw, "pi/large-session.jsonl"), "--providers", "gpt9:1000", "--json", "--db", Path.join(dir, "b.sqlite")], "bad_input",
        "--providers: \"gpt9:1000\": unknown provider \"gpt9\" (known: codex, claude, openai, anthropic, pi, openhands, gemini, scripted)"],
      [["demo", "--samples", dir, "--json"], "bad_input",
        `the sample transcripts are not in ${dir} (no ${Path.join(dir, "raw", "pi", "before-compaction.jsonl")}); replay one of your own agent sessions instead: ` +
        "pnpm baton replay ~/.claude/projects/<project-dir>/<session-id>.jsonl (Claude Code) or " +
        "pnpm baton replay ~/.pi/agent/sessions/<project-dir>/<timestamp>_<session-id>.jsonl (pi)"],
      [["compact", "thr_x", "--json"], "bad_input", needsServer("compact")],
      [["offload", "thr_x", "--json"], "bad_input", needsServer("offload")],
      [["offload-control", "thr_x", "--json"], "bad_input", needsServer("offload-control")],
      [["tool-results", "thr_x", "run_x", "--results", "[]", "--json"], "bad_input", needsServer("tool-results")],
      [["send", "thr_x", "hi", "--json"], "bad_input", needsServer("send")],
      [["events", "--json"], "bad_input", needsServer("events")],
      [["offload", "thr_x", "--keep-tokens", "abc", "--json"], "usage", "--keep-tokens: expected a number of tokens in decimal digits, got 'abc'"],
      // Newcomer's walk (b47ux): `--server` before `replay` was ignored in silence and the replay wrote to the local database.
      [["--server", "http://127.0.0.1:1", "replay", Path.join(raw, "pi/before-compaction.jsonl"), "--json", "--db", Path.join(dir, "b.sqlite")], "bad_input",
        "`baton replay` runs in this process on the database (--db, --data-dir or --database-url), not on a server: " +
        "--server is for threads, thread show, handoffs and the commands that need a server"],
      // Found in review: `--json=true` (which the library reads as `--json`) got no document on a usage error.
      [["replay", Path.join(dir, "nope.jsonl"), "--json=true", "--seed", "x", "--db", Path.join(dir, "b.sqlite")], "usage", "--seed: expected an integer in decimal digits, got 'x'"]
    ]
    const results = await Promise.all(cases.map(([args]) => baton(args)))
    expect(results.map((r) => [r.code, r.stdout, r.stderr])).toEqual(cases.map(([, code, message]) => [
      2,
      `${JSON.stringify({ error: { code, message } })}\n`,
      `baton: ${message}\n`
    ]))
    expect(Fs.readdirSync(dir)).toEqual([])
    Fs.rmSync(dir, { recursive: true, force: true })
  }, 60_000)

  // b48srv: `baton --server URL threads --db X` listed the server's threads without a word about X, and
  // `baton --server URL serve` (or `--token T serve`) served this machine's database, the flag ignored.
  it("a database flag beside --server, and --server or --token before serve, are refused: one line, exit 2, nothing written", async () => {
    const dir = tmp()
    const db = Path.join(dir, "b.sqlite")
    const server = "http://127.0.0.1:1"
    const contradict = (flag: string) =>
      `${flag} and --server ${server} contradict: with a server the command reads the server's database, not this one; ` +
      `drop ${flag.split(" ")[0]}, or --server to read the database in this process`
    const cases: ReadonlyArray<readonly [ReadonlyArray<string>, string]> = [
      [["--server", server, "threads", "--db", db], contradict(`--db ${db}`)],
      [["--server", server, "--data-dir", dir, "thread", "show", "thr_x"], contradict(`--data-dir ${dir}`)],
      [["--server", server, "handoffs", "thr_x", "--database-url", "postgres://127.0.0.1:1/x"], contradict("--database-url")],
      [["--server", server, "--db", db, "send", "thr_x", "hi"], contradict(`--db ${db}`)],
      [["--token", "0123456789abcdef0123", "threads", "--db", db],
        "--token is sent to a Baton server: pass --server URL too (or set BATON_SERVER), or drop --token to read the database in this process"],
      [["--server", server, "serve", "--port", "0", "--data-dir", dir],
        "`baton serve` runs in this process on the database (--db, --data-dir or --database-url), not on a server: " +
        "--server is for threads, thread show, handoffs and the commands that need a server"],
      [["--token", "0123456789abcdef0123", "serve", "--port", "0", "--data-dir", dir],
        "`baton serve` takes its admin token from BATON_TOKEN or the config file's auth.token (else its token file), " +
        "not --token: --token is what a client sends to --server"]
    ]
    const results = await Promise.all(cases.map(([args]) => baton(args)))
    expect(results.map((r) => [r.code, r.stdout, r.stderr])).toEqual(cases.map(([, message]) => [2, "", `baton: ${message}\n`]))
    expect(Fs.readdirSync(dir)).toEqual([])
    Fs.rmSync(dir, { recursive: true, force: true })
  }, 60_000)

  // Found in review: the rewording of @effect/cli's usage errors wrapped the console of the whole program, so every
  // log line a command wrote (the pretty logger writes through Console.error) came out as `baton: [12:00:00.000] INFO
  // …`, and a logged cause, printed over several lines in one call, was cut to its first line.
  it("a command's log lines are not reworded as usage errors (no `baton:` prefix); its own error line is one", async () => {
    const dir = tmp()
    // A database that cannot be reached: the startup lines are logged before the connection fails. (A taken port
    // is said before them now: ServeBusyPort.test.)
    const unreachable = await baton(["serve", "--port", "0", "--database-url", "postgres://postgres@127.0.0.1:1/test", "--data-dir", dir])
    const lines = unreachable.stderr.trim().split("\n")
    expect(unreachable.code).toBe(2)
    expect(lines.slice(0, -1).filter((l) => /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO \(#\d+\): /.test(l)).length).toBeGreaterThanOrEqual(2)
    expect(lines.slice(0, -1).filter((l) => l.startsWith("baton: "))).toEqual([])
    expect(lines.at(-1)).toMatch(/^baton: storage error in database\.connect: cannot connect to postgres:/)
    Fs.rmSync(dir, { recursive: true, force: true })
  }, 60_000)

  it("takes --db/--data-dir before the command too (`baton --data-dir DIR threads`); the command's own win", async () => {
    const dir = tmp()
    const db = Path.join(dir, "baton.sqlite")
    const replayed = await baton(["--db", db, "replay", Path.join(raw, "swe-agent/pydicom__pydicom-1458.traj"), "--json"])
    expect(replayed.code).toBe(0)
    expect(Fs.existsSync(db)).toBe(true)
    const [byDir, byDb, own] = await Promise.all([
      baton(["--data-dir", dir, "threads"]),
      baton(["--db", db, "threads"]),
      baton(["--data-dir", Path.join(dir, "absent"), "threads", "--db", db])
    ])
    for (const r of [byDir, byDb, own]) {
      expect([r.code, r.stderr]).toEqual([0, ""])
      expect(r.stdout).toMatch(/^thr_\S+ .* \d+ runs/)
    }
    const threadId = byDir.stdout.split(/\s+/)[0]!
    const show = await baton(["--data-dir", dir, "thread", "show", threadId])
    expect([show.code, show.stderr]).toEqual([0, ""])
    expect(show.stdout).toContain(`thread ${threadId}`)
    Fs.rmSync(dir, { recursive: true, force: true })
  }, 120_000)

  it("serve with a --config file that does not exist says so in one `baton:` line naming the file, exits 2", async () => {
    const dir = tmp()
    const missing = Path.join(dir, "nonexistent.json")
    const result = await baton(["serve", "--port", "0", "--config", missing, "--data-dir", dir])
    expect(result.code).toBe(2)
    expect(result.stderr).toMatch(new RegExp(`^baton: ${missing.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}: cannot read it \\(ENOENT[^\n]*\\)\n$`))
    expect(Fs.readdirSync(dir)).toEqual([])
    Fs.rmSync(dir, { recursive: true, force: true })
  }, 60_000)

  it("serve --port takes decimal digits only: 0x50 and 8e3 are refused, not read as ports 80 and 8000", async () => {
    const dir = tmp()
    for (const port of ["0x50", "8e3"]) {
      const result = await baton(["serve", "--port", port, "--data-dir", dir])
      expect([result.code, result.stdout]).toEqual([2, ""])
      expect(result.stderr).toBe(`baton: --port: expected an integer from 0 to 65535 in decimal digits, got '${port}'\n`)
    }
    expect(Fs.readdirSync(dir)).toEqual([])
    Fs.rmSync(dir, { recursive: true, force: true })
  }, 60_000)

  it("--help says each integer flag takes an integer in decimal digits, not \"A user-defined piece of text.\"", async () => {
    const styles = new RegExp(`${String.fromCharCode(0x1b)}\\[[0-9;]*m`, "g")
    const integerFlags: Record<string, ReadonlyArray<string>> = {
      replay: ["--switch-every", "--compact-every", "--seed"],
      demo: ["--switch-every", "--compact-every", "--seed"],
      offload: ["--keep-tokens"],
      "offload-control": ["--keep-newest"],
      serve: ["--port"]
    }
    for (const [command, flags] of Object.entries(integerFlags)) {
      const help = await baton([command, "--help"])
      expect(help.code).toBe(0)
      // One block per flag: its heading, then its paragraphs up to the next heading.
      const blocks = help.stdout.replace(styles, "").split(/\n(?=--)/)
      for (const flag of flags) {
        const block = blocks.filter((b) => b.startsWith(`${flag} integer\n`))
        expect(block).toHaveLength(1)
        expect(block[0]!.split("\n\n")[1]).toBe("  An integer in decimal digits (e.g. 42; not 0x2a or 4.2e1).")
        expect(block[0]).not.toContain("A user-defined piece of text")
      }
    }
  }, 60_000)

  // Found at an earlier stop: every text argument's and text flag's help began with the library's "A user-defined
  // piece of text." above its description (`baton send --help`: above "the thread's id" and "the message; …").
  it("--help shows only Baton's description under each text argument and flag, never \"A user-defined piece of text.\"", async () => {
    const styles = new RegExp(`${String.fromCharCode(0x1b)}\\[[0-9;]*m`, "g")
    const send = await baton(["send", "--help"])
    expect(send.code).toBe(0)
    const text = send.stdout.replace(styles, "")
    expect(text).toContain("<thread-id>\n\n  the thread's id (thr_…, as `baton threads` lists them)\n\n<text>\n\n  the message; - reads it from standard input")
    const helps = await Promise.all(
      [["--help"], ["replay", "--help"], ["thread", "create", "--help"], ["offload-control", "--help"], ["tool-results", "--help"], ["serve", "--help"]]
        .map((args) => baton(args))
    )
    for (const help of [send, ...helps]) expect(help.stdout).not.toContain("A user-defined piece of text")
  }, 60_000)

  it("serve on a port another process holds, or on an unreachable database: one `baton:` line saying why, exit 2", async () => {
    const dir = tmp()
    const lastLine = (text: string) => text.trim().split("\n").at(-1)
    const holder = Net.createServer()
    await new Promise<void>((resolve) => holder.listen(0, "127.0.0.1", resolve))
    const port = (holder.address() as Net.AddressInfo).port
    const wide = Net.createServer()
    await new Promise<void>((resolve) => wide.listen(0, "0.0.0.0", resolve))
    const widePort = (wide.address() as Net.AddressInfo).port
    const six = Net.createServer()
    await new Promise<void>((resolve) => six.listen(0, "::1", resolve))
    const sixPort = (six.address() as Net.AddressInfo).port
    // Four serve processes on one fresh data directory, three failing to listen: one of those now and then hung after
    // its startup lines, ignoring SIGTERM (CI timed out on 132059e); the cause was Effect's concurrent forEach
    // (patches/effect@3.22.4.patch; the interleaving itself is forced in CliRuntime.test).
    const [taken, noDatabase, wideTaken, sixTaken] = await Promise.all([
      baton(["serve", "--port", String(port), "--data-dir", dir]),
      baton(["serve", "--port", "0", "--database-url", "postgres://postgres@127.0.0.1:1/test", "--data-dir", dir]),
      baton(["serve", "--host", "0.0.0.0", "--port", String(widePort), "--data-dir", dir]),
      baton(["serve", "--host", "::1", "--port", String(sixPort), "--data-dir", dir])
    ])
    await new Promise<void>((resolve) => holder.close(() => resolve()))
    await new Promise<void>((resolve) => wide.close(() => resolve()))
    await new Promise<void>((resolve) => six.close(() => resolve()))
    // An IPv6 host in brackets, so the port is told apart (review r37: `cannot listen on ::1:PORT`).
    expect([sixTaken.code, sixTaken.stdout]).toEqual([2, ""])
    expect(lastLine(sixTaken.stderr)).toMatch(new RegExp(`^baton: cannot listen on \\[::1\\]:${sixPort} \\(listen EADDRINUSE`))
    // Beyond loopback: the warning comes once the listener is up, so a listen that fails says only why (it warned
    // "listening on 0.0.0.0, beyond loopback" first before).
    expect([wideTaken.code, wideTaken.stdout, wideTaken.stderr.includes("beyond loopback"), lastLine(wideTaken.stderr)]).toEqual([
      2,
      "",
      false,
      `baton: cannot listen on 0.0.0.0:${widePort} (listen EADDRINUSE: address already in use 0.0.0.0:${widePort}); ` +
      "another process holds that port: stop it, or pass another --port (0: any free port)"
    ])
    expect([taken.code, taken.stdout]).toEqual([2, ""])
    expect(lastLine(taken.stderr)).toBe(
      `baton: cannot listen on 127.0.0.1:${port} (listen EADDRINUSE: address already in use 127.0.0.1:${port}); ` +
        "another process holds that port: stop it, or pass another --port (0: any free port)"
    )
    expect([noDatabase.code, noDatabase.stdout]).toEqual([2, ""])
    expect(lastLine(noDatabase.stderr)).toBe(
      "baton: storage error in database.connect: cannot connect to postgres://postgres@127.0.0.1:1/test: ECONNREFUSED: connect ECONNREFUSED 127.0.0.1:1"
    )
    Fs.rmSync(dir, { recursive: true, force: true })
  }, 60_000)

  it("serve on a SQLite file it cannot open (a directory, a file that is not SQLite): one `baton:` line, exit 2", async () => {
    const dir = tmp()
    const notSqlite = Path.join(dir, "notes.txt")
    Fs.writeFileSync(notSqlite, "these are not the droids\n".repeat(100))
    const [directory, text] = await Promise.all([
      baton(["serve", "--port", "0", "--db", dir, "--data-dir", dir]),
      baton(["serve", "--port", "0", "--db", notSqlite, "--data-dir", dir])
    ])
    const lastLine = (t: string) => t.trim().split("\n").at(-1)
    expect([directory.code, directory.stdout, lastLine(directory.stderr)]).toEqual([
      2,
      "",
      `baton: storage error in database.open: cannot open ${dir} as a SQLite database (unable to open database file)`
    ])
    expect([text.code, text.stdout]).toEqual([2, ""])
    expect(lastLine(text.stderr)).toMatch(/^baton: storage error in database\.open: cannot open .*notes\.txt as a SQLite database \(file is not a database\)$/)
    Fs.rmSync(dir, { recursive: true, force: true })
  }, 60_000)

  // Found by a review (stop 35): Node 20's `mkdirSync(dir, { recursive: true })` retries forever under /proc, where
  // `mkdir` answers ENOENT though the parent exists: `serve --data-dir /proc/x` hung without a word.
  it("serve with a data directory or database under /proc: one `baton:` line, exit 2 (it hung before)", async () => {
    const dir = tmp()
    const run = (args: ReadonlyArray<string>) =>
      new Promise<{ code: number | string | null | undefined; stdout: string; stderr: string }>((resolve) => {
        execFile(process.execPath, batonArgs(args), { cwd: repo, env: { ...process.env, BATON_DATA_DIR: "" }, timeout: 20_000, killSignal: "SIGKILL" }, (error, stdout, stderr) => {
          resolve({ code: error === null ? 0 : error.killed ? "killed" : error.code, stdout, stderr })
        })
      })
    const [dataDir, db] = await Promise.all([
      run(["serve", "--port", "0", "--data-dir", "/proc/baton-test/data"]),
      run(["serve", "--port", "0", "--db", "/proc/baton-test/baton.sqlite", "--data-dir", dir])
    ])
    const lastLine = (t: string) => t.trim().split("\n").at(-1)
    expect([dataDir.code, dataDir.stdout, lastLine(dataDir.stderr)]).toEqual([
      2,
      "",
      "baton: /proc/baton-test/data/token: cannot read or create the token file (ENOENT: no such file or directory, mkdir '/proc/baton-test')"
    ])
    expect([db.code, db.stdout, lastLine(db.stderr)]).toEqual([
      2,
      "",
      "baton: storage error in database.open: cannot open /proc/baton-test/baton.sqlite as a SQLite database (ENOENT: no such file or directory, mkdir '/proc/baton-test')"
    ])
    Fs.rmSync(dir, { recursive: true, force: true })
  }, 60_000)

  it("demo without the sample transcripts says so in one line, shows where one's own sessions are, exits 2", async () => {
    const dir = tmp()
    const samples = Path.join(dir, "transcripts")
    const db = Path.join(dir, "baton.sqlite")
    const r = await baton(["demo", "--samples", samples, "--db", db])
    expect(r.code).toBe(2)
    expect(r.stdout).toBe("")
    expect(r.stderr).toBe(
      // `--samples DIR` is named as given (it said "not beside this repository", b46ux).
      `baton: the sample transcripts are not in ${samples} (no ${Path.join(samples, "raw/pi/before-compaction.jsonl")}); ` +
        "replay one of your own agent sessions instead: " +
        "pnpm baton replay ~/.claude/projects/<project-dir>/<session-id>.jsonl (Claude Code) or " +
        "pnpm baton replay ~/.pi/agent/sessions/<project-dir>/<timestamp>_<session-id>.jsonl (pi)\n"
    )
    expect(Fs.existsSync(db)).toBe(false)
    Fs.rmSync(dir, { recursive: true, force: true })
  }, 60_000)

  it("a Postgres server it cannot reach, or a database that does not exist: one line naming the cause, exit 2", async () => {
    const [refused, missing] = await Promise.all([
      baton(["threads", "--database-url", "postgres://postgres:secret@127.0.0.1:1/test"]),
      baton(["threads", "--database-url", "postgres://postgres@127.0.0.1:5432/baton_no_such_database"])
    ])
    expect([refused.code, refused.stdout]).toEqual([2, ""])
    expect(refused.stderr.trim()).toBe(
      "baton: storage error in database.connect: cannot connect to postgres://postgres:***@127.0.0.1:1/test: ECONNREFUSED: connect ECONNREFUSED 127.0.0.1:1"
    )
    expect([missing.code, missing.stdout]).toEqual([2, ""])
    expect(missing.stderr.trim()).toBe(
      "baton: storage error in database.connect: cannot connect to postgres://postgres@127.0.0.1:5432/baton_no_such_database: 3D000: database \"baton_no_such_database\" does not exist"
    )
  })
})
