//! The query root, merged from one object per area.

mod moment;
mod node;
mod safety;
mod status;
mod user;

pub(crate) use status::statuses_of;

use async_graphql::MergedObject;

/// The query root.
#[derive(MergedObject, Default)]
#[graphql(name = "Query")]
pub struct QueryRoot(
    node::NodeQuery,
    user::UserQuery,
    status::StatusQuery,
    moment::MomentQuery,
    safety::SafetyQuery,
);
