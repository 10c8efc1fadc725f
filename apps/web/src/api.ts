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

/** Reports a 401 (clears the token) from any caller, the SSE reader included. */
export const reportUnauthorized = (message: string) => {
  clearToken()
  unauthorized(message)
}

/** A call of `method path` with an optional JSON body. Network failures answer status 0 with the browser's words. */
export const call = async <A>(method: "GET" | "POST", path: string, body?: unknown): Promise<Result<A>> => {
  let response: Response
  try {
    response = await fetch(path, {
      method,
      headers: { ...authHeaders(), ...(body === undefined ? {} : { "content-type": "application/json" }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) })
    })
  } catch (e) {
    return { ok: false, status: 0, tag: "NetworkError", message: `cannot reach the server (${String(e)})`, body: null }
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
  if (response.status === 401) reportUnauthorized(message)
  return { ok: false, status: response.status, tag: error._tag ?? `HTTP ${response.status}`, message, body: json }
}

export const get = <A>(path: string) => call<A>("GET", path)
export const post = <A>(path: string, body: unknown = {}) => call<A>("POST", path, body)
