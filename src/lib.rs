//! ephemera: a GraphQL server for ephemeral social content. See the README's
//! module map for what each module is for.

pub mod app;
pub mod auth;
pub mod clock;
pub mod config;
pub mod cursor;
pub mod db;
pub mod domain;
pub mod entity;
pub mod error;
pub mod events;
pub mod graphql;
pub mod http;
pub mod ids;
pub mod jobs;
pub mod signing;
pub mod state;
pub mod storage;
pub mod throttle;
