//! 64-bit snowflake ids: 41 bits of milliseconds since 2024-01-01, 10 bits of
//! node id (`EPHEMERA_NODE_ID`, distinct per instance), 12 bits of sequence.
//! They sort roughly by creation time and never collide across instances.
//!
//! Where an id must not be guessable from its neighbours (a location, whose
//! id a snowflake would put next to the moment that made it), [`random_id`]
//! gives 62 random bits instead.

use std::sync::Mutex;

const EPOCH_MS: i64 = 1_704_067_200_000; // 2024-01-01T00:00:00Z
const NODE_BITS: u32 = 10;
const SEQ_BITS: u32 = 12;
const SEQ_MASK: i64 = (1 << SEQ_BITS) - 1;

/// The largest node id.
pub const MAX_NODE_ID: u16 = (1 << NODE_BITS) - 1;

/// Makes unique ids for one instance.
#[derive(Debug)]
pub struct IdGenerator {
    node: i64,
    state: Mutex<(i64, i64)>, // (last millisecond, sequence)
}

impl IdGenerator {
    pub fn new(node: u16) -> Self {
        Self {
            node: i64::from(node.min(MAX_NODE_ID)),
            state: Mutex::new((0, 0)),
        }
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
        (now << (NODE_BITS + SEQ_BITS)) | (self.node << SEQ_BITS) | seq
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
