/**
 * Text that Baton can store and send unchanged: well-formed Unicode without NUL. Shared by the schemas of prompts,
 * titles, tool declarations and tool results.
 */

/**
 * The index (UTF-16 code units) of the first lone surrogate in `text`, or -1 when `text` is well-formed Unicode.
 */
export const loneSurrogateAt = (text: string): number => {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (c >= 0xd800 && c <= 0xdbff) {
      const next = text.charCodeAt(i + 1)
      if (next >= 0xdc00 && next <= 0xdfff) i++
      else return i
    } else if (c >= 0xdc00 && c <= 0xdfff) return i
  }
  return -1
}

/**
 * Why `text` (named `what`, e.g. "the prompt") cannot be stored as given, or `true`: a lone surrogate (it would be
 * stored altered) or a NUL character (U+0000: Postgres refuses it in text, error 22021, so SQLite refuses it too and
 * both dialects answer alike). For `Schema.filter`.
 */
export const storableText = (what: string) => (text: string): true | string => {
  const nul = text.indexOf("\u0000")
  if (nul >= 0) return `${what} contains a NUL character (U+0000) at index ${nul}, which cannot be stored`
  const at = loneSurrogateAt(text)
  return at < 0 || `${what} is not well-formed Unicode: lone surrogate at index ${at}`
}


/**
 * `text` made storable as it will be read back: each NUL character and each lone surrogate replaced by U+FFFD (the
 * replacement character), everything else unchanged. For text Baton records but does not choose (a provider's
 * output): Postgres refuses NUL and both dialects alter a lone surrogate (differently), so the record would fail or
 * differ from what Baton holds in memory.
 */
export const toStorableText = (text: string): string =>
  !text.includes("\u0000") && loneSurrogateAt(text) < 0
    ? text
    : text.replaceAll("\u0000", "\uFFFD").replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, "\uFFFD")

const isHigh = (c: number) => c >= 0xd800 && c <= 0xdbff
const isLow = (c: number) => c >= 0xdc00 && c <= 0xdfff
/** Whether `index` falls between the two halves of a surrogate pair of `text` (a cut there splits a character). */
export const insidePair = (text: string, index: number) =>
  index > 0 && index < text.length && isHigh(text.charCodeAt(index - 1)) && isLow(text.charCodeAt(index))

/**
 * The window `[start, end)` of `text` for a page of `limit` UTF-16 code units from `offset`, never splitting a
 * character (a page holding half a surrogate pair is not well-formed Unicode: JSON encoders write it as a lone
 * `\ud83d`, which other languages' decoders replace or refuse, and model APIs refuse): a start inside a pair moves
 * back to the pair's start; an end inside one moves back too, unless the window would then be empty, when it takes
 * the whole pair (one code unit over `limit`, so paging always advances). Both are clamped to the text.
 */
export const characterWindow = (text: string, offset: number, limit: number): { readonly start: number; readonly end: number } => {
  let start = Math.min(Math.max(offset, 0), text.length)
  if (insidePair(text, start)) start--
  let end = Math.min(text.length, start + Math.max(limit, 0))
  if (insidePair(text, end)) end = end - 1 > start ? end - 1 : end + 1
  return { start, end }
}
