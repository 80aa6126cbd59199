// Validates record files with @atproto/lexicon, the way `gelstore lex
// check` does: read each file, parse it, turn `$bytes`/`$link` into their
// values, validate against the lexicon its `$type` names (a record, or a
// non-record object def such as `chat.gel.assistant.defs#plainContent`).
// Prints the number of records and of invalid ones (with the first
// failure), and the time taken after the lexicons loaded (start-up not
// counted), as one JSON line.
import { readFileSync, readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { Lexicons, jsonToLex } from '@atproto/lexicon'

const [lexDir, ...files] = process.argv.slice(2)

function walk(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name)
    return statSync(path).isDirectory() ? walk(path) : name.endsWith('.json') ? [path] : []
  })
}

const lexicons = new Lexicons()
for (const file of walk(lexDir)) lexicons.add(JSON.parse(readFileSync(file, 'utf8')))

const start = process.hrtime.bigint()
let invalid = 0
let firstError
for (const file of files) {
  const value = jsonToLex(JSON.parse(readFileSync(file, 'utf8')))
  const result = lexicons.validate(value.$type, value)
  if (!result.success) {
    invalid++
    firstError ??= `${file}: ${result.error.message}`
  }
}
const ms = Number(process.hrtime.bigint() - start) / 1e6
console.log(JSON.stringify({ records: files.length, invalid, ms, firstError }))
