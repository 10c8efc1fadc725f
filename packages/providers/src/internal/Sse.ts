/**
 * A server-sent-events decoder (WHATWG HTML "Server-sent events", §9.2.6 interpretation of the stream): bytes in
 * arbitrary chunks to `{ event, data }` messages. Lines end at LF, CR or CRLF; `data:` lines of one message are joined
 * with LF; a line starting with `:` is a comment; a message is dispatched at a blank line. `id` and `retry` are
 * ignored (a model API stream is never resumed). A message whose data is empty is not dispatched, as the standard
 * says. Written here rather than taken from `@effect/experimental`'s `Sse` so the hot path is one pass over the
 * text without per-line allocations beyond the message itself.
 */

/** One dispatched message: `event` is `message` when the server named none. */
export interface SseMessage {
  readonly event: string
  readonly data: string
}

/** An incremental decoder: `push` a chunk, get the messages it completed; `end` says whether input stopped mid-message. */
export interface SseDecoder {
  readonly push: (chunk: Uint8Array) => ReadonlyArray<SseMessage>
  /** Flushes the decoder at end of input; `true` when a partial message (or line) was left undispatched. */
  readonly end: () => boolean
}

export const makeDecoder = (): SseDecoder => {
  const decoder = new TextDecoder()
  let buffer = ""
  let event = ""
  let data: Array<string> = []
  let pendingCr = false

  const line = (text: string, out: Array<SseMessage>) => {
    if (text.length === 0) {
      if (data.length > 0) out.push({ event: event === "" ? "message" : event, data: data.join("\n") })
      event = ""
      data = []
      return
    }
    if (text.charCodeAt(0) === 58 /* : */) return
    const colon = text.indexOf(":")
    const field = colon === -1 ? text : text.slice(0, colon)
    let value = colon === -1 ? "" : text.slice(colon + 1)
    if (value.charCodeAt(0) === 32) value = value.slice(1)
    if (field === "data") data.push(value)
    else if (field === "event") event = value
  }

  return {
    push: (chunk) => {
      const out: Array<SseMessage> = []
      let text = buffer + decoder.decode(chunk, { stream: true })
      // A CR ending the previous chunk and an LF starting this one are one line break.
      if (pendingCr && text.charCodeAt(0) === 10) text = text.slice(1)
      pendingCr = false
      let start = 0
      for (let i = 0; i < text.length; i++) {
        const c = text.charCodeAt(i)
        if (c !== 10 && c !== 13) continue
        line(text.slice(start, i), out)
        if (c === 13) {
          if (i + 1 === text.length) pendingCr = true
          else if (text.charCodeAt(i + 1) === 10) i++
        }
        start = i + 1
      }
      buffer = text.slice(start)
      return out
    },
    end: () => {
      buffer += decoder.decode()
      return buffer.length > 0 || data.length > 0 || event !== ""
    }
  }
}

/**
 * `data` as the `data:` field lines of one event (no trailing blank line): one `data: ` line per line of `data`, so a
 * value holding line feeds (a decoded event whose data came on several lines, a pretty-printed JSON body) decodes back
 * to the same `data` (the decoder joins a message's data lines with `\n`). A `\r\n` or `\r` in `data` is written as a
 * line break too (SSE reads either as one), so it comes back as `\n`.
 */
export const dataLines = (data: string): string => data.split(/\r\n|\r|\n/).map((line) => `data: ${line}`).join("\n")
