//! The names of the semantic lint rules: stable kebab-case identifiers a CI
//! user can grep for or allow. The structural rules reported while loading
//! are in `schema::parse::rules` (and `catalog::DUPLICATE_ID`).

/// `id` is not a valid NSID.
pub const INVALID_ID: &str = "invalid-id";
/// The file path does not end with the id's segments as folders plus
/// `<name>.json` (`com/example/fooBar.json` for `com.example.fooBar`).
pub const ID_PATH: &str = "id-path";
/// A primary type (record, query, procedure, subscription, permission-set)
/// sits in a def not named `main`.
pub const PRIMARY_NOT_MAIN: &str = "primary-not-main";
/// A file declares more than one primary type (reported at the second and
/// later ones); each lexicon file describes at most one record or endpoint.
pub const MULTIPLE_PRIMARY: &str = "multiple-primary";
/// A reference (`ref`, union ref, or a `nsid#name` token in `knownValues` or
/// `enum`) names a lexicon that is in the catalog, but a def it lacks.
pub const DANGLING_REF: &str = "dangling-ref";
/// A reference names a lexicon that is not in the catalog. Kept apart from
/// `dangling-ref` so users can allow it for refs to external lexicons.
pub const UNRESOLVED_LEXICON: &str = "unresolved-lexicon";
/// A reference resolves to a def of the wrong kind: a `ref` to a query,
/// procedure, subscription, permission-set or token; a union ref to anything
/// but an object or record; a `knownValues`/`enum` token reference to
/// anything but a token.
pub const REF_TYPE: &str = "ref-type";
/// A `ref` target is not a reference (`#name`, `nsid` or `nsid#name`).
pub const BAD_REF: &str = "bad-ref";
/// A union `refs` entry is not a reference (`#name`, `nsid` or `nsid#name`).
pub const BAD_UNION_REF: &str = "bad-union-ref";
/// A union lists the same def twice (also `#x` next to `<own id>#x`, or
/// `nsid` next to `nsid#main`).
pub const DUPLICATE_UNION_REF: &str = "duplicate-union-ref";
/// A closed union with no refs: no value can ever match it.
pub const EMPTY_CLOSED_UNION: &str = "empty-closed-union";
/// A lower bound above its upper bound (lengths, graphemes, minimum/maximum,
/// array and bytes lengths), `minGraphemes` above `maxLength` (a grapheme is
/// at least one byte), or a blob `maxSize` of 0.
pub const CONTRADICTING_LIMITS: &str = "contradicting-limits";
/// A `default` no value of the field could have: outside the enum or
/// min/max, of the wrong length or grapheme count, or not in the format.
pub const DEFAULT_OUT_OF_RANGE: &str = "default-out-of-range";
/// A `const` no value of the field could have (same checks as `default`).
pub const CONST_OUT_OF_RANGE: &str = "const-out-of-range";
/// Both `const` and `default` are given; the spec makes them exclusive.
pub const CONST_AND_DEFAULT: &str = "const-and-default";
/// A property listed in `required` has a `default`, which can never apply.
pub const DEFAULT_ON_REQUIRED: &str = "default-on-required";
/// An empty `enum`, duplicate entries, entries outside the field's own
/// limits or format, local `#name` token references, or both `enum` and
/// `knownValues` on one string.
pub const BAD_ENUM: &str = "bad-enum";
/// `knownValues` with duplicates, empty strings, entries outside the
/// string's own limits or format, or local `#name` token references (tokens
/// must be fully qualified).
pub const BAD_KNOWN_VALUES: &str = "bad-known-values";
/// A string `format` the spec does not define.
pub const INVALID_FORMAT: &str = "invalid-format";
/// A blob `accept` entry that is not a MIME type, `type/*` or `*/*`;
/// duplicates; or an empty list (which accepts nothing).
pub const BAD_ACCEPT: &str = "bad-accept";
/// A `required` name that is not a property, or listed twice.
pub const BAD_REQUIRED: &str = "bad-required";
/// A `nullable` name that is not a property, or listed twice.
pub const BAD_NULLABLE: &str = "bad-nullable";
/// A record key `literal:<value>` whose value is not a valid record key.
pub const BAD_RECORD_KEY: &str = "bad-record-key";
/// An XRPC body `encoding` that is not a MIME type (or `type/*`, `*/*`), or
/// a body `schema` with an encoding other than `application/json`.
pub const BAD_ENCODING: &str = "bad-encoding";
/// A def name that is not an NSID-style name (ASCII letter, then ASCII
/// letters and digits, at most 63), or a property name that is empty or
/// starts with `$` (reserved by the data model).
pub const BAD_DEF_NAME: &str = "bad-def-name";
/// A permission-set entry the spec does not allow: unknown or unsupported
/// resource, unknown parameter, invalid or wildcard collection, unknown
/// action, invalid `lxm`, a fixed `aud`, or a `title:lang`/`detail:lang`
/// key that is not a language tag.
pub const BAD_PERMISSION: &str = "bad-permission";
/// An error name listed twice in a query, procedure or subscription.
pub const DUPLICATE_ERROR: &str = "duplicate-error";
/// An error name that is empty or contains whitespace.
pub const BAD_ERROR_NAME: &str = "bad-error-name";

/// Every lint rule with a one-line description, for `--help` and docs.
pub const ALL_RULES: &[(&str, &str)] = &[
    (INVALID_ID, "the lexicon id is not a valid NSID"),
    (
        ID_PATH,
        "the file path does not end with the id as folders plus <name>.json",
    ),
    (
        PRIMARY_NOT_MAIN,
        "a record, query, procedure, subscription or permission-set def is not named main",
    ),
    (
        MULTIPLE_PRIMARY,
        "a file declares more than one primary (record/endpoint/permission-set) def",
    ),
    (
        DANGLING_REF,
        "a reference names a def its lexicon (in the catalog) does not have",
    ),
    (
        UNRESOLVED_LEXICON,
        "a reference names a lexicon that is not in the catalog",
    ),
    (
        REF_TYPE,
        "a ref, union ref or token reference points to a def of the wrong kind",
    ),
    (BAD_REF, "a ref target is not #name, nsid or nsid#name"),
    (
        BAD_UNION_REF,
        "a union refs entry is not #name, nsid or nsid#name",
    ),
    (DUPLICATE_UNION_REF, "a union lists the same def twice"),
    (
        EMPTY_CLOSED_UNION,
        "a closed union has no refs, so no value can match",
    ),
    (
        CONTRADICTING_LIMITS,
        "a minimum is above its maximum (or the limits admit no value)",
    ),
    (
        DEFAULT_OUT_OF_RANGE,
        "a default violates the field's enum, limits or format",
    ),
    (
        CONST_OUT_OF_RANGE,
        "a const violates the field's enum, limits or format",
    ),
    (CONST_AND_DEFAULT, "both const and default are given"),
    (
        DEFAULT_ON_REQUIRED,
        "a required property has a default, which can never apply",
    ),
    (
        BAD_ENUM,
        "an enum is empty, has duplicates or impossible entries, or sits next to knownValues",
    ),
    (
        BAD_KNOWN_VALUES,
        "knownValues has duplicates, empty or impossible entries, or local token refs",
    ),
    (INVALID_FORMAT, "a string format the spec does not define"),
    (
        BAD_ACCEPT,
        "a blob accept entry is not a MIME type, type/* or */*",
    ),
    (
        BAD_REQUIRED,
        "a required name is not a property, or is listed twice",
    ),
    (
        BAD_NULLABLE,
        "a nullable name is not a property, or is listed twice",
    ),
    (
        BAD_RECORD_KEY,
        "a literal:<value> record key holds an invalid record key",
    ),
    (
        BAD_ENCODING,
        "a body encoding is not a MIME type, or a schema has a non-JSON encoding",
    ),
    (BAD_DEF_NAME, "a def or property name is not a valid name"),
    (
        BAD_PERMISSION,
        "a permission-set entry has an unknown resource, parameter, action or bad value",
    ),
    (
        DUPLICATE_ERROR,
        "an endpoint lists the same error name twice",
    ),
    (
        BAD_ERROR_NAME,
        "an error name is empty or contains whitespace",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn rule_names_are_unique_kebab_case() {
        let mut seen = HashSet::new();
        for (name, description) in ALL_RULES {
            assert!(seen.insert(*name), "{name} listed twice");
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "{name} is not kebab-case"
            );
            assert!(!description.is_empty());
        }
    }

    #[test]
    fn lint_rules_do_not_reuse_structural_names() {
        for structural in [
            "schema",
            "unknown-field",
            "lexicon-version",
            "type-not-allowed",
            "no-defs",
            crate::catalog::DUPLICATE_ID,
        ] {
            assert!(
                ALL_RULES.iter().all(|(n, _)| *n != structural),
                "{structural}"
            );
        }
    }
}
