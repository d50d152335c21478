//! Accounts: sign-up, sign-in and deletion.

use async_graphql::{Context, Object, Result};

use crate::domain::user;
use crate::graphql::types::{AuthPayload, SignInInput, SignUpInput, User};
use crate::graphql::{app, member};

#[derive(Default)]
pub struct UserMutation;

#[Object]
impl UserMutation {
    /// Creates an account and signs it in. A taken username is BAD_USER_INPUT.
    async fn sign_up(&self, ctx: &Context<'_>, input: SignUpInput) -> Result<AuthPayload> {
        let session = user::sign_up(
            app(ctx)?,
            user::SignUp {
                username: input.username,
                password: input.password,
                display_name: input.display_name,
            },
        )
        .await?;
        Ok(AuthPayload {
            token: session.token,
            user: User(session.user),
        })
    }

    /// Signs in. A wrong password and an unknown user give the same UNAUTHENTICATED error.
    async fn sign_in(&self, ctx: &Context<'_>, input: SignInInput) -> Result<AuthPayload> {
        let session = user::sign_in(app(ctx)?, &input.username, input.password).await?;
        Ok(AuthPayload {
            token: session.token,
            user: User(session.user),
        })
    }

    /// Deletes the viewer's account and everything it owns, media included.
    async fn delete_account(&self, ctx: &Context<'_>, password: String) -> Result<bool> {
        let me = member(ctx).await?;
        user::delete_account(app(ctx)?, me, password).await?;
        Ok(true)
    }
}
