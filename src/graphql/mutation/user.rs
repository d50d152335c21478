//! Accounts: sign-up, sign-in and deletion.

use async_graphql::{Context, Object, Result};

use crate::auth::Bearer;
use crate::domain::{session, user};
use crate::graphql::types::{
    AuthPayload, IdKind, SignInInput, SignUpInput, UpdateProfileInput, User, require_id,
};
use crate::graphql::{app, member, writer};
use crate::throttle::Write;
use crate::throttle::{ClientAddr, PasswordBudget};

/// The client's address, where the transport knows it.
fn client(ctx: &Context<'_>) -> Option<ClientAddr> {
    ctx.data_opt::<ClientAddr>().copied()
}

/// The token the request came with (`UNAUTHENTICATED` without one).
fn bearer(ctx: &Context<'_>) -> Result<Bearer, crate::error::AppError> {
    ctx.data_opt::<Bearer>()
        .copied()
        .ok_or_else(crate::error::AppError::sign_in_required)
}

/// Spends the request's one password check (see [`PasswordBudget`]).
fn spend_password_check(ctx: &Context<'_>) -> Result<(), crate::error::AppError> {
    match ctx.data_opt::<PasswordBudget>() {
        Some(budget) => budget.spend(),
        None => Ok(()),
    }
}

#[derive(Default)]
pub struct UserMutation;

#[Object]
impl UserMutation {
    /// Creates an account and signs it in. A taken username is BAD_USER_INPUT.
    async fn sign_up(&self, ctx: &Context<'_>, input: SignUpInput) -> Result<AuthPayload> {
        spend_password_check(ctx)?;
        let app = app(ctx)?;
        let session = user::sign_up(
            &app.db,
            &app.accounts,
            &app.ids,
            user::SignUp {
                username: input.username,
                password: input.password,
                display_name: input.display_name,
            },
            client(ctx),
            app.clock.now(),
        )
        .await?;
        Ok(AuthPayload {
            token: session.token,
            user: User(session.user),
        })
    }

    /// Signs in. A wrong password and an unknown user give the same UNAUTHENTICATED error.
    async fn sign_in(&self, ctx: &Context<'_>, input: SignInInput) -> Result<AuthPayload> {
        spend_password_check(ctx)?;
        let app = app(ctx)?;
        let session = user::sign_in(
            &app.db,
            &app.accounts,
            &input.username,
            input.password,
            client(ctx),
            app.clock.now(),
        )
        .await?;
        Ok(AuthPayload {
            token: session.token,
            user: User(session.user),
        })
    }

    /// Signs this token out: it stops working at once (on other server instances within seconds), and websockets opened with it close. Other sign-ins of the account go on.
    async fn sign_out(&self, ctx: &Context<'_>) -> Result<bool> {
        writer(ctx, Write::Account).await?;
        let bearer = bearer(ctx)?;
        let app = app(ctx)?;
        session::end(&app.db, &app.accounts, bearer).await?;
        Ok(true)
    }

    /// Signs every token of the viewer's account out, this one included (a lost phone); returns how many sign-ins ended.
    async fn sign_out_everywhere(&self, ctx: &Context<'_>) -> Result<i32> {
        let me = writer(ctx, Write::Account).await?;
        let app = app(ctx)?;
        let ended = session::end_all(&app.db, me).await?;
        session::forget_all(&app.accounts, me, &ended);
        Ok(i32::try_from(ended.len()).unwrap_or(i32::MAX))
    }

    /// Changes the viewer's password (8 to 1,024 characters) after checking the current one (FORBIDDEN if wrong, nothing changes). Every token of the account stops working; the payload holds a new one.
    async fn change_password(
        &self,
        ctx: &Context<'_>,
        current_password: String,
        new_password: String,
    ) -> Result<AuthPayload> {
        let me = member(ctx).await?;
        spend_password_check(ctx)?;
        let app = app(ctx)?;
        let change = user::PasswordChange {
            current: current_password,
            new: new_password,
        };
        let now = app.clock.now();
        let session =
            user::change_password(&app.db, &app.accounts, me, change, client(ctx), now).await?;
        Ok(AuthPayload {
            token: session.token,
            user: User(session.user),
        })
    }

    /// Changes the viewer's profile; what is left out stays as it is.
    async fn update_profile(&self, ctx: &Context<'_>, input: UpdateProfileInput) -> Result<User> {
        let me = writer(ctx, Write::Account).await?;
        let app = app(ctx)?;
        let avatar_media_id = match &input.avatar_media_id {
            Some(id) => Some(require_id(id, IdKind::Media, "media")?),
            None => None,
        };
        let change = user::ProfileChange {
            display_name: input.display_name,
            bio: input.bio,
            avatar_media_id,
            remove_avatar: input.remove_avatar,
        };
        let profile =
            user::update_profile(&app.db, &app.media, me, change, app.clock.now()).await?;
        Ok(User(profile))
    }

    /// Deletes the viewer's account and everything it owns, media included.
    async fn delete_account(&self, ctx: &Context<'_>, password: String) -> Result<bool> {
        let me = member(ctx).await?;
        spend_password_check(ctx)?;
        let app = app(ctx)?;
        let now = app.clock.now();
        user::delete_account(&app.db, &app.accounts, me, password, client(ctx), now).await?;
        Ok(true)
    }
}
