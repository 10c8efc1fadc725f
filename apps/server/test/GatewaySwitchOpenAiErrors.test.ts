/**
 * An upstream's 401, 403 or 404 reaching an OpenAI agent through a provider switch (`GatewaySwitchAnthropic.chatError`
 * for an Anthropic upstream's error, `GatewaySwitchOpenAi.openAiError` for an answer in no known shape) is in OpenAI's
 * shape with OpenAI's types and codes. Found at an earlier stop: the Anthropic types `authentication_error`,
 * `permission_error` and `not_found_error` (and `invalid_request_error`) were passed on as the OpenAI `code`.
 */
import { describe, expect, it } from "@effect/vitest"
import * as GatewaySwitchAnthropic from "../src/GatewaySwitchAnthropic.js"
import * as GatewaySwitchOpenAi from "../src/GatewaySwitchOpenAi.js"

const anthropic = (type: string, message: string) => JSON.stringify({ type: "error", error: { type, message } })
const openAi = (status: number, message: string, code: string | null) => ({ status, body: { error: { message, type: "invalid_request_error", param: null, code } } })

describe("an upstream's 401/403/404 in OpenAI's shape", () => {
  it("an Anthropic upstream's error: OpenAI's codes, not Anthropic's types", () => {
    expect(GatewaySwitchAnthropic.chatError(401, anthropic("authentication_error", "invalid x-api-key")))
      .toEqual(openAi(401, "invalid x-api-key", "invalid_api_key"))
    expect(GatewaySwitchAnthropic.chatError(403, anthropic("permission_error", "Your API key does not have permission to use the specified resource.")))
      .toEqual(openAi(403, "Your API key does not have permission to use the specified resource.", null))
    expect(GatewaySwitchAnthropic.chatError(404, anthropic("not_found_error", "model: claude-nope")))
      .toEqual(openAi(404, "model: claude-nope", "model_not_found"))
    expect(GatewaySwitchAnthropic.chatError(404, anthropic("not_found_error", "Not Found")))
      .toEqual(openAi(404, "Not Found", "unknown_url"))
    expect(GatewaySwitchAnthropic.chatError(400, anthropic("invalid_request_error", "messages: at least one message is required")))
      .toEqual(openAi(400, "messages: at least one message is required", null))
  })

  it("an answer in no known shape: its status decides (401 invalid_api_key, 404 unknown_url)", () => {
    expect(GatewaySwitchOpenAi.openAiError(401, "Unauthorized")).toEqual(openAi(401, "Unauthorized", "invalid_api_key"))
    expect(GatewaySwitchOpenAi.openAiError(404, "404 page not found")).toEqual(openAi(404, "404 page not found", "unknown_url"))
    expect(GatewaySwitchOpenAi.openAiError(403, "Forbidden")).toEqual(openAi(403, "Forbidden", null))
  })
})
