//! Emits the items of one lexicon module: structs, string enums, unions,
//! newtypes, tokens and the method types, each with its `Validate` impl.

use indexmap::IndexMap;

use super::names::{self, Names};
use super::writer::{MAX_WIDTH, Writer};
use super::{Ctx, Kind, module_path};
use gelstore_lexicon::catalog::{Resolved, type_id};
use gelstore_lexicon::schema::{Body, Def, Document, Params, RecordKey, StringType, Type, Union};
use gelstore_lexicon::syntax::Format;

/// An inline type met inside a def, emitted right after it.
enum Pending {
    Struct {
        name: String,
        doc: Option<String>,
        props: IndexMap<String, Type>,
        required: Vec<String>,
        nullable: Vec<String>,
    },
    Union {
        name: String,
        doc: Option<String>,
        union: Union,
    },
    StrEnum {
        name: String,
        doc: Option<String>,
        ty: StringType,
    },
}

pub(crate) struct Module<'a, 'c> {
    pub ctx: &'a mut Ctx<'c>,
    pub nsid: String,
    /// The def being emitted (for boxing decisions).
    pub def: String,
    pub w: Writer,
    pending: Vec<Pending>,
}

/// The body of the module for `doc` (everything after the header).
pub(crate) fn module(ctx: &mut Ctx<'_>, doc: &Document) -> String {
    let mut m = Module {
        ctx,
        nsid: doc.id.clone(),
        def: String::new(),
        w: Writer::default(),
        pending: Vec::new(),
    };
    if doc.main().is_some_and(Def::is_primary) {
        m.w.blank();
        m.w.line("/// The NSID of this lexicon's main definition.");
        assign(
            &mut m.w,
            "pub const NSID: &str =",
            &format!("{:?};", doc.id),
        );
    }
    if let Some(method) = doc.main().and_then(method_const) {
        m.w.blank();
        m.w.line("/// How this method is called (a server's route table reads it).");
        m.w.open("pub const METHOD: support::Method = support::Method {");
        for line in method {
            m.w.line(&line);
        }
        m.w.close("};");
    }
    for (name, def) in &doc.defs {
        m.def = name.clone();
        m.emit_def(doc, name, def);
        while !m.pending.is_empty() {
            let p = m.pending.remove(0);
            m.emit_pending(p);
        }
    }
    let body = m.w.take();
    let mut out = String::new();
    if body.contains("support::") {
        out.push_str(&format!("\n{}\n", super::use_support(m.ctx.opts)));
        if !body.starts_with('\n') {
            out.push('\n');
        }
    }
    out.push_str(&body);
    out
}

/// The `validate_by_type` table at the root of the generated tree.
pub(crate) fn root_table(ctx: &Ctx<'_>, w: &mut Writer) {
    w.blank();
    w.line(&super::use_support(ctx.opts));
    w.blank();
    w.line("/// Validates `value` as the object or record type `type_id` names, when the");
    w.line("/// generated code has that type (for `unknown` fields and open unions).");
    w.line("/// Returns false for a type it does not know.");
    w.open("pub fn validate_by_type(");
    w.line("type_id: &str,");
    w.line("value: &support::Data,");
    w.line("path: &support::Path<'_>,");
    w.line("errors: &mut support::Errors,");
    w.close(") -> bool {");
    w.indent_by(1);
    w.open("match type_id {");
    for entry in ctx.catalog.entries() {
        for (name, def) in &entry.doc.defs {
            let is_data = matches!(def, Def::Record(_) | Def::Type(Type::Object(_)));
            if !is_data {
                continue;
            }
            let info = &ctx.defs[&(entry.doc.id.clone(), name.clone())];
            let path = format!("{}::{}", module_path(&entry.doc.id).join("::"), info.name);
            w.open(&format!("{} => {{", patterns(&entry.doc.id, name)));
            w.line(&format!("type T = {path};"));
            w.line("support::validate_data::<T>(value, path, errors)");
            w.close("}");
        }
    }
    w.line("_ => false,");
    w.close("}");
    w.indent_by(-1);
    w.line("}");
}

/// The fields of the `METHOD` constant of a query, procedure or
/// subscription (each a line of the struct literal); None for other defs.
fn method_const(def: &Def) -> Option<Vec<String>> {
    let encoding = |b: Option<&Body>| match b {
        Some(b) => format!("Some({:?})", b.encoding),
        None => "None".to_string(),
    };
    let (kind, input, output) = match def {
        Def::Query(q) => ("Query", None, q.output.as_ref()),
        Def::Procedure(p) => ("Procedure", p.input.as_ref(), p.output.as_ref()),
        Def::Subscription(_) => ("Subscription", None, None),
        _ => return None,
    };
    Some(vec![
        "nsid: NSID,".to_string(),
        format!("kind: support::MethodKind::{kind},"),
        format!("input: {},", encoding(input)),
        format!("output: {},", encoding(output)),
    ])
}

/// The `METHODS` table at the root of the generated tree: every method's
/// `METHOD`, in NSID order.
pub(crate) fn method_table(ctx: &Ctx<'_>, w: &mut Writer) {
    let mut methods: Vec<&str> = ctx
        .catalog
        .entries()
        .filter(|e| {
            matches!(
                e.doc.main(),
                Some(Def::Query(_) | Def::Procedure(_) | Def::Subscription(_))
            )
        })
        .map(|e| e.doc.id.as_str())
        .collect();
    methods.sort_unstable();
    w.blank();
    w.line("/// Every XRPC method of the catalog, in NSID order.");
    if methods.is_empty() {
        w.line("pub const METHODS: &[support::Method] = &[];");
        return;
    }
    w.open("pub const METHODS: &[support::Method] = &[");
    for nsid in methods {
        w.line(&format!("{}::METHOD,", module_path(nsid).join("::")));
    }
    w.close("];");
}

/// The `$type` spellings of a def: `nsid` and `nsid#main` for main.
fn patterns(nsid: &str, name: &str) -> String {
    if name == "main" {
        format!("{nsid:?} | \"{nsid}#main\"")
    } else {
        format!("\"{nsid}#{name}\"")
    }
}

impl Module<'_, '_> {
    fn emit_def(&mut self, doc: &Document, name: &str, def: &Def) {
        let key = (doc.id.clone(), name.to_string());
        let info = self.ctx.defs[&key].clone();
        match def {
            Def::Record(r) => {
                let o = &r.record;
                let desc = r.description.as_deref().or(o.description.as_deref());
                self.emit_struct(
                    &info.name,
                    desc,
                    &o.properties,
                    &o.required,
                    &o.nullable,
                    Some(&r.key),
                );
            }
            Def::Type(Type::Object(o)) => {
                self.emit_struct(
                    &info.name,
                    o.description.as_deref(),
                    &o.properties,
                    &o.required,
                    &o.nullable,
                    None,
                );
            }
            Def::Type(Type::Params(p)) => {
                self.emit_struct(
                    &info.name,
                    p.description.as_deref(),
                    &p.properties,
                    &p.required,
                    &[],
                    None,
                );
            }
            Def::Type(Type::Token(t)) => {
                self.w.blank();
                self.w.doc(t.description.as_deref());
                let id = type_id(&doc.id, name);
                let lhs = format!("pub const {}: &str =", info.name);
                assign(&mut self.w, &lhs, &format!("{id:?};"));
            }
            Def::Type(Type::String(s)) if matches!(info.kind, Kind::StrEnum) => {
                self.emit_str_enum(&info.name, s.description.as_deref(), s, true);
            }
            Def::Type(Type::Union(u)) => {
                self.emit_union(&info.name, u.description.as_deref(), u, None);
            }
            Def::Type(t) => self.emit_newtype(&info.name, t),
            Def::Query(q) => {
                let main = &info.name;
                self.emit_params(main, q.parameters.as_ref());
                self.emit_body(main, "Output", q.output.as_ref());
                self.emit_errors(main, &q.errors);
            }
            Def::Procedure(p) => {
                let main = &info.name;
                self.emit_params(main, p.parameters.as_ref());
                self.emit_body(main, "Input", p.input.as_ref());
                self.emit_body(main, "Output", p.output.as_ref());
                self.emit_errors(main, &p.errors);
            }
            Def::Subscription(s) => {
                let main = &info.name;
                self.emit_params(main, s.parameters.as_ref());
                if let Some(m) = &s.message {
                    let name = self.claim(&format!("{main}Message"));
                    let desc = m
                        .description
                        .as_deref()
                        .or(Some("A message of the stream."));
                    match &m.schema {
                        Type::Union(u) => self.emit_union(&name, desc, u, Some(&doc.id)),
                        other => {
                            let ty = self.rust_type(other, &name, "");
                            self.w.blank();
                            self.w.doc(desc);
                            self.w.line(&format!("pub type {name} = {ty};"));
                        }
                    }
                }
                self.emit_errors(main, &s.errors);
            }
            Def::PermissionSet(p) => {
                self.w.blank();
                self.w.doc(p.title.as_deref());
                self.w.line("/// A permission set: it has no data types; its permissions are in the lexicon.");
                let id = type_id(&doc.id, name);
                self.w
                    .line(&format!("pub const PERMISSION_SET: &str = {id:?};"));
            }
        }
    }

    fn claim(&mut self, wanted: &str) -> String {
        let module = module_path(&self.nsid).join("::");
        self.ctx
            .type_names
            .entry(module)
            .or_default()
            .claim(wanted, "Def")
    }

    fn emit_pending(&mut self, p: Pending) {
        match p {
            Pending::Struct {
                name,
                doc,
                props,
                required,
                nullable,
            } => self.emit_struct(&name, doc.as_deref(), &props, &required, &nullable, None),
            Pending::Union { name, doc, union } => {
                self.emit_union(&name, doc.as_deref(), &union, None)
            }
            Pending::StrEnum { name, doc, ty } => {
                self.emit_str_enum(&name, doc.as_deref(), &ty, false)
            }
        }
    }

    /// An XRPC body: a struct for an object schema, an alias for a ref,
    /// an enum for a union; the encoding as a constant.
    /// `{Main}Params`: an XRPC method's parameters as a struct.
    fn emit_params(&mut self, main: &str, params: Option<&Params>) {
        if let Some(p) = params {
            let name = self.claim(&format!("{main}Params"));
            self.emit_struct(
                &name,
                p.description.as_deref(),
                &p.properties,
                &p.required,
                &[],
                None,
            );
            self.emit_query_shape(&name, p);
        }
    }

    /// `impl support::Params`: how each parameter reads from a query string.
    fn emit_query_shape(&mut self, name: &str, p: &Params) {
        let scalar = |t: &Type| match t {
            Type::Integer(_) => "Integer",
            Type::Boolean(_) => "Boolean",
            _ => "String",
        };
        self.w.blank();
        self.w.open(&format!("impl support::Params for {name} {{"));
        if p.properties.is_empty() {
            self.w
                .line("const FIELDS: &'static [support::ParamField] = &[];");
        } else {
            // rustfmt hugs a lone struct literal: `&[Field {` … `}];`.
            let lone = p.properties.len() == 1;
            let head = "const FIELDS: &'static [support::ParamField] = &[";
            if !lone {
                self.w.open(head);
            }
            for (field, t) in &p.properties {
                let (ty, many) = match t {
                    Type::Array(a) => (scalar(&a.items), true),
                    other => (scalar(other), false),
                };
                if lone {
                    self.w.open(&format!("{head}support::ParamField {{"));
                } else {
                    self.w.open("support::ParamField {");
                }
                self.w.line(&format!("name: {field:?},"));
                self.w.line(&format!("ty: support::ParamType::{ty},"));
                self.w.line(&format!("array: {many},"));
                self.w
                    .line(&format!("required: {},", p.required.contains(field)));
                self.w.close(if lone { "}];" } else { "}," });
            }
            if !lone {
                self.w.close("];");
            }
        }
        self.w.close("}");
    }

    fn emit_body(&mut self, main: &str, side: &str, body: Option<&Body>) {
        let Some(body) = body else { return };
        self.w.blank();
        self.w.line(&format!(
            "/// The MIME type of the {} body.",
            side.to_lowercase()
        ));
        self.w.line(&format!(
            "pub const {}_ENCODING: &str = {:?};",
            side.to_uppercase(),
            body.encoding
        ));
        let Some(schema) = &body.schema else { return };
        let name = self.claim(&format!("{main}{side}"));
        let desc = body.description.as_deref();
        match schema {
            Type::Object(o) => self.emit_struct(
                &name,
                desc.or(o.description.as_deref()),
                &o.properties,
                &o.required,
                &o.nullable,
                None,
            ),
            Type::Union(u) => self.emit_union(&name, desc.or(u.description.as_deref()), u, None),
            other => {
                let ty = self.rust_type(other, &name, "");
                self.w.blank();
                self.w.doc(desc);
                self.w.line(&format!("pub type {name} = {ty};"));
            }
        }
    }

    fn emit_errors(&mut self, main: &str, errors: &[gelstore_lexicon::schema::ErrorDef]) {
        if errors.is_empty() {
            return;
        }
        let name = self.claim(&format!("{main}Error"));
        let values: Vec<(String, Option<String>)> = errors
            .iter()
            .map(|e| (e.name.clone(), e.description.clone()))
            .collect();
        self.emit_enum(
            &name,
            Some("The errors this method declares (the `error` of an XRPC error response)."),
            &values,
            true,
        );
        self.impl_validate(&name, Writer::default());
    }

    // -----------------------------------------------------------------------
    // Rust types of lexicon types

    /// The Rust type of a field (or array item) of `owner`, queueing inline
    /// structs, unions and enums under `owner` + `field` names.
    pub(crate) fn rust_type(&mut self, ty: &Type, owner: &str, field: &str) -> String {
        let inline_name = |m: &mut Self, suffix: &str| {
            let wanted = format!("{owner}{}{suffix}", names::camel(field));
            m.claim(&wanted)
        };
        match ty {
            Type::Null(_) => "()".into(),
            Type::Boolean(_) => "bool".into(),
            Type::Integer(_) => "i64".into(),
            Type::String(s) => {
                if s.r#enum.is_some() || s.known_values.is_some() {
                    let name = inline_name(self, "");
                    self.pending.push(Pending::StrEnum {
                        name: name.clone(),
                        doc: s.description.clone(),
                        ty: s.clone(),
                    });
                    name
                } else {
                    match s.format.as_deref().and_then(Format::from_name) {
                        Some(f) => format!("support::{}", format_type(f)),
                        None => "String".into(),
                    }
                }
            }
            Type::Bytes(_) => "support::Bytes".into(),
            Type::CidLink(_) => "support::CidLink".into(),
            Type::Blob(_) => "support::BlobRef".into(),
            Type::Array(a) => {
                let item = self.rust_type(&a.items, owner, &format!("{field}Item"));
                // A `Vec` already breaks a by-value cycle.
                let item = match item.strip_prefix("Box<") {
                    Some(inner) => inner.strip_suffix('>').unwrap_or(inner).to_string(),
                    None => item,
                };
                format!("Vec<{item}>")
            }
            Type::Object(o) => {
                let name = inline_name(self, "");
                self.pending.push(Pending::Struct {
                    name: name.clone(),
                    doc: o.description.clone(),
                    props: o.properties.clone(),
                    required: o.required.clone(),
                    nullable: o.nullable.clone(),
                });
                name
            }
            Type::Params(p) => {
                let name = inline_name(self, "");
                self.pending.push(Pending::Struct {
                    name: name.clone(),
                    doc: p.description.clone(),
                    props: p.properties.clone(),
                    required: p.required.clone(),
                    nullable: Vec::new(),
                });
                name
            }
            Type::Token(_) => "String".into(),
            Type::Ref(r) => self.ref_type(&r.target),
            Type::Union(u) => {
                let name = inline_name(self, "");
                self.pending.push(Pending::Union {
                    name: name.clone(),
                    doc: u.description.clone(),
                    union: u.clone(),
                });
                name
            }
            Type::Unknown(_) => "support::Data".into(),
        }
    }

    fn resolve<'s>(&'s self, target: &'s str) -> Option<Resolved<'s>> {
        self.ctx.catalog.resolve(&self.nsid, target).ok()
    }

    fn ref_type(&mut self, target: &str) -> String {
        let nsid = self.nsid.clone();
        let Some(r) = self.ctx.catalog.resolve(&nsid, target).ok() else {
            // A lexicon outside the catalog: keep the value as data.
            return "support::Data".into();
        };
        let info = self.ctx.info(&r).clone();
        match info.kind {
            Kind::Token => "String".into(),
            Kind::Method => {
                self.ctx.problems.push(format!(
                    "{nsid}: a ref to {r}, a {} definition, which data can not have",
                    r.def.type_name()
                ));
                "support::Data".into()
            }
            _ => {
                let path = self.ctx.path_to(&nsid, &r);
                if self.ctx.reaches(&r, (&nsid, &self.def)) {
                    format!("Box<{path}>")
                } else {
                    path
                }
            }
        }
    }

    // -----------------------------------------------------------------------
    // Structs

    fn emit_struct(
        &mut self,
        name: &str,
        doc: Option<&str>,
        props: &IndexMap<String, Type>,
        required: &[String],
        nullable: &[String],
        record: Option<&RecordKey>,
    ) {
        struct Field {
            prop: String,
            ident: String,
            ty: Type,
            required: bool,
            nullable: bool,
        }
        let fields: Vec<Field> = props
            .iter()
            .map(|(prop, ty)| Field {
                prop: prop.clone(),
                ident: names::snake(prop),
                ty: ty.clone(),
                required: required.contains(prop),
                nullable: nullable.contains(prop),
            })
            .collect();
        let extra = if fields.iter().any(|f| f.ident == "extra") {
            "extra_fields"
        } else {
            "extra"
        };
        let mut decls = Vec::new();
        for f in &fields {
            let t = self.rust_type(&f.ty, name, &f.prop);
            decls.push(t);
        }
        self.w.blank();
        self.w.doc(doc);
        self.w
            .line("#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]");
        if record.is_some() {
            self.w
                .line("#[serde(remote = \"Self\", rename_all = \"camelCase\")]");
        } else {
            self.w.line("#[serde(rename_all = \"camelCase\")]");
        }
        self.w.open(&format!("pub struct {name} {{"));
        for (f, t) in fields.iter().zip(&decls) {
            self.w.doc(f.ty.description());
            if names::serde_camel(&f.ident) != f.prop {
                self.w.line(&format!("#[serde(rename = {:?})]", f.prop));
            }
            let full = match (f.required, f.nullable) {
                (true, false) => t.clone(),
                (true, true) => {
                    self.w
                        .line("#[serde(deserialize_with = \"support::required_nullable\")]");
                    format!("Option<{t}>")
                }
                (false, false) => {
                    self.w
                        .line("#[serde(default, deserialize_with = \"support::some\")]");
                    self.w
                        .line("#[serde(skip_serializing_if = \"Option::is_none\")]");
                    format!("Option<{t}>")
                }
                (false, true) => {
                    self.w
                        .line("#[serde(default, deserialize_with = \"support::nullable\")]");
                    self.w
                        .line("#[serde(skip_serializing_if = \"Option::is_none\")]");
                    format!("Option<Option<{t}>>")
                }
            };
            self.w.line(&format!("pub {}: {full},", f.ident));
        }
        self.w
            .line("/// Fields this version of the lexicon does not declare, kept as they are.");
        self.w.line("#[serde(flatten)]");
        self.w.line(&format!("pub {extra}: support::Extra,"));
        self.w.close("}");

        // Defaults.
        let mut defaults = Writer::default();
        defaults.indent_by(1);
        for f in fields.iter().filter(|f| !f.required && !f.nullable) {
            let (ret, body, shown) = match &f.ty {
                Type::Boolean(b) => match b.default {
                    Some(d) => (
                        "bool",
                        format!("self.{}.unwrap_or({d})", f.ident),
                        d.to_string(),
                    ),
                    None => continue,
                },
                Type::Integer(i) => match i.default {
                    Some(d) => (
                        "i64",
                        format!("self.{}.unwrap_or({d})", f.ident),
                        d.to_string(),
                    ),
                    None => continue,
                },
                Type::String(s)
                    if s.r#enum.is_none() && s.known_values.is_none() && s.format.is_none() =>
                {
                    match &s.default {
                        Some(d) => (
                            "&str",
                            format!("self.{}.as_deref().unwrap_or({d:?})", f.ident),
                            format!("{d:?}"),
                        ),
                        None => continue,
                    }
                }
                _ => continue,
            };
            defaults.blank();
            defaults.line(&format!(
                "/// `{}`, or the lexicon's default (`{shown}`) when it is absent.",
                f.prop
            ));
            let bare = f.ident.strip_prefix("r#").unwrap_or(&f.ident);
            defaults.open(&format!("pub fn {bare}_or_default(&self) -> {ret} {{"));
            defaults.line(&body);
            defaults.close("}");
        }
        let defaults = defaults.take();
        if !defaults.is_empty() {
            self.w.blank();
            self.w.line(&format!("impl {name} {{"));
            self.w.raw(defaults.trim_start_matches('\n'));
            self.w.line("}");
        }

        if let Some(key) = record {
            self.emit_record_impls(name, key);
        }

        // Validation.
        let mut body = Writer::default();
        body.indent_by(2);
        for f in &fields {
            let mut inner = Writer::default();
            let nested = !f.required || f.nullable;
            inner.indent_by(if nested { 3 } else { 2 });
            let val = if nested {
                "v".to_string()
            } else {
                format!("&self.{}", f.ident)
            };
            self.checks(&mut inner, &f.ty, &val, "&p");
            let inner = inner.take();
            if inner.is_empty() {
                continue;
            }
            if nested {
                let pat = if !f.required && f.nullable {
                    "Some(Some(v))"
                } else {
                    "Some(v)"
                };
                body.open(&format!("if let {pat} = &self.{} {{", f.ident));
                body.line(&format!("let p = path.key({:?});", f.prop));
                body.raw(&inner);
                body.close("}");
            } else {
                body.line(&format!("let p = path.key({:?});", f.prop));
                body.raw(&inner);
            }
        }
        body.line(&format!("support::extra(&self.{extra}, path, errors);"));
        self.impl_validate(name, body);
    }

    fn emit_record_impls(&mut self, name: &str, key: &RecordKey) {
        let key = match key {
            RecordKey::Tid => "support::KeyType::Tid".to_string(),
            RecordKey::Nsid => "support::KeyType::Nsid".to_string(),
            RecordKey::Any => "support::KeyType::Any".to_string(),
            RecordKey::Literal(k) => format!("support::KeyType::Literal({k:?})"),
        };
        let w = &mut self.w;
        w.blank();
        w.open(&format!("impl support::Record for {name} {{"));
        w.line(&format!("const NSID: &'static str = {:?};", self.nsid));
        w.line(&format!("const KEY: support::KeyType = {key};"));
        w.blank();
        w.open(
            "fn serialize_fields<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {",
        );
        w.line("Self::serialize(self, s)");
        w.close("}");
        w.blank();
        w.open("fn deserialize_fields<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {");
        w.line("Self::deserialize(d)");
        w.close("}");
        w.blank();
        w.open("fn extra_mut(&mut self) -> &mut support::Extra {");
        w.line("&mut self.extra");
        w.close("}");
        w.close("}");
        w.blank();
        w.open(&format!("impl serde::Serialize for {name} {{"));
        w.open("fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {");
        w.line("support::serialize_record(self, s)");
        w.close("}");
        w.close("}");
        w.blank();
        w.open(&format!("impl<'de> serde::Deserialize<'de> for {name} {{"));
        w.open("fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {");
        w.line("support::deserialize_record(d)");
        w.close("}");
        w.close("}");
    }

    /// `impl support::Validate for name` with `body` (already indented).
    fn impl_validate(&mut self, name: &str, mut body: Writer) {
        let body = body.take();
        let w = &mut self.w;
        w.blank();
        w.open(&format!("impl support::Validate for {name} {{"));
        if body.is_empty() {
            w.line("fn validate_at(&self, _path: &support::Path<'_>, _errors: &mut support::Errors) {}");
        } else {
            w.open(
                "fn validate_at(&self, path: &support::Path<'_>, errors: &mut support::Errors) {",
            );
            w.raw(&body);
            w.close("}");
        }
        w.close("}");
    }

    // -----------------------------------------------------------------------
    // Newtypes and string enums

    fn emit_newtype(&mut self, name: &str, ty: &Type) {
        let inner = self.rust_type(ty, name, "");
        self.w.blank();
        self.w.doc(ty.description());
        self.w
            .line("#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]");
        self.w.line("#[serde(transparent)]");
        self.w.line(&format!("pub struct {name}(pub {inner});"));
        let mut body = Writer::default();
        body.indent_by(2);
        self.checks(&mut body, ty, "&self.0", "path");
        self.impl_validate(name, body);
    }

    fn emit_str_enum(&mut self, name: &str, doc: Option<&str>, s: &StringType, validate: bool) {
        let (values, open) = match (&s.r#enum, &s.known_values) {
            (Some(v), _) => (v.clone(), false),
            (None, Some(v)) => (v.clone(), true),
            (None, None) => (Vec::new(), true),
        };
        let values: Vec<(String, Option<String>)> = values.into_iter().map(|v| (v, None)).collect();
        self.emit_enum(name, doc, &values, open);
        if validate {
            let mut body = Writer::default();
            body.indent_by(2);
            self.checks(&mut body, &Type::String(s.clone()), "self", "path");
            self.impl_validate(name, body);
        }
    }

    /// An enum over strings; `open` adds `Other(String)`.
    fn emit_enum(
        &mut self,
        name: &str,
        doc: Option<&str>,
        values: &[(String, Option<String>)],
        open: bool,
    ) {
        let mut taken = Names::default();
        if open {
            taken.reserve("Other");
        }
        let variants: Vec<(String, &str, Option<&str>)> = values
            .iter()
            .map(|(v, d)| {
                (
                    taken.claim(&names::value_variant(v), "Value"),
                    v.as_str(),
                    d.as_deref(),
                )
            })
            .collect();
        let w = &mut self.w;
        w.blank();
        w.doc(doc);
        w.line("#[derive(Clone, Debug, PartialEq, Eq, Hash)]");
        w.open(&format!("pub enum {name} {{"));
        for (variant, value, d) in &variants {
            match d {
                Some(d) => w.doc(Some(&format!("`{value}`: {d}"))),
                None => w.line(&format!("/// `{value}`")),
            }
            w.line(&format!("{variant},"));
        }
        if open {
            w.line("/// A value this version of the lexicon does not know.");
            w.line("Other(String),");
        }
        w.close("}");
        w.blank();
        w.open(&format!("impl {name} {{"));
        w.line("/// The string this value stands for.");
        w.open("pub fn as_str(&self) -> &str {");
        w.open("match self {");
        for (variant, value, _) in &variants {
            arm(w, &format!("Self::{variant}"), &format!("{value:?}"));
        }
        if open {
            w.line("Self::Other(s) => s,");
        }
        if variants.is_empty() && !open {
            w.line("_ => unreachable!(),");
        }
        w.close("}");
        w.close("}");
        w.close("}");
        w.blank();
        w.open(&format!("impl support::StringEnum for {name} {{"));
        w.open("fn as_str(&self) -> &str {");
        w.line("self.as_str()");
        w.close("}");
        w.blank();
        w.open("fn from_string(s: String) -> Result<Self, String> {");
        w.open("match s.as_str() {");
        for (variant, value, _) in &variants {
            arm(w, &format!("{value:?}"), &format!("Ok(Self::{variant})"));
        }
        if open {
            w.line("_ => Ok(Self::Other(s)),");
        } else {
            let list: Vec<&str> = variants.iter().map(|v| v.1).collect();
            let msg = format!("is not one of {}", list.join(", "));
            w.line(&format!(
                "_ => Err(format!(\"{{s:?}} {}\")),",
                msg.replace('{', "{{")
                    .replace('}', "}}")
                    .replace('"', "\\\"")
            ));
        }
        w.close("}");
        w.close("}");
        w.close("}");
        w.blank();
        w.open(&format!("impl serde::Serialize for {name} {{"));
        w.open("fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {");
        w.line("support::serialize_str_enum(self, s)");
        w.close("}");
        w.close("}");
        w.blank();
        w.open(&format!("impl<'de> serde::Deserialize<'de> for {name} {{"));
        w.open("fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {");
        w.line("support::deserialize_str_enum(d)");
        w.close("}");
        w.close("}");
    }

    // -----------------------------------------------------------------------
    // Unions

    fn emit_union(&mut self, name: &str, doc: Option<&str>, u: &Union, frames_of: Option<&str>) {
        enum Holds {
            Struct(String, bool),
            Extra,
            Data,
        }
        let mut taken = Names::default();
        if !u.closed {
            taken.reserve("Unknown");
        }
        let mut variants: Vec<(String, String, Vec<String>, Holds)> = Vec::new();
        for target in &u.refs {
            let (id, pats, holds, short) = match self.resolve(target) {
                Some(r) => {
                    let id = r.type_id();
                    let pats = if r.name == "main" {
                        vec![format!("{id:?}"), format!("\"{id}#main\"")]
                    } else {
                        vec![format!("{id:?}")]
                    };
                    let info = self.ctx.info(&r).clone();
                    let holds = match info.kind {
                        Kind::Struct { record } => {
                            let path = self.ctx.path_to(&self.nsid, &r);
                            let nsid = self.nsid.clone();
                            let path = if self.ctx.reaches(&r, (&nsid, &self.def)) {
                                format!("Box<{path}>")
                            } else {
                                path
                            };
                            Holds::Struct(path, record)
                        }
                        Kind::Token => Holds::Extra,
                        _ => Holds::Data,
                    };
                    let short = if r.name == "main" {
                        r.nsid.rsplit('.').next().unwrap_or(r.nsid).to_string()
                    } else {
                        r.name.to_string()
                    };
                    (id, pats, holds, short)
                }
                None => {
                    let id = match target.strip_prefix('#') {
                        Some(n) => format!("{}#{n}", self.nsid),
                        None => target.strip_suffix("#main").unwrap_or(target).to_string(),
                    };
                    let pats = vec![format!("{id:?}")];
                    let short = id.rsplit(['#', '.']).next().unwrap_or(&id).to_string();
                    (id, pats, Holds::Data, short)
                }
            };
            let variant = taken.claim(&names::camel(&short), "Variant");
            variants.push((variant, id, pats, holds));
        }
        let w = &mut self.w;
        w.blank();
        w.doc(doc);
        if u.closed {
            w.line("///");
            w.line("/// A closed union: any other `$type` is a decoding error.");
        }
        w.line("#[derive(Clone, Debug, PartialEq)]");
        w.open(&format!("pub enum {name} {{"));
        for (variant, id, _, holds) in &variants {
            w.line(&format!("/// `{id}`"));
            match holds {
                Holds::Struct(p, _) => w.line(&format!("{variant}({p}),")),
                Holds::Extra => w.line(&format!("{variant}(support::Extra),")),
                Holds::Data => w.line(&format!("{variant}(support::Data),")),
            }
        }
        if !u.closed {
            w.line("/// A `$type` this version of the lexicon does not know, kept as it is.");
            w.line("Unknown(support::Data),");
        }
        w.close("}");
        w.blank();
        w.open(&format!("impl {name} {{"));
        w.line("/// The `$type` of each variant, in the lexicon's order.");
        let ids: Vec<String> = variants.iter().map(|v| format!("{:?}", v.1)).collect();
        list(
            w,
            "pub const TYPE_IDS: &'static [&'static str] = &[",
            &ids,
            "];",
        );
        w.blank();
        w.line("/// The `$type` this value carries.");
        w.open("pub fn type_id(&self) -> &str {");
        w.open("match self {");
        for (i, (variant, _, _, holds)) in variants.iter().enumerate() {
            match holds {
                Holds::Data => w.line(&format!(
                    "Self::{variant}(v) => v.type_id().unwrap_or_default(),"
                )),
                _ => w.line(&format!("Self::{variant}(_) => Self::TYPE_IDS[{i}],")),
            }
        }
        if !u.closed {
            w.line("Self::Unknown(v) => v.type_id().unwrap_or_default(),");
        }
        w.close("}");
        w.close("}");
        w.blank();
        w.line("/// Decodes the variant `type_id` names from the value's other fields");
        w.line("/// (`nsid` and `nsid#main` name the same type).");
        w.open("pub fn from_parts(type_id: &str, body: support::Ipld) -> Result<Self, support::DecodeError> {");
        w.open("match type_id {");
        for (variant, _, pats, holds) in &variants {
            let body = match holds {
                Holds::Struct(..) | Holds::Extra => {
                    format!("support::from_ipld(body).map(Self::{variant})")
                }
                Holds::Data => {
                    format!("Ok(Self::{variant}(support::Data::with_type(type_id, body)))")
                }
            };
            arm(w, &pats.join(" | "), &body);
        }
        if u.closed {
            w.line("_ => support::closed_union(type_id, Self::TYPE_IDS),");
        } else {
            w.line("_ => Ok(Self::Unknown(support::Data::with_type(type_id, body))),");
        }
        w.close("}");
        w.close("}");
        if frames_of.is_some() {
            w.blank();
            w.line("/// Decodes an event-stream frame body whose type the frame header gives");
            w.line("/// (`t`: `#name`, relative to this subscription, or a full `nsid#name`).");
            w.open("pub fn from_frame(t: &str, body: support::Ipld) -> Result<Self, support::DecodeError> {");
            w.line("Self::from_parts(&support::frame_type(NSID, t), body)");
            w.close("}");
        }
        w.close("}");
        w.blank();
        w.open(&format!("impl serde::Serialize for {name} {{"));
        w.open("fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {");
        w.open("match self {");
        for (i, (variant, _, _, holds)) in variants.iter().enumerate() {
            match holds {
                Holds::Struct(_, true) | Holds::Data => w.line(&format!(
                    "Self::{variant}(v) => serde::Serialize::serialize(v, s),"
                )),
                _ => w.line(&format!(
                    "Self::{variant}(v) => support::tagged(s, Self::TYPE_IDS[{i}], v),"
                )),
            }
        }
        if !u.closed {
            w.line("Self::Unknown(v) => serde::Serialize::serialize(v, s),");
        }
        w.close("}");
        w.close("}");
        w.close("}");
        w.blank();
        w.open(&format!("impl<'de> serde::Deserialize<'de> for {name} {{"));
        w.open("fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {");
        w.line("let (t, body) = support::union_parts(d)?;");
        w.line("Self::from_parts(&t, body).map_err(serde::de::Error::custom)");
        w.close("}");
        w.close("}");
        let root = self.ctx.opts.root.clone();
        let mut body = Writer::default();
        body.indent_by(2);
        body.open("match self {");
        for (variant, _, _, holds) in &variants {
            match holds {
                Holds::Struct(..) => body.line(&format!(
                    "Self::{variant}(v) => v.validate_at(path, errors),"
                )),
                Holds::Extra => body.line(&format!(
                    "Self::{variant}(v) => support::extra(v, path, errors),"
                )),
                Holds::Data => body.line(&format!("Self::{variant}(_) => {{}}")),
            }
        }
        if !u.closed {
            body.open("Self::Unknown(v) => {");
            body.line(&format!("let by_type = {root}::validate_by_type;"));
            body.line("support::open_variant(v, by_type, path, errors)");
            body.close("}");
        }
        body.close("}");
        self.impl_validate(name, body);
    }
}

/// `pattern => body,` on one line when it fits, else `pattern => {` block.
pub(crate) fn arm(w: &mut Writer, pattern: &str, body: &str) {
    let one = format!("{pattern} => {body},");
    if w.indent() + one.len() <= MAX_WIDTH {
        w.line(&one);
    } else {
        w.open(&format!("{pattern} => {{"));
        w.line(body);
        w.close("}");
    }
}

/// `lhs rhs` on one line when it fits, else `rhs` indented on the next.
pub(crate) fn assign(w: &mut Writer, lhs: &str, rhs: &str) {
    if w.indent() + lhs.len() + 1 + rhs.len() <= MAX_WIDTH {
        w.line(&format!("{lhs} {rhs}"));
    } else {
        w.open(lhs);
        w.line(rhs);
        w.indent_by(-1);
    }
}

/// `head items tail` for an array literal, one line or one item per line.
pub(crate) fn list(w: &mut Writer, head: &str, items: &[String], tail: &str) {
    let joined = items.join(", ");
    let one = format!("{head}{joined}{tail}");
    if joined.len() <= super::writer::CALL_WIDTH && w.indent() + one.len() <= MAX_WIDTH {
        w.line(&one);
    } else {
        w.open(head);
        for i in items {
            w.line(&format!("{i},"));
        }
        w.close(tail);
    }
}

/// The support newtype of a string format.
pub(crate) fn format_type(f: Format) -> &'static str {
    match f {
        Format::AtIdentifier => "AtIdentifier",
        Format::AtUri => "AtUri",
        Format::Cid => "CidString",
        Format::Datetime => "Datetime",
        Format::Did => "Did",
        Format::Handle => "Handle",
        Format::Language => "Language",
        Format::Nsid => "Nsid",
        Format::RecordKey => "RecordKey",
        Format::Tid => "Tid",
        Format::Uri => "Uri",
    }
}
