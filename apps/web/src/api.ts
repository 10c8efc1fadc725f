/**
 * The API client of the dashboard: `fetch` on the same origin with the session's bearer token. Every call answers a
 * `Result`: the decoded JSON, or the API's refusal in its own words (`_tag`, `message`, the status). A 401 clears the
 * token and tells the app to ask for it again (`onUnauthorized`).
 */
const tokenKey = "baton.token"

/** The token kept for this browser session only (sessionStorage), or `null`. */
export const storedToken = (): string | null => sessionStorage.getItem(tokenKey)
export const storeToken = (token: string) => sessionStorage.setItem(tokenKey, token)
export const clearToken = () => sessionStorage.removeItem(tokenKey)

/** What a call answered: the body, or the API's error (`message` is the sentence the API wrote). */
export type Result<A> =
  | { readonly ok: true; readonly status: number; readonly value: A }
  | { readonly ok: false; readonly status: number; readonly tag: string; readonly message: string; readonly body: unknown }

let unauthorized: (message: string) => void = () => {}
/** Called with the API's message when any call answers 401 (the token was cleared first). */
export const onUnauthorized = (f: (message: string) => void) => void (unauthorized = f)

/** The `Authorization` header of the session's token. */
export const authHeaders = (): Record<string, string> => {
  const token = storedToken()
  return token === null ? {} : { authorization: `Bearer ${token}` }
}

/**
 * Reports a 401 (clears the token) from any caller, the SSE reader included; `sent` is the token the refused request
 * carried (`null`: none). Only the first refusal of a token is shown: the calls that answer after it (in flight with
 * the same token, or sent after it was cleared and so refused for carrying none) would otherwise replace the server's
 * reason ("unknown token") with "no bearer token". A refusal of another token than the stored one (an early request
 * of the old token answering after the user entered a new one) is not about the stored token: it is ignored.
 */
export const reportUnauthorized = (message: string, sent: string | null) => {
  const stored = storedToken()
  if (stored === null || stored !== sent) return
  clearToken()
  unauthorized(message)
}

declare global {
  interface Window {
    /**
     * The first screen's responses, asked for by index.html's inline script before this bundle was parsed: by path,
     * a `Response` or `{ networkError }`; `at` is when they were asked for (`Date.now()`).
     */
    __batonPrefetch?: { readonly at: number; readonly responses: Record<string, Promise<Response | { readonly networkError: string }>> }
  }
}

/** How long a prefetched response may wait for its first GET (ms); older ones are fetched again. */
const prefetchMaxAgeMs = 10_000

/**
 * The prefetched response of `path`, once (the next GET of the path fetches again), or `undefined`: none, or older
 * than `prefetchMaxAgeMs`.
 */
const prefetched = (path: string) => {
  const prefetch = window.__batonPrefetch
  const response = prefetch?.responses[path]
  if (prefetch === undefined || response === undefined) return undefined
  delete prefetch.responses[path]
  return Date.now() - prefetch.at <= prefetchMaxAgeMs ? response : undefined
}

/**
 * When the first screen's loads were asked for (`Date.now()`, ms): the inline prefetch's time if it ran, else now.
 * What they read includes every event committed before it.
 */
export const loadsStartedAt = (): number => Math.min(Date.now(), window.__batonPrefetch?.at ?? Infinity)

/** A call of `method path` with an optional JSON body. Network failures answer status 0 with the browser's words. */
export const call = async <A>(method: "GET" | "POST", path: string, body?: unknown): Promise<Result<A>> => {
  const networkError = (e: unknown): Result<A> =>
    ({ ok: false, status: 0, tag: "NetworkError", message: `cannot reach the server (${String(e)})`, body: null })
  let response: Response
  // The token this call carries (a prefetched response carried the same: index.html read it from sessionStorage).
  const sent = storedToken()
  try {
    const early = method === "GET" ? prefetched(path) : undefined
    const answered = early === undefined ? undefined : await early
    if (answered !== undefined && "networkError" in answered) return networkError(answered.networkError)
    response = answered ?? await fetch(path, {
      method,
      headers: { ...authHeaders(), ...(body === undefined ? {} : { "content-type": "application/json" }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) })
    })
  } catch (e) {
    return networkError(e)
  }
  const text = await response.text()
  let json: unknown
  try {
    json = text === "" ? null : JSON.parse(text)
  } catch (_notJson) {
    json = text
  }
  if (response.ok) return { ok: true, status: response.status, value: json as A }
  const error = (json ?? {}) as { readonly _tag?: string; readonly message?: string }
  const message = error.message ?? `HTTP ${response.status}`
  if (response.status === 401) reportUnauthorized(message, sent)
  return { ok: false, status: response.status, tag: error._tag ?? `HTTP ${response.status}`, message, body: json }
}

export const get = <A>(path: string) => call<A>("GET", path)
export const post = <A>(path: string, body: unknown = {}) => call<A>("POST", path, body)
