/**
 * A server-sent event reader over `fetch` (an `EventSource` cannot send the bearer token). It resumes after any
 * disconnect, a server restart, or a `subscriber_too_slow` end by sending the id of the last event it handed on as
 * `Last-Event-ID`, so the server replays exactly what came after it: no gap. On a thread's stream the ids are the
 * thread's gap-free `seq`, and an id not above the last one is dropped, so nothing is handed on twice.
 */
import { authHeaders, reportUnauthorized, storedToken } from "./api.js"
import type { EventJson } from "./types.js"

export interface Follow {
  readonly close: () => void
}

export interface FollowOptions {
  /** The stream's path (`/threads/{id}/events` or `/events`). */
  readonly path: string
  /** Whether ids increase on this stream (a thread's `seq`): then an id at or below the last one is a repeat. */
  readonly monotonic: boolean
  /** Each event once, in stream order; `live` is false while the stored log is being replayed in one burst. */
  readonly onEvent: (event: EventJson, id: number) => void
  /** The connection state, for the page's indicator. */
  readonly onState?: (state: "connecting" | "open" | "reconnecting") => void
  /**
   * The server refused the stream for good (a 4xx other than 401, e.g. 404 `ThreadNotFound`): the reader stops
   * instead of asking again every 2 s forever; `message` is the API's sentence.
   */
  readonly onRefused?: (refusal: { readonly status: number; readonly tag: string; readonly message: string }) => void
}

/** Parses SSE text into complete events; returns the rest (an incomplete event) to prepend to the next chunk. */
export const parseChunk = (
  buffer: string,
  emit: (event: { readonly id: string | null; readonly type: string; readonly data: string }) => void
): string => {
  let rest = buffer
  for (;;) {
    const end = rest.indexOf("\n\n")
    if (end < 0) return rest
    const block = rest.slice(0, end)
    rest = rest.slice(end + 2)
    let id: string | null = null
    let type = "message"
    const data: Array<string> = []
    for (const line of block.split("\n")) {
      if (line.startsWith(":")) continue
      const colon = line.indexOf(":")
      const field = colon < 0 ? line : line.slice(0, colon)
      const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "")
      if (field === "id") id = value
      else if (field === "event") type = value
      else if (field === "data") data.push(value)
    }
    if (data.length > 0) emit({ id, type, data: data.join("\n") })
  }
}

/**
 * Follows `options.path` until `close()` or a refusal (`onRefused`), reconnecting with `Last-Event-ID` (backoff 250 ms
 * doubling to 2 s).
 */
export const follow = (options: FollowOptions, from: number | null = null): Follow => {
  let last: number | null = from
  let closed = false
  let controller: AbortController | null = null
  let delay = 250

  const connectOnce = async () => {
    controller = new AbortController()
    options.onState?.("connecting")
    const sent = storedToken()
    const headers: Record<string, string> = { ...authHeaders(), accept: "text/event-stream" }
    if (last !== null) headers["last-event-id"] = String(last)
    const response = await fetch(options.path, { headers, signal: controller.signal })
    if (response.status === 401) {
      const body = await response.json().catch(() => ({})) as { readonly message?: string }
      reportUnauthorized(body.message ?? "unauthorized", sent)
      closed = true
      return
    }
    // A client error other than a timeout or rate limit will not change by asking again: stop and say why. A 5xx
    // (a server starting or stopping) is retried like a cut connection.
    if (response.status >= 400 && response.status < 500 && response.status !== 408 && response.status !== 429) {
      const body = await response.json().catch(() => ({})) as { readonly _tag?: string; readonly message?: string }
      closed = true
      options.onRefused?.({ status: response.status, tag: body._tag ?? `HTTP ${response.status}`, message: body.message ?? `HTTP ${response.status}` })
      return
    }
    if (!response.ok || response.body === null) return
    options.onState?.("open")
    delay = 250
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader()
    let buffer = ""
    for (;;) {
      const { done, value } = await reader.read()
      if (done) return
      buffer = parseChunk(buffer + value.replace(/\r\n?/g, "\n"), (sse) => {
        if (sse.type === "subscriber_too_slow") {
          // The server ended the stream; resume from the cursor it names (the last event it sent us).
          const cursor = (JSON.parse(sse.data) as { readonly cursor?: number }).cursor
          if (typeof cursor === "number") last = cursor
          return
        }
        const id = Number(sse.id)
        if (sse.id === null || !Number.isFinite(id)) return
        if (options.monotonic && last !== null && id <= last) return
        last = id
        options.onEvent(JSON.parse(sse.data) as EventJson, id)
      })
    }
  }

  const loop = async () => {
    while (!closed) {
      try {
        await connectOnce()
      } catch (_disconnected) {
        // A refused connection or a cut stream: reconnect below.
      }
      if (closed) return
      options.onState?.("reconnecting")
      await new Promise((resolve) => setTimeout(resolve, delay))
      delay = Math.min(delay * 2, 2_000)
    }
  }
  void loop()
  return {
    close: () => {
      closed = true
      controller?.abort()
    }
  }
}
