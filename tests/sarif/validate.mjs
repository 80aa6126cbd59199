// Reads a SARIF log on stdin and validates it against the SARIF 2.1.0
// JSON Schema (draft-04, as shipped in @microsoft/jest-sarif); also checks
// that every artifactLocation.uri is an RFC 3986 URI reference written in
// ASCII (spaces and non-ASCII percent-encoded), which the schema's
// "uri-reference" format alone does not enforce. Exit 0: valid; 1: the
// errors are printed on stderr; 2: the input is not JSON.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import Ajv from "ajv-draft-04";
import addFormats from "ajv-formats";

const require = createRequire(import.meta.url);
const schemaFile = require.resolve(
  "@microsoft/jest-sarif/lib/schemas/sarif-2.1.0-rtm.5.json",
);
const schema = JSON.parse(readFileSync(schemaFile, "utf8"));

let log;
try {
  log = JSON.parse(readFileSync(0, "utf8"));
} catch (e) {
  console.error(`not JSON: ${e.message}`);
  process.exit(2);
}

// strict: false — the schema is draft-04, written before Ajv's strict mode.
// unicodeRegExp: false — its "language" pattern
// (`^[a-zA-Z]{2}|^[a-zA-Z]{2}-[a-zA-Z]{2}]?$`) has a stray `]`, an error
// with the `u` flag and a literal `]` without it, as draft-04 validators
// of its day read it. Every error is wanted, not just the first.
const ajv = new Ajv({ allErrors: true, strict: false, unicodeRegExp: false });
addFormats(ajv);
const validate = ajv.compile(schema);
const errors = [];
if (!validate(log)) {
  for (const e of validate.errors) {
    errors.push(`${e.instancePath || "/"}: ${e.message} ${JSON.stringify(e.params)}`);
  }
}

// RFC 3986: unreserved / reserved / pct-encoded, nothing else.
const URI_CHARS = /^(?:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})*$/;
function walk(value, path) {
  if (Array.isArray(value)) {
    value.forEach((v, i) => walk(v, `${path}/${i}`));
  } else if (value && typeof value === "object") {
    for (const [k, v] of Object.entries(value)) {
      if (k === "artifactLocation" && v && typeof v.uri === "string" && !URI_CHARS.test(v.uri)) {
        errors.push(`${path}/${k}/uri: not a percent-encoded URI reference: ${JSON.stringify(v.uri)}`);
      }
      walk(v, `${path}/${k}`);
    }
  }
}
walk(log, "");

if (errors.length > 0) {
  for (const e of errors) console.error(e);
  process.exit(1);
}
