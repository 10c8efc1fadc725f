/**
 * Media files built in tests: valid PDFs (checked with `qpdf --check` and `pdfinfo` when written) and WAV audio, as
 * agents attach them inline (base64).
 */
import * as Crypto from "node:crypto"
import * as Zlib from "node:zlib"

/** How `pdf` lays its objects out. */
export interface PdfOptions {
  /**
   * `"classic"`: every object in the clear and a cross-reference table (PDF 1.4). `"packed"`: the catalog, the page
   * tree and the pages in one compressed object stream, with a cross-reference stream (PDF 1.5, as pdfTeX, Chrome and
   * most tools of the last decade write a PDF): no `/Type /Page` in the clear.
   */
  readonly layout: "classic" | "packed"
  /** Bytes of incompressible data (a scanned page's image, say) drawn on the first page; 0 by default. */
  readonly imageBytes?: number
  /** Dictionaries written with no space before a name (`<</Type/Page/Parent 2 0 R…`), as Ghostscript writes them. */
  readonly compact?: boolean
}

/**
 * A valid PDF of `pages` pages (US Letter), each with a line of text ("Page i of n", Helvetica) in a compressed content
 * stream, and, when `imageBytes` is set, a grey image XObject of random samples on the first page.
 */
export const pdf = (pages: number, options: PdfOptions): Buffer => {
  const imageBytes = options.imageBytes ?? 0
  const side = Math.ceil(Math.sqrt(imageBytes))
  const samples = imageBytes > 0 ? Crypto.randomBytes(side * side) : Buffer.alloc(0)
  // Object numbers: 1 catalog, 2 page tree, 3 font, 4 image (present or not), then per page a page and its content.
  const pageNumber = (i: number) => 5 + 2 * i
  const contentNumber = (i: number) => 6 + 2 * i
  const dictionaries = new Map<number, string>([
    [1, "<< /Type /Catalog /Pages 2 0 R >>"],
    [2, `<< /Type /Pages /Kids [${Array.from({ length: pages }, (_, i) => `${pageNumber(i)} 0 R`).join(" ")}] /Count ${pages} >>`],
    [3, "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
  ])
  for (let i = 0; i < pages; i++) {
    const image = i === 0 && imageBytes > 0 ? " /XObject << /Im1 4 0 R >>" : ""
    dictionaries.set(pageNumber(i), `<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >>${image} >> /Contents ${contentNumber(i)} 0 R >>`)
  }
  if (options.compact === true) for (const [n, d] of dictionaries) dictionaries.set(n, d.replace(/ ?(\/|<<|>>)/g, "$1"))
  const streams = new Map<number, { readonly dictionary: string; readonly data: Buffer }>()
  if (imageBytes > 0) {
    streams.set(4, { dictionary: `/Type /XObject /Subtype /Image /Width ${side} /Height ${side} /ColorSpace /DeviceGray /BitsPerComponent 8`, data: samples })
  }
  for (let i = 0; i < pages; i++) {
    const draw = `${i === 0 && imageBytes > 0 ? "q 200 0 0 200 72 400 cm /Im1 Do Q " : ""}BT /F1 24 Tf 72 720 Td (Page ${i + 1} of ${pages}) Tj ET`
    streams.set(contentNumber(i), { dictionary: "/Filter /FlateDecode", data: Zlib.deflateSync(draw) })
  }

  const parts: Array<Buffer> = []
  let length = 0
  const write = (part: string | Buffer) => {
    const b = typeof part === "string" ? Buffer.from(part, "latin1") : part
    parts.push(b)
    length += b.length
  }
  const offsets = new Map<number, number>()
  const writeStream = (n: number, dictionary: string, data: Buffer) => {
    offsets.set(n, length)
    write(`${n} 0 obj\n<< ${dictionary} /Length ${data.length} >>\nstream\n`)
    write(data)
    write("\nendstream\nendobj\n")
  }
  write(options.layout === "classic" ? "%PDF-1.4\n%\xe2\xe3\xcf\xd3\n" : "%PDF-1.5\n%\xe2\xe3\xcf\xd3\n")
  for (const [n, s] of streams) writeStream(n, s.dictionary, s.data)

  const size = contentNumber(pages - 1) + (options.layout === "classic" ? 1 : 3)
  if (options.layout === "classic") {
    for (const [n, d] of dictionaries) {
      offsets.set(n, length)
      write(`${n} 0 obj\n${d}\nendobj\n`)
    }
    const xref = length
    const rows = Array.from({ length: size }, (_, n) =>
      n === 0 ? "0000000000 65535 f \n" : offsets.has(n) ? `${String(offsets.get(n)).padStart(10, "0")} 00000 n \n` : "0000000000 00000 f \n")
    write(`xref\n0 ${size}\n${rows.join("")}trailer\n<< /Size ${size} /Root 1 0 R >>\nstartxref\n${xref}\n%%EOF\n`)
    return Buffer.concat(parts)
  }

  // The object stream: "n offset" pairs, then the objects one after the other.
  const objectStream = size - 2
  const packed = [...dictionaries]
  let at = 0
  const header: Array<string> = []
  const bodies: Array<string> = []
  for (const [n, d] of packed) {
    header.push(`${n} ${at}`)
    bodies.push(d)
    at += d.length + 1
  }
  const first = `${header.join(" ")}\n`
  writeStream(objectStream, `/Type /ObjStm /N ${packed.length} /First ${first.length} /Filter /FlateDecode`, Zlib.deflateSync(first + bodies.join("\n") + "\n"))
  // The cross-reference stream: per object, its type (0 free, 1 in the clear at an offset, 2 in an object stream at
  // an index), in fields of 1, 4 and 2 bytes.
  const xrefStream = size - 1
  offsets.set(xrefStream, length)
  const row = (type: number, a: number, b: number) => {
    const r = Buffer.alloc(7)
    r.writeUInt8(type, 0)
    r.writeUInt32BE(a, 1)
    r.writeUInt16BE(b, 5)
    return r
  }
  const rows = Array.from({ length: size }, (_, n) => {
    const index = packed.findIndex(([m]) => m === n)
    return n === 0 ? row(0, 0, 65535) : index >= 0 ? row(2, objectStream, index) : offsets.has(n) ? row(1, offsets.get(n)!, 0) : row(0, 0, 0)
  })
  const xref = length
  writeStream(xrefStream, `/Type /XRef /Size ${size} /W [1 4 2] /Root 1 0 R /Filter /FlateDecode`, Zlib.deflateSync(Buffer.concat(rows)))
  write(`startxref\n${xref}\n%%EOF\n`)
  return Buffer.concat(parts)
}

/** A WAV file (RIFF, 16-bit PCM, mono) of `seconds` of a 440 Hz tone at `sampleRate` samples per second. */
export const wav = (seconds: number, sampleRate = 24_000): Buffer => {
  const samples = Math.round(seconds * sampleRate)
  const out = Buffer.alloc(44 + samples * 2)
  out.write("RIFF", 0, "latin1")
  out.writeUInt32LE(36 + samples * 2, 4)
  out.write("WAVE", 8, "latin1")
  out.write("fmt ", 12, "latin1")
  out.writeUInt32LE(16, 16)
  out.writeUInt16LE(1, 20) // PCM
  out.writeUInt16LE(1, 22) // mono
  out.writeUInt32LE(sampleRate, 24)
  out.writeUInt32LE(sampleRate * 2, 28) // bytes per second
  out.writeUInt16LE(2, 32)
  out.writeUInt16LE(16, 34)
  out.write("data", 36, "latin1")
  out.writeUInt32LE(samples * 2, 40)
  for (let i = 0; i < samples; i++) out.writeInt16LE(Math.round(8_000 * Math.sin((2 * Math.PI * 440 * i) / sampleRate)), 44 + i * 2)
  return out
}
