//! Media: uploads through GraphQL and direct-upload tickets.

use std::io::Read;

use async_graphql::{Context, Object, Result};

use crate::domain::media;
use crate::error::AppError;
use crate::graphql::types::{
    DateTime, HttpHeader, IdKind, Media, MediaUploadInput, MediaUploadTicket, Upload, id,
};
use crate::graphql::{app, writer};
use crate::throttle::Write;

#[derive(Default)]
pub struct MediaMutation;

#[Object]
impl MediaMutation {
    /// Stores an image (GraphQL multipart request). At most 15 MB; JPEG, PNG, GIF, WebP, HEIC or HEIF, judged by the file's bytes, not its name or declared type.
    async fn upload_media(&self, ctx: &Context<'_>, file: Upload) -> Result<Media> {
        let owner = writer(ctx, Write::Media).await?;
        let app = app(ctx)?;
        let value = file
            .value(ctx)
            .ok_or_else(|| AppError::bad_input("this request carried no such file"))?;
        // Held while the file is in memory: reading, judging, storing.
        let _slot = media::upload_slot(&app.media).await?;
        let max = app.config.media.max_upload_bytes;
        let bytes = tokio::task::spawn_blocking(move || {
            let mut buf = Vec::new();
            value.into_read().take(max + 1).read_to_end(&mut buf)?;
            Ok::<_, std::io::Error>(buf)
        })
        .await
        .map_err(|e| AppError::internal("reading an upload", e))?
        .map_err(|e| AppError::internal("reading an upload", e))?;
        let now = app.clock.now();
        let stored = media::upload(&app.db, &app.media, &app.ids, owner, bytes.into(), now).await?;
        Ok(Media(stored))
    }

    /// Starts a direct upload for large files or S3 deployments: PUT the bytes to uploadUrl with the given headers before expiresAt, then use mediaId. The same limits as uploadMedia, checked before the media can be used.
    async fn request_media_upload(
        &self,
        ctx: &Context<'_>,
        input: MediaUploadInput,
    ) -> Result<MediaUploadTicket> {
        let owner = writer(ctx, Write::Media).await?;
        let app = app(ctx)?;
        let ticket = media::request_upload(
            &app.db,
            &app.media,
            &app.ids,
            owner,
            &input.content_type,
            i64::from(input.byte_size),
            app.clock.now(),
        )
        .await?;
        Ok(MediaUploadTicket {
            media_id: id(IdKind::Media, ticket.media_id),
            upload_url: ticket.target.url,
            headers: ticket
                .target
                .headers
                .into_iter()
                .map(|(name, value)| HttpHeader { name, value })
                .collect(),
            expires_at: DateTime(ticket.target.expires_at),
        })
    }
}
