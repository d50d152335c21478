//! Reports, moderation notices and what they are about.

use async_graphql::{ComplexObject, Context, Enum, ID, InputObject, Result, SimpleObject};

use super::{DateTime, IdKind, User, decode_id, id};
use crate::domain::moderation::SubjectKind;
use crate::entity::{moderation_notice, report};
use crate::graphql::loaders;

/// What a report or a moderation notice is about.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportSubject {
    Status,
    Moment,
    User,
}

impl From<SubjectKind> for ReportSubject {
    fn from(k: SubjectKind) -> Self {
        match k {
            SubjectKind::Status => Self::Status,
            SubjectKind::Moment => Self::Moment,
            SubjectKind::User => Self::User,
        }
    }
}

/// The type of a reportable subject's id.
fn id_kind(kind: SubjectKind) -> IdKind {
    match kind {
        SubjectKind::Status => IdKind::Status,
        SubjectKind::Moment => IdKind::Moment,
        SubjectKind::User => IdKind::User,
    }
}

/// What a subject's id names, if it names a status, moment or user.
pub fn parse_subject(subject: &ID) -> Option<(SubjectKind, i64)> {
    let (kind, n) = decode_id(subject)?;
    [SubjectKind::Status, SubjectKind::Moment, SubjectKind::User]
        .into_iter()
        .find(|s| id_kind(*s) == kind)
        .map(|s| (s, n))
}

/// Why something is reported.
#[derive(Enum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportReason {
    Spam,
    Harassment,
    Hate,
    Nudity,
    Violence,
    SelfHarm,
    Impersonation,
    Other,
}

impl ReportReason {
    /// The stored form (the enum value's name).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Spam => "SPAM",
            Self::Harassment => "HARASSMENT",
            Self::Hate => "HATE",
            Self::Nudity => "NUDITY",
            Self::Violence => "VIOLENCE",
            Self::SelfHarm => "SELF_HARM",
            Self::Impersonation => "IMPERSONATION",
            Self::Other => "OTHER",
        }
    }

    fn from_stored(s: &str) -> Self {
        [
            Self::Spam,
            Self::Harassment,
            Self::Hate,
            Self::Nudity,
            Self::Violence,
            Self::SelfHarm,
            Self::Impersonation,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
        .unwrap_or(Self::Other)
    }
}

/// A report of a status, moment or user.
#[derive(InputObject)]
pub struct ReportInput {
    /// The status, moment or user reported; it must be one the reporter can see.
    pub subject_id: ID,
    pub reason: ReportReason,
    /// What else the moderators should know; at most 1,000 characters.
    pub details: Option<String>,
}

/// A report, as its reporter and the moderators see it.
#[derive(Clone, Debug, SimpleObject)]
#[graphql(complex)]
pub struct Report {
    /// The report's id.
    pub id: ID,
    /// What kind of thing is reported.
    pub subject_kind: ReportSubject,
    /// The id of the status, moment or user reported.
    pub subject_id: ID,
    /// The reported text as the reporter saw it (a caption, or a user's name).
    pub excerpt: Option<String>,
    pub reason: ReportReason,
    pub details: Option<String>,
    /// When it was reported.
    pub created_at: DateTime,
    /// When a moderator resolved it; null while it is open.
    pub resolved_at: Option<DateTime>,
    /// What the moderator did or decided.
    pub resolution: Option<String>,
    #[graphql(skip)]
    pub reporter_id: Option<i64>,
    #[graphql(skip)]
    pub author_id: Option<i64>,
}

#[ComplexObject]
impl Report {
    /// Who reported it; null once their account is deleted.
    async fn reporter(&self, ctx: &Context<'_>) -> Result<Option<User>> {
        self.user(ctx, self.reporter_id).await
    }

    /// Whose content it is (the user, for a reported user); null once deleted.
    async fn subject_author(&self, ctx: &Context<'_>) -> Result<Option<User>> {
        self.user(ctx, self.author_id).await
    }
}

impl Report {
    async fn user(&self, ctx: &Context<'_>, id: Option<i64>) -> Result<Option<User>> {
        let Some(id) = id else { return Ok(None) };
        Ok(loaders(ctx)?.users.load_one(id).await?.map(User))
    }
}

impl From<report::Model> for Report {
    fn from(r: report::Model) -> Self {
        let kind = SubjectKind::from_stored(&r.subject_kind);
        Self {
            id: id(IdKind::Report, r.id),
            subject_kind: kind.into(),
            subject_id: id(id_kind(kind), r.subject_id),
            excerpt: r.excerpt,
            reason: ReportReason::from_stored(&r.reason),
            details: r.details,
            created_at: DateTime(r.created_at),
            resolved_at: r.resolved_at.map(DateTime),
            resolution: r.resolution,
            reporter_id: r.reporter_id,
            author_id: r.subject_author_id,
        }
    }
}

/// What a moderator told the viewer: content of theirs taken down, or their account suspended.
#[derive(Clone, Debug, SimpleObject)]
pub struct ModerationNotice {
    /// The notice's id.
    pub id: ID,
    /// What was acted on: a status or moment taken down, or the account (USER) suspended.
    pub subject_kind: ReportSubject,
    /// The id of what was taken down (or of the account).
    pub subject_id: ID,
    /// Why, in the moderator's words.
    pub reason: String,
    /// When.
    pub created_at: DateTime,
}

impl From<moderation_notice::Model> for ModerationNotice {
    fn from(n: moderation_notice::Model) -> Self {
        let kind = SubjectKind::from_stored(&n.subject_kind);
        Self {
            id: id(IdKind::ModerationNotice, n.id),
            subject_kind: kind.into(),
            subject_id: id(id_kind(kind), n.subject_id),
            reason: n.reason,
            created_at: DateTime(n.created_at),
        }
    }
}
