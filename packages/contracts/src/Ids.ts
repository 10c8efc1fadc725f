/**
 * Branded identifiers. Every id is an opaque string; the brand keeps a `RunId` from being passed where a
 * `ThreadId` is expected. Ids are minted by the orchestrator (`thr_…`, `run_…`, …) or, for imported transcripts,
 * derived deterministically from the source so a re-import yields the same ids.
 */
import { Schema } from "effect"

export const ThreadId = Schema.String.pipe(Schema.brand("ThreadId"))
export type ThreadId = typeof ThreadId.Type
export const RunId = Schema.String.pipe(Schema.brand("RunId"))
export type RunId = typeof RunId.Type
export const RunAttemptId = Schema.String.pipe(Schema.brand("RunAttemptId"))
export type RunAttemptId = typeof RunAttemptId.Type
export const ItemId = Schema.String.pipe(Schema.brand("ItemId"))
export type ItemId = typeof ItemId.Type
export const ProviderThreadId = Schema.String.pipe(Schema.brand("ProviderThreadId"))
export type ProviderThreadId = typeof ProviderThreadId.Type
export const NativeThreadId = Schema.String.pipe(Schema.brand("NativeThreadId"))
export type NativeThreadId = typeof NativeThreadId.Type
export const HandoffId = Schema.String.pipe(Schema.brand("HandoffId"))
export type HandoffId = typeof HandoffId.Type
export const DeliveryId = Schema.String.pipe(Schema.brand("DeliveryId"))
export type DeliveryId = typeof DeliveryId.Type
export const OffloadId = Schema.String.pipe(Schema.brand("OffloadId"))
export type OffloadId = typeof OffloadId.Type
export const CommandId = Schema.String.pipe(Schema.brand("CommandId"))
export type CommandId = typeof CommandId.Type
/** The provider-assigned id pairing a tool call with its result (Anthropic `tool_use.id`, OpenAI `call_id`). */
export const ToolCallId = Schema.String.pipe(Schema.brand("ToolCallId"))
export type ToolCallId = typeof ToolCallId.Type
/** A configured provider instance name, e.g. `codex` or `claude`: lowercase letters, digits, `-` and `_`. */
export const ProviderInstance = Schema.String.pipe(
  Schema.pattern(/^[a-z][a-z0-9_-]{0,39}$/),
  Schema.brand("ProviderInstance")
)
export type ProviderInstance = typeof ProviderInstance.Type
