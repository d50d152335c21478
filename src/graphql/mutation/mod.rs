//! The mutation root, merged from one object per area.

mod friend;
mod media;
mod moment;
mod safety;
mod status;
mod user;

use async_graphql::MergedObject;

/// The mutation root.
#[derive(MergedObject, Default)]
#[graphql(name = "Mutation")]
pub struct MutationRoot(
    user::UserMutation,
    friend::FriendMutation,
    media::MediaMutation,
    status::StatusMutation,
    moment::MomentMutation,
    safety::SafetyMutation,
);
