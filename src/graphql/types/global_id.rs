//! Global ids that say their type: the GraphQL `ID` of every object is
//! `Type:number` (the type's name and its row's snowflake id), base64url
//! without padding, so clients treat it as opaque and the server knows from
//! the id alone which table to read (`node` and `nodes` run one statement per
//! type present, and an id of the wrong type is simply not found).

use async_graphql::ID;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::error::AppError;

/// The longest id this server makes ("ModerationNotice:" and 19 digits,
/// base64): anything longer is not decoded at all.
const MAX_ID_LEN: usize = 48;

/// What an id names: the GraphQL type of the object behind it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IdKind {
    User,
    Status,
    Moment,
    Location,
    Media,
    Report,
    ModerationNotice,
}

impl IdKind {
    const ALL: [IdKind; 7] = [
        IdKind::User,
        IdKind::Status,
        IdKind::Moment,
        IdKind::Location,
        IdKind::Media,
        IdKind::Report,
        IdKind::ModerationNotice,
    ];

    /// The GraphQL type's name, as the id spells it.
    pub fn name(self) -> &'static str {
        match self {
            IdKind::User => "User",
            IdKind::Status => "Status",
            IdKind::Moment => "Moment",
            IdKind::Location => "Location",
            IdKind::Media => "Media",
            IdKind::Report => "Report",
            IdKind::ModerationNotice => "ModerationNotice",
        }
    }
}

/// The global id of row `n` of `kind`.
pub fn id(kind: IdKind, n: i64) -> ID {
    ID(URL_SAFE_NO_PAD.encode(format!("{}:{n}", kind.name())))
}

/// The id of `author`'s entry in `viewer`'s tray (`0` for an anonymous
/// viewer): both numbers, so that entries of two viewers never share one.
/// Never an input, so never decoded.
pub fn tray_entry_id(viewer: Option<i64>, author: i64) -> ID {
    ID(URL_SAFE_NO_PAD.encode(format!("StoryTrayEntry:{}:{author}", viewer.unwrap_or(0))))
}

/// The kind and number behind an id; `None` for an id this server could not
/// have made (too long, not base64, an unknown type, not a positive number).
pub fn decode_id(id: &ID) -> Option<(IdKind, i64)> {
    if id.0.len() > MAX_ID_LEN {
        return None;
    }
    let bytes = URL_SAFE_NO_PAD.decode(id.0.as_bytes()).ok()?;
    let text = std::str::from_utf8(&bytes).ok()?;
    let (name, number) = text.split_once(':')?;
    let kind = IdKind::ALL.into_iter().find(|k| k.name() == name)?;
    // Digits only: `i64::from_str` would also take a sign.
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n = number.parse::<i64>().ok().filter(|n| *n > 0)?;
    Some((kind, n))
}

/// The number behind an id of `kind`; `None` for any other id.
pub fn parse_id(id: &ID, kind: IdKind) -> Option<i64> {
    decode_id(id).filter(|(k, _)| *k == kind).map(|(_, n)| n)
}

/// The number behind an id that must name a `kind`: `NOT_FOUND` otherwise
/// (exactly as for an id that names nothing).
pub fn require_id(id: &ID, kind: IdKind, what: &str) -> Result<i64, AppError> {
    parse_id(id, kind).ok_or_else(|| AppError::not_found(format!("{what} not found")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_say_their_type() {
        for kind in IdKind::ALL {
            for n in [1, 42, i64::MAX] {
                let made = id(kind, n);
                assert!(made.0.len() <= MAX_ID_LEN, "{made:?}");
                assert_eq!(decode_id(&made), Some((kind, n)));
                assert_eq!(parse_id(&made, kind), Some(n));
            }
        }
        assert_eq!(parse_id(&id(IdKind::User, 7), IdKind::Status), None);
    }

    #[test]
    fn foreign_ids_decode_to_nothing() {
        let enc = |s: &str| ID(URL_SAFE_NO_PAD.encode(s));
        for bad in [
            ID("7".into()),
            ID("".into()),
            ID("!!!".into()),
            enc("User:"),
            enc("User:-5"),
            enc("User:+5"),
            enc("User:0"),
            enc("User:99999999999999999999"),
            enc("Nobody:5"),
            enc("User5"),
            ID("A".repeat(MAX_ID_LEN + 1)),
        ] {
            assert_eq!(decode_id(&bad), None, "{bad:?}");
        }
    }
}
