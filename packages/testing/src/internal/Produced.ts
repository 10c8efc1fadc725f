/** One item a scripted provider produces: `kind` and `text`, everything else empty unless given in `extra`. */
import type { ProviderAdapter } from "@baton/providers"

export const produced = (
  kind: ProviderAdapter.ProducedItem["kind"],
  text: string,
  extra: Partial<ProviderAdapter.ProducedItem> = {}
): ProviderAdapter.ProducedItem => ({
  kind,
  text,
  toolCallId: null,
  toolName: null,
  messageId: null,
  isError: false,
  toolCallState: null,
  ...extra
})
