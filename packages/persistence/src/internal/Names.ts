/**
 * The SQL client's name transforms (camelCase in code, snake_case in SQL), each answer remembered.
 *
 * `@effect/sql` calls `transformQueryNames` for every identifier of every statement it compiles (`sql(name)`, the
 * keys of `sql.insert` / `sql.update`) and `transformResultNames` for every column of every row it returns:
 * `String.camelToSnake` is a regular-expression replace and `String.snakeToCamel` builds its answer a character at
 * a time, so a quiet turn start (27 statements, a few hundred names) made thousands of short-lived strings for the
 * same few dozen column names. The names come from Baton's own queries and schemas, a small fixed set; the cache
 * still stops growing at `limit` names (a JSON column's keys, say, go through the Postgres result transform too).
 */
import { String as Str } from "effect"

/**
 * `f` (a pure function of a name) with its answers kept for the first `limit` distinct names (default 4,096);
 * a name past the limit is transformed each time. Same answers as `f`.
 */
export const memo = (f: (name: string) => string, limit = 4_096): (name: string) => string => {
  const seen = new Map<string, string>()
  return (name) => {
    let out = seen.get(name)
    if (out === undefined) {
      out = f(name)
      if (seen.size < limit) seen.set(name, out)
    }
    return out
  }
}

/** Baton's name transforms for `@effect/sql` (both dialects): `String.camelToSnake` / `String.snakeToCamel`, memoised. */
export const names = {
  transformQueryNames: memo(Str.camelToSnake),
  transformResultNames: memo(Str.snakeToCamel)
}
