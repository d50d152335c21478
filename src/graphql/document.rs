//! What a GraphQL document may cost, measured before anything recursive
//! touches it.
//!
//! Two passes, both linear in the document:
//! - [`scan`] reads the raw text as GraphQL's lexer would and counts tokens
//!   and bracket nesting (`{`, `[`, `(`), so that neither the parser nor any
//!   later walk can be made to recurse deeper than [`Limits::max_nesting`]
//!   (a value such as `[[[[…]]]]` or `{a:{a:…}}` is refused here, not on the
//!   stack) or to read more than [`Limits::max_tokens`] tokens;
//! - [`measure`] walks the parsed document once, each fragment once (its
//!   cost remembered and reused at every spread), and gives the document's
//!   size with fragments expanded: fields, aliases and depth. A document of
//!   a few hundred bytes whose fragments spread each other twice expands to
//!   millions of fields; it is refused by its measure before validation
//!   (which expands spreads) runs.

use std::collections::HashMap;

use async_graphql::Name;
use async_graphql::parser::types::{ExecutableDocument, Selection, SelectionSet};

/// Bounds on a document.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Most lexical tokens in the text.
    pub max_tokens: usize,
    /// Deepest nesting of brackets of any kind in the text.
    pub max_nesting: usize,
}

/// Why a text was refused by [`scan`].
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    Tokens(usize),
    Nesting(usize),
}

impl Refused {
    /// The message a client sees.
    pub fn message(&self) -> String {
        match self {
            Refused::Tokens(limit) => {
                format!("document has too many tokens; the limit is {limit}")
            }
            Refused::Nesting(limit) => {
                format!("document is nested too deep; the nesting limit is {limit}")
            }
        }
    }
}

/// Reads `text` as GraphQL's lexer would (comments, strings and block
/// strings skipped as single tokens) and refuses it as soon as it has more
/// tokens or deeper bracket nesting than `limits` allow. It does not judge
/// syntax: the parser does that next, on a text now known to be bounded.
pub fn scan(text: &str, limits: Limits) -> Result<(), Refused> {
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut tokens = 0usize;
    let mut depth = 0usize;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b' ' | b'\t' | b'\n' | b'\r' | b',' => {
                i += 1;
                continue;
            }
            0xEF if bytes[i..].starts_with(&[0xEF, 0xBB, 0xBF]) => {
                i += 3;
                continue;
            }
            b'#' => {
                while i < bytes.len() && bytes[i] != b'\n' && bytes[i] != b'\r' {
                    i += 1;
                }
                continue;
            }
            b'"' if bytes[i..].starts_with(b"\"\"\"") => i = skip_block_string(bytes, i + 3),
            b'"' => i = skip_string(bytes, i + 1),
            b'{' | b'[' | b'(' => {
                depth += 1;
                if depth > limits.max_nesting {
                    return Err(Refused::Nesting(limits.max_nesting));
                }
                i += 1;
            }
            b'}' | b']' | b')' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'.' if bytes[i..].starts_with(b"...") => i += 3,
            _ if is_word(b) => {
                while i < bytes.len() && is_word(bytes[i]) {
                    i += 1;
                }
            }
            _ => i += 1,
        }
        tokens += 1;
        if tokens > limits.max_tokens {
            return Err(Refused::Tokens(limits.max_tokens));
        }
    }
    Ok(())
}

/// Letters, digits and what numbers are written with: names and numbers
/// are one token each.
fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'+' | b'.')
}

/// The index after a string's closing quote (or the end of its line, where
/// the parser will report it unterminated).
fn skip_string(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            b'\n' | b'\r' => return i,
            _ => i += 1,
        }
    }
    i
}

/// The index after a block string's closing `"""` (`\"""` does not close).
fn skip_block_string(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len() {
        if bytes[i..].starts_with(b"\\\"\"\"") {
            i += 4;
        } else if bytes[i..].starts_with(b"\"\"\"") {
            return i + 3;
        } else {
            i += 1;
        }
    }
    i
}

/// A document's size with every fragment spread expanded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Measure {
    /// Deepest nesting of fields outside introspection.
    pub depth: usize,
    /// Deepest nesting of fields, introspection included.
    pub depth_all: usize,
    /// Fields selected, counted once per place a spread puts them.
    pub fields: usize,
    /// Aliased fields, counted the same way.
    pub aliases: usize,
}

impl Measure {
    /// Beside `other` in one selection set.
    fn beside(self, other: Measure) -> Measure {
        Measure {
            depth: self.depth.max(other.depth),
            depth_all: self.depth_all.max(other.depth_all),
            fields: self.fields.saturating_add(other.fields),
            aliases: self.aliases.saturating_add(other.aliases),
        }
    }
}

/// Measures every operation of `doc` (all are validated, whichever runs),
/// each fragment once.
pub fn measure(doc: &ExecutableDocument) -> Measure {
    let mut walk = Walk {
        doc,
        fragments: HashMap::new(),
    };
    doc.operations
        .iter()
        .map(|(_, op)| walk.set(&op.node.selection_set.node))
        .fold(Measure::default(), Measure::beside)
}

struct Walk<'a> {
    doc: &'a ExecutableDocument,
    /// Each fragment's measure once known; `None` while it is being measured
    /// (a cycle, which validation refuses: it counts nothing here).
    fragments: HashMap<&'a str, Option<Measure>>,
}

impl<'a> Walk<'a> {
    fn set(&mut self, set: &'a SelectionSet) -> Measure {
        set.items
            .iter()
            .map(|item| match &item.node {
                Selection::Field(f) => {
                    let inner = self.set(&f.node.selection_set.node);
                    let name = f.node.name.node.as_str();
                    let introspection = name == "__schema" || name == "__type";
                    Measure {
                        depth: if introspection { 0 } else { inner.depth + 1 },
                        depth_all: inner.depth_all + 1,
                        fields: inner.fields.saturating_add(1),
                        aliases: inner
                            .aliases
                            .saturating_add(usize::from(f.node.alias.is_some())),
                    }
                }
                Selection::InlineFragment(f) => self.set(&f.node.selection_set.node),
                Selection::FragmentSpread(s) => self.fragment(&s.node.fragment_name.node),
            })
            .fold(Measure::default(), Measure::beside)
    }

    fn fragment(&mut self, name: &'a Name) -> Measure {
        match self.fragments.get(name.as_str()) {
            Some(Some(known)) => return *known,
            Some(None) => return Measure::default(),
            None => {}
        }
        let Some(fragment) = self.doc.fragments.get(name) else {
            return Measure::default();
        };
        self.fragments.insert(name.as_str(), None);
        let m = self.set(&fragment.node.selection_set.node);
        self.fragments.insert(name.as_str(), Some(m));
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_tokens: 100,
        max_nesting: 8,
    };

    #[test]
    fn nesting_and_tokens_are_bounded_on_the_raw_text() {
        assert_eq!(scan("{ viewer { id } }", LIMITS), Ok(()));
        let deep = format!("{{__typename(x:{}1{})}}", "[".repeat(9), "]".repeat(9));
        assert_eq!(scan(&deep, LIMITS), Err(Refused::Nesting(8)));
        let objects = format!("{{__typename(x:{}1{})}}", "{a:".repeat(9), "}".repeat(9));
        assert_eq!(scan(&objects, LIMITS), Err(Refused::Nesting(8)));
        // Brackets inside strings, block strings and comments are not nesting.
        let quoted = format!(
            "{{ a(x: \"{0}\", y: \"\"\"{0}\\\"\"\"\"\"\") # {0}\n }}",
            "[".repeat(50)
        );
        assert_eq!(scan(&quoted, LIMITS), Ok(()));
        let many = "a ".repeat(101);
        assert_eq!(scan(&many, LIMITS), Err(Refused::Tokens(100)));
        // Names, numbers and the spread are one token each.
        assert_eq!(scan(&"...abc_9 -1.5e+3 ".repeat(33), LIMITS), Ok(()));
    }

    #[test]
    fn fragments_are_measured_once_and_expanded_by_count() {
        // F0 spreads F1 twice, ..., F23: 2^23 copies of one field.
        let mut text = String::from("query { ...F0 }");
        for i in 0..23 {
            text.push_str(&format!(
                " fragment F{i} on Query {{ ...F{} ...F{} }}",
                i + 1,
                i + 1
            ));
        }
        text.push_str(" fragment F23 on Query { a: __typename }");
        let doc = async_graphql::parser::parse_query(&text).unwrap();
        let m = measure(&doc);
        assert_eq!(m.fields, 1 << 23);
        assert_eq!(m.aliases, 1 << 23);
        assert_eq!(m.depth, 1);

        let doc = async_graphql::parser::parse_query(
            "query { a: viewer { id } b: viewer { x: id } ...F } fragment F on Query { c: viewer { id } }",
        )
        .unwrap();
        assert_eq!(
            measure(&doc),
            Measure {
                depth: 2,
                depth_all: 2,
                fields: 6,
                aliases: 4
            }
        );
        let intro = async_graphql::parser::parse_query(
            "{ __schema { types { fields { type { ofType { ofType { ofType { name } } } } } } } }",
        )
        .unwrap();
        assert_eq!((measure(&intro).depth, measure(&intro).depth_all), (0, 8));
        // A cycle (refused later by validation) ends the walk.
        let cyclic =
            async_graphql::parser::parse_query("{ ...A } fragment A on Query { viewer { ...A } }")
                .unwrap();
        assert_eq!(measure(&cyclic).depth, 1);
    }
}
