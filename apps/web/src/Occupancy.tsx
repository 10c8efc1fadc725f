/**
 * Context occupancy of one native thread (uPlot): usage after each run (one point per run, the API's reported
 * values), the window and the auto-compact threshold the reports carried, the turn-start budget where history was
 * owed, and vertical marks where the native thread was compacted, offloaded, summarised or replaced (the sawtooth).
 * The same points are listed in a table under the chart (what a screen reader and the tests read).
 */
import { useEffect, useMemo, useRef, useState } from "react"
import uPlot from "uplot"
import "uplot/dist/uPlot.min.css"
import { fmt, type OccupancyMark, type OccupancyPoint } from "./model.js"

export interface OccupancyProps {
  readonly title: string
  readonly nativeThreadId: string
  readonly points: ReadonlyArray<OccupancyPoint>
  readonly marks: ReadonlyArray<OccupancyMark>
  /** The native thread's window as the snapshot has it, used where reports carry none. */
  readonly window: number | null
}

const markColor: Record<OccupancyMark["kind"], string> = {
  compacted: "#c2410c",
  "tool results offloaded": "#7c3aed",
  summarised: "#0f766e",
  replaced: "#be123c"
}

/** uPlot's `points.show`: whether the runs `i0..i1` in view are few enough for a marker each (8 CSS px per run). */
const markersApart = (u: uPlot, _series: number, i0: number, i1: number) => u.bbox.width / uPlot.pxRatio / Math.max(1, i1 - i0) >= 8

export function Occupancy(props: OccupancyProps) {
  const host = useRef<HTMLDivElement | null>(null)
  // The table is built only while it is open: a 5,000-run thread would otherwise render 5,000 rows on every update.
  const [tableOpen, setTableOpen] = useState(false)
  const plot = useRef<uPlot | null>(null)
  const marksRef = useRef(props.marks)
  marksRef.current = props.marks

  // Every run seq from the first point to the last, so the line breaks where the native thread had no run (the
  // runs on another provider) instead of drawing a slope across them. Rebuilt only when the points change (the
  // view keeps the same array until the fold moves), not on every render.
  const data = useMemo((): uPlot.AlignedData => {
    const bySeq = new Map(props.points.map((p) => [p.runSeq, p]))
    const first = props.points[0]?.runSeq ?? 0
    const last = props.points[props.points.length - 1]?.runSeq ?? -1
    const xs = Array.from({ length: Math.max(0, last - first + 1) }, (_, i) => first + i)
    const column = (f: (p: OccupancyPoint) => number | null) => xs.map((x) => {
      const p = bySeq.get(x)
      return p === undefined ? null : f(p)
    })
    return [
      xs,
      column((p) => p.usedTokens),
      column((p) => p.maxTokens ?? props.window),
      column((p) => p.autoCompactThreshold),
      column((p) => p.budget)
    ]
  }, [props.points, props.window])

  useEffect(() => {
    if (host.current === null) return
    const opts: uPlot.Options = {
      width: Math.max(320, host.current.clientWidth),
      height: 220,
      scales: { x: { time: false } },
      // Runs are whole numbers: ticks only at integer steps.
      axes: [{ label: "run", incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000] }, { label: "tokens", size: 70 }],
      series: [
        { label: "run" },
        // A marker per run only while they stand apart (at least 8 CSS pixels per run in view): a 5,000-run thread
        // drew 5,000 circles on every update, the largest share of a live update's time in the page's profile.
        { label: "used", stroke: "#2563eb", width: 2, points: { show: markersApart, size: 6 } },
        { label: "window", stroke: "#111827", dash: [2, 2], points: { show: false } },
        { label: "auto-compact", stroke: "#dc2626", dash: [6, 4], points: { show: false } },
        { label: "budget", stroke: "#16a34a", dash: [1, 3], points: { show: true, size: 4 } }
      ],
      hooks: {
        draw: [(u) => {
          const ctx = u.ctx
          for (const mark of marksRef.current) {
            const x = u.valToPos(mark.runSeq + 0.5, "x", true)
            ctx.save()
            ctx.strokeStyle = markColor[mark.kind]
            ctx.lineWidth = 1.5
            ctx.beginPath()
            ctx.moveTo(x, u.bbox.top)
            ctx.lineTo(x, u.bbox.top + u.bbox.height)
            ctx.stroke()
            ctx.restore()
          }
        }]
      }
    }
    plot.current = new uPlot(opts, data, host.current)
    return () => {
      plot.current?.destroy()
      plot.current = null
    }
    // The chart is built once; data updates go through setData below.
  }, [])

  useEffect(() => {
    plot.current?.setData(data)
  }, [data, props.marks])

  return (
    <section className="occupancy" data-testid="occupancy" data-native-thread={props.nativeThreadId}>
      <h3>{props.title}</h3>
      <div ref={host} />
      <ul className="marks">
        {props.marks.map((m, i) => (
          <li key={i} style={{ color: markColor[m.kind] }}>after run {m.runSeq}: {m.kind} ({m.detail})</li>
        ))}
      </ul>
      <details onToggle={(e) => setTableOpen(e.currentTarget.open)}>
        <summary>{props.points.length} points</summary>
        {tableOpen && <table data-testid="occupancy-points">
          <thead><tr><th>run</th><th>used</th><th>window</th><th>auto-compact</th><th>budget</th><th>report</th></tr></thead>
          <tbody>
            {props.points.map((p) => (
              <tr key={p.runId} data-run-id={p.runId} data-run-seq={p.runSeq} data-used={p.usedTokens}>
                <td>{p.runSeq}</td><td>{fmt(p.usedTokens)}</td><td>{fmt(p.maxTokens ?? props.window)}</td>
                <td>{fmt(p.autoCompactThreshold)}</td><td>{fmt(p.budget)}</td><td>{p.trusted ? "trusted" : "untrusted (estimate)"}</td>
              </tr>
            ))}
          </tbody>
        </table>}
      </details>
    </section>
  )
}
