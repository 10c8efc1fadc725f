/**
 * GatewayMemo: what the gateway computed for a conversation's earlier requests, reused (issue 14, "Performance").
 * An agent sends its whole history again on every request, so nearly everything a request's messages cost (their
 * JSON text, token counts, fingerprints, stubs) was computed for the same messages on the request before. It owns:
 *
 * - **Interning** (`makeInterner`): a request's parsed body is compared with the previous requests of its session
 *   (value by value in key order, strings as wholes: a memory compare, no serialising or hashing), and every top-level
 *   field and history entry equal to one seen before is replaced by that earlier object; the others are frozen
 *   (deeply). So a message the agent sends again unchanged is the same object from one request to the next.
 * - **Memos on interned objects** (`memo`, `json`, `bodyJson`): a function of an interned object is computed once
 *   per object (a `WeakMap`: an object no request holds any more is collected with its entries); any other argument
 *   is computed every time, as it could change.
 *
 * It only saves work: every answer is the one computed without it (an interned object equals, in the same key order,
 * the one it replaces; an interned object cannot change, it is frozen). It keeps no state that must outlive the
 * process: a restart starts with nothing remembered and computes everything once.
 */

/** The objects frozen by `intern` (deeply, with everything they hold) or declared so by `adopt`. */
const interned = new WeakSet<object>()

/** Whether `value` is an interned object (frozen with everything it holds), whose memos may be kept. */
export const isInterned = (value: unknown): boolean => typeof value === "object" && value !== null && interned.has(value)

/** Freezes `value` and everything it holds, and marks every object of it interned. Returns `value`. */
export const deepFreeze = <A>(value: A): A => {
  if (typeof value !== "object" || value === null || interned.has(value)) return value
  for (const v of Object.values(value)) deepFreeze(v)
  Object.freeze(value)
  interned.add(value)
  return value
}

/**
 * Marks `value` interned: it is frozen, and what it holds is interned already (or not an object). For an object
 * built from interned parts (a stub of an interned message): only its own new parts are frozen.
 */
export const adopt = <A extends object>(value: A): A => {
  for (const v of Object.values(value)) deepFreeze(v)
  Object.freeze(value)
  interned.add(value)
  return value
}

/**
 * Whether `a` and `b` are the same JSON value with their object keys in the same order (so `JSON.stringify` gives the
 * same text for both): a walk over their structure, strings compared as wholes. For parsed JSON (plain objects and
 * arrays, no `undefined`).
 */
export const sameValue = (a: unknown, b: unknown): boolean => {
  if (a === b) return true
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false
    for (let i = 0; i < a.length; i++) if (!sameValue(a[i], b[i])) return false
    return true
  }
  if (Array.isArray(b)) return false
  const ka = Object.keys(a)
  const kb = Object.keys(b)
  if (ka.length !== kb.length) return false
  for (let i = 0; i < ka.length; i++) {
    if (ka[i] !== kb[i] || !sameValue((a as Record<string, unknown>)[ka[i]!], (b as Record<string, unknown>)[kb[i]!])) return false
  }
  return true
}

/**
 * `f` computed once per interned argument (kept while the argument lives); for any other argument, every time.
 * `f` must be a pure function of its argument's value.
 */
export const memo = <A extends object, B>(f: (a: A) => B): (a: A) => B => {
  const cache = new WeakMap<A, B>()
  return (a) => {
    if (!interned.has(a)) return f(a)
    if (cache.has(a)) return cache.get(a)!
    const b = f(a)
    cache.set(a, b)
    return b
  }
}

const jsonOfObject = memo((value: object) => JSON.stringify(value))

/** `JSON.stringify(value)`, its text kept for an interned object. */
export const json = (value: unknown): string => (isInterned(value) ? jsonOfObject(value as object) : JSON.stringify(value))

/** How `JSON.stringify` writes an array entry (`undefined`, functions and symbols as `null`). */
const entryJson = (value: unknown): string =>
  value === undefined || typeof value === "function" || typeof value === "symbol" ? "null" : json(value)

/**
 * `JSON.stringify(body)` for a request body (an object of JSON values), byte for byte, with the texts of its interned
 * parts (the history entries, `system`, `tools`) reused: only what is new is serialised. Keys in `Object.keys`
 * order, `undefined` (function, symbol) values left out, as `JSON.stringify` does; a body with a `toJSON` is passed
 * to `JSON.stringify`.
 */
export const bodyJson = (body: Readonly<Record<string, unknown>>): string => {
  if (typeof body.toJSON === "function") return JSON.stringify(body)
  const parts: Array<string> = []
  for (const key of Object.keys(body)) {
    const value = body[key]
    if (value === undefined || typeof value === "function" || typeof value === "symbol") continue
    const text = Array.isArray(value) && !isInterned(value) ? `[${value.map(entryJson).join(",")}]` : json(value)
    parts.push(`${JSON.stringify(key)}:${text}`)
  }
  return `{${parts.join(",")}}`
}

/**
 * Interns request bodies against the previous requests of their session (see the module docblock). `intern(scope,
 * body, historyKey)`: `scope` names the session (wire and session header; requests without one share a scope),
 * `historyKey` the body's history array (`messages`, `input`), whose entries are interned one by one against the
 * entry at the same position of the earlier request; other top-level objects are interned whole. The earlier
 * request is, among the last `perScope` of the scope, the one whose history starts with the same entry (the same
 * conversation: a sub-agent shares its session but not its start), else the last. Mutates `body` (its top-level
 * fields and its history array's entries; the body and the array themselves stay the caller's) and returns how many
 * history entries were found. `capacity` scopes are kept, the least recently used dropped.
 */
export const makeInterner = (capacity = 256, perScope = 4) => {
  const scopes = new Map<string, Array<Readonly<Record<string, unknown>>>>()
  const intern = (scope: string, body: Record<string, unknown>, historyKey: string): number => {
    const earlier = scopes.get(scope) ?? []
    const history = body[historyKey]
    const start = Array.isArray(history) && history.length > 0 ? history[0] : undefined
    const same = earlier.find((e) => {
      const h = e[historyKey]
      return start !== undefined && Array.isArray(h) && h.length > 0 && sameValue(h[0], start)
    })
    const match = same ?? earlier[0]
    let found = 0
    for (const key of Object.keys(body)) {
      const value = body[key]
      if (typeof value !== "object" || value === null) continue
      const before = match?.[key]
      if (key === historyKey && Array.isArray(value)) {
        const entries = Array.isArray(before) ? before : []
        for (let i = 0; i < value.length; i++) {
          if (i < entries.length && sameValue(entries[i], value[i])) {
            value[i] = entries[i]
            found++
          } else {
            deepFreeze(value[i])
          }
        }
      } else if (before !== undefined && sameValue(before, value)) {
        body[key] = before
      } else {
        deepFreeze(value)
      }
    }
    const kept: Record<string, unknown> = { ...body }
    if (Array.isArray(history)) kept[historyKey] = [...history]
    // The request takes its conversation's place (another conversation of the session keeps its own).
    const next = [kept, ...earlier.filter((e) => e !== same)].slice(0, perScope)
    scopes.delete(scope)
    scopes.set(scope, next)
    if (scopes.size > capacity) scopes.delete(scopes.keys().next().value!)
    return found
  }
  return { intern }
}
