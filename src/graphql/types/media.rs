//! Stored images and direct-upload tickets.

use async_graphql::{
    Context, ID, InputObject, InputValueError, InputValueResult, Object, Result, Scalar,
    ScalarType, SimpleObject, UploadValue, Value,
};

use super::{DateTime, IdKind, id};
use crate::entity::media;
use crate::error::AppError;
use crate::graphql::app;

/// A stored image.
#[derive(Clone, Debug)]
pub struct Media(pub media::Model);

#[Object]
impl Media {
    /// The media's id.
    pub async fn id(&self) -> ID {
        id(IdKind::Media, self.0.id)
    }

    /// Where a client fetches the bytes: served by this server for the local store, a time-limited signed URL for S3.
    async fn url(&self, ctx: &Context<'_>) -> Result<String> {
        let app = app(ctx)?;
        Ok(app
            .media
            .store
            .url(
                &self.0.storage_key,
                app.clock.now(),
                app.config.media.url_ttl,
            )
            .await
            .map_err(AppError::from)?)
    }

    /// The type judged from the file's bytes, e.g. `image/jpeg`.
    async fn content_type(&self) -> &str {
        &self.0.content_type
    }

    /// Size of the stored file in bytes (after location metadata was removed).
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

/// A direct upload to start.
#[derive(Debug, InputObject)]
pub struct MediaUploadInput {
    /// One of image/jpeg, image/png, image/gif, image/webp, image/heic, image/heif.
    pub content_type: String,
    /// The exact size of the file in bytes, at most 15 MB.
    pub byte_size: i32,
}

/// Where and how to PUT the bytes of a direct upload.
#[derive(Debug, SimpleObject)]
pub struct MediaUploadTicket {
    /// The media to attach once the bytes are uploaded.
    pub media_id: ID,
    /// The URL to PUT the bytes to.
    pub upload_url: String,
    /// Headers the PUT must carry.
    pub headers: Vec<HttpHeader>,
    /// The upload URL stops working at this time.
    pub expires_at: DateTime,
}

/// An HTTP header.
#[derive(Debug, SimpleObject)]
pub struct HttpHeader {
    pub name: String,
    pub value: String,
}

/// A file sent with the request (GraphQL multipart request spec). Our own
/// scalar rather than async-graphql's, whose parsing panics on a forged
/// placeholder; here any value that is not a file of this request is refused.
#[derive(Clone, Copy, Debug)]
pub struct Upload(usize);

const FILE_PLACEHOLDER: &str = "#__graphql_file__:";

#[Scalar(
    name = "Upload",
    specified_by_url = "https://github.com/jaydenseric/graphql-multipart-request-spec"
)]
impl ScalarType for Upload {
    fn parse(value: Value) -> InputValueResult<Self> {
        match &value {
            Value::String(s) => s
                .strip_prefix(FILE_PLACEHOLDER)
                .and_then(|n| n.parse().ok())
                .map(Upload)
                .ok_or_else(|| InputValueError::custom("send the file in a multipart request")),
            _ => Err(InputValueError::custom(
                "send the file in a multipart request",
            )),
        }
    }

    fn to_value(&self) -> Value {
        Value::Null
    }
}

impl Upload {
    /// The file, if this request carried it.
    pub fn value(&self, ctx: &Context<'_>) -> Option<UploadValue> {
        ctx.query_env.uploads.get(self.0)?.try_clone().ok()
    }
}
