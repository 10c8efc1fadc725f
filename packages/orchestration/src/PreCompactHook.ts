/**
 * PreCompactHook: the port `/offload` asks before it summarises (issue 12 item 6). A hook receives the thread id,
 * the trigger (`manual`: a client asked; `automatic`: Baton decided) and the approval mode, and allows or denies with
 * a reason; a denial ends the operation with outcome `denied` and the reason shown to the user, the conversation
 * unchanged. The default allows everything; the server builds one from its config (an executable or an HTTP
 * endpoint, with a deadline: apps/server PreCompactHooks).
 */
import { Context, Effect } from "effect"

/** What a hook is told. `approvalMode`: how the operation was approved (`manual` offloads are the client's own ask). */
export interface PreCompactInput {
  readonly threadId: string
  readonly trigger: "manual" | "automatic"
  readonly approvalMode: string
}

/** A hook's answer: go on, or stop with the reason the user reads. */
export type PreCompactDecision = { readonly allow: true } | { readonly allow: false; readonly reason: string }

export interface PreCompactHookShape {
  /** Asks the hook; never fails (a hook that errs or misses its deadline answers a denial saying so). */
  readonly check: (input: PreCompactInput) => Effect.Effect<PreCompactDecision>
}

/** The hook `/offload` asks; by default one that allows everything. */
export class PreCompactHook extends Context.Reference<PreCompactHook>()("@baton/orchestration/PreCompactHook", {
  defaultValue: (): PreCompactHookShape => ({ check: () => Effect.succeed({ allow: true }) })
}) {}
