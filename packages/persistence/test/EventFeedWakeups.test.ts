/**
 * The merge of a tailer's wake-ups (`EventFeed.mergeWakeups`): wake-ups that arrive while the tailer is busy are
 * kept, not replaced, so the committed events they carry still reach subscribers without a read of the log (on SQLite
 * that read waits for the one connection, which a long turn start can hold for half a second). The feed itself is
 * tested end to end in packages/orchestration/test/EventFeed.test.ts.
 */
import { EventFeed } from "@baton/persistence"
import { describe, expect, it } from "@effect/vitest"

const events = (...seqs: Array<number>) => seqs.map((seq) => ({ seq }))

describe("EventFeed.mergeWakeups", () => {
  it("keeps every committed event of the wake-ups it merges, in commit order, and a read if either asked for one", () => {
    expect(EventFeed.mergeWakeups(null, { events: events(5), read: false }, 256)).toEqual({ events: events(5), read: false })
    expect(EventFeed.mergeWakeups({ events: events(5), read: false }, { events: events(6, 7), read: false }, 256))
      .toEqual({ events: events(5, 6, 7), read: false })
    // A poll (a read, no events) arriving after a commit's events used to replace them: the tailer then read the log.
    expect(EventFeed.mergeWakeups({ events: events(5), read: false }, { events: [], read: true }, 256))
      .toEqual({ events: events(5), read: true })
    expect(EventFeed.mergeWakeups({ events: [], read: true }, { events: events(6), read: false }, 256))
      .toEqual({ events: events(6), read: true })
  })

  it("past `maxEvents` it keeps none and asks for a read of the log instead (bounded memory for a tailer held up)", () => {
    expect(EventFeed.mergeWakeups({ events: events(1, 2), read: false }, { events: events(3), read: false }, 3))
      .toEqual({ events: events(1, 2, 3), read: false })
    expect(EventFeed.mergeWakeups({ events: events(1, 2, 3), read: false }, { events: events(4), read: false }, 3))
      .toEqual({ events: [], read: true })
  })
})
