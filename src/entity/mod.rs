//! SeaORM entities: the rows of the tables the domain reads and writes. They
//! carry no GraphQL derives; `graphql::types` wraps them.

pub mod event;
pub mod location;
pub mod media;
pub mod moderation_notice;
pub mod moment;
pub mod moment_like;
pub mod report;
pub mod session;
pub mod status;
pub mod user;
