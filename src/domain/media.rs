//! Media rows: who may use or see a stored image. Uploads and storage come
//! with the media issue; statuses already attach and resolve media here.

use std::collections::HashMap;

use sea_orm::ConnectionTrait;

use crate::db::{self, placeholders};
use crate::entity::media;
use crate::error::AppResult;

/// Media by id (the media loader's query).
pub async fn find_by_ids<C: ConnectionTrait>(
    db: &C,
    ids: &[i64],
) -> AppResult<HashMap<i64, media::Model>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<media::Model> = db::fetch_all(
        db,
        &format!(
            "SELECT * FROM media WHERE id IN ({})",
            placeholders(1, ids.len())
        ),
        ids.iter().map(|&i| i.into()).collect(),
    )
    .await?;
    Ok(rows.into_iter().map(|m| (m.id, m)).collect())
}

/// Those of `ids` that `owner` uploaded: a media is visible by id to its
/// uploader only (others see it through what it is attached to).
pub async fn find_owned_by_ids<C: ConnectionTrait>(
    db: &C,
    owner: i64,
    ids: &[i64],
) -> AppResult<HashMap<i64, media::Model>> {
    let mut found = find_by_ids(db, ids).await?;
    found.retain(|_, m| m.owner_id == owner);
    Ok(found)
}
