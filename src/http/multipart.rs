//! GraphQL multipart requests (the GraphQL multipart request spec): an
//! `operations` part, a `map` part, then at most one file.
//!
//! The body is read as it streams in, under limits: the file may be at most
//! `EPHEMERA_MAX_UPLOAD_BYTES`, the other parts at most
//! `EPHEMERA_MAX_BODY_BYTES`; a larger body is refused with
//! `PAYLOAD_TOO_LARGE` as soon as the limit is passed, not after buffering it.
//! The file goes to an anonymous temporary file, which the upload resolver
//! reads.

use std::collections::HashMap;

use async_graphql::{BatchRequest, UploadValue};
use axum::body::Body;
use axum::http::StatusCode;
use multer::{Constraints, Multipart, SizeLimit};
use tokio::io::AsyncWriteExt;

use crate::error::AppError;

type Refusal = (StatusCode, AppError);

fn bad(message: impl Into<String>) -> Refusal {
    (StatusCode::BAD_REQUEST, AppError::bad_input(message))
}

fn io_error(e: std::io::Error) -> Refusal {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        AppError::internal("buffering an upload", e),
    )
}

/// The limits of one multipart request.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    pub max_file: u64,
    pub max_part: u64,
}

impl Limits {
    fn refusal(&self, err: multer::Error) -> Refusal {
        match err {
            multer::Error::FieldSizeExceeded { .. } | multer::Error::StreamSizeExceeded { .. } => (
                StatusCode::PAYLOAD_TOO_LARGE,
                AppError::payload_too_large(format!(
                    "a media file is at most {} bytes (other parts at most {})",
                    self.max_file, self.max_part
                )),
            ),
            other => bad(format!("malformed multipart request: {other}")),
        }
    }
}

/// Reads a multipart request into GraphQL requests with the file set where
/// the map says.
pub(super) async fn parse(
    body: Body,
    content_type: &str,
    limits: Limits,
    parse_operations: impl Fn(&[u8]) -> Result<BatchRequest, AppError>,
) -> Result<BatchRequest, Refusal> {
    let boundary = multer::parse_boundary(content_type)
        .map_err(|_| bad("multipart/form-data needs a boundary"))?;
    let size_limit = SizeLimit::new()
        .whole_stream(limits.max_file + 2 * limits.max_part)
        .per_field(limits.max_file)
        .for_field("operations", limits.max_part)
        .for_field("map", limits.max_part);
    let mut multipart = Multipart::with_constraints(
        body.into_data_stream(),
        boundary,
        Constraints::new().size_limit(size_limit),
    );
    let mut operations: Option<BatchRequest> = None;
    let mut map: Option<HashMap<String, Vec<String>>> = None;
    let mut file: Option<(String, UploadValue)> = None;
    while let Some(mut field) = multipart
        .next_field()
        .await
        .map_err(|e| limits.refusal(e))?
    {
        let name = field.name().unwrap_or_default().to_owned();
        match name.as_str() {
            "operations" => {
                let bytes = field.bytes().await.map_err(|e| limits.refusal(e))?;
                operations =
                    Some(parse_operations(&bytes).map_err(|e| (StatusCode::BAD_REQUEST, e))?);
            }
            "map" => {
                let bytes = field.bytes().await.map_err(|e| limits.refusal(e))?;
                map = Some(serde_json::from_slice(&bytes).map_err(|e| {
                    bad(format!(
                        "the map part must be a JSON object of arrays of paths: {e}"
                    ))
                })?);
            }
            _ => {
                if operations.is_none() || map.is_none() {
                    return Err(bad(
                        "the operations and map parts must come before the file",
                    ));
                }
                if file.is_some() {
                    return Err(bad("at most one file per request"));
                }
                let upload = UploadValue {
                    filename: field.file_name().unwrap_or_default().to_owned(),
                    content_type: field.content_type().map(ToString::to_string),
                    content: buffer(&mut field, limits).await?,
                };
                file = Some((name, upload));
            }
        }
    }
    let mut batch = operations.ok_or_else(|| bad("the operations part is missing"))?;
    let map = map.ok_or_else(|| bad("the map part is missing"))?;
    if map.len() > 1 || map.values().any(|paths| paths.len() != 1) {
        return Err(bad("at most one file per request, used in one place"));
    }
    match (map.into_iter().next(), file) {
        (None, None) => {}
        (Some((name, paths)), Some((file_name, upload))) if name == file_name => {
            for path in paths {
                set_upload(&mut batch, &path, upload.try_clone().map_err(io_error)?)?;
            }
        }
        (Some((name, _)), _) => {
            return Err(bad(format!(
                "the map names file {name:?}, which was not sent"
            )));
        }
        (None, Some((name, _))) => return Err(bad(format!("file {name:?} is not in the map"))),
    }
    Ok(batch)
}

/// Streams the file part into an anonymous temporary file.
async fn buffer(field: &mut multer::Field<'_>, limits: Limits) -> Result<std::fs::File, Refusal> {
    let temp = tempfile::tempfile().map_err(io_error)?;
    let mut file = tokio::fs::File::from_std(temp);
    while let Some(chunk) = field.chunk().await.map_err(|e| limits.refusal(e))? {
        file.write_all(&chunk).await.map_err(io_error)?;
    }
    file.flush().await.map_err(io_error)?;
    let mut file = file.into_std().await;
    std::io::Seek::rewind(&mut file).map_err(io_error)?;
    Ok(file)
}

fn set_upload(batch: &mut BatchRequest, path: &str, upload: UploadValue) -> Result<(), Refusal> {
    match batch {
        BatchRequest::Single(request) => request.set_upload(path, upload),
        BatchRequest::Batch(requests) => {
            let (index, rest) = path.split_once('.').ok_or_else(|| {
                bad(format!(
                    "map path {path:?} must start with the operation's index"
                ))
            })?;
            let request = index
                .parse::<usize>()
                .ok()
                .and_then(|i| requests.get_mut(i))
                .ok_or_else(|| bad(format!("map path {path:?} names no operation")))?;
            request.set_upload(rest, upload);
        }
    }
    Ok(())
}
