/**
 * The drawer that reads any original by its ref (an item id): `GET /items/{id}` a window of 4,096 characters at a
 * time, "more" for the next window (`nextOffset`). Opened from a row, a handoff's delivered or omitted ids, or an id
 * typed in. An item the page already holds (the conversation's pages carry each item whole; items never change)
 * shows its first window at once, without a request: on a long thread's open the server is busy paging the rest in.
 */
import { useEffect, useRef, useState } from "react"
import { get } from "./api.js"
import { drawerWindow as window, firstWindow, fmt } from "./model.js"
import type { ItemJson, ItemTextJson } from "./types.js"

export function Drawer(props: {
  readonly itemId: string | null
  readonly onClose: () => void
  readonly onOpen: (id: string) => void
  /** The item with this id if the page holds it (read without a request). */
  readonly held?: (id: string) => ItemJson | undefined
}) {
  const [pages, setPages] = useState<Array<ItemTextJson>>([])
  const [error, setError] = useState<string | null>(null)
  const [ref, setRef] = useState("")

  // The item shown now: an answer for another (opened before it, answering late) is dropped, not shown under its id.
  const shown = useRef(props.itemId)
  shown.current = props.itemId

  const load = async (id: string, offset: number) => {
    const page = await get<ItemTextJson>(`/items/${encodeURIComponent(id)}?offset=${offset}&limit=${window}`)
    if (shown.current !== id) return
    if (page.ok) {
      setError(null)
      // A window joins only where the text shown ends (a second "more" answering for the same offset is a repeat).
      setPages((old) => offset === 0 ? [page.value] : old[old.length - 1]?.nextOffset === offset ? [...old, page.value] : old)
    } else {
      setError(page.message)
    }
  }

  useEffect(() => {
    setError(null)
    const held = props.itemId === null ? undefined : props.held?.(props.itemId)
    setPages(held === undefined ? [] : [firstWindow(held)])
    if (props.itemId !== null && held === undefined) void load(props.itemId, 0)
  }, [props.itemId])

  if (props.itemId === null) {
    return (
      <form className="ref-form" onSubmit={(e) => {
        e.preventDefault()
        if (ref.trim() !== "") props.onOpen(ref.trim())
      }}>
        <input aria-label="item ref" placeholder="read an original by ref (item id)" value={ref} onChange={(e) => setRef(e.target.value)} />
        <button type="submit">Read</button>
      </form>
    )
  }
  const first = pages[0]
  const last = pages[pages.length - 1]
  return (
    <aside className="drawer" data-testid="drawer" data-item-id={props.itemId}>
      <header>
        <strong>{props.itemId}</strong>
        {first !== undefined && <span> {first.item.kind}{first.item.toolName === null ? "" : ` ${first.item.toolName}`} · seq {first.item.seq} · {fmt(first.item.tokens)} tokens · {fmt(first.totalChars)} characters</span>}
        <button onClick={props.onClose} aria-label="close">×</button>
      </header>
      {error !== null && <p className="error" data-testid="drawer-error">{error}</p>}
      <pre data-testid="drawer-text">{pages.map((p) => p.item.text).join("")}</pre>
      {last !== undefined && last.nextOffset !== null && (
        <button onClick={() => void load(props.itemId!, last.nextOffset!)}>more ({fmt(last.totalChars - last.nextOffset)} characters left)</button>
      )}
    </aside>
  )
}
