/**
 * The dashboard's shell: asks for the token once (kept in sessionStorage for this browser session; any 401 brings the
 * form back), learns its role (`GET /session`: the read-only token hides the actions; a thread's page loads meanwhile),
 * and routes between the thread list (`/`) and a thread (`/ui/threads/<id>`) with the History API.
 */
import { useEffect, useState } from "react"
import { clearToken, get, onUnauthorized, storeToken, storedToken } from "./api.js"
import { ThreadList } from "./ThreadList.js"
import { ThreadView } from "./ThreadView.js"
import type { Role, SessionJson } from "./types.js"

const threadOfPath = (path: string) => {
  const match = /^\/ui\/threads\/([^/]+)$/.exec(path)
  return match === null ? null : decodeURIComponent(match[1]!)
}

/**
 * Why `token` cannot be a Baton token, or `null`. Tokens are printable ASCII (docs/server.md, `auth.token`); another
 * character cannot even be sent in a header (`fetch` throws), which read as "cannot reach the server" and kept the
 * token for the session.
 */
export const tokenProblem = (token: string): string | null =>
  /^[\x20-\x7e]+$/.test(token) ? null : "a Baton token is printable ASCII (letters, digits, punctuation): this one has other characters; paste it again"

function TokenForm(props: { readonly message: string | null; readonly onToken: (token: string) => void }) {
  const [token, setToken] = useState("")
  const [problem, setProblem] = useState<string | null>(null)
  const message = problem ?? props.message
  return (
    <form className="token-form" data-testid="token-form" onSubmit={(e) => {
      e.preventDefault()
      const entered = token.trim()
      if (entered === "") return
      setProblem(tokenProblem(entered))
      if (tokenProblem(entered) === null) props.onToken(entered)
    }}>
      <h1>Baton</h1>
      <p>Enter a Baton token (the admin token is in <code>.baton/token</code>; a read-only token shows everything but the actions). It is kept for this browser session only.</p>
      {message !== null && <p className="error" data-testid="auth-message">{message}</p>}
      <input type="password" autoComplete="off" aria-label="token" value={token} onChange={(e) => setToken(e.target.value)} autoFocus />
      <button type="submit">Open</button>
    </form>
  )
}

export function App() {
  const [role, setRole] = useState<Role | null>(null)
  const [authMessage, setAuthMessage] = useState<string | null>(null)
  const [hasToken, setHasToken] = useState(() => {
    const stored = storedToken()
    // A token no request can carry (kept by an older page) is dropped: the form asks for it again.
    if (stored !== null && tokenProblem(stored) !== null) clearToken()
    return storedToken() !== null
  })
  const [threadId, setThreadId] = useState<string | null>(threadOfPath(location.pathname))

  useEffect(() => {
    onUnauthorized((message) => {
      setRole(null)
      setHasToken(false)
      setAuthMessage(message)
    })
    const onPop = () => setThreadId(threadOfPath(location.pathname))
    addEventListener("popstate", onPop)
    return () => removeEventListener("popstate", onPop)
  }, [])

  useEffect(() => {
    if (!hasToken) return
    void get<SessionJson>("/session").then((r) => {
      if (r.ok) setRole(r.value.role)
      else if (r.status !== 401) setAuthMessage(r.message)
    })
  }, [hasToken])

  const navigate = (id: string | null) => {
    history.pushState(null, "", id === null ? "/" : `/ui/threads/${encodeURIComponent(id)}`)
    setThreadId(id)
  }

  // A thread's page starts loading while the token is checked (its loads do not wait for `GET /session`); its
  // actions appear once the role is known to be admin. Any 401 brings the form back either way.
  const checking = hasToken && role === null && authMessage === null
  if (!hasToken || (role === null && !(checking && threadId !== null))) {
    return checking
      ? <p className="dim">checking the token…</p>
      : <TokenForm message={authMessage} onToken={(token) => {
        storeToken(token)
        setAuthMessage(null)
        setHasToken(true)
      }} />
  }
  return (
    <main data-role={role ?? "checking"}>
      {role === "read" && <div className="banner" data-testid="read-only">read-only token: actions are hidden</div>}
      {threadId === null
        ? <ThreadList open={navigate} />
        : <ThreadView key={threadId} threadId={threadId} admin={role === "admin"} navigate={navigate} />}
    </main>
  )
}
