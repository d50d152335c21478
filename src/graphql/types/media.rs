//! Stored images.

use async_graphql::{ID, Object};

use super::id;
use crate::entity::media;

/// A stored image.
#[derive(Clone, Debug)]
pub struct Media(pub media::Model);

#[Object]
impl Media {
    /// The media's id.
    pub async fn id(&self) -> ID {
        id(self.0.id)
    }

    /// Where a client fetches the bytes: served by this server for the local store, a time-limited signed URL for S3.
    async fn url(&self) -> String {
        format!("/media/{}", self.0.storage_key)
    }

    /// The type judged from the file's bytes, e.g. `image/jpeg`.
    async fn content_type(&self) -> &str {
        &self.0.content_type
    }

    /// Size of the stored file in bytes.
    async fn byte_size(&self) -> i32 {
        i32::try_from(self.0.byte_size).unwrap_or(i32::MAX)
    }

    /// Width in pixels, where the file's header gives it.
    async fn width(&self) -> Option<i32> {
        self.0.width
    }

    /// Height in pixels, where the file's header gives it.
    async fn height(&self) -> Option<i32> {
        self.0.height
    }
}
