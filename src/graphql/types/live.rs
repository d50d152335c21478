//! What the `events` subscription sends: one object per change, each with
//! the cursor to resume after it. Objects that are created or change carry
//! the whole `Status` or `Moment` (a normalising cache such as Apollo's or
//! urql's merges it by `__typename` and `id`); deletions carry the ids to
//! evict (`Status:<statusId>`, `Moment:<momentId>`) and the author, whose
//! tray entry or profile list a client updates.

use async_graphql::{Context, ID, Interface, Object, Result, SimpleObject};

use super::{Moment, Status, StoryTrayEntry, User, load_user};

/// A change a live tray or feed follows. `cursor` is what `events(after:)` resumes after.
#[derive(Interface)]
#[graphql(field(
    name = "cursor",
    ty = "&String",
    desc = "Pass it as `after` to resume right after this event."
))]
pub enum LiveEvent {
    StatusCreated(StatusCreatedEvent),
    StatusDeleted(StatusDeletedEvent),
    StatusSeen(StatusSeenEvent),
    MomentCreated(MomentCreatedEvent),
    MomentDeleted(MomentDeletedEvent),
    MomentRestored(MomentRestoredEvent),
    AuthorGone(AuthorGoneEvent),
    FriendshipChanged(FriendshipChangedEvent),
    StoryTrayEntryChanged(StoryTrayEntryChangedEvent),
    StoryTrayEntryRemoved(StoryTrayEntryRemovedEvent),
}

/// An entry of the viewer's tray appeared or changed: a new status the viewer may see, one gone, a seen mark.
#[derive(SimpleObject)]
pub struct StoryTrayEntryChangedEvent {
    /// Pass it as `after` to resume right after this event.
    pub cursor: String,
    /// The entry as `storyTray` returns it now (merge it by `id`; its place is by `latestCreatedAt`).
    pub entry: StoryTrayEntry,
}

/// An author left the viewer's tray: no live status the viewer may see remains.
#[derive(SimpleObject)]
pub struct StoryTrayEntryRemovedEvent {
    /// Pass it as `after` to resume right after this event.
    pub cursor: String,
    /// The entry to evict (`StoryTrayEntry:<entryId>`).
    pub entry_id: ID,
    /// Its author.
    pub author_id: ID,
}

/// How the viewer stands with a user changed: a request sent, accepted or withdrawn, a friendship ended, a block either way (the blocked side hears it as the friendship ending).
pub struct FriendshipChangedEvent {
    pub cursor: String,
    /// The other user.
    pub user_id: i64,
}

#[Object]
impl FriendshipChangedEvent {
    /// Pass it as `after` to resume right after this event.
    async fn cursor(&self) -> &String {
        &self.cursor
    }

    /// The other user, as the viewer now stands with them (`friendship`, `friendRequestedAt`).
    async fn user(&self, ctx: &Context<'_>) -> Result<User> {
        load_user(ctx, self.user_id).await
    }
}

/// An account whose content the viewer could see was deleted: evict everything of `authorId` (their tray entry, statuses and moments). One event for the whole account, not one per status or moment.
#[derive(SimpleObject)]
pub struct AuthorGoneEvent {
    /// Pass it as `after` to resume right after this event.
    pub cursor: String,
    /// The deleted account (evict `User:<authorId>` and what it posted).
    pub author_id: ID,
}

/// A status was posted that the viewer may see.
#[derive(SimpleObject)]
pub struct StatusCreatedEvent {
    /// Pass it as `after` to resume right after this event.
    pub cursor: String,
    /// The new status.
    pub status: Status,
}

/// A status the viewer could see is gone: deleted by its author or a moderator, or purged when it expired.
#[derive(SimpleObject)]
pub struct StatusDeletedEvent {
    /// Pass it as `after` to resume right after this event.
    pub cursor: String,
    /// The id of the status that is gone (evict `Status:<statusId>`).
    pub status_id: ID,
    /// Its author, whose tray entry changes.
    pub author_id: ID,
}

/// The viewer marked a status seen (on this or another device): `status.viewerHasSeen` is now true.
#[derive(SimpleObject)]
pub struct StatusSeenEvent {
    /// Pass it as `after` to resume right after this event.
    pub cursor: String,
    /// The status, as the viewer now sees it.
    pub status: Status,
}

/// A moment was posted that the viewer may see.
#[derive(SimpleObject)]
pub struct MomentCreatedEvent {
    /// Pass it as `after` to resume right after this event.
    pub cursor: String,
    /// The new moment.
    pub moment: Moment,
}

/// A moment the viewer could see is gone: deleted by its author or a moderator, or expired.
#[derive(SimpleObject)]
pub struct MomentDeletedEvent {
    /// Pass it as `after` to resume right after this event.
    pub cursor: String,
    /// The id of the moment that is gone (evict `Moment:<momentId>`).
    pub moment_id: ID,
    /// Its author.
    pub author_id: ID,
}

/// A deleted moment the viewer may see was restored by its author.
#[derive(SimpleObject)]
pub struct MomentRestoredEvent {
    /// Pass it as `after` to resume right after this event.
    pub cursor: String,
    /// The moment, live again.
    pub moment: Moment,
}
