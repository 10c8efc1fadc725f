/**
 * What the orchestration tests that put a real model-API adapter on a loopback server share: Anthropic streams a
 * model answers with, and the scripted `codex` instance the history is built on before a switch.
 */
import type { ProviderInstance } from "@baton/contracts"
import type { TokenCounter } from "@baton/context"
import { ScriptedProvider } from "@baton/providers"
import { frame, sse } from "../../../providers/test/support/Loopback.js"

const kind = "anthropic-messages" as const

/** An Anthropic stream answering `text` (usage: `inputTokens` in, 12 out). */
export const answer = (text: string, inputTokens = 900) =>
  sse(frame(kind, [
    `{"type":"message_start","message":{"id":"msg_end","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":${inputTokens},"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}`,
    `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
    `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":${JSON.stringify(text)}}}`,
    `{"type":"content_block_stop","index":0}`,
    `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":12}}`,
    `{"type":"message_stop"}`
  ]))

/** An Anthropic stream whose answer is parallel tool calls (`[id, name, input]`) in one message. */
export const toolCalls = (calls: ReadonlyArray<readonly [string, string, object]>) =>
  sse(frame(kind, [
    `{"type":"message_start","message":{"id":"msg_${calls[0]?.[0] ?? "none"}","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":900,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}`,
    ...calls.flatMap(([id, name, input], index) => [
      `{"type":"content_block_start","index":${index},"content_block":{"type":"tool_use","id":"${id}","name":"${name}","input":{}}}`,
      `{"type":"content_block_delta","index":${index},"delta":{"type":"input_json_delta","partial_json":${JSON.stringify(JSON.stringify(input))}}}`,
      `{"type":"content_block_stop","index":${index}}`
    ]),
    `{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":20}}`,
    `{"type":"message_stop"}`
  ]))

/** The scripted `codex` instance (window 1,000,000, injects natively) playing back `script`. */
export const scriptedCodex = (script: ScriptedProvider.Script, counter: TokenCounter.TokenCounterShape) =>
  ScriptedProvider.make({
    instance: "codex" as ProviderInstance,
    contextWindow: 1_000_000,
    autoCompactThreshold: null,
    injectHistory: true
  }, script, counter)
