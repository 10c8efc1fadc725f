/**
 * Exact byte-pair-encoding merge counting in O(n log n), for the pre-tokens the default counter must not hand to
 * gpt-tokenizer (see `TokenCounter`): pieces containing U+FEFF, which gpt-tokenizer 3.4.0 miscounts, and very long
 * pieces, on which its O(n²) merge loop takes seconds.
 *
 * The merge rule is tiktoken's (`_byte_pair_merge`): repeatedly merge the adjacent pair whose concatenated bytes have
 * the lowest rank, the leftmost such pair on ties, until no adjacent pair is a token. Here the candidate pairs sit in
 * a binary heap keyed by (rank, byte offset of the left part); the byte offset of a part never changes when parts
 * merge, so popping the heap's minimum picks the same pair as tiktoken's linear scan. Entries made stale by a merge
 * are skipped by a per-part version stamp.
 */

/** A byte-sequence-to-rank lookup. `rank` returns `Infinity` when `bytes[start, end)` is not a token. */
export interface RankTable {
  readonly rank: (bytes: Uint8Array, start: number, end: number) => number
}

const latin1 = (bytes: ArrayLike<number>, start: number, end: number): string => {
  let key = ""
  for (let i = start; i < end; i++) key += String.fromCharCode(bytes[i])
  return key
}

/**
 * Byte sequences of up to `SHORT` bytes are keyed by a number (8 bits a byte, times 8, plus the length, so sequences
 * that differ only by leading zero bytes stay apart: at most 6 * 8 + 3 = 51 bits, exact in a double); longer ones by
 * their Latin-1 string. Most lookups during a merge are short pairs, and a number key costs no string.
 */
const SHORT = 6

const shortKey = (bytes: ArrayLike<number>, start: number, end: number): number => {
  let key = 0
  for (let i = start; i < end; i++) key = key * 256 + bytes[i]
  return key * 8 + (end - start)
}

/**
 * Build a rank table from gpt-tokenizer's rank list: index = rank, value = the token as a string (its UTF-8 bytes)
 * or, for tokens that are not valid UTF-8 on their own, as the byte values. The lookup is by bytes and never goes
 * through a UTF-8 decoder (whose BOM stripping is gpt-tokenizer's bug). About 200,000 entries; build once, lazily.
 */
export const makeRankTable = (ranks: ReadonlyArray<string | ReadonlyArray<number>>): RankTable => {
  const encoder = new TextEncoder()
  const short = new Map<number, number>()
  const long = new Map<string, number>()
  ranks.forEach((token, rank) => {
    const bytes = typeof token === "string" ? encoder.encode(token) : token
    if (bytes.length <= SHORT) short.set(shortKey(bytes, 0, bytes.length), rank)
    else long.set(latin1(bytes, 0, bytes.length), rank)
  })
  return {
    rank: (bytes, start, end) =>
      (end - start <= SHORT ? short.get(shortKey(bytes, start, end)) : long.get(latin1(bytes, start, end))) ??
        Number.POSITIVE_INFINITY
  }
}

/**
 * A binary min-heap of candidate merges. Each entry packs `rank * 2^32 + offset` into one number (ranks are below
 * 2^18 and offsets below 2^32, so the key is an exact integer under 2^53): ordering by the key orders by rank, then
 * by leftmost offset.
 */
class MergeHeap {
  private readonly keys: Array<number> = []
  private readonly versions: Array<number> = []

  get size(): number {
    return this.keys.length
  }

  push(key: number, version: number): void {
    const keys = this.keys
    const versions = this.versions
    let i = keys.length
    keys.push(key)
    versions.push(version)
    while (i > 0) {
      const parent = (i - 1) >> 1
      if (keys[parent] <= key) break
      keys[i] = keys[parent]
      versions[i] = versions[parent]
      i = parent
    }
    keys[i] = key
    versions[i] = version
  }

  /** Remove the minimum; its key and version are left in `poppedKey` / `poppedVersion`. */
  poppedKey = 0
  poppedVersion = 0
  pop(): void {
    const keys = this.keys
    const versions = this.versions
    this.poppedKey = keys[0]
    this.poppedVersion = versions[0]
    const lastKey = keys.pop()!
    const lastVersion = versions.pop()!
    const n = keys.length
    if (n === 0) return
    let i = 0
    while (true) {
      const left = 2 * i + 1
      if (left >= n) break
      const right = left + 1
      const child = right < n && keys[right] < keys[left] ? right : left
      if (keys[child] >= lastKey) break
      keys[i] = keys[child]
      versions[i] = versions[child]
      i = child
    }
    keys[i] = lastKey
    versions[i] = lastVersion
  }
}

const OFFSET_RANGE = 4_294_967_296

/**
 * The number of tokens tiktoken's merge produces for one pre-token, given as its UTF-8 bytes.
 * Time O(n log n) in the byte length n, memory O(n).
 */
export const countMerged = (bytes: Uint8Array, table: RankTable): number => {
  const n = bytes.length
  if (n <= 1) return n
  // Parts are named by the byte offset they start at; `next[i]` is where part i ends (n for the last part).
  const next = new Int32Array(n)
  const prev = new Int32Array(n)
  const version = new Uint32Array(n)
  const removed = new Uint8Array(n)
  for (let i = 0; i < n; i++) {
    next[i] = i + 1
    prev[i] = i - 1
  }
  const heap = new MergeHeap()
  // The candidate pair starting at part i: part i followed by part next[i].
  const offer = (i: number): void => {
    const j = next[i]
    if (j >= n) return
    const rank = table.rank(bytes, i, next[j])
    if (rank !== Number.POSITIVE_INFINITY) heap.push(rank * OFFSET_RANGE + i, version[i])
  }
  for (let i = 0; i < n - 1; i++) offer(i)

  let parts = n
  while (heap.size > 0) {
    heap.pop()
    const i = heap.poppedKey % OFFSET_RANGE
    if (removed[i] === 1 || version[i] !== heap.poppedVersion) continue
    const j = next[i]
    const k = next[j]
    next[i] = k
    if (k < n) prev[k] = i
    removed[j] = 1
    parts--
    version[i]++
    offer(i)
    const p = prev[i]
    if (p >= 0) {
      version[p]++
      offer(p)
    }
  }
  return parts
}
