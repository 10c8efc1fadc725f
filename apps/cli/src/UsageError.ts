/**
 * UsageError: `@effect/cli`'s own errors for a command line it cannot parse, in the form of every other CLI error.
 *
 * The library prints them itself, before any command runs, through `Console.error` as a bare paragraph and a blank
 * line (`'abc' is not a integer`, `Missing argument <text>`, `Received unknown argument: '--seed'`, `Invalid
 * subcommand for baton - use one of …`), then fails with a `ValidationError` that the app turns into exit code 2. This
 * module owns the rewording only: one line `baton: <message>`, naming the option whose value did not parse. It does
 * not decide exit codes, and it leaves every line that already starts `baton:` as it is.
 *
 * Its help says what an integer flag takes: Baton reads those flags as text (in decimal digits only, see bin.ts's
 * `integerOption`), and the library gives every text flag the paragraph "A user-defined piece of text."; under a flag
 * whose pseudo-name is `integer` that paragraph is replaced, and under every other text argument or flag, which has a
 * description of its own, removed (`helpText`).
 *
 * Only the library's own lines are reworded: a command's handler runs with the console as it was (`unreworded`), so
 * its output and its log lines (the pretty logger writes through `Console.error`, a failure's cause over several
 * lines) reach stderr whole. Found in review: every log line of `baton serve` came out as `baton: [12:00:00.000] INFO
 * …`, and a logged cause was cut to its first line.
 */
import { Console, type Effect } from "effect"

const prefix = "baton: "

/** ANSI escape sequences (styles) the library's help text may carry. */
const ansi = new RegExp(`${String.fromCharCode(0x1b)}\\[[0-9;]*m`, "g")

/** `'<value>' is not a <type>`: a primitive option or argument value that did not parse. */
const notA = /^'([\s\S]*)' is not a (\w+)$/

/**
 * `Expected path '<path>' to be a regular file` (or `a directory`): a file or directory option given the other kind.
 * Found by a newcomer's walk (b45ux): `baton serve --config /tmp` said only "Expected path '/tmp' to be a regular
 * file", naming no option.
 */
const pathKind = /^Expected path '([\s\S]*)' to be a (regular file|directory)$/

/**
 * The option of `argv` (the command line after the program) whose value is `value`: `--name` for `--name value` or
 * `--name=value`, or `undefined` when the value is no option's (an argument's) or appears more than once.
 */
const optionOf = (argv: ReadonlyArray<string>, value: string): string | undefined => {
  const named = argv.flatMap((arg, i) => {
    if (arg.startsWith("-") && arg.includes("=") && arg.slice(arg.indexOf("=") + 1) === value) return [arg.slice(0, arg.indexOf("="))]
    const previous = argv[i - 1]
    return arg === value && previous !== undefined && previous.startsWith("-") && !previous.includes("=") ? [previous] : []
  })
  return named.length === 1 ? named[0] : undefined
}

/**
 * `text` (what the library printed, any number of lines) as one `baton: …` line: its first non-blank line, styles
 * removed; a value that did not parse names its option (`baton: --interrupt-rate: 'often' is not a float`). Text that
 * already starts `baton:` is returned unchanged; a file option given a directory, or a directory option a file, names
 * its option too (`baton: --config: '/tmp' is not a regular file`). `argv`: the command line after the program, to find the option.
 */
export const phrase = (text: string, argv: ReadonlyArray<string>): string => {
  if (text.startsWith(prefix)) return text
  const line = text.replace(ansi, "").split("\n").map((l) => l.trim()).find((l) => l.length > 0) ?? ""
  const kind = pathKind.exec(line)
  if (kind !== null) {
    const [, path, what] = kind as unknown as [string, string, string]
    const option = optionOf(argv, path)
    return `${prefix}${option === undefined ? "" : `${option}: `}'${path}' is not a ${what}`
  }
  const parsed = notA.exec(line)
  if (parsed === null) return `${prefix}${line}`
  const [, value, type] = parsed as unknown as [string, string, string]
  const article = /^[aeiou]/.test(type) ? "an" : "a"
  const option = optionOf(argv, value)
  return `${prefix}${option === undefined ? "" : `${option}: `}'${value}' is not ${article} ${type}`
}

/**
 * The one line (without `baton: `) for a command line whose last argument is a flag of `valueFlags` (those that take a
 * value: `--get`, `--pin`, …) with no value after it, or `undefined`. @effect/cli reads such a flag, when optional,
 * as an argument it does not know (`Received unknown argument: '--get'`, though `--get` is a flag of `offload`), and
 * a repeatable one (`offload-control T --pin`) as given no times: the command ran and exited 0 without pinning
 * anything. Found by a newcomer's walk (b45ux).
 */
export const missingValue = (argv: ReadonlyArray<string>, valueFlags: ReadonlySet<string>): string | undefined => {
  const last = argv.at(-1)
  return last !== undefined && valueFlags.has(last) ? `${last}: expected a value after it` : undefined
}

/** What an integer flag's help says it takes, in place of the text primitive's paragraph. */
export const integerHelp = "An integer in decimal digits (e.g. 42; not 0x2a or 4.2e1)."

/**
 * A flag's heading in the library's help whose pseudo-name is `integer` (`--port integer`, styles around it), the blank
 * line and indentation after it, then the text primitive's paragraph. Found in review: `baton replay --help` said
 * `--seed`, `--switch-every` and `--compact-every` each took "A user-defined piece of text.".
 */
const integerFlagHelp = new RegExp(`(--[a-z][a-z0-9-]* integer(?:${ansi.source})*\\n\\n[ \\t]*)A user-defined piece of text\\.`, "g")

/**
 * The text primitive's own paragraph, "A user-defined piece of text.", with the blank line after it. @effect/cli 0.77
 * prints it above the description of every text argument and text flag: its help of a single argument or option is
 * always `sequence(p(primitive's help), description)`, and `withDescription` appends to that description instead of
 * replacing the primitive's line (args.ts and options.ts, `getHelpInternal`), so no way of building `Args.text` or
 * `Options.text` leaves it out. Found at an earlier stop: `baton send --help` said "A user-defined piece of text."
 * above "the thread's id (thr_…)" and above "the message; - reads it from standard input".
 */
const textPrimitiveHelp = /^[ \t]*A user-defined piece of text\.\n\n/gm

/** `baton`'s commands and subcommands, by name: the words of a command line that name its command. */
const commandNames: ReadonlySet<string> = new Set([
  "replay", "demo", "threads", "thread", "show", "create", "handoffs", "send", "switch", "compact", "offload",
  "offload-control", "tool-results", "events", "serve"
])

/**
 * A subcommand's usage line (`$ create --provider text …`: @effect/cli names only the subcommand itself) as the line
 * a user types, `$ baton thread create --provider text …`: the command names of `argv` up to that subcommand, after
 * `baton`. Found by a newcomer's walk (b46ux): `baton thread create --help` showed `$ create …`, which runs nothing.
 */
const usageLine = (text: string, argv: ReadonlyArray<string>): string =>
  text.replace(new RegExp(`^(\\$ (?:${ansi.source})*)([a-z][a-z-]*)(?= |$)`, "m"), (line, start: string, name: string) => {
    if (name === "baton") return line
    const words = argv.filter((a) => commandNames.has(a))
    const end = words.indexOf(name)
    return end < 0 ? line : `${start}baton ${words.slice(0, end + 1).join(" ")}`
  })

/**
 * `text` (what the library printed on stdout: its help) with each integer flag's paragraph "A user-defined piece of
 * text." replaced by `integerHelp`, and the same paragraph under every other text argument or flag removed (each has
 * its own description); a subcommand's usage line starting `$ baton` and its command path (`usageLine`, when `argv`
 * is given); every other line unchanged.
 */
export const helpText = (text: string, argv?: ReadonlyArray<string>): string => {
  const helped = text.replace(integerFlagHelp, `$1${integerHelp}`).replace(textPrimitiveHelp, "")
  return argv === undefined ? helped : usageLine(helped, argv)
}

/**
 * `text` (a usage error as the library prints it) as `phrase` words it, without the `baton: ` prefix: the message of
 * the JSON error document a command given `--json` prints on stdout.
 */
export const message = (text: string, argv: ReadonlyArray<string>): string => {
  const line = phrase(text, argv)
  return line.startsWith(prefix) ? line.slice(prefix.length) : line
}

/**
 * Whether a command line asks for `--json`: a `--json` argument, or `--json=V` with V one of the library's true values
 * (`true`, `1`, `y`, `yes`, `on`), which it reads as `--json` too. Found in review: a usage error under `--json=true`
 * printed no JSON document (only `--json` itself was looked for).
 */
export const asksForJson = (argv: ReadonlyArray<string>): boolean =>
  argv.some((a) => a === "--json" || (a.startsWith("--json=") && ["true", "1", "y", "yes", "on"].includes(a.slice("--json=".length))))

/** Each rewording console (`console`) and the console it wraps, so a command's handler gets the latter back. */
const wrapped = new WeakMap<Console.Console, Console.Console>()

/**
 * `console` with `error` (the library's channel for usage errors) rewording what it is given with `phrase`, and `log`
 * (its channel for help) with `helpText`; every other method, and error lines already starting `baton:`, unchanged.
 */
export const console = (argv: ReadonlyArray<string>) => (inner: Console.Console): Console.Console => {
  const rewording: Console.Console = {
    ...inner,
    error: (...args) => inner.error(phrase(args.map(String).join(" "), argv)),
    log: (...args) => inner.log(...args.map((a) => typeof a === "string" ? helpText(a, argv) : a)),
    unsafe: { ...inner.unsafe, error: (...args) => inner.unsafe.error(phrase(args.map(String).join(" "), argv)) }
  }
  wrapped.set(rewording, inner)
  return rewording
}

/**
 * Runs `self` with usage errors printed as `baton:` lines (see `console`). Give the command's handler `unreworded`
 * (`Command.transformHandler`), or its own `Console.error` lines and log lines are reworded too.
 */
export const reworded = (argv: ReadonlyArray<string>) => <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Console.consoleWith((inner) => Console.withConsole(self, console(argv)(inner)))

/**
 * Runs `self` (a command's handler) with the console `reworded` wrapped, so what the command prints and logs is not
 * taken for a usage error; outside `reworded`, `self` as it is.
 */
export const unreworded = <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Console.consoleWith((current) => {
    const inner = wrapped.get(current)
    return inner === undefined ? self : Console.withConsole(self, inner)
  })
