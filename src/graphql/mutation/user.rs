//! Accounts: sign-up, sign-in and deletion.

use async_graphql::{Context, Object, Result};

use crate::domain::user;
use crate::graphql::types::{AuthPayload, SignInInput, SignUpInput, User};
use crate::graphql::{app, member};
use crate::throttle::{ClientAddr, PasswordBudget};

/// The client's address, where the transport knows it.
fn client(ctx: &Context<'_>) -> Option<ClientAddr> {
    ctx.data_opt::<ClientAddr>().copied()
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
        let session = user::sign_up(
            app(ctx)?,
            user::SignUp {
                username: input.username,
                password: input.password,
                display_name: input.display_name,
            },
            client(ctx),
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
        let session =
            user::sign_in(app(ctx)?, &input.username, input.password, client(ctx)).await?;
        Ok(AuthPayload {
            token: session.token,
            user: User(session.user),
        })
    }

    /// Deletes the viewer's account and everything it owns, media included.
    async fn delete_account(&self, ctx: &Context<'_>, password: String) -> Result<bool> {
        let me = member(ctx).await?;
        spend_password_check(ctx)?;
        user::delete_account(app(ctx)?, me, password, client(ctx)).await?;
        Ok(true)
    }
}
