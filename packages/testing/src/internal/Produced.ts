/** One item a scripted provider produces: `kind` and `text`, everything else empty unless given in `extra`. */
import { ProviderAdapter } from "@baton/providers"

export const produced = ProviderAdapter.producedItem
