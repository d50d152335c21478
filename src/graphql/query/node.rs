//! `node` and `nodes`: refetching any object by its id.

use async_graphql::{Context, ID, Object, Result};

use crate::domain::{location, media, moment, status, user};
use crate::error::AppError;
use crate::graphql::types::{IdKind, Location, Media, Moment, Node, Status, User, decode_id};
use crate::graphql::{app, db, viewer};

const MAX_NODES: usize = 100;

#[derive(Default)]
pub struct NodeQuery;

#[Object]
impl NodeQuery {
    /// Refetch any object by its id (Relay Global Object Identification).
    async fn node(&self, ctx: &Context<'_>, id: ID) -> Result<Option<Node>> {
        Ok(resolve_nodes(ctx, &[id]).await?.pop().flatten())
    }

    /// Many objects at once, in the order asked, null where an id is unknown or not visible; at most 100 ids.
    #[graphql(complexity = "ids.len().max(1).saturating_mul(child_complexity)")]
    async fn nodes(&self, ctx: &Context<'_>, ids: Vec<ID>) -> Result<Vec<Option<Node>>> {
        if ids.len() > MAX_NODES {
            return Err(AppError::bad_input(format!("at most {MAX_NODES} ids")).into());
        }
        resolve_nodes(ctx, &ids).await
    }
}

/// Reads each type's ids from its own table alone (the ids say their
/// type), each by its own visibility rules: one statement per type present.
async fn resolve_nodes(ctx: &Context<'_>, ids: &[ID]) -> Result<Vec<Option<Node>>> {
    let app = app(ctx)?;
    let db = db(ctx)?;
    let me = viewer(ctx).id();
    let decoded: Vec<Option<(IdKind, i64)>> = ids.iter().map(decode_id).collect();
    let of = |kind: IdKind| -> Vec<i64> {
        let mut numbers: Vec<i64> = decoded
            .iter()
            .flatten()
            .filter(|(k, _)| *k == kind)
            .map(|(_, n)| *n)
            .collect();
        numbers.sort_unstable();
        numbers.dedup();
        numbers
    };
    // Each finder runs no statement for no ids.
    let now = app.clock.now();
    let users = user::find_visible_by_ids(db, me, &of(IdKind::User)).await?;
    let statuses = status::find_readable_by_ids(db, me, &of(IdKind::Status), now).await?;
    let moments = moment::find_readable_by_ids(db, me, &of(IdKind::Moment), now).await?;
    let locations = location::find_visible_by_ids(db, me, &of(IdKind::Location), now).await?;
    let media = match me {
        Some(v) => media::find_owned_by_ids(db, v, &of(IdKind::Media)).await?,
        None => Default::default(),
    };
    Ok(decoded
        .into_iter()
        .map(|d| {
            let (kind, n) = d?;
            Some(match kind {
                IdKind::User => Node::User(User(users.get(&n)?.clone())),
                IdKind::Status => Node::Status(Status::new(statuses.get(&n)?.clone())),
                IdKind::Moment => Node::Moment(Moment::new(moments.get(&n)?.clone())),
                IdKind::Location => Node::Location(Location::new(locations.get(&n)?.clone())),
                IdKind::Media => Node::Media(Media(media.get(&n)?.clone())),
                IdKind::Report | IdKind::ModerationNotice => return None,
            })
        })
        .collect())
}
