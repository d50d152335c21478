//! Domain rules: what users, friends and statuses may do, and the SQL that
//! enforces it. Nothing here knows about GraphQL or HTTP; resolvers and jobs
//! both call these functions.

pub mod expiry;
pub mod friend;
pub mod image;
pub mod media;
pub mod page;
pub mod status;
pub mod user;
pub mod visibility;

/// Whose content a list shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Everything the viewer may see.
    Everyone,
    /// The viewer's own and their accepted friends' (needs a signed-in viewer).
    Friends,
}
