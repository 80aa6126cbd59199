//! A JSON pointer built lazily on the stack: each level borrows its parent,
//! so walking the happy path allocates nothing. The string is rendered only
//! when a finding is reported.

use crate::finding::pointer_push;

#[derive(Clone, Copy, Debug)]
pub(crate) enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl<'a> Path<'a> {
    pub(crate) fn key(&'a self, key: &'a str) -> Path<'a> {
        Path::Key(self, key)
    }

    pub(crate) fn index(&'a self, i: usize) -> Path<'a> {
        Path::Index(self, i)
    }

    /// The RFC 6901 pointer (`""` for the root, `/a~1b/3` …).
    pub(crate) fn render(&self) -> String {
        let mut segments = Vec::new();
        let mut at = self;
        loop {
            match at {
                Path::Root => break,
                Path::Key(parent, key) => {
                    segments.push(Segment::Key(key));
                    at = parent;
                }
                Path::Index(parent, i) => {
                    segments.push(Segment::Index(*i));
                    at = parent;
                }
            }
        }
        let mut out = String::new();
        for segment in segments.iter().rev() {
            out = match segment {
                Segment::Key(key) => pointer_push(&out, key),
                Segment::Index(i) => pointer_push(&out, &i.to_string()),
            };
        }
        out
    }

    /// A name for the value in messages: the field name, `tags[2]` for an
    /// array item, `value` for the root.
    pub(crate) fn subject(&self) -> String {
        match self {
            Path::Root => "value".to_string(),
            Path::Key(_, key) => (*key).to_string(),
            Path::Index(parent, i) => {
                // Find the nearest named ancestor so nested arrays read `a[1][2]`.
                let mut indices = vec![*i];
                let mut at = *parent;
                loop {
                    match at {
                        Path::Index(p, j) => {
                            indices.push(*j);
                            at = p;
                        }
                        Path::Key(_, key) => break format_indexed(key, &indices),
                        Path::Root => break format_indexed("value", &indices),
                    }
                }
            }
        }
    }
}

enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

fn format_indexed(name: &str, reversed: &[usize]) -> String {
    let mut out = name.to_string();
    for i in reversed.iter().rev() {
        out.push_str(&format!("[{i}]"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_pointers_with_escapes() {
        let root = Path::Root;
        assert_eq!(root.render(), "");
        let a = root.key("content");
        let b = a.key("parts");
        let c = b.index(3);
        let d = c.key("text");
        assert_eq!(d.render(), "/content/parts/3/text");
        let e = root.key("a/b~c");
        assert_eq!(e.render(), "/a~1b~0c");
        let empty = root.key("");
        assert_eq!(empty.render(), "/");
    }

    #[test]
    fn subjects_name_the_value() {
        let root = Path::Root;
        assert_eq!(root.subject(), "value");
        let tags = root.key("tags");
        let item = tags.index(2);
        assert_eq!(item.subject(), "tags[2]");
        let inner = item.index(0);
        assert_eq!(inner.subject(), "tags[2][0]");
        let top = root.index(1);
        assert_eq!(top.subject(), "value[1]");
    }
}
