//! A line writer that produces text in rustfmt's default layout for the
//! few shapes the emitter uses.

use super::{GENERATED_MARKER, Options};

/// rustfmt's `max_width`.
pub const MAX_WIDTH: usize = 100;
/// rustfmt's `fn_call_width` (60% of `max_width` with the default heuristics).
pub const CALL_WIDTH: usize = 60;

#[derive(Default)]
pub struct Writer {
    out: String,
    indent: usize,
}

impl Writer {
    pub fn header(&mut self, opts: &Options, root: bool, lexicon: Option<(&str, Option<&str>)>) {
        self.line(&format!(
            "// {GENERATED_MARKER} by `{}` from the lexicons; do not edit.",
            opts.command
        ));
        if root {
            self.line("//! Types generated from the lexicon catalog: one module per lexicon.");
        }
        if let Some((nsid, doc)) = lexicon {
            self.line(&format!("//! `{nsid}`"));
            if let Some(doc) = doc {
                self.line("//!");
                for l in doc.trim().lines() {
                    self.line(format!("//! {}", l.trim_end()).trim_end());
                }
            }
            self.line("#![allow(clippy::enum_variant_names, clippy::large_enum_variant)]");
        }
    }

    pub fn line(&mut self, s: &str) {
        if s.is_empty() {
            self.out.push('\n');
            return;
        }
        for _ in 0..self.indent {
            self.out.push_str("    ");
        }
        self.out.push_str(s);
        self.out.push('\n');
    }

    pub fn blank(&mut self) {
        if !self.out.ends_with("\n\n") && !self.out.ends_with("{\n") && !self.out.is_empty() {
            self.out.push('\n');
        }
    }

    pub fn open(&mut self, s: &str) {
        self.line(s);
        self.indent += 1;
    }

    pub fn close(&mut self, s: &str) {
        self.indent -= 1;
        self.line(s);
    }

    /// `///` lines for a description (one per source line).
    pub fn doc(&mut self, text: Option<&str>) {
        if let Some(text) = text {
            for l in text.trim().lines() {
                let l = l.trim_end();
                if l.is_empty() {
                    self.line("///");
                } else {
                    self.line(&format!("/// {l}"));
                }
            }
        }
    }

    /// A call statement `head(args)tail`, on one line when rustfmt would
    /// keep it there, else one argument per line.
    pub fn call(&mut self, head: &str, args: &[String], tail: &str) {
        let joined = args.join(", ");
        let one = format!("{head}({joined}){tail}");
        if joined.len() <= CALL_WIDTH && self.indent * 4 + one.len() <= MAX_WIDTH {
            self.line(&one);
        } else {
            self.open(&format!("{head}("));
            for a in args {
                self.line(&format!("{a},"));
            }
            self.close(&format!("){tail}"));
        }
    }

    pub fn indent_by(&mut self, n: isize) {
        self.indent = (self.indent as isize + n).max(0) as usize;
    }

    pub fn indent(&self) -> usize {
        self.indent * 4
    }

    pub fn raw(&mut self, s: &str) {
        self.out.push_str(s);
    }

    pub fn finish(mut self) -> String {
        while self.out.ends_with("\n\n") {
            self.out.pop();
        }
        self.out
    }

    pub fn take(&mut self) -> String {
        std::mem::take(&mut self.out)
    }
}
