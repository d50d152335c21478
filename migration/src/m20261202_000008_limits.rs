//! Limits that hold across instances: per-account and per-address rate
//! limits, the upload bytes an account was charged, and the mark that a
//! direct upload's bytes have been received once.
//!
//! `rate_limits` holds one row per limited key (`post:<account>`,
//! `password-address:<ip>`, ...): `tat` is the key's theoretical arrival
//! time (GCRA), so a key whose `tat` is in the past is as good as absent
//! and is pruned. `upload_charges` is a ledger: an upload, or a ticket, adds
//! its bytes; the daily quota sums the last 24 hours of it, whatever has
//! become of the media since. `media.upload_received_at` is set when a
//! direct upload's PUT claims its ticket, so a ticket takes bytes once.
//! `moments_standalone` lets a map of a large box read the newest
//! standalone moments and stop (`domain::map::MAP_SCAN`).

use sea_orm_migration::prelude::*;

sql_migration!("m20261202_000008_limits");

const UP: &str = r#"
CREATE TABLE rate_limits (
    scope TEXT PRIMARY KEY,
    tat BIGINT NOT NULL,
    allowed BOOLEAN NOT NULL
);
CREATE INDEX rate_limits_tat ON rate_limits (tat);

CREATE TABLE upload_charges (
    owner_id BIGINT NOT NULL,
    charged_at BIGINT NOT NULL,
    media_id BIGINT NOT NULL,
    bytes BIGINT NOT NULL,
    PRIMARY KEY (owner_id, charged_at, media_id)
);
CREATE INDEX upload_charges_charged ON upload_charges (charged_at);

ALTER TABLE media ADD COLUMN upload_received_at BIGINT;

CREATE INDEX moments_standalone ON moments (created_at, id) WHERE location_id IS NULL AND deleted_at IS NULL
"#;

const DOWN: &str = r#"
DROP INDEX moments_standalone;
ALTER TABLE media DROP COLUMN upload_received_at;
DROP INDEX upload_charges_charged;
DROP TABLE upload_charges;
DROP INDEX rate_limits_tat;
DROP TABLE rate_limits
"#;
