/**
 * GatewayBody: a request body's JSON parsed with what the conversation's previous request already parsed (issue 14,
 * "Performance"). An agent sends its whole history again on every request, so a body's bytes start with the bytes of
 * the body before it, up to the message that changed (the moved `cache_control` breakpoint, the new messages).
 *
 * After a body is parsed and interned (`GatewayMemo`), `remember` keeps its bytes, the byte range of each entry of its
 * history array (`messages`, `input`; found by a scan of the JSON's structure) and the parsed values: the entries and
 * the top-level fields before the history. The next body of the same scope (endpoint and session header) is compared
 * with it byte for byte (a binary search of memory compares); the history entries that lie, with the comma after
 * them, wholly inside the shared bytes are the earlier parsed objects, and only the rest is decoded and parsed: the
 * text before the history's key is left out (its fields are the earlier ones), and the shared entries are cut out of
 * the array (`[` joined to the first entry that is not shared); when the bytes after the array are the earlier body's
 * (Claude Code sends `system` and `tools` after `messages`), its fields after the history are taken too and only the
 * new entries are parsed. The result equals `JSON.parse` of the whole text:
 * the shared bytes are the same text, so they parse to the same values, and an array with complete values and their
 * commas cut from its start is valid JSON exactly when the whole one is (the cut must be followed by a value, not by
 * `]`, which is checked). A body that cannot use the earlier one (another start, a change before the history, no
 * history array, any doubt) is parsed whole, as before.
 *
 * It only saves work: every answer is the one `JSON.parse` gives. It keeps no state that must outlive the process.
 */
import { GatewayMemo } from "@baton/orchestration"
import { isRecord, parseJson } from "./GatewayDialect.js"

/** What `remember` keeps of a body: its bytes and where its history's entries are, with their parsed values. */
interface Kept {
  readonly bytes: Uint8Array
  readonly historyKey: string
  /** The top-level fields before the history's key, in order, as parsed (interned). */
  readonly before: ReadonlyArray<readonly [string, unknown]>
  /** Offset of the history key's opening quote. */
  readonly keyStart: number
  /** Offset just after the history array's `[`. */
  readonly open: number
  /** Offset of each entry's first byte and just after its last. */
  readonly starts: ReadonlyArray<number>
  readonly ends: ReadonlyArray<number>
  readonly entries: ReadonlyArray<unknown>
  /** Offset just after the history array's `]`, and the top-level fields after it, in order, as parsed (interned). */
  readonly close: number
  readonly after: ReadonlyArray<readonly [string, unknown]>
}

/** How a body was parsed: `reused` the history entries taken from the earlier body (0 when parsed whole). */
export interface Parsed {
  readonly value: unknown
  readonly reused: number
}

const decoder = new TextDecoder()
/** For the parts of a body: a byte order mark inside it is text (U+FEFF, not JSON white space), not dropped as at its start. */
const partDecoder = new TextDecoder("utf-8", { ignoreBOM: true })

const isSpace = (b: number) => b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09

const skipSpace = (bytes: Uint8Array, i: number): number => {
  while (i < bytes.length && isSpace(bytes[i]!)) i++
  return i
}

/** The offset just after the string starting at `i` (its opening quote). */
const skipString = (bytes: Uint8Array, i: number): number => {
  i++
  while (i < bytes.length) {
    const b = bytes[i]!
    if (b === 0x5c) i += 2
    else if (b === 0x22) return i + 1
    else i++
  }
  return -1
}

/**
 * The offset just after the JSON value starting at `i` (no white space before it), by its structure only (strings,
 * brackets); -1 when the bytes end first. Correct for valid JSON; checks nothing else.
 */
export const skipValue = (bytes: Uint8Array, i: number): number => {
  const first = bytes[i]
  if (first === 0x22) return skipString(bytes, i)
  if (first === 0x7b || first === 0x5b) {
    let depth = 0
    while (i < bytes.length) {
      const b = bytes[i]!
      if (b === 0x22) {
        i = skipString(bytes, i)
        if (i < 0) return -1
        continue
      }
      if (b === 0x7b || b === 0x5b) depth++
      else if (b === 0x7d || b === 0x5d) {
        depth--
        if (depth === 0) return i + 1
      }
      i++
    }
    return -1
  }
  while (i < bytes.length) {
    const b = bytes[i]!
    if (b === 0x2c || b === 0x5d || b === 0x7d || isSpace(b)) return i
    i++
  }
  return i
}

/**
 * The entries of the array starting at `open` (just after its `[`): each entry's start and end offsets, and the offset
 * just after the array's `]`; `null` when the structure does not read as an array. For valid JSON.
 */
export const scanEntries = (bytes: Uint8Array, open: number): { starts: Array<number>; ends: Array<number>; close: number } | null => {
  const starts: Array<number> = []
  const ends: Array<number> = []
  let i = skipSpace(bytes, open)
  if (bytes[i] === 0x5d) return { starts, ends, close: i + 1 }
  while (i < bytes.length) {
    const end = skipValue(bytes, i)
    if (end < 0) return null
    starts.push(i)
    ends.push(end)
    i = skipSpace(bytes, end)
    if (bytes[i] === 0x5d) return { starts, ends, close: i + 1 }
    if (bytes[i] !== 0x2c) return null
    i = skipSpace(bytes, i + 1)
  }
  return null
}

/**
 * Where the top-level value of `key` starts in a body that is a JSON object: the offset of the key's opening quote
 * and of its value; `null` when it is not there (or the structure does not read). For valid JSON; the first
 * occurrence of the key.
 */
export const findKey = (bytes: Uint8Array, key: string): { keyStart: number; valueStart: number } | null => {
  let i = skipSpace(bytes, 0)
  if (bytes[i] !== 0x7b) return null
  i = skipSpace(bytes, i + 1)
  while (i < bytes.length && bytes[i] === 0x22) {
    const keyEnd = skipString(bytes, i)
    if (keyEnd < 0) return null
    const name = JSON.parse(decoder.decode(bytes.subarray(i, keyEnd))) as string
    let j = skipSpace(bytes, keyEnd)
    if (bytes[j] !== 0x3a) return null
    j = skipSpace(bytes, j + 1)
    if (name === key) return { keyStart: i, valueStart: j }
    const end = skipValue(bytes, j)
    if (end < 0) return null
    i = skipSpace(bytes, end)
    if (bytes[i] !== 0x2c) return null
    i = skipSpace(bytes, i + 1)
  }
  return null
}

/**
 * The keys of the top-level fields after the history array (`close`: just after its `]`), in order; `null` when the
 * structure does not read as the rest of an object. For valid JSON.
 */
export const keysAfter = (bytes: Uint8Array, close: number): Array<string> | null => {
  const keys: Array<string> = []
  let i = skipSpace(bytes, close)
  while (i < bytes.length) {
    if (bytes[i] === 0x7d) return skipSpace(bytes, i + 1) === bytes.length ? keys : null
    if (bytes[i] !== 0x2c) return null
    i = skipSpace(bytes, i + 1)
    if (bytes[i] !== 0x22) return null
    const keyEnd = skipString(bytes, i)
    if (keyEnd < 0) return null
    // The bytes may be no JSON (a new body's): a key that does not parse is a structure that does not read.
    const key = parseJson(partDecoder.decode(bytes.subarray(i, keyEnd)))
    if (typeof key !== "string") return null
    keys.push(key)
    i = skipSpace(bytes, keyEnd)
    if (bytes[i] !== 0x3a) return null
    const end = skipValue(bytes, skipSpace(bytes, i + 1))
    if (end < 0) return null
    i = skipSpace(bytes, end)
  }
  return null
}

/**
 * The deepest nesting of arrays and objects the gateway takes in a request body (an agent's bodies nest a tool's
 * input or schema a few dozen levels at most). Deeper, the gateway's walks over the body (interning, fingerprints,
 * token counts: each recursive, one frame per level) exhausted the stack: new user hnew sent `"metadata"` (or a
 * `tool_use` input) nesting 100,000 arrays and got an empty 500.
 */
export const maxNesting = 512

/**
 * Whether `value` (a parsed body) nests arrays and objects more than `limit` levels deep. A walk with its own stack
 * (it never recurses) that skips interned objects (`GatewayMemo`: the history an earlier request of the conversation
 * sent, checked then), so a request costs the walk of its new parts only.
 */
export const nestsDeeperThan = (value: unknown, limit: number): boolean => {
  const stack: Array<readonly [unknown, number]> = [[value, 1]]
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!
    if (typeof v !== "object" || v === null || GatewayMemo.isInterned(v)) continue
    if (depth > limit) return true
    for (const child of Object.values(v)) if (typeof child === "object" && child !== null) stack.push([child, depth + 1])
  }
  return false
}

/** `bytes` as a `Buffer` (the same memory). */
const view = (bytes: Uint8Array): Buffer => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)

/** The length of the longest common prefix of `a` and `b` (memory compares, halving). */
export const commonPrefix = (a: Uint8Array, b: Uint8Array): number => {
  const x = view(a)
  const y = view(b)
  let lo = 0
  let hi = Math.min(x.length, y.length)
  while (hi - lo > 32) {
    const mid = (lo + hi) >>> 1
    if (x.compare(y, lo, mid, lo, mid) === 0) lo = mid
    else hi = mid
  }
  while (lo < hi && x[lo] === y[lo]) lo++
  return lo
}

/**
 * A parser of request bodies that reuses the previous bodies of each scope (see the module docblock). `capacity`:
 * the scopes kept (the least recently used dropped); `perScope`: the bodies kept per scope (a session's sub-agents
 * share its header, each its own conversation); `maxBytes`: the bytes kept in all, the least recently used scopes
 * dropped beyond it.
 */
export const makeParser = (capacity = 64, perScope = 4, maxBytes = 128 * 1024 * 1024) => {
  const scopes = new Map<string, Array<Kept>>()
  let keptBytes = 0

  const drop = (scope: string) => {
    for (const k of scopes.get(scope) ?? []) keptBytes -= k.bytes.length
    scopes.delete(scope)
  }

  /** `kept`'s values for `bytes` when it shares enough of them; `null` when `bytes` must be parsed whole. */
  const reuse = (kept: Kept, bytes: Uint8Array, shared: number): Parsed | null => {
    if (shared < kept.open) return null
    // The entries wholly shared (the last one's comma is checked in `bytes` itself).
    let k = 0
    while (k < kept.ends.length && kept.ends[k]! <= shared) k++
    let cut = kept.open
    if (k > 0) {
      const comma = skipSpace(bytes, kept.ends[k - 1]!)
      if (bytes[comma] !== 0x2c) {
        // The last shared entry is the array's last in `bytes` too: it must be followed by `]`; then nothing is cut
        // past it and the array's end is parsed with the entry before it shared.
        k--
        if (k === 0) return null
        const before = skipSpace(bytes, kept.ends[k - 1]!)
        if (bytes[before] !== 0x2c) return null
        cut = skipSpace(bytes, before + 1)
      } else {
        cut = skipSpace(bytes, comma + 1)
      }
      // A cut array must go on with a value (`[a, ]` is not JSON, `[ ]` is).
      if (cut >= bytes.length || bytes[cut] === 0x5d) return null
    }
    if (k === 0) return null
    // The new entries; the bytes after the array are the earlier body's (its fields taken as they are: Claude Code
    // sends `system` and `tools` after `messages`), else they are parsed too, and a field of the history's name or of a
    // field before it would make the whole body's value another (the last of duplicate keys wins), and `__proto__` is
    // no field when assigned.
    const scanned = scanEntries(bytes, cut)
    if (scanned === null) return null
    const value: Record<string, unknown> = {}
    for (const [key, v] of kept.before) value[key] = v
    const suffix = bytes.length - scanned.close
    if (suffix === kept.bytes.length - kept.close && view(bytes).compare(view(kept.bytes), kept.close, kept.bytes.length, scanned.close, bytes.length) === 0) {
      const fresh = parseJson(`[${partDecoder.decode(bytes.subarray(cut, scanned.close))}`)
      if (!Array.isArray(fresh) || fresh.length !== scanned.starts.length) return null
      value[kept.historyKey] = [...kept.entries.slice(0, k), ...fresh]
      for (const [key, v] of kept.after) value[key] = v
      pending.set(value, { bytes, kept, k, starts: scanned.starts, ends: scanned.ends, close: scanned.close, after: kept.after.map(([key]) => key) })
      return { value, reused: k }
    }
    const after = keysAfter(bytes, scanned.close)
    if (after === null || after.some((key) => key === kept.historyKey || key === "__proto__" || kept.before.some(([b]) => b === key))) return null
    const head = partDecoder.decode(bytes.subarray(kept.keyStart, kept.open))
    const tail = partDecoder.decode(bytes.subarray(cut))
    const rest = parseJson(`{${head}${tail}`)
    if (!isRecord(rest)) return null
    const fresh = rest[kept.historyKey]
    if (!Array.isArray(fresh) || fresh.length !== scanned.starts.length) return null
    for (const key of Object.keys(rest)) value[key] = rest[key]
    value[kept.historyKey] = [...kept.entries.slice(0, k), ...fresh]
    // The scan of what was parsed, for `remember`.
    pending.set(value, { bytes, kept, k, starts: scanned.starts, ends: scanned.ends, close: scanned.close, after })
    return { value, reused: k }
  }

  /** What `reuse` parsed of a body, for `remember` to scan only the new entries. */
  const pending = new WeakMap<
    object,
    { bytes: Uint8Array; kept: Kept; k: number; starts: Array<number>; ends: Array<number>; close: number; after: ReadonlyArray<string> }
  >()

  /**
   * The body's JSON value (`undefined` when it is not JSON), reusing the scope's earlier bodies where they share its
   * bytes. The history entries and top-level fields taken from an earlier body are its (frozen) objects.
   */
  const parse = (scope: string, bytes: Uint8Array): Parsed => {
    const earlier = scopes.get(scope)
    if (earlier !== undefined) {
      let best: Kept | undefined
      let shared = -1
      for (const kept of earlier) {
        const n = commonPrefix(kept.bytes, bytes)
        if (n > shared) {
          shared = n
          best = kept
        }
      }
      if (best !== undefined) {
        const parsed = reuse(best, bytes, shared)
        if (parsed !== null) return parsed
      }
    }
    return { value: parseJson(decoder.decode(bytes)), reused: 0 }
  }

  /**
   * Keeps a parsed (and interned) body for the scope's next requests: `body` is the value `parse` returned for `bytes`,
   * `historyKey` its history array's key. Top-level keys named `__proto__` are not kept (an object literal's
   * assignment would not make them a field).
   */
  const remember = (scope: string, bytes: Uint8Array, body: Record<string, unknown>, historyKey: string) => {
    const entries = body[historyKey]
    if (!Array.isArray(entries) || Object.keys(body).includes("__proto__")) return
    let kept: Kept | null = null
    const was = pending.get(body)
    if (was !== undefined && was.bytes === bytes && was.kept.historyKey === historyKey) {
      if (was.k + was.starts.length === entries.length) {
        kept = {
          ...was.kept,
          bytes,
          entries: [...entries],
          starts: [...was.kept.starts.slice(0, was.k), ...was.starts],
          ends: [...was.kept.ends.slice(0, was.k), ...was.ends],
          close: was.close,
          after: was.after.map((key) => [key, body[key]] as const)
        }
      }
    } else {
      const found = findKey(bytes, historyKey)
      if (found !== null && bytes[found.valueStart] === 0x5b) {
        const scanned = scanEntries(bytes, found.valueStart + 1)
        const keys = Object.keys(body)
        const before = keys.slice(0, keys.indexOf(historyKey))
        const after = scanned === null ? null : keysAfter(bytes, scanned.close)
        if (scanned !== null && scanned.starts.length === entries.length && after !== null && !after.some((key) => key === historyKey || before.includes(key))) {
          kept = {
            bytes,
            historyKey,
            before: before.map((key) => [key, body[key]] as const),
            keyStart: found.keyStart,
            open: found.valueStart + 1,
            starts: scanned.starts,
            ends: scanned.ends,
            entries: [...entries],
            close: scanned.close,
            after: after.map((key) => [key, body[key]] as const)
          }
        }
      }
    }
    const list = scopes.get(scope) ?? []
    scopes.delete(scope)
    if (kept === null) {
      if (list.length > 0) scopes.set(scope, list)
      return
    }
    // The body it extends (or the oldest) makes room for it.
    const replaced = was?.kept !== undefined && list.includes(was.kept) ? was.kept : list.length >= perScope ? list[list.length - 1] : undefined
    const next = [kept, ...list.filter((k) => k !== replaced)]
    for (const k of list) if (!next.includes(k)) keptBytes -= k.bytes.length
    keptBytes += kept.bytes.length
    scopes.set(scope, next)
    for (const oldest of scopes.keys()) {
      if (scopes.size <= capacity && keptBytes <= maxBytes) break
      drop(oldest)
    }
  }

  return { parse, remember }
}
