/**
 * Recorded Anthropic wire traffic (`../shared/provider-fixtures/anthropic/` beside the repository) as the gateway's
 * loopback tests replay it: a recorded stream (one JSON event a line) re-encoded as Anthropic serves it, and a
 * recorded whole answer parsed.
 */
import * as Fs from "node:fs"
import { fileURLToPath } from "node:url"

/** The directory of the recorded Anthropic traffic. */
export const dir = fileURLToPath(new URL("../../../../../shared/provider-fixtures/anthropic/", import.meta.url))

/** The recorded stream `name` (one JSON event a line) as `event:`/`data:` lines, as Anthropic serves it. */
export const recordedStream = (name: string) =>
  Fs.readFileSync(`${dir}${name}`, "utf8").split("\n").filter((l) => l.trim() !== "").map((l) => `event: ${String((JSON.parse(l) as { type: string }).type)}\ndata: ${l}\n\n`).join("")

/** The recorded whole answer `name`, parsed. */
export const recordedJson = (name: string): unknown => JSON.parse(Fs.readFileSync(`${dir}${name}`, "utf8"))
