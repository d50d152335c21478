//! `node` and `nodes`: refetching any object by its id.

use async_graphql::{Context, ID, Object, Result};

use crate::domain::node::{self, Table};
use crate::domain::{location, media, moment, status, user};
use crate::error::AppError;
use crate::graphql::types::{Location, Media, Moment, Node, Status, User, parse_id};
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

/// Finds which tables hold the ids (one statement), then looks them up in
/// those tables alone, each by its own visibility rules.
async fn resolve_nodes(ctx: &Context<'_>, ids: &[ID]) -> Result<Vec<Option<Node>>> {
    let app = app(ctx)?;
    let db = db(ctx)?;
    let me = viewer(ctx).id();
    let mut numbers: Vec<i64> = ids.iter().filter_map(parse_id).collect();
    numbers.sort_unstable();
    numbers.dedup();
    let held = node::tables(db, &numbers).await?;
    let of = |table: Table| -> Vec<i64> {
        numbers
            .iter()
            .copied()
            .filter(|n| held.get(n) == Some(&table))
            .collect()
    };
    // Each finder runs no statement for no ids.
    let now = app.clock.now();
    let users = user::find_visible_by_ids(db, me, &of(Table::User)).await?;
    let statuses = status::find_readable_by_ids(db, me, &of(Table::Status), now).await?;
    let moments = moment::find_readable_by_ids(db, me, &of(Table::Moment), now).await?;
    let locations = location::find_visible_by_ids(db, me, &of(Table::Location), now).await?;
    let media = match me {
        Some(v) => media::find_owned_by_ids(db, v, &of(Table::Media)).await?,
        None => Default::default(),
    };
    Ok(ids
        .iter()
        .map(|id| {
            let n = parse_id(id)?;
            if let Some(u) = users.get(&n) {
                return Some(Node::User(User(u.clone())));
            }
            if let Some(s) = statuses.get(&n) {
                return Some(Node::Status(Status::new(s.clone())));
            }
            if let Some(m) = moments.get(&n) {
                return Some(Node::Moment(Moment::new(m.clone())));
            }
            if let Some(l) = locations.get(&n) {
                return Some(Node::Location(Location::new(l.clone())));
            }
            media.get(&n).map(|m| Node::Media(Media(m.clone())))
        })
        .collect())
}
