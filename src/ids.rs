//! 64-bit snowflake ids: 41 bits of milliseconds since 2024-01-01, 10 bits of
//! node id, 12 bits of sequence. They sort roughly by creation time and never
//! collide across instances, because no two instances hold the same node id
//! at once: each leases one from the database ([`NodeLease`]: the lowest id
//! whose lease is free or expired, renewed while the instance lives,
//! released when it stops), unless `EPHEMERA_NODE_ID` names one by hand.
//! An instance that could not renew for longer than the lease (cut off from
//! the database, while others were not) finds the lease taken at its next
//! renewal and leases another; meanwhile its own writes fail with the
//! database unreachable, so ids it made in that window are not stored.
//!
//! Where an id must not be guessable from its neighbours (a location, whose
//! id a snowflake would put next to the moment that made it), [`random_id`]
//! gives 62 random bits instead.

use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};

use sea_orm::{ConnectionTrait, FromQueryResult};

use crate::db::{self, Sql};
use crate::error::{AppError, AppResult};

const EPOCH_MS: i64 = 1_704_067_200_000; // 2024-01-01T00:00:00Z
const NODE_BITS: u32 = 10;
const SEQ_BITS: u32 = 12;
const SEQ_MASK: i64 = (1 << SEQ_BITS) - 1;

/// The largest node id.
pub const MAX_NODE_ID: u16 = (1 << NODE_BITS) - 1;

/// Makes unique ids for one instance.
#[derive(Debug)]
pub struct IdGenerator {
    node: AtomicI64,
    state: Mutex<(i64, i64)>, // (last millisecond, sequence)
}

impl IdGenerator {
    pub fn new(node: u16) -> Self {
        Self {
            node: AtomicI64::new(i64::from(node.min(MAX_NODE_ID))),
            state: Mutex::new((0, 0)),
        }
    }

    /// The node id in the ids made now.
    pub fn node(&self) -> u16 {
        u16::try_from(self.node.load(Ordering::Relaxed)).unwrap_or(0)
    }

    /// Makes the next ids with another node id (a lease was lost and
    /// another taken).
    pub fn set_node(&self, node: u16) {
        self.node
            .store(i64::from(node.min(MAX_NODE_ID)), Ordering::Relaxed);
    }

    /// The next id. Uses the real time (not the injected clock), so ids stay
    /// unique even when tests move time backwards or stand it still.
    pub fn next_id(&self) -> i64 {
        let mut guard = match self.state.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let mut now = chrono::Utc::now().timestamp_millis() - EPOCH_MS;
        let (last, seq) = *guard;
        if now < last {
            now = last; // the wall clock stepped back: keep counting from the last id
        }
        let seq = if now == last { (seq + 1) & SEQ_MASK } else { 0 };
        if now == last && seq == 0 {
            now = last + 1; // sequence exhausted within a millisecond: borrow the next one
        }
        *guard = (now, seq);
        let node = self.node.load(Ordering::Relaxed);
        (now << (NODE_BITS + SEQ_BITS)) | (node << SEQ_BITS) | seq
    }
}

/// This instance's lease on a node id (see the module doc). Lease times are
/// the wall clock's, not the injectable one: they are compared across
/// instances.
#[derive(Debug)]
pub struct NodeLease {
    /// Who holds it: unique per process start.
    pub holder: String,
    /// How long a lease lasts unrenewed, in milliseconds.
    ttl_ms: i64,
}

#[derive(Debug, FromQueryResult)]
struct LeaseRow {
    node_id: i32,
}

fn wall_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl NodeLease {
    pub fn new(ttl: std::time::Duration) -> Self {
        use rand::Rng;
        let tag: u64 = rand::thread_rng().r#gen();
        Self {
            holder: format!("pid {} {tag:016x}", std::process::id()),
            ttl_ms: i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 2),
        }
    }

    /// Takes the lowest node id that no live lease holds. Two instances
    /// racing for one id: the upsert lets only one take it, the other tries
    /// the next.
    pub async fn acquire<C: ConnectionTrait>(&self, db: &C) -> AppResult<u16> {
        for _ in 0..=MAX_NODE_ID {
            let now = wall_ms();
            let leases: Vec<LeaseRow> = db::fetch_all(
                db,
                Sql::new("SELECT node_id FROM node_leases WHERE expires_at > ").bind(now),
            )
            .await?;
            let taken: std::collections::HashSet<i32> = leases.iter().map(|l| l.node_id).collect();
            let Some(free) = (0..=i32::from(MAX_NODE_ID)).find(|n| !taken.contains(n)) else {
                return Err(AppError::internal(
                    "leasing a node id",
                    "every node id (0 to 1023) is leased by a live instance",
                ));
            };
            let took = db::execute(
                db,
                Sql::new("INSERT INTO node_leases (node_id, holder, expires_at) VALUES (")
                    .bind(free)
                    .push(", ")
                    .bind(self.holder.clone())
                    .push(", ")
                    .bind(now + self.ttl_ms)
                    .push(
                        ") ON CONFLICT (node_id) DO UPDATE SET holder = excluded.holder, \
                         expires_at = excluded.expires_at WHERE node_leases.expires_at <= ",
                    )
                    .bind(now),
            )
            .await?;
            if took == 1 {
                return u16::try_from(free).map_err(|e| AppError::internal("leasing a node id", e));
            }
        }
        Err(AppError::internal(
            "leasing a node id",
            "lost every race for a free node id",
        ))
    }

    /// Extends the lease on `node`; false if it is no longer ours (it
    /// expired and another instance took it).
    pub async fn renew<C: ConnectionTrait>(&self, db: &C, node: u16) -> AppResult<bool> {
        let n = db::execute(
            db,
            Sql::new("UPDATE node_leases SET expires_at = ")
                .bind(wall_ms() + self.ttl_ms)
                .push(" WHERE node_id = ")
                .bind(i32::from(node))
                .push(" AND holder = ")
                .bind(self.holder.clone()),
        )
        .await?;
        Ok(n == 1)
    }

    /// Gives `node` back at once (on shutdown).
    pub async fn release<C: ConnectionTrait>(&self, db: &C, node: u16) -> AppResult<()> {
        db::execute(
            db,
            Sql::new("DELETE FROM node_leases WHERE node_id = ")
                .bind(i32::from(node))
                .push(" AND holder = ")
                .bind(self.holder.clone()),
        )
        .await?;
        Ok(())
    }

    /// How often to renew: a third of the lease.
    pub fn renew_every(&self) -> std::time::Duration {
        std::time::Duration::from_millis(u64::try_from(self.ttl_ms / 3).unwrap_or(1000).max(100))
    }
}

/// A positive id of 62 random bits: not derivable from any other id; two
/// collide with negligible probability (a collision fails its insert).
pub fn random_id() -> i64 {
    use rand::Rng;
    rand::thread_rng().gen_range(1..(1i64 << 62))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn ids_are_unique_and_increasing() {
        let generator = IdGenerator::new(3);
        let mut seen = HashSet::new();
        let mut prev = 0;
        for _ in 0..20_000 {
            let id = generator.next_id();
            assert!(id > prev);
            assert!(seen.insert(id));
            prev = id;
        }
    }

    #[test]
    fn node_id_is_embedded() {
        let id = IdGenerator::new(5).next_id();
        assert_eq!((id >> SEQ_BITS) & i64::from(MAX_NODE_ID), 5);
    }
}
