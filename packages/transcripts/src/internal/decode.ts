/**
 * Schema decoding of transcript records with errors turned into a `RecordIssue`: the JSON path of the first
 * offending field (`message.content`, `history.12.observation`) and a short reason. Importers validate only the
 * fields they rely on; unknown fields are ignored so newer agent versions still import.
 */
import { Either, ParseResult, Schema } from "effect"
import type { RecordIssue } from "../RecordImporter.js"

/** Joins a path prefix and a ParseError path into `a.b.0.c`; `undefined` for the record itself. */
const joinPath = (prefix: string, path: ReadonlyArray<PropertyKey>): string | undefined => {
  const parts = path.map(String)
  const joined = prefix === "" ? parts.join(".") : [prefix, ...parts].join(".")
  return joined === "" ? undefined : joined
}

/** Shortens Schema's rendering of an object or array type ("Expected { readonly … }, actual null"). */
const shortReason = (message: string): string => {
  const object = /^Expected \{[\s\S]*\}, actual ([\s\S]*)$/.exec(message)
  if (object) return `expected an object, actual ${object[1]}`
  const array = /^Expected ReadonlyArray<[\s\S]*>, actual ([\s\S]*)$/.exec(message)
  if (array) return `expected an array, actual ${array[1]}`
  return message
}

/** Converts a ParseError into a `RecordIssue` for its first issue, with `prefix` before the error's path. */
export const toIssue = (error: ParseResult.ParseError, prefix = ""): RecordIssue => {
  const [first] = ParseResult.ArrayFormatter.formatErrorSync(error)
  if (first === undefined) return { field: prefix === "" ? undefined : prefix, reason: "invalid record" }
  return {
    field: joinPath(prefix, first.path),
    reason: first._tag === "Missing" ? "required field is missing" : shortReason(first.message)
  }
}

/**
 * A decoder for `schema`: `(value, prefix?) => Either<A, RecordIssue>`, where `prefix` is the JSON path of `value`
 * within its record (so a nested content block reports `message.content.2.tool_use_id`). Build once per schema.
 */
export const decoder = <A, I>(schema: Schema.Schema<A, I, never>) => {
  const decode = Schema.decodeUnknownEither(schema)
  return (value: unknown, prefix = ""): Either.Either<A, RecordIssue> =>
    Either.mapLeft(decode(value), (error) => toIssue(error, prefix))
}

/** Content that is either a string or a list of blocks (Anthropic, pi, OpenAI messages). */
export const StringOrBlocks = Schema.Union(Schema.String, Schema.Array(Schema.Unknown))

/** The `type` tag every content block carries. */
export const BlockType = Schema.Struct({ type: Schema.String })
export const decodeBlockType = decoder(BlockType)

/** A `{type: "text", text}` block. */
export const TextBlock = Schema.Struct({ text: Schema.String })
export const decodeTextBlock = decoder(TextBlock)

/**
 * The text of string-or-blocks content: the string itself, or the `text` of every `text` block joined with `"\n"`
 * (other blocks, e.g. images, carry no text and are left out). Fails on a block without a string `type`, or a text
 * block without a string `text`, naming `prefix.<index>…`.
 */
export const textOf = (
  content: string | ReadonlyArray<unknown>,
  prefix: string
): Either.Either<string, RecordIssue> => {
  if (typeof content === "string") return Either.right(content)
  const texts: Array<string> = []
  for (let i = 0; i < content.length; i++) {
    const at = `${prefix}.${i}`
    const block = decodeBlockType(content[i], at)
    if (Either.isLeft(block)) return Either.left(block.left)
    if (block.right.type !== "text") continue
    const text = decodeTextBlock(content[i], at)
    if (Either.isLeft(text)) return Either.left(text.left)
    texts.push(text.right.text)
  }
  return Either.right(texts.join("\n"))
}

/** `JSON.stringify` for tool arguments; `undefined` (a call without arguments) becomes `{}`. */
export const argumentsText = (value: unknown): string => JSON.stringify(value ?? {})
