export * as ProviderAdapter from "./ProviderAdapter.js"
export * as ProviderRegistry from "./ProviderRegistry.js"
export * as ScriptedProvider from "./ScriptedProvider.js"
