/**
 * Thread events as the server's API sends them (the JSON of `/threads/{id}/events`), for the CLI tests whose server is
 * a loopback stand-in speaking the API's wire format (SendEnd.test, StreamCut.test).
 */
import { ThreadEvent } from "@baton/contracts"
import { Schema } from "effect"
import * as Format from "../../src/Format.js"

/** The `createdAt` of every event these tests build (and of the stand-ins' other records). */
export const at = "2026-12-06T07:31:47.740Z"

/** One event as the server writes it: `type` and `payload` as the log holds them, `globalSeq` equal to `seq`. */
export interface WireEvent {
  readonly eventId: string
  readonly threadId: string
  readonly seq: number
  readonly globalSeq: number
  readonly commandId: null
  readonly createdAt: string
  readonly type: string
  readonly payload: Record<string, unknown>
}

/** The builder of thread `threadId`'s events: event `seq` of `type` with `payload`, id `evt_SEQ`. */
export const eventsOf = (threadId: string) => (seq: number, type: string, payload: Record<string, unknown>): WireEvent => ({
  eventId: `evt_${seq}`,
  threadId,
  seq,
  globalSeq: seq,
  commandId: null,
  createdAt: at,
  type,
  payload
})

/** The event as one server-sent-events message: `id` (its seq), `event` (its type) and `data` (its JSON). */
export const sse = (e: WireEvent) => `id: ${e.seq}\nevent: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`

/** The lines the CLI prints for `events` (`Format.eventLine`, without colour). */
export const lines = (events: ReadonlyArray<WireEvent>) =>
  events.map((e) => Format.eventLine(Schema.decodeUnknownSync(ThreadEvent)(e), false))
