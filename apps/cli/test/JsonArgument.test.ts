/**
 * `--tools` and `--results` (JSON inline or in a file) that do not match: one `baton:` line saying what is expected
 * and where it went wrong, without Effect Schema's own rendering of the type. Checked before any request (port 1:
 * nothing listens there). Found by a newcomer's walk (b45ux): `thread create --tools '[1]'` printed `(parseJson <->
 * ReadonlyArray<{ readonly name: { a string matching the pattern … } … }>)`, and `--results '[1]'` "Expected Struct
 * (Encoded side), actual 1".
 */
import { describe, expect, it } from "@effect/vitest"
import { runBaton } from "./support/CliEntry.js"

const server = ["--server", "http://127.0.0.1:1", "--token", "t".repeat(20)]

describe("a JSON argument that does not match", () => {
  it("names what is expected and the value at fault, exit 2", async () => {
    const [tools, toolsObject, results, resultId] = await Promise.all([
      runBaton([...server, "thread", "create", "--provider", "p", "--tools", "[1]"]),
      runBaton([...server, "thread", "create", "--provider", "p", "--tools", "{\"x\":1}"]),
      runBaton([...server, "tool-results", "thr_x", "run_x", "--results", "[1]"]),
      runBaton([...server, "tool-results", "thr_x", "run_x", "--results", "[{\"toolCallId\":1,\"output\":\"x\"}]"])
    ])
    const toolsShape = "baton: --tools: expected a JSON array of {\"name\", \"description\", \"inputSchema\"}"
    const resultsShape = "baton: --results: expected a JSON array of {\"toolCallId\", \"output\", \"isError\"?} or {\"results\": [...]}"
    expect([tools, toolsObject, results, resultId].map((r) => [r.code, r.stdout, r.stderr])).toEqual([
      [2, "", `${toolsShape}; [0]: unexpected value 1\n`],
      [2, "", `${toolsShape}; unexpected value {"x":1}\n`],
      [2, "", `${resultsShape}; [0]: unexpected value 1\n`],
      [2, "", `${resultsShape}; [0].toolCallId: Expected string, actual 1\n`]
    ])
  }, 60_000)

  // b48srv: a value that is neither JSON nor a file said "cannot read notjson (ENOENT: no such file or directory …)".
  it("a value that is neither inline JSON nor a file says what the flag accepts, exit 2", async () => {
    const [results, tools, directory] = await Promise.all([
      runBaton([...server, "tool-results", "thr_x", "run_x", "--results", "notjson"]),
      runBaton([...server, "thread", "create", "--provider", "p", "--tools", "read_file"]),
      runBaton([...server, "tool-results", "thr_x", "run_x", "--results", "."])
    ])
    const resultsShape = "a JSON array of {\"toolCallId\", \"output\", \"isError\"?} or {\"results\": [...]}"
    expect([results, tools, directory].map((r) => [r.code, r.stdout, r.stderr])).toEqual([
      [2, "", `baton: --results: 'notjson' is neither JSON nor a file: give ${resultsShape} inline (starting with [ or {), or the path of a file holding it\n`],
      [2, "", "baton: --tools: 'read_file' is neither JSON nor a file: give a JSON array of {\"name\", \"description\", \"inputSchema\"} " +
        "inline (starting with [ or {), or the path of a file holding it\n"],
      [2, "", `baton: --results: '.' is neither JSON nor a file: give ${resultsShape} inline (starting with [ or {), or the path of a file holding it\n`]
    ])
  }, 60_000)
})
