//! The one error type of ephemera. Each variant has a stable code that becomes
//! `extensions.code` in GraphQL responses. An internal failure keeps its
//! cause (what was being done, and the error's own text with its chain) and
//! is logged once, where it becomes a response ([`AppError::to_graphql_json`]
//! and the GraphQL conversion in `graphql`) or where a job or the binary
//! gives up on it; clients see only `INTERNAL_SERVER_ERROR` with a fixed
//! message.
//!
//! `AppError` deliberately does not implement `Display`: async-graphql has a
//! blanket `From<T: Display>` for its error type that would copy a database
//! error's text into a response. Our own `From<AppError>` sits in its place.

use std::fmt;
use std::sync::Arc;

/// The codes of the API contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    Unauthenticated,
    Forbidden,
    NotFound,
    BadUserInput,
    PayloadTooLarge,
    UnsupportedMediaType,
    RateLimited,
    /// A subscription cursor from before what the change log keeps: the
    /// client refetches, then subscribes afresh.
    CursorExpired,
    Internal,
}

impl Code {
    /// The string clients see in `extensions.code`.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Unauthenticated => "UNAUTHENTICATED",
            Code::Forbidden => "FORBIDDEN",
            Code::NotFound => "NOT_FOUND",
            Code::BadUserInput => "BAD_USER_INPUT",
            Code::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            Code::UnsupportedMediaType => "UNSUPPORTED_MEDIA_TYPE",
            Code::RateLimited => "RATE_LIMITED",
            Code::CursorExpired => "CURSOR_EXPIRED",
            Code::Internal => "INTERNAL_SERVER_ERROR",
        }
    }
}

/// An error with a code and a message that is safe to show to the client.
#[derive(Clone, PartialEq, Eq)]
pub struct AppError {
    code: Code,
    message: String,
    /// With `RATE_LIMITED`: seconds after which a retry may succeed
    /// (`extensions.retryAfter`).
    retry_after: Option<u64>,
    /// Why an internal failure happened: for the log, never for clients.
    cause: Option<Arc<Cause>>,
}

/// What was being done when an internal failure happened, and the failure.
#[derive(Debug, PartialEq, Eq)]
struct Cause {
    context: String,
    /// The failure's `Debug` text (which carries the chain of its sources).
    detail: String,
}

/// The message every internal failure shows to clients.
pub const INTERNAL_MESSAGE: &str = "internal server error";

impl AppError {
    fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            retry_after: None,
            cause: None,
        }
    }

    /// Too much of something: try again in `retry_after` (whole seconds,
    /// rounded up, at least 1).
    pub fn rate_limited(message: impl Into<String>, retry_after: std::time::Duration) -> Self {
        let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
        Self {
            retry_after: Some(secs.max(1)),
            ..Self::new(Code::RateLimited, message)
        }
    }

    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(Code::Unauthenticated, message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(Code::Forbidden, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(Code::NotFound, message)
    }

    pub fn bad_input(message: impl Into<String>) -> Self {
        Self::new(Code::BadUserInput, message)
    }

    pub fn payload_too_large(message: impl Into<String>) -> Self {
        Self::new(Code::PayloadTooLarge, message)
    }

    /// A subscription cursor older than what the change log keeps.
    pub fn cursor_expired() -> Self {
        Self::new(
            Code::CursorExpired,
            "this cursor is older than the events kept: refetch, then subscribe without it",
        )
    }

    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(Code::UnsupportedMediaType, message)
    }

    /// An internal failure: the cause is kept (and logged where the error
    /// becomes a response, [`AppError::log`]); the client sees only
    /// [`INTERNAL_MESSAGE`].
    pub fn internal(context: &str, cause: impl fmt::Debug) -> Self {
        Self {
            cause: Some(Arc::new(Cause {
                context: context.to_owned(),
                detail: format!("{cause:?}"),
            })),
            ..Self::new(Code::Internal, INTERNAL_MESSAGE)
        }
    }

    /// Logs an internal failure with its cause (nothing for the others,
    /// which are the client's doing). Called once, where the error becomes
    /// a response or is given up on.
    pub fn log(&self) {
        if let Some(cause) = &self.cause {
            tracing::error!(context = %cause.context, cause = %cause.detail, "internal error");
        }
    }

    /// The seconds after which a retry may succeed (`RATE_LIMITED` only).
    pub fn retry_after(&self) -> Option<u64> {
        self.retry_after
    }

    /// A viewer that must be signed in.
    pub fn sign_in_required() -> Self {
        Self::unauthenticated("sign in to do this")
    }

    pub fn code(&self) -> Code {
        self.code
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// The error as a GraphQL response error object (for responses built
    /// outside the executor, such as a malformed request body); the error
    /// is logged here, where it becomes the response.
    pub fn to_graphql_json(&self) -> serde_json::Value {
        self.log();
        let mut extensions = serde_json::json!({ "code": self.code.as_str() });
        if let Some(secs) = self.retry_after {
            extensions["retryAfter"] = secs.into();
        }
        serde_json::json!({
            "errors": [{ "message": self.message, "extensions": extensions }]
        })
    }
}

impl fmt::Debug for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)?;
        if let Some(cause) = &self.cause {
            write!(f, " ({}: {})", cause.context, cause.detail)?;
        }
        Ok(())
    }
}

/// How a statement refused by a request's database budget
/// ([`crate::db::Budget`]) begins its `DbErr::Custom` text: such an error
/// is the client's (`RATE_LIMITED`), not an internal failure.
pub const BUDGET_SPENT: &str = "request budget spent: ";

impl From<sea_orm::DbErr> for AppError {
    fn from(err: sea_orm::DbErr) -> Self {
        match &err {
            sea_orm::DbErr::Custom(m) if m.starts_with(BUDGET_SPENT) => {
                tracing::warn!(reason = %m, "request refused: database budget");
                Self::rate_limited(&m[BUDGET_SPENT.len()..], std::time::Duration::from_secs(1))
            }
            _ => Self::internal("database", err),
        }
    }
}

impl From<sea_orm::TransactionError<AppError>> for AppError {
    fn from(err: sea_orm::TransactionError<AppError>) -> Self {
        match err {
            sea_orm::TransactionError::Connection(db) => db.into(),
            sea_orm::TransactionError::Transaction(app) => app,
        }
    }
}

/// The result type of domain functions.
pub type AppResult<T> = Result<T, AppError>;
