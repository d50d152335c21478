//! `/media/<key>` for the local store: GET serves a file through a signed,
//! expiring URL; PUT receives a direct upload through a signed, expiring URL
//! that also signs the `Content-Type` and `Content-Length` it must carry. A
//! ticket takes one PUT, of exactly its bytes (at most the upload limit),
//! through one of the upload slots. With the S3 store clients talk to S3
//! and these answer 404.

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use super::{HttpState, error_response};
use crate::domain::{image, media};
use crate::error::AppError;
use crate::storage::MediaStore;
use crate::storage::local::LocalStore;

#[derive(Debug, Deserialize)]
pub(super) struct Signed {
    exp: Option<i64>,
    sig: Option<String>,
}

fn local(state: &HttpState) -> Option<&LocalStore> {
    match &state.app.media.store {
        MediaStore::Local(store) => Some(store),
        MediaStore::S3(_) => None,
    }
}

fn not_found() -> Response {
    error_response(StatusCode::NOT_FOUND, &AppError::not_found("no such media"))
}

fn denied() -> Response {
    error_response(
        StatusCode::FORBIDDEN,
        &AppError::forbidden("this media URL is invalid or has expired"),
    )
}

/// GET: the bytes, with the type their leading bytes show.
pub(super) async fn serve(
    State(state): State<HttpState>,
    Path((dir, name)): Path<(String, String)>,
    Query(signed): Query<Signed>,
) -> Response {
    let Some(store) = local(&state) else {
        return not_found();
    };
    let key = format!("{dir}/{name}");
    let now = state.app.clock.now();
    let (Some(exp), Some(sig)) = (signed.exp, signed.sig) else {
        return denied();
    };
    if !store.check_get(&key, exp, &sig, now) {
        tracing::info!(key, "media read refused: bad or expired signature");
        return denied();
    }
    let Some(path) = store.file_path(&key) else {
        return not_found();
    };
    let mut file = match tokio::fs::File::open(&path).await {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return not_found(),
        Err(e) => {
            let err = AppError::internal("opening a media file", e);
            return error_response(StatusCode::INTERNAL_SERVER_ERROR, &err);
        }
    };
    let opened = async {
        let len = file.metadata().await?.len();
        let mut header = [0u8; 64];
        let n = file.read(&mut header).await?;
        file.rewind().await?;
        Ok::<_, std::io::Error>((len, image::content_type_of(&header[..n])))
    };
    let (len, content_type) = match opened.await {
        Ok(v) => v,
        Err(e) => {
            let err = AppError::internal("reading a media file", e);
            return error_response(StatusCode::INTERNAL_SERVER_ERROR, &err);
        }
    };
    let max_age = (exp * 1000 - now).max(0) / 1000;
    (
        [
            (
                header::CONTENT_TYPE,
                content_type
                    .unwrap_or("application/octet-stream")
                    .to_owned(),
            ),
            (header::CONTENT_LENGTH, len.to_string()),
            (header::CACHE_CONTROL, format!("private, max-age={max_age}")),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; sandbox".to_owned(),
            ),
        ],
        Body::from_stream(tokio_util::io::ReaderStream::new(file)),
    )
        .into_response()
}

/// PUT: a direct upload's bytes, exactly as many as were signed. A
/// refusal says `Connection: close`: the body it did not read (or read
/// only in part) still stands between it and the next request.
pub(super) async fn receive(
    state: State<HttpState>,
    path: Path<(String, String)>,
    signed: Query<Signed>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let mut response = receive_bytes(state, path, signed, headers, body).await;
    if !response.status().is_success() {
        response.headers_mut().insert(
            header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    response
}

async fn receive_bytes(
    State(state): State<HttpState>,
    Path((dir, name)): Path<(String, String)>,
    Query(signed): Query<Signed>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Some(store) = local(&state) else {
        return not_found();
    };
    let key = format!("{dir}/{name}");
    let (Some(exp), Some(sig)) = (signed.exp, signed.sig) else {
        return denied();
    };
    let header_str = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let content_type = header_str(header::CONTENT_TYPE).unwrap_or_default();
    let Some(len) = header_str(header::CONTENT_LENGTH).and_then(|v| v.parse::<u64>().ok()) else {
        return error_response(
            StatusCode::LENGTH_REQUIRED,
            &AppError::bad_input("a direct upload must carry its Content-Length"),
        );
    };
    let now = state.app.clock.now();
    if !store.check_put(&key, exp, &sig, content_type, len, now) {
        tracing::info!(key, "direct upload refused: bad or expired signature");
        return denied();
    }
    let max = state.app.media.config.max_upload_bytes;
    if len > max {
        return error_response(
            StatusCode::PAYLOAD_TOO_LARGE,
            &AppError::payload_too_large(format!("a media file is at most {max} bytes")),
        );
    }
    match media::claim_upload(&state.app.db, &key, len, now).await {
        Ok(Ok(())) => {}
        Ok(Err(media::Unclaimed::NoTicket)) => {
            return error_response(
                StatusCode::CONFLICT,
                &AppError::bad_input("this upload is already complete, or was withdrawn"),
            );
        }
        Ok(Err(media::Unclaimed::Claimed)) => {
            return error_response(
                StatusCode::CONFLICT,
                &AppError::bad_input(
                    "this ticket's bytes were already sent; a ticket takes one PUT (ask for a new one)",
                ),
            );
        }
        Ok(Err(media::Unclaimed::WrongSize { ticket })) => {
            return error_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                &AppError::payload_too_large(format!("this ticket is for {ticket} bytes")),
            );
        }
        Err(e) => return error_response(StatusCode::INTERNAL_SERVER_ERROR, &e),
    }
    // The bytes stream in under one of the upload slots, as every upload.
    let _slot = match media::upload_slot(&state.app.media).await {
        Ok(slot) => slot,
        Err(e) => return error_response(StatusCode::INTERNAL_SERVER_ERROR, &e),
    };
    let temp = store.temp_path();
    let written = write_exactly(&temp, body, len).await;
    let result = match written {
        Ok(()) => store
            .commit_temp(&temp, &key)
            .await
            .map_err(|f| (StatusCode::INTERNAL_SERVER_ERROR, AppError::from(f))),
        Err(refusal) => Err(refusal),
    };
    // The row may have been checked or withdrawn while the bytes streamed
    // in; then nothing may be left under its key.
    let result = match result {
        Ok(()) => match media::is_pending(&state.app.db, &key).await {
            Ok(true) => Ok(()),
            Ok(false) => {
                let _ = store.delete(&key).await;
                Err((
                    StatusCode::CONFLICT,
                    AppError::bad_input("this upload is already complete, or was withdrawn"),
                ))
            }
            Err(e) => Err((StatusCode::INTERNAL_SERVER_ERROR, e)),
        },
        Err(refusal) => Err(refusal),
    };
    match result {
        Ok(()) => StatusCode::OK.into_response(),
        Err((status, err)) => {
            let _ = tokio::fs::remove_file(&temp).await;
            error_response(status, &err)
        }
    }
}

/// Streams `body` into `path`, refusing more or fewer than `len` bytes.
async fn write_exactly(
    path: &std::path::Path,
    body: Body,
    len: u64,
) -> Result<(), (StatusCode, AppError)> {
    let io = |e: std::io::Error| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            AppError::internal("writing a direct upload", e),
        )
    };
    let mut file = crate::storage::local::create_private(path)
        .await
        .map_err(io)?;
    let mut stream = body.into_data_stream();
    let mut total = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|_| {
            (
                StatusCode::BAD_REQUEST,
                AppError::bad_input("the upload was interrupted"),
            )
        })?;
        total += chunk.len() as u64;
        if total > len {
            return Err((
                StatusCode::PAYLOAD_TOO_LARGE,
                AppError::payload_too_large(format!("this upload was signed for {len} bytes")),
            ));
        }
        file.write_all(&chunk).await.map_err(io)?;
    }
    if total != len {
        return Err((
            StatusCode::BAD_REQUEST,
            AppError::bad_input(format!("got {total} bytes of the {len} signed for")),
        ));
    }
    file.sync_all().await.map_err(io)?;
    Ok(())
}
