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
//!   cost remembered and reused at every spread), refuses what validation
//!   would refuse only after expanding spreads (unknown, cyclic and unused
//!   fragments, chains of fragments nested past the nesting limit), and
//!   gives the document's size with fragments expanded: fields, aliases,
//!   selections and depth. Only a document that passes both reaches
//!   async-graphql's validation, whose passes expand every spread: their
//!   work is then bounded by the measured selections. A document of
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
    /// Every selection (fields, spreads, inline fragments) a walk of the
    /// operations that expands spreads visits, counted the same way: the work
    /// of async-graphql's validation passes that expand spreads.
    pub selections: usize,
    /// How many selection sets deep the deepest one is (fragment hops and
    /// inline fragments count as a level).
    pub nest: usize,
}

impl Measure {
    /// Beside `other` in one selection set.
    fn beside(self, other: Measure) -> Measure {
        Measure {
            depth: self.depth.max(other.depth),
            depth_all: self.depth_all.max(other.depth_all),
            fields: self.fields.saturating_add(other.fields),
            aliases: self.aliases.saturating_add(other.aliases),
            selections: self.selections.saturating_add(other.selections),
            nest: self.nest.max(other.nest),
        }
    }
}

/// Why a parsed document was refused by [`measure`]: what validation would
/// refuse too, found here in one linear walk so that no walk that expands
/// spreads ever runs on it.
#[derive(Debug, PartialEq, Eq)]
pub enum Invalid {
    /// A spread of a fragment the document does not define.
    UnknownFragment(String),
    /// A fragment that spreads itself, directly or through others.
    FragmentCycle(String),
    /// A fragment no operation uses.
    UnusedFragment(String),
    /// Selection sets, fields and fragment spreads together nest deeper than
    /// this (a chain of fragments each spreading the next).
    TooDeep(usize),
}

impl Invalid {
    /// The message a client sees.
    pub fn message(&self) -> String {
        match self {
            Invalid::UnknownFragment(name) => format!("unknown fragment \"{name}\""),
            Invalid::FragmentCycle(name) => format!("fragment \"{name}\" spreads itself"),
            Invalid::UnusedFragment(name) => format!("fragment \"{name}\" is never used"),
            Invalid::TooDeep(limit) => format!(
                "selections nest too deep with their fragments; the nesting limit is {limit}"
            ),
        }
    }
}

/// Measures every operation of `doc` (all are validated, whichever runs) and
/// every fragment, each fragment once, and refuses what would make a walk
/// that expands spreads unbounded or non-linear: unknown, cyclic and unused
/// fragments, and selections (fragment hops included) nested deeper than
/// `max_nesting`. Recursion here is bounded by the same `max_nesting`.
pub fn measure(doc: &ExecutableDocument, max_nesting: usize) -> Result<Measure, Invalid> {
    let mut walk = Walk {
        doc,
        fragments: HashMap::with_capacity(doc.fragments.len()),
        max_nesting,
    };
    let mut total = Measure::default();
    for (_, op) in doc.operations.iter() {
        total = total.beside(walk.set(&op.node.selection_set.node, 0)?);
    }
    if let Some(unused) = doc
        .fragments
        .keys()
        .find(|name| !walk.fragments.contains_key(name.as_str()))
    {
        return Err(Invalid::UnusedFragment(unused.to_string()));
    }
    Ok(total)
}

struct Walk<'a> {
    doc: &'a ExecutableDocument,
    /// Each fragment's measure once known; `None` while it is being measured
    /// (met again then, it spreads itself).
    fragments: HashMap<&'a str, Option<Measure>>,
    max_nesting: usize,
}

impl<'a> Walk<'a> {
    /// The measure of `set`, entered at `nesting` sets deep.
    fn set(&mut self, set: &'a SelectionSet, nesting: usize) -> Result<Measure, Invalid> {
        if nesting >= self.max_nesting && !set.items.is_empty() {
            return Err(Invalid::TooDeep(self.max_nesting));
        }
        let mut m = Measure::default();
        for item in &set.items {
            let one = match &item.node {
                Selection::Field(f) => {
                    let inner = self.set(&f.node.selection_set.node, nesting + 1)?;
                    let name = f.node.name.node.as_str();
                    let introspection = name == "__schema" || name == "__type";
                    Measure {
                        depth: if introspection { 0 } else { inner.depth + 1 },
                        depth_all: inner.depth_all + 1,
                        fields: inner.fields.saturating_add(1),
                        aliases: inner
                            .aliases
                            .saturating_add(usize::from(f.node.alias.is_some())),
                        selections: inner.selections.saturating_add(1),
                        nest: inner.nest,
                    }
                }
                Selection::InlineFragment(f) => {
                    let mut inner = self.set(&f.node.selection_set.node, nesting + 1)?;
                    inner.selections = inner.selections.saturating_add(1);
                    inner
                }
                Selection::FragmentSpread(s) => {
                    let mut inner = self.fragment(&s.node.fragment_name.node, nesting + 1)?;
                    inner.selections = inner.selections.saturating_add(1);
                    inner
                }
            };
            m = m.beside(one);
        }
        if !set.items.is_empty() {
            m.nest += 1;
        }
        Ok(m)
    }

    /// The measure of the fragment `name`, spread at `nesting` sets deep. A
    /// fragment is walked once, at its first spread; later spreads reuse its
    /// measure, and the nesting it adds is checked against where they are.
    fn fragment(&mut self, name: &'a Name, nesting: usize) -> Result<Measure, Invalid> {
        match self.fragments.get(name.as_str()) {
            Some(Some(known)) => {
                return if nesting + known.nest > self.max_nesting {
                    Err(Invalid::TooDeep(self.max_nesting))
                } else {
                    Ok(*known)
                };
            }
            Some(None) => return Err(Invalid::FragmentCycle(name.to_string())),
            None => {}
        }
        let Some(fragment) = self.doc.fragments.get(name) else {
            return Err(Invalid::UnknownFragment(name.to_string()));
        };
        self.fragments.insert(name.as_str(), None);
        let m = self.set(&fragment.node.selection_set.node, nesting)?;
        self.fragments.insert(name.as_str(), Some(m));
        Ok(m)
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
        let m = measure(&doc, 64).unwrap();
        assert_eq!(m.fields, 1 << 23);
        assert_eq!(m.aliases, 1 << 23);
        assert_eq!(m.depth, 1);

        let doc = async_graphql::parser::parse_query(
            "query { a: viewer { id } b: viewer { x: id } ...F } fragment F on Query { c: viewer { id } }",
        )
        .unwrap();
        assert_eq!(
            measure(&doc, 64),
            Ok(Measure {
                depth: 2,
                depth_all: 2,
                fields: 6,
                aliases: 4,
                selections: 7,
                nest: 3,
            })
        );
        let intro = async_graphql::parser::parse_query(
            "{ __schema { types { fields { type { ofType { ofType { ofType { name } } } } } } } }",
        )
        .unwrap();
        let m = measure(&intro, 64).unwrap();
        assert_eq!((m.depth, m.depth_all), (0, 8));
    }

    fn refusal(text: &str, nesting: usize) -> Invalid {
        let doc = async_graphql::parser::parse_query(text).unwrap();
        measure(&doc, nesting).unwrap_err()
    }

    #[test]
    fn unknown_cyclic_unused_and_deep_fragments_are_refused() {
        // The reported bomb: spreads three ways deep, ending in a fragment
        // that does not exist. Refused at the first unknown spread.
        let mut text = String::from("query { ...F0 }");
        for i in 0..24 {
            let next = format!(" ...F{}", i + 1);
            text.push_str(&format!(" fragment F{i} on Query {{{}}}", next.repeat(3)));
        }
        text.push_str(" fragment F24 on Query { ...Nowhere ...Nowhere }");
        assert_eq!(
            refusal(&text, 64),
            Invalid::UnknownFragment("Nowhere".into())
        );
        assert_eq!(
            refusal("{ ...A } fragment A on Query { viewer { ...A } }", 64),
            Invalid::FragmentCycle("A".into())
        );
        assert_eq!(
            refusal(
                "{ ...A } fragment A on Query { ...B } fragment B on Query { ...A }",
                64
            ),
            Invalid::FragmentCycle("A".into())
        );
        // In an operation that operationName would not select: the same.
        assert_eq!(
            refusal("query A { __typename } query B { ...Nowhere }", 64),
            Invalid::UnknownFragment("Nowhere".into())
        );
        assert_eq!(
            refusal("{ __typename } fragment U on Query { a }", 64),
            Invalid::UnusedFragment("U".into())
        );
        // A chain of fragments each spreading the next nests one level per hop.
        let mut chain = String::from("{ ...C0 }");
        for i in 0..100 {
            chain.push_str(&format!(" fragment C{i} on Query {{ ...C{} }}", i + 1));
        }
        chain.push_str(" fragment C100 on Query { __typename }");
        assert_eq!(refusal(&chain, 64), Invalid::TooDeep(64));
        // A fragment measured shallow, spread again deeper: the reuse is checked.
        let reuse = "{ ...D a { b { c { ...D } } } } fragment D on Query { x { y } }";
        let doc = async_graphql::parser::parse_query(reuse).unwrap();
        assert!(measure(&doc, 6).is_ok());
        assert_eq!(measure(&doc, 5), Err(Invalid::TooDeep(5)));
    }
}
