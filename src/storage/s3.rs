//! The S3 media store: aws-sdk-s3 against AWS or any S3-compatible server
//! (`EPHEMERA_S3_ENDPOINT`, path-style addressing for most of them).
//! Credentials come from `EPHEMERA_S3_ACCESS_KEY_ID` /
//! `EPHEMERA_S3_SECRET_ACCESS_KEY` when set, else from the standard AWS chain
//! (environment, profiles, web identity, container and instance roles).
//!
//! Every call has a connect and an attempt timeout and a bounded number of
//! retries, so an unreachable store fails a request (or a job round) quickly
//! instead of hanging it; the deletion outbox retries later.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_sdk_s3::Client;
use aws_sdk_s3::config::{
    Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
};
use aws_sdk_s3::error::DisplayErrorContext;
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;
use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
use bytes::Bytes;

use super::{StoreFailure, StoreResult, UploadTarget};
use crate::clock::Millis;
use crate::config::Config;
use crate::error::{AppError, AppResult};

/// A bucket.
#[derive(Clone, Debug)]
pub struct S3Store {
    client: Client,
    bucket: String,
}

fn failure(what: &str, key: &str, e: impl std::error::Error) -> StoreFailure {
    StoreFailure(format!("{what} {key}: {}", DisplayErrorContext(e)))
}

fn system_time(ms: Millis) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

impl S3Store {
    /// A client for the configured bucket. Makes no request.
    pub async fn connect(config: &Config) -> AppResult<Self> {
        let bucket = config
            .s3
            .bucket
            .clone()
            .filter(|b| !b.is_empty())
            .ok_or_else(|| {
                AppError::bad_input("EPHEMERA_S3_BUCKET is required with EPHEMERA_MEDIA_STORE=s3")
            })?;
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(Provider::Rustls(CryptoMode::Ring))
            .build_https();
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .http_client(http)
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(3))
                    .operation_attempt_timeout(Duration::from_secs(30))
                    .build(),
            )
            .retry_config(RetryConfig::standard().with_max_attempts(3));
        if let Some(region) = &config.s3.region {
            loader = loader.region(Region::new(region.clone()));
        }
        match (&config.s3.access_key_id, &config.s3.secret_access_key) {
            (Some(id), Some(secret)) => {
                loader = loader.credentials_provider(Credentials::new(
                    id.clone(),
                    secret.clone(),
                    None,
                    None,
                    "ephemera-settings",
                ));
            }
            (None, None) => {}
            _ => {
                return Err(AppError::bad_input(
                    "set both EPHEMERA_S3_ACCESS_KEY_ID and EPHEMERA_S3_SECRET_ACCESS_KEY, or neither",
                ));
            }
        }
        let shared = loader.load().await;
        let mut builder = aws_sdk_s3::config::Builder::from(&shared)
            .force_path_style(config.s3.path_style)
            // Checksums only where S3 requires them: S3-compatible servers
            // differ in their support of the newer default ones.
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired);
        if shared.region().is_none() {
            builder = builder.region(Region::new("us-east-1"));
        }
        if let Some(endpoint) = &config.s3.endpoint {
            builder = builder.endpoint_url(endpoint.clone());
        }
        Ok(Self {
            client: Client::from_conf(builder.build()),
            bucket,
        })
    }

    pub async fn put(&self, key: &str, bytes: Bytes, content_type: &str) -> StoreResult<()> {
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type(content_type)
            .body(ByteStream::from(bytes))
            .send()
            .await
            .map_err(|e| failure("putting", key, e))?;
        Ok(())
    }

    pub async fn size(&self, key: &str) -> StoreResult<Option<u64>> {
        match self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(out) => Ok(Some(
                out.content_length()
                    .and_then(|n| u64::try_from(n).ok())
                    .unwrap_or(0),
            )),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_not_found()) => Ok(None),
            Err(e) => Err(failure("reading the size of", key, e)),
        }
    }

    pub async fn get(&self, key: &str) -> StoreResult<Option<Bytes>> {
        let out = match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => return Ok(None),
            Err(e) => return Err(failure("getting", key, e)),
        };
        let body = out
            .body
            .collect()
            .await
            .map_err(|e| failure("reading", key, e))?;
        Ok(Some(body.into_bytes()))
    }

    /// S3 answers a delete of a missing key with success, as we want.
    pub async fn delete(&self, key: &str) -> StoreResult<()> {
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| failure("deleting", key, e))?;
        Ok(())
    }

    pub async fn keys(&self) -> StoreResult<Vec<String>> {
        let mut keys = Vec::new();
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| failure("listing", &self.bucket, e))?;
            keys.extend(
                page.contents()
                    .iter()
                    .filter_map(|o| o.key().map(str::to_owned)),
            );
        }
        keys.sort();
        Ok(keys)
    }

    fn presigning(start: Millis, expires: Millis) -> StoreResult<PresigningConfig> {
        let seconds = u64::try_from((expires - start).max(1000) / 1000).unwrap_or(1);
        PresigningConfig::builder()
            .start_time(system_time(start))
            .expires_in(Duration::from_secs(seconds))
            .build()
            .map_err(|e| failure("presigning", "a URL", e))
    }

    pub async fn presigned_get(
        &self,
        key: &str,
        start: Millis,
        expires: Millis,
    ) -> StoreResult<String> {
        let request = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .presigned(Self::presigning(start, expires)?)
            .await
            .map_err(|e| failure("presigning a GET of", key, e))?;
        Ok(request.uri().to_owned())
    }

    pub async fn presigned_put(
        &self,
        key: &str,
        content_type: &str,
        len: u64,
        start: Millis,
        expires: Millis,
    ) -> StoreResult<UploadTarget> {
        let request = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type(content_type)
            .content_length(i64::try_from(len).unwrap_or(i64::MAX))
            .presigned(Self::presigning(start, expires)?)
            .await
            .map_err(|e| failure("presigning a PUT of", key, e))?;
        Ok(UploadTarget {
            url: request.uri().to_owned(),
            headers: request
                .headers()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            expires_at: expires - expires.rem_euclid(1000),
        })
    }
}
