//! The statements a generated `validate_at` runs for one value: the
//! lexicon's constraints as plain calls into `support`.

use super::Kind;
use super::items::Module;
use super::writer::Writer;
use gelstore_lexicon::catalog::type_id;
use gelstore_lexicon::schema::Type;
use gelstore_lexicon::syntax::Format;

/// `&self.x` → `self.x`; `v` → `*v` (for `Copy` values).
fn deref(val: &str) -> String {
    match val.strip_prefix('&') {
        Some(place) => place.to_string(),
        None => format!("*{val}"),
    }
}

/// A receiver for a method call on `val`.
fn recv(val: &str) -> &str {
    val.strip_prefix('&').unwrap_or(val)
}

impl Module<'_, '_> {
    /// Writes the checks of `ty` for `val` (an expression of type `&T`) at
    /// `path` (an expression of type `&support::Path`).
    pub(crate) fn checks(&mut self, w: &mut Writer, ty: &Type, val: &str, path: &str) {
        let c = |w: &mut Writer, f: &str, args: Vec<String>| {
            let mut args = args;
            args.push(path.to_string());
            args.push("errors".to_string());
            w.call(&format!("support::{f}"), &args, ";");
        };
        match ty {
            Type::Boolean(b) => {
                if let Some(k) = b.r#const {
                    c(w, "const_bool", vec![deref(val), k.to_string()]);
                }
            }
            Type::Integer(t) => {
                let v = deref(val);
                if let Some(k) = t.r#const {
                    c(w, "const_int", vec![v.clone(), k.to_string()]);
                }
                if let Some(values) = &t.r#enum {
                    let list: Vec<String> = values.iter().map(i64::to_string).collect();
                    c(
                        w,
                        "enum_int",
                        vec![v.clone(), format!("&[{}]", list.join(", "))],
                    );
                }
                if let Some(min) = t.minimum {
                    c(w, "minimum", vec![v.clone(), min.to_string()]);
                }
                if let Some(max) = t.maximum {
                    c(w, "maximum", vec![v, max.to_string()]);
                }
            }
            Type::String(s) => {
                let sv = format!("{}.as_str()", recv(val));
                if let Some(k) = &s.r#const {
                    c(w, "const_str", vec![sv.clone(), format!("{k:?}")]);
                }
                if let Some(max) = s.max_length {
                    c(w, "max_length", vec![sv.clone(), max.to_string()]);
                }
                if let Some(min) = s.min_length {
                    c(w, "min_length", vec![sv.clone(), min.to_string()]);
                }
                if let Some(max) = s.max_graphemes {
                    c(w, "max_graphemes", vec![sv.clone(), max.to_string()]);
                }
                if let Some(min) = s.min_graphemes {
                    c(w, "min_graphemes", vec![sv.clone(), min.to_string()]);
                }
                // A format is checked by the newtype, unless the Rust type is
                // an enum (knownValues/enum with a format).
                let is_enum = s.r#enum.is_some() || s.known_values.is_some();
                if is_enum && let Some(f) = s.format.as_deref().and_then(Format::from_name) {
                    let format = format!("support::Format::{f:?}");
                    c(w, "format", vec![sv, format]);
                }
            }
            Type::Bytes(b) => {
                if let Some(max) = b.max_length {
                    c(w, "max_bytes", vec![val.to_string(), max.to_string()]);
                }
                if let Some(min) = b.min_length {
                    c(w, "min_bytes", vec![val.to_string(), min.to_string()]);
                }
            }
            Type::Blob(b) => {
                if let Some(max) = b.max_size {
                    c(w, "max_size", vec![val.to_string(), max.to_string()]);
                }
                if let Some(accept) = &b.accept {
                    let list: Vec<String> = accept.iter().map(|a| format!("{a:?}")).collect();
                    c(
                        w,
                        "accept",
                        vec![val.to_string(), format!("&[{}]", list.join(", "))],
                    );
                }
            }
            Type::Array(a) => {
                let len = format!("{}.len()", recv(val));
                if let Some(max) = a.max_length {
                    c(w, "max_items", vec![len.clone(), max.to_string()]);
                }
                if let Some(min) = a.min_length {
                    c(w, "min_items", vec![len, min.to_string()]);
                }
                let mut inner = Writer::default();
                inner.indent_by((w.indent() / 4 + 1) as isize);
                self.checks(&mut inner, &a.items, "v", "&p");
                let inner = inner.take();
                if !inner.is_empty() {
                    w.open(&format!(
                        "for (i, v) in {}.iter().enumerate() {{",
                        recv(val)
                    ));
                    w.line(&format!("let p = {}.index(i);", recv(path)));
                    w.raw(&inner);
                    w.close("}");
                }
            }
            Type::Object(_) | Type::Params(_) | Type::Union(_) => {
                w.call(
                    &format!("{}.validate_at", recv(val)),
                    &[path.to_string(), "errors".into()],
                    ";",
                );
            }
            Type::Ref(r) => {
                let nsid = self.nsid.clone();
                let Ok(resolved) = self.ctx.catalog.resolve(&nsid, &r.target) else {
                    return;
                };
                match self.ctx.info(&resolved).kind {
                    Kind::Token => {
                        let id = type_id(resolved.nsid, resolved.name);
                        let sv = format!("{}.as_str()", recv(val));
                        c(w, "token", vec![sv, format!("{id:?}")]);
                    }
                    Kind::Method => {}
                    _ => {
                        w.call(
                            &format!("{}.validate_at", recv(val)),
                            &[path.to_string(), "errors".into()],
                            ";",
                        );
                    }
                }
            }
            Type::Unknown(_) => {
                let by_type = format!("{}::validate_by_type", self.ctx.opts.root);
                c(w, "unknown", vec![val.to_string(), by_type]);
            }
            Type::Null(_) | Type::CidLink(_) | Type::Token(_) => {}
        }
    }
}
