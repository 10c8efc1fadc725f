/**
 * Exact o200k_base token counting on top of gpt-tokenizer 3.4.0, with two repairs:
 *
 * - Exactness: gpt-tokenizer looks merge candidates up by decoding their bytes as UTF-8 with a `TextDecoder` that
 *   strips a leading U+FEFF, so the nine o200k tokens that start with a byte-order mark (`"\uFEFF"`,
 *   `"\uFEFFusing"`, `"\uFEFF//"`, ...) are never found: `"\uFEFFusing System;"` counts 5 instead of tiktoken's 3.
 * - Time: its merge loop is tiktoken's O(n²) scan-and-splice, harmless for ordinary pre-tokens (the longest in a
 *   2.4 MB real transcript is about 1,000 characters) but seconds for a long run of one character class, e.g. 30,000
 *   unpunctuated CJK characters (about 3 s) or a long run of one repeated symbol.
 *
 * Both cases are pre-tokens ("pieces", the matches of the o200k split pattern) that this module counts itself with
 * `BytePair.countMerged`; every other stretch of the text goes to gpt-tokenizer unchanged. A text is first screened
 * in one linear pass for a U+FEFF and for how long its longest piece could be, so ordinary text never pays for the
 * pattern match twice.
 *
 * Splitting a text at piece boundaries and counting the stretches separately gives the same total, with one exception
 * handled below: the split pattern's only look-ahead, `\s+(?!\S)`, sees the end of a stretch where the whole text
 * had the next piece, so a stretch must not end in whitespace pieces. The property tests compare this counter, with a
 * threshold small enough to cut at nearly every piece, against gpt-tokenizer and js-tiktoken.
 */
import o200kRanks from "gpt-tokenizer/bpeRanks/o200k_base"
import { clearMergeCache, countTokens } from "gpt-tokenizer/encoding/o200k_base"
import { O200K_TOKEN_SPLIT_REGEX } from "gpt-tokenizer/encodingParams/constants"
import * as BytePair from "./BytePair.js"

/**
 * Special tokens are never honoured: an empty `disallowedSpecial` set makes gpt-tokenizer encode `<|endoftext|>` and
 * friends as ordinary text instead of throwing ("Disallowed special token found"), as tiktoken's
 * `encode(text, disallowed_special=())` does.
 */
const plainText = { disallowedSpecial: new Set<string>() }

/**
 * gpt-tokenizer keeps the merges of the pieces it met in a least-recently-used cache of 100,000 entries (a `Map`: a hit
 * deletes and re-adds its entry, a miss when full deletes the first key). Once full, every miss walks over the deleted
 * slots left at the front of V8's hash table before it finds that first key: on 300,000 short messages counted a
 * second time (a gateway request's entries as JSON, then its items) the second pass took 24.7 s instead of 5.3 s
 * without the cache. So the cache is emptied before it can fill: each count adds at most one entry per character, and
 * it is cleared once `mergeCacheChars` characters went through it (a text longer than that with no cut point, see
 * `stretchesOf`, may still fill it).
 */
const mergeCacheChars = 100_000
let charsSinceClear = 0

const countWithGptTokenizer = (text: string): number => {
  charsSinceClear += text.length
  if (charsSinceClear > mergeCacheChars) {
    clearMergeCache()
    charsSinceClear = text.length
  }
  return countTokens(text, plainText)
}

let rankTable: BytePair.RankTable | undefined
/** Built on first use (about 0.3 s and 13 MB of heap): most texts never hold a piece that needs it. */
const ranks = (): BytePair.RankTable => (rankTable ??= BytePair.makeRankTable(o200kRanks))

const BYTE_ORDER_MARK = 0xfeff

/** ECMAScript `\s`: WhiteSpace and LineTerminator code points (ECMA-262 §12.2, §12.3). */
const isWhitespace = (c: number): boolean =>
  c < 0x80
    ? c === 0x20 || (c >= 0x09 && c <= 0x0d)
    : c === 0xa0 || c === 0x1680 || (c >= 0x2000 && c <= 0x200a) || c === 0x2028 || c === 0x2029 ||
      c === 0x202f || c === 0x205f || c === 0x3000 || c === BYTE_ORDER_MARK

const isAllWhitespace = (piece: string): boolean => {
  for (let i = 0; i < piece.length; i++) if (!isWhitespace(piece.charCodeAt(i))) return false
  return true
}

/**
 * An upper bound on the length (UTF-16 code units) of any piece of `text`, or -1 when `text` holds a U+FEFF.
 *
 * Why it bounds: a piece of the o200k pattern is either all whitespace (`\s*[\r\n]+`, `\s+(?!\S)`, `\s+`), so it
 * lies in one run of whitespace; or one to three digits (`\p{N}{1,3}`, the only alternative that takes a digit); or a
 * letter or punctuation piece, which holds a U+0020 only as its first character (the optional prefix) and no digit
 * at all, so it lies in one character plus a run free of U+0020 and of ASCII digits. Counting only ASCII digits as
 * breaks (a subset of `\p{N}`) keeps the bound safe; they are what keeps base64 data (images in transcripts) on the
 * fast path.
 */
const longestPieceBound = (text: string): number => {
  let longestRun = 0
  let run = 0
  let longestWhitespace = 0
  let whitespace = 0
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (c === BYTE_ORDER_MARK) return -1
    if (c === 0x20 || (c >= 0x30 && c <= 0x39)) {
      run = 0
    } else if (++run > longestRun) {
      longestRun = run
    }
    if (!isWhitespace(c)) {
      whitespace = 0
    } else if (++whitespace > longestWhitespace) {
      longestWhitespace = whitespace
    }
  }
  return Math.max(3, longestRun + 1, longestWhitespace)
}

/**
 * Pieces longer than this many UTF-16 code units are merged by `BytePair`. Measured on single-piece texts (CJK
 * without punctuation, one repeated letter, one repeated symbol): gpt-tokenizer is 2-4x faster up to 2,048 units,
 * `BytePair` 2-5x faster from 4,096 and 30-60x at 30,000 CJK characters (35 ms against 2.3 s in the bench).
 */
export const defaultLongPiece = 3_000

/**
 * The cut points of `stretchesOf`: positions `p` where a piece of the o200k split pattern ends in every text that has
 * the characters of `text` around `p`, and the pieces before it are the same when the text ends there. Two kinds:
 * - a letter (`\p{L}`) at `p - 1` and, at `p`, neither a letter, a mark (`\p{M}`) nor an apostrophe: the piece
 *   holding that letter is a letter piece (whitespace, digit and punctuation pieces hold no letter), which ends at its
 *   last letter or mark unless a contraction (`'s`, `'ll`…) follows, and takes a non-letter only as its first character;
 * - a digit (`\p{N}`) at `p - 1` and no digit at `p`: digits are split in threes from the start of their run
 *   (`\p{N}{1,3}`; no other alternative takes one), so the run's last piece ends at `p`.
 * Both pieces ending at `p` were matched without look-ahead (the pattern's only one, `\s+(?!\S)`, ends whitespace
 * pieces, and the stretch before `p` ends in a letter or a digit); the pattern has no look-behind, so the pieces after
 * `p` are the same in the text that starts there. The first kind is what cuts prose ("word word", "word."), CJK with
 * its punctuation ("文字。文字") and code; both cut base64 data (letters and digits alternate) and hex. Matched by
 * one sticky-free `RegExp` (`u`: code points, so a cut never splits a surrogate pair).
 */
const cutPoint = /(?<=\p{L})(?=[^\p{L}\p{M}'])|(?<=\p{N})(?=\P{N})/gu

/**
 * `text` cut at piece boundaries (`cutPoint`) into stretches of at least `chars` UTF-16 code units (the last one may
 * be shorter; a text without a cut point after `chars` is one stretch). Counting each stretch and adding the counts
 * gives the count of `text`. One pass over `text`.
 */
export const stretchesOf = (text: string, chars: number): Array<string> => {
  const out: Array<string> = []
  let from = 0
  while (text.length - from > chars) {
    cutPoint.lastIndex = from + Math.max(1, chars)
    const cut = cutPoint.exec(text)
    // `index > from` always (the search starts past `from`); checked so that no input can loop here.
    if (cut === null || cut.index <= from || cut.index >= text.length) break
    out.push(text.slice(from, cut.index))
    from = cut.index
  }
  out.push(text.slice(from))
  return out
}

/** The stretch length (UTF-16 code units) above which `makeCount` counts a text stretch by stretch. */
export const defaultStretch = 65_536

/**
 * A counting function. `longPiece` (code units, >= 1) is the length above which a piece is merged here; tests lower
 * it to push nearly every piece through this module's path. `stretch` (code units, >= 1): a longer text is counted
 * in `stretchesOf(text, stretch)`; tests lower it to cut at nearly every cut point.
 */
export const makeCount = (longPiece: number = defaultLongPiece, stretch: number = defaultStretch): ((text: string) => number) => {
  // A private instance: `exec` keeps its position in `lastIndex`.
  const splitter = new RegExp(O200K_TOKEN_SPLIT_REGEX.source, "gu")
  const encoder = new TextEncoder()

  const countPieceByPiece = (text: string): number => {
    let total = 0
    // The text from `stretchStart` up to the next piece this module merges goes to gpt-tokenizer in one call,
    // except a run of all-whitespace pieces right before that piece: cut there, `\s+(?!\S)` would see the end of
    // input instead of the piece and match the run as one piece ("  " + "123" splits as " ", " ", "123" but "  "
    // alone is one piece). Such pieces are counted one by one, at the boundaries the whole text gave them.
    let stretchStart = 0
    let whitespaceRunStart = 0
    const whitespaceEnds: Array<number> = []
    splitter.lastIndex = 0
    for (let match = splitter.exec(text); match !== null; match = splitter.exec(text)) {
      const piece = match[0]
      const end = splitter.lastIndex
      if (piece.length > longPiece || piece.includes("\uFEFF")) {
        if (whitespaceEnds.length === 0) whitespaceRunStart = match.index
        if (whitespaceRunStart > stretchStart) {
          total += countWithGptTokenizer(text.slice(stretchStart, whitespaceRunStart))
        }
        let pieceStart = whitespaceRunStart
        for (const pieceEnd of whitespaceEnds) {
          total += countWithGptTokenizer(text.slice(pieceStart, pieceEnd))
          pieceStart = pieceEnd
        }
        whitespaceEnds.length = 0
        total += BytePair.countMerged(encoder.encode(piece), ranks())
        stretchStart = end
      } else if (isAllWhitespace(piece)) {
        if (whitespaceEnds.length === 0) whitespaceRunStart = match.index
        whitespaceEnds.push(end)
      } else {
        whitespaceEnds.length = 0
      }
    }
    if (stretchStart === 0) return countWithGptTokenizer(text)
    if (stretchStart < text.length) total += countWithGptTokenizer(text.slice(stretchStart))
    return total
  }

  const countStretch = (text: string): number => {
    if (text.length <= longPiece && !text.includes("\uFEFF")) return countWithGptTokenizer(text)
    const bound = longestPieceBound(text)
    return bound >= 0 && bound <= longPiece ? countWithGptTokenizer(text) : countPieceByPiece(text)
  }

  // A long text goes to gpt-tokenizer in stretches, so its merge cache is emptied between them (`mergeCacheChars`).
  return (text) => {
    if (text.length <= stretch) return countStretch(text)
    let total = 0
    for (const s of stretchesOf(text, stretch)) total += countStretch(s)
    return total
  }
}
