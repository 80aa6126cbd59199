//! JSON → [`Document`], reporting every structural problem as a [`Finding`].

use super::*;
use crate::finding::{Finding, pointer_push};
use serde_json::Map;

/// Rule names the parser reports (see `lint` for the semantic ones).
pub mod rules {
    /// A value has the wrong JSON type, or a required key is missing.
    pub const SCHEMA: &str = "schema";
    /// A key the Lexicon spec does not define for this type (often a typo).
    pub const UNKNOWN_FIELD: &str = "unknown-field";
    /// `lexicon` is not 1.
    pub const LEXICON_VERSION: &str = "lexicon-version";
    /// `type` names no Lexicon type, or one not allowed where it stands.
    pub const TYPE_NOT_ALLOWED: &str = "type-not-allowed";
    /// `defs` is empty.
    pub const NO_DEFS: &str = "no-defs";
}

/// Where a type appears; decides which types are allowed there.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// A named def other than a primary type.
    NamedDef,
    /// An object property or array items.
    Field,
    /// A params property (or the items of an array in params).
    Param,
    /// An XRPC body schema: object, ref or union.
    BodySchema,
    /// A subscription message schema: a union.
    MessageSchema,
    /// The `parameters` of a query, procedure or subscription: params.
    Parameters,
}

impl Place {
    fn allows(self, type_name: &str) -> bool {
        match self {
            Place::NamedDef => !matches!(type_name, "ref" | "union" | "unknown" | "params"),
            Place::Field => !matches!(type_name, "token" | "params"),
            Place::Param => matches!(
                type_name,
                "boolean" | "integer" | "string" | "array" | "unknown"
            ),
            Place::BodySchema => matches!(type_name, "object" | "ref" | "union"),
            Place::MessageSchema => type_name == "union",
            Place::Parameters => type_name == "params",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Place::NamedDef => "a named def",
            Place::Field => "a property or array items",
            Place::Param => "params (only boolean, integer, string, unknown and arrays of them)",
            Place::BodySchema => "a body schema (object, ref or union)",
            Place::MessageSchema => "a subscription message schema (union)",
            Place::Parameters => "parameters (params)",
        }
    }
}

/// Parses one lexicon document. Returns the model (when the document is
/// recognisable at all) and every problem found on the way; `file` labels the
/// findings.
pub fn parse_document(value: &Value, file: &str) -> (Option<Document>, Vec<Finding>) {
    let mut p = Parser {
        file,
        findings: Vec::new(),
    };
    let doc = p.document(value);
    (doc, p.findings)
}

struct Parser<'a> {
    file: &'a str,
    findings: Vec<Finding>,
}

impl Parser<'_> {
    fn report(&mut self, path: &str, rule: &'static str, message: impl Into<String>) {
        self.findings
            .push(Finding::new(self.file, path, rule, message));
    }

    fn document(&mut self, value: &Value) -> Option<Document> {
        let Some(map) = value.as_object() else {
            self.report(
                "",
                rules::SCHEMA,
                "a lexicon document must be a JSON object",
            );
            return None;
        };
        self.unknown_keys(
            map,
            "",
            &["lexicon", "id", "revision", "description", "defs"],
        );
        match map.get("lexicon") {
            None => self.report("", rules::SCHEMA, "missing required field 'lexicon'"),
            Some(v) if v.as_i64() == Some(1) => {}
            Some(v) if v.is_i64() || v.is_u64() => self.report(
                "/lexicon",
                rules::LEXICON_VERSION,
                format!("only Lexicon version 1 is supported, found {v}"),
            ),
            Some(_) => self.report("/lexicon", rules::SCHEMA, "'lexicon' must be the integer 1"),
        }
        let id = match map.get("id") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                self.report("/id", rules::SCHEMA, "'id' must be a string (an NSID)");
                None
            }
            None => {
                self.report("", rules::SCHEMA, "missing required field 'id'");
                None
            }
        };
        let revision = self.opt_int(map, "", "revision");
        if revision.is_some_and(|r| r < 0) {
            self.report(
                "/revision",
                rules::SCHEMA,
                "'revision' must not be negative",
            );
        }
        let description = self.opt_str(map, "", "description");
        let mut defs = IndexMap::new();
        match map.get("defs") {
            Some(Value::Object(raw)) => {
                if raw.is_empty() {
                    self.report(
                        "/defs",
                        rules::NO_DEFS,
                        "a lexicon must have at least one def",
                    );
                }
                for (name, def) in raw {
                    let path = pointer_push("/defs", name);
                    if let Some(def) = self.def(def, &path) {
                        defs.insert(name.clone(), def);
                    }
                }
            }
            Some(_) => self.report("/defs", rules::SCHEMA, "'defs' must be an object"),
            None => self.report("", rules::SCHEMA, "missing required field 'defs'"),
        }
        Some(Document {
            id: id?,
            revision,
            description,
            defs,
        })
    }

    fn def(&mut self, value: &Value, path: &str) -> Option<Def> {
        let (map, type_name) = self.typed_object(value, path)?;
        let description = self.opt_str(map, path, "description");
        let def = match type_name {
            "record" => {
                self.unknown_keys(map, path, &["type", "description", "key", "record"]);
                let key = match self.opt_str(map, path, "key") {
                    Some(k) => {
                        match RecordKey::parse(&k) {
                            Some(key) => key,
                            None => {
                                self.report(
                                &pointer_push(path, "key"),
                                rules::SCHEMA,
                                format!("record key type '{k}' is not tid, nsid, any or literal:<value>"),
                            );
                                RecordKey::Any
                            }
                        }
                    }
                    None => {
                        self.report(path, rules::SCHEMA, "a record needs a 'key' type");
                        RecordKey::Any
                    }
                };
                let record_path = pointer_push(path, "record");
                let record = match map.get("record") {
                    Some(v) => match self.ty(v, &record_path, Place::Field)? {
                        Type::Object(o) => o,
                        other => {
                            self.report(
                                &record_path,
                                rules::TYPE_NOT_ALLOWED,
                                format!(
                                    "a record's schema must be an object, not {}",
                                    other.type_name()
                                ),
                            );
                            return None;
                        }
                    },
                    None => {
                        self.report(
                            path,
                            rules::SCHEMA,
                            "a record needs a 'record' object schema",
                        );
                        return None;
                    }
                };
                Def::Record(Record {
                    description,
                    key,
                    record,
                })
            }
            "query" => {
                self.unknown_keys(
                    map,
                    path,
                    &["type", "description", "parameters", "output", "errors"],
                );
                Def::Query(Query {
                    description,
                    parameters: self.opt_params(map, path),
                    output: self.opt_body(map, path, "output"),
                    errors: self.errors(map, path),
                })
            }
            "procedure" => {
                self.unknown_keys(
                    map,
                    path,
                    &[
                        "type",
                        "description",
                        "parameters",
                        "input",
                        "output",
                        "errors",
                    ],
                );
                Def::Procedure(Procedure {
                    description,
                    parameters: self.opt_params(map, path),
                    input: self.opt_body(map, path, "input"),
                    output: self.opt_body(map, path, "output"),
                    errors: self.errors(map, path),
                })
            }
            "subscription" => {
                self.unknown_keys(
                    map,
                    path,
                    &["type", "description", "parameters", "message", "errors"],
                );
                if !map.contains_key("message") {
                    self.report(
                        path,
                        rules::SCHEMA,
                        "a subscription needs a 'message' (with a union schema)",
                    );
                }
                Def::Subscription(Subscription {
                    description,
                    parameters: self.opt_params(map, path),
                    message: self.opt_message(map, path),
                    errors: self.errors(map, path),
                })
            }
            "permission-set" => {
                self.unknown_keys(
                    map,
                    path,
                    &[
                        "type",
                        "description",
                        "title",
                        "title:lang",
                        "detail",
                        "detail:lang",
                        "permissions",
                    ],
                );
                Def::PermissionSet(PermissionSet {
                    description,
                    title: self.opt_str(map, path, "title"),
                    title_lang: self.lang_map(map, path, "title:lang"),
                    detail: self.opt_str(map, path, "detail"),
                    detail_lang: self.lang_map(map, path, "detail:lang"),
                    permissions: self.permissions(map, path),
                })
            }
            _ => return self.ty(value, path, Place::NamedDef).map(Def::Type),
        };
        Some(def)
    }

    /// Checks `value` is an object with a string `type`, returning both.
    fn typed_object<'v>(
        &mut self,
        value: &'v Value,
        path: &str,
    ) -> Option<(&'v Map<String, Value>, &'v str)> {
        let Some(map) = value.as_object() else {
            self.report(path, rules::SCHEMA, "a definition must be a JSON object");
            return None;
        };
        match map.get("type") {
            Some(Value::String(t)) => Some((map, t.as_str())),
            Some(_) => {
                self.report(
                    &pointer_push(path, "type"),
                    rules::SCHEMA,
                    "'type' must be a string",
                );
                None
            }
            None => {
                self.report(path, rules::SCHEMA, "missing required field 'type'");
                None
            }
        }
    }

    fn ty(&mut self, value: &Value, path: &str, place: Place) -> Option<Type> {
        let (map, type_name) = self.typed_object(value, path)?;
        if matches!(
            type_name,
            "record" | "query" | "procedure" | "subscription" | "permission-set"
        ) {
            self.report(
                &pointer_push(path, "type"),
                rules::TYPE_NOT_ALLOWED,
                format!("the primary type '{type_name}' may only be the def named 'main'"),
            );
            return None;
        }
        if !place.allows(type_name) && is_field_type(type_name) {
            self.report(
                &pointer_push(path, "type"),
                rules::TYPE_NOT_ALLOWED,
                format!("type '{type_name}' is not allowed in {}", place.label()),
            );
            return None;
        }
        let description = self.opt_str(map, path, "description");
        let t = match type_name {
            "null" | "cid-link" | "token" | "unknown" => {
                self.unknown_keys(map, path, &["type", "description"]);
                let c = Common { description };
                match type_name {
                    "null" => Type::Null(c),
                    "cid-link" => Type::CidLink(c),
                    "token" => Type::Token(c),
                    _ => Type::Unknown(c),
                }
            }
            "boolean" => {
                self.unknown_keys(map, path, &["type", "description", "default", "const"]);
                Type::Boolean(Boolean {
                    description,
                    default: self.opt_bool(map, path, "default"),
                    r#const: self.opt_bool(map, path, "const"),
                })
            }
            "integer" => {
                self.unknown_keys(
                    map,
                    path,
                    &[
                        "type",
                        "description",
                        "minimum",
                        "maximum",
                        "enum",
                        "default",
                        "const",
                    ],
                );
                Type::Integer(Integer {
                    description,
                    minimum: self.opt_int(map, path, "minimum"),
                    maximum: self.opt_int(map, path, "maximum"),
                    r#enum: self.opt_int_list(map, path, "enum"),
                    default: self.opt_int(map, path, "default"),
                    r#const: self.opt_int(map, path, "const"),
                })
            }
            "string" => {
                self.unknown_keys(
                    map,
                    path,
                    &[
                        "type",
                        "description",
                        "format",
                        "minLength",
                        "maxLength",
                        "minGraphemes",
                        "maxGraphemes",
                        "knownValues",
                        "enum",
                        "default",
                        "const",
                    ],
                );
                Type::String(StringType {
                    description,
                    format: self.opt_str(map, path, "format"),
                    min_length: self.opt_len(map, path, "minLength"),
                    max_length: self.opt_len(map, path, "maxLength"),
                    min_graphemes: self.opt_len(map, path, "minGraphemes"),
                    max_graphemes: self.opt_len(map, path, "maxGraphemes"),
                    known_values: self.opt_str_list(map, path, "knownValues"),
                    r#enum: self.opt_str_list(map, path, "enum"),
                    default: self.opt_str(map, path, "default"),
                    r#const: self.opt_str(map, path, "const"),
                })
            }
            "bytes" => {
                self.unknown_keys(
                    map,
                    path,
                    &["type", "description", "minLength", "maxLength"],
                );
                Type::Bytes(Bytes {
                    description,
                    min_length: self.opt_len(map, path, "minLength"),
                    max_length: self.opt_len(map, path, "maxLength"),
                })
            }
            "blob" => {
                self.unknown_keys(map, path, &["type", "description", "accept", "maxSize"]);
                Type::Blob(Blob {
                    description,
                    accept: self.opt_str_list(map, path, "accept"),
                    max_size: self.opt_len(map, path, "maxSize"),
                })
            }
            "array" => {
                self.unknown_keys(
                    map,
                    path,
                    &["type", "description", "items", "minLength", "maxLength"],
                );
                let items_path = pointer_push(path, "items");
                let Some(items) = map.get("items") else {
                    self.report(path, rules::SCHEMA, "an array needs an 'items' schema");
                    return None;
                };
                let items_place = if place == Place::Param {
                    Place::Param
                } else {
                    Place::Field
                };
                let items = self.ty(items, &items_path, items_place)?;
                if place == Place::Param && matches!(items, Type::Array(_)) {
                    self.report(
                        &items_path,
                        rules::TYPE_NOT_ALLOWED,
                        "params arrays may not nest arrays",
                    );
                }
                Type::Array(Array {
                    description,
                    items: Box::new(items),
                    min_length: self.opt_len(map, path, "minLength"),
                    max_length: self.opt_len(map, path, "maxLength"),
                })
            }
            "object" => {
                self.unknown_keys(
                    map,
                    path,
                    &["type", "description", "required", "nullable", "properties"],
                );
                Type::Object(Object {
                    description,
                    required: self.opt_str_list(map, path, "required").unwrap_or_default(),
                    nullable: self.opt_str_list(map, path, "nullable").unwrap_or_default(),
                    properties: self.properties(map, path, Place::Field),
                })
            }
            "params" => {
                self.unknown_keys(
                    map,
                    path,
                    &["type", "description", "required", "properties"],
                );
                Type::Params(Params {
                    description,
                    required: self.opt_str_list(map, path, "required").unwrap_or_default(),
                    properties: self.properties(map, path, Place::Param),
                })
            }
            "ref" => {
                self.unknown_keys(map, path, &["type", "description", "ref"]);
                let Some(target) = self.opt_str(map, path, "ref") else {
                    self.report(path, rules::SCHEMA, "a ref needs a 'ref' target");
                    return None;
                };
                Type::Ref(Ref {
                    description,
                    target,
                })
            }
            "union" => {
                self.unknown_keys(map, path, &["type", "description", "refs", "closed"]);
                let Some(refs) = self.opt_str_list(map, path, "refs") else {
                    self.report(path, rules::SCHEMA, "a union needs a 'refs' list");
                    return None;
                };
                Type::Union(Union {
                    description,
                    refs,
                    closed: self.opt_bool(map, path, "closed").unwrap_or(false),
                })
            }
            other => {
                self.report(
                    &pointer_push(path, "type"),
                    rules::TYPE_NOT_ALLOWED,
                    format!("'{other}' is not a Lexicon type"),
                );
                return None;
            }
        };
        Some(t)
    }

    fn properties(
        &mut self,
        map: &Map<String, Value>,
        path: &str,
        place: Place,
    ) -> IndexMap<String, Type> {
        let mut out = IndexMap::new();
        let props_path = pointer_push(path, "properties");
        match map.get("properties") {
            None => {}
            Some(Value::Object(props)) => {
                for (name, v) in props {
                    if let Some(t) = self.ty(v, &pointer_push(&props_path, name), place) {
                        out.insert(name.clone(), t);
                    }
                }
            }
            Some(_) => self.report(&props_path, rules::SCHEMA, "'properties' must be an object"),
        }
        out
    }

    fn opt_params(&mut self, map: &Map<String, Value>, path: &str) -> Option<Params> {
        let v = map.get("parameters")?;
        let p = pointer_push(path, "parameters");
        match self.ty(v, &p, Place::Parameters)? {
            Type::Params(params) => Some(params),
            other => {
                self.report(
                    &p,
                    rules::TYPE_NOT_ALLOWED,
                    format!(
                        "'parameters' must be of type params, not {}",
                        other.type_name()
                    ),
                );
                None
            }
        }
    }

    fn opt_body(&mut self, map: &Map<String, Value>, path: &str, key: &str) -> Option<Body> {
        let v = map.get(key)?;
        let p = pointer_push(path, key);
        let Some(body) = v.as_object() else {
            self.report(&p, rules::SCHEMA, format!("'{key}' must be an object"));
            return None;
        };
        self.unknown_keys(body, &p, &["description", "encoding", "schema"]);
        let encoding = match self.opt_str(body, &p, "encoding") {
            Some(e) if e.is_empty() => {
                self.report(
                    &pointer_push(&p, "encoding"),
                    rules::SCHEMA,
                    "'encoding' must not be empty (a MIME type, like application/json)",
                );
                e
            }
            Some(e) => e,
            None => {
                self.report(
                    &p,
                    rules::SCHEMA,
                    format!("'{key}' needs an 'encoding' (a MIME type)"),
                );
                String::new()
            }
        };
        let schema = body
            .get("schema")
            .and_then(|s| self.ty(s, &pointer_push(&p, "schema"), Place::BodySchema));
        Some(Body {
            description: self.opt_str(body, &p, "description"),
            encoding,
            schema,
        })
    }

    fn opt_message(&mut self, map: &Map<String, Value>, path: &str) -> Option<Message> {
        let v = map.get("message")?;
        let p = pointer_push(path, "message");
        let Some(msg) = v.as_object() else {
            self.report(&p, rules::SCHEMA, "'message' must be an object");
            return None;
        };
        self.unknown_keys(msg, &p, &["description", "schema"]);
        let Some(schema) = msg.get("schema") else {
            self.report(&p, rules::SCHEMA, "'message' needs a 'schema' (a union)");
            return None;
        };
        let schema = self.ty(schema, &pointer_push(&p, "schema"), Place::MessageSchema)?;
        Some(Message {
            description: self.opt_str(msg, &p, "description"),
            schema,
        })
    }

    fn errors(&mut self, map: &Map<String, Value>, path: &str) -> Vec<ErrorDef> {
        let p = pointer_push(path, "errors");
        let Some(v) = map.get("errors") else {
            return Vec::new();
        };
        let Some(list) = v.as_array() else {
            self.report(&p, rules::SCHEMA, "'errors' must be an array");
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, e) in list.iter().enumerate() {
            let ep = pointer_push(&p, &i.to_string());
            let Some(obj) = e.as_object() else {
                self.report(
                    &ep,
                    rules::SCHEMA,
                    "an error must be an object with a 'name'",
                );
                continue;
            };
            self.unknown_keys(obj, &ep, &["name", "description"]);
            match self.opt_str(obj, &ep, "name") {
                Some(name) => out.push(ErrorDef {
                    name,
                    description: self.opt_str(obj, &ep, "description"),
                }),
                None => self.report(&ep, rules::SCHEMA, "an error needs a 'name'"),
            }
        }
        out
    }

    fn permissions(&mut self, map: &Map<String, Value>, path: &str) -> Vec<Permission> {
        let p = pointer_push(path, "permissions");
        let Some(list) = map.get("permissions").and_then(Value::as_array) else {
            if map.contains_key("permissions") {
                self.report(&p, rules::SCHEMA, "'permissions' must be an array");
            } else {
                self.report(path, rules::SCHEMA, "a permission-set needs 'permissions'");
            }
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in list.iter().enumerate() {
            let ip = pointer_push(&p, &i.to_string());
            let Some((obj, t)) = self.typed_object(item, &ip) else {
                continue;
            };
            if t != "permission" {
                self.report(
                    &pointer_push(&ip, "type"),
                    rules::TYPE_NOT_ALLOWED,
                    format!("permission-set entries must be of type permission, not '{t}'"),
                );
                continue;
            }
            let Some(resource) = self.opt_str(obj, &ip, "resource") else {
                self.report(&ip, rules::SCHEMA, "a permission needs a 'resource'");
                continue;
            };
            let params = obj
                .iter()
                .filter(|(k, _)| *k != "type" && *k != "resource")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            out.push(Permission { resource, params });
        }
        out
    }

    fn lang_map(
        &mut self,
        map: &Map<String, Value>,
        path: &str,
        key: &str,
    ) -> IndexMap<String, String> {
        let mut out = IndexMap::new();
        let Some(v) = map.get(key) else {
            return out;
        };
        let p = pointer_push(path, key);
        let Some(obj) = v.as_object() else {
            self.report(
                &p,
                rules::SCHEMA,
                format!("'{key}' must map language tags to strings"),
            );
            return out;
        };
        for (lang, text) in obj {
            match text {
                Value::String(s) => {
                    out.insert(lang.clone(), s.clone());
                }
                _ => self.report(&pointer_push(&p, lang), rules::SCHEMA, "must be a string"),
            }
        }
        out
    }

    fn unknown_keys(&mut self, map: &Map<String, Value>, path: &str, known: &[&str]) {
        for key in map.keys() {
            if !known.contains(&key.as_str()) {
                self.report(
                    &pointer_push(path, key),
                    rules::UNKNOWN_FIELD,
                    format!(
                        "'{key}' is not a field of this Lexicon type (expected one of: {})",
                        known.join(", ")
                    ),
                );
            }
        }
    }

    fn opt_str(&mut self, map: &Map<String, Value>, path: &str, key: &str) -> Option<String> {
        match map.get(key)? {
            Value::String(s) => Some(s.clone()),
            _ => {
                self.report(
                    &pointer_push(path, key),
                    rules::SCHEMA,
                    format!("'{key}' must be a string"),
                );
                None
            }
        }
    }

    fn opt_bool(&mut self, map: &Map<String, Value>, path: &str, key: &str) -> Option<bool> {
        match map.get(key)? {
            Value::Bool(b) => Some(*b),
            _ => {
                self.report(
                    &pointer_push(path, key),
                    rules::SCHEMA,
                    format!("'{key}' must be a boolean"),
                );
                None
            }
        }
    }

    fn opt_int(&mut self, map: &Map<String, Value>, path: &str, key: &str) -> Option<i64> {
        let v = map.get(key)?;
        match v.as_i64() {
            Some(i) => Some(i),
            None => {
                self.report(
                    &pointer_push(path, key),
                    rules::SCHEMA,
                    format!("'{key}' must be an integer (64-bit signed)"),
                );
                None
            }
        }
    }

    /// A length or size: a non-negative integer.
    fn opt_len(&mut self, map: &Map<String, Value>, path: &str, key: &str) -> Option<u64> {
        let v = map.get(key)?;
        match v.as_u64() {
            Some(n) => Some(n),
            None => {
                self.report(
                    &pointer_push(path, key),
                    rules::SCHEMA,
                    format!("'{key}' must be a non-negative integer"),
                );
                None
            }
        }
    }

    fn opt_str_list(
        &mut self,
        map: &Map<String, Value>,
        path: &str,
        key: &str,
    ) -> Option<Vec<String>> {
        self.opt_list(map, path, key, "string", |v| v.as_str().map(str::to_string))
    }

    fn opt_int_list(
        &mut self,
        map: &Map<String, Value>,
        path: &str,
        key: &str,
    ) -> Option<Vec<i64>> {
        self.opt_list(map, path, key, "integer", Value::as_i64)
    }

    /// An optional array whose items `item` converts; items it cannot
    /// convert are reported (as not being `what`) and left out.
    fn opt_list<T>(
        &mut self,
        map: &Map<String, Value>,
        path: &str,
        key: &str,
        what: &str,
        item: impl Fn(&Value) -> Option<T>,
    ) -> Option<Vec<T>> {
        let v = map.get(key)?;
        let p = pointer_push(path, key);
        let Some(items) = v.as_array() else {
            self.report(
                &p,
                rules::SCHEMA,
                format!("'{key}' must be an array of {what}s"),
            );
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, v) in items.iter().enumerate() {
            match item(v) {
                Some(t) => out.push(t),
                None => self.report(
                    &pointer_push(&p, &i.to_string()),
                    rules::SCHEMA,
                    format!(
                        "must be {} {what}",
                        if what == "integer" { "an" } else { "a" }
                    ),
                ),
            }
        }
        Some(out)
    }
}

fn is_field_type(name: &str) -> bool {
    matches!(
        name,
        "null"
            | "boolean"
            | "integer"
            | "string"
            | "bytes"
            | "cid-link"
            | "blob"
            | "array"
            | "object"
            | "params"
            | "token"
            | "ref"
            | "union"
            | "unknown"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules_of(v: Value) -> Vec<&'static str> {
        parse_document(&v, "t.json")
            .1
            .into_iter()
            .map(|f| f.rule)
            .collect()
    }

    #[test]
    fn minimal_document_parses_clean() {
        let (doc, findings) = parse_document(
            &json!({"lexicon": 1, "id": "com.example.thing", "defs": {"main": {"type": "token"}}}),
            "t.json",
        );
        assert!(findings.is_empty(), "{findings:?}");
        assert_eq!(doc.unwrap().main().unwrap().type_name(), "token");
    }

    #[test]
    fn reports_each_structural_problem() {
        assert_eq!(rules_of(json!("nope")), [rules::SCHEMA]);
        assert_eq!(
            rules_of(json!({"lexicon": 2, "id": "a.b.c", "defs": {"x": {"type": "token"}}})),
            [rules::LEXICON_VERSION]
        );
        assert_eq!(
            rules_of(json!({"lexicon": 1, "id": "a.b.c", "defs": {}})),
            [rules::NO_DEFS]
        );
        assert_eq!(
            rules_of(
                json!({"lexicon": 1, "id": "a.b.c", "defs": {"x": {"type": "string", "maxlength": 3}}})
            ),
            [rules::UNKNOWN_FIELD]
        );
        assert_eq!(
            rules_of(
                json!({"lexicon": 1, "id": "a.b.c", "defs": {"x": {"type": "ref", "ref": "#y"}}})
            ),
            [rules::TYPE_NOT_ALLOWED]
        );
        assert_eq!(
            rules_of(
                json!({"lexicon": 1, "id": "a.b.c", "defs": {"x": {"type": "integer", "minimum": 1.5}}})
            ),
            [rules::SCHEMA]
        );
    }

    #[test]
    fn findings_carry_json_pointer_paths() {
        let (_, findings) = parse_document(
            &json!({"lexicon": 1, "id": "a.b.c", "defs": {"main": {"type": "record", "key": "tid",
                "record": {"type": "object", "properties": {"a/b": {"type": "frob"}}}}}}),
            "t.json",
        );
        assert_eq!(findings.len(), 1);
        assert_eq!(findings[0].path, "/defs/main/record/properties/a~1b/type");
    }

    #[test]
    fn parameters_take_params_and_nothing_else() {
        let params = json!({"type": "params", "properties": {"q": {"type": "string"}}});
        let (doc, findings) = parse_document(
            &json!({"lexicon": 1, "id": "a.b.c", "defs": {"main": {"type": "query",
                "parameters": params}}}),
            "t.json",
        );
        assert!(findings.is_empty(), "{findings:?}");
        let Some(Def::Query(q)) = doc.unwrap().defs.get("main").cloned() else {
            panic!("not a query")
        };
        assert!(q.parameters.is_some());
        assert_eq!(
            rules_of(
                json!({"lexicon": 1, "id": "a.b.c", "defs": {"main": {"type": "query",
                "parameters": {"type": "object", "properties": {}}}}})
            ),
            [rules::TYPE_NOT_ALLOWED]
        );
        assert_eq!(
            rules_of(
                json!({"lexicon": 1, "id": "a.b.c", "defs": {"x": {"type": "object",
                "properties": {"p": {"type": "params", "properties": {}}}}}})
            ),
            [rules::TYPE_NOT_ALLOWED]
        );
    }

    #[test]
    fn subscriptions_need_a_message_and_bodies_an_encoding() {
        assert_eq!(
            rules_of(
                json!({"lexicon": 1, "id": "a.b.c", "defs": {"main": {"type": "subscription"}}})
            ),
            [rules::SCHEMA]
        );
        assert_eq!(
            rules_of(
                json!({"lexicon": 1, "id": "a.b.c", "defs": {"main": {"type": "query",
                "output": {"encoding": ""}}}})
            ),
            [rules::SCHEMA]
        );
    }

    #[test]
    fn record_schema_must_be_an_object() {
        let (doc, findings) = parse_document(
            &json!({"lexicon": 1, "id": "a.b.c", "defs": {"main": {"type": "record", "key": "any",
                "record": {"properties": {}}}}}),
            "t.json",
        );
        assert_eq!(findings[0].rule, rules::SCHEMA);
        assert!(doc.unwrap().defs.is_empty());
    }
}
