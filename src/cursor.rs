//! Opaque, signed cursors over `(timestamp, id)` keys: a cursor names its
//! list (kind and owner) and is refused by any other, and one the server did
//! not issue is refused too. What a page does with a key is
//! `domain::page`'s.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::error::{AppError, AppResult};
use crate::signing::Signer;

/// A position in a list sorted by `(ts, id)` descending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key {
    pub ts: i64,
    pub id: i64,
}

/// Which list a cursor belongs to; a cursor of one list is refused by another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum CursorKind {
    Status = 1,
    Tray = 2,
    Friend = 3,
    FriendRequest = 4,
    StatusViewer = 5,
    MomentFeed = 6,
    UserMoments = 7,
    LocationMoments = 8,
    MomentLiker = 9,
    CloseFriend = 10,
    HiddenFrom = 11,
    Muted = 12,
    Blocked = 13,
    Report = 14,
    Notice = 15,
    /// A position in the change log (subscriptions).
    Event = 16,
    /// A position in a search for people (`ts`: friends or others).
    UserSearch = 17,
    SentFriendRequest = 18,
    /// The tray part of a change-log event (see `events::Pos`).
    TrayEvent = 19,
}

/// One list a cursor belongs to: its kind and whose it is (the author of a
/// per-author page, the status of a viewer list, the viewer of a tray...;
/// 0 for a list that is the same for everyone). The owner is signed into
/// the cursor's tag, not written in it: a cursor from one author's page is
/// refused on another's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct List(pub CursorKind, pub i64);

impl From<CursorKind> for List {
    fn from(kind: CursorKind) -> Self {
        List(kind, 0)
    }
}

const MAC_LEN: usize = 8;
const RAW_LEN: usize = 1 + 8 + 8;

/// Signs and checks cursors, so a cursor the server did not issue is refused.
#[derive(Clone, Debug)]
pub struct Cursors {
    signer: Signer,
}

impl Cursors {
    pub fn new(secret: &[u8]) -> Self {
        Self {
            signer: Signer::new("cursor v1", secret, MAC_LEN),
        }
    }

    /// What a cursor's tag signs: its body and the list's owner.
    fn signed(body: &[u8], owner: i64) -> Vec<u8> {
        let mut signed = body.to_vec();
        signed.extend_from_slice(&owner.to_be_bytes());
        signed
    }

    pub fn encode(&self, list: impl Into<List>, key: Key) -> String {
        let List(kind, owner) = list.into();
        let mut raw = Vec::with_capacity(RAW_LEN + MAC_LEN);
        raw.push(kind as u8);
        raw.extend_from_slice(&key.ts.to_be_bytes());
        raw.extend_from_slice(&key.id.to_be_bytes());
        let tag = self.signer.tag(&Self::signed(&raw, owner));
        raw.extend_from_slice(&tag);
        URL_SAFE_NO_PAD.encode(raw)
    }

    pub fn decode(&self, list: impl Into<List>, cursor: &str) -> AppResult<Key> {
        let List(kind, owner) = list.into();
        let invalid = || AppError::bad_input("invalid cursor: it was not issued for this list");
        let raw = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| invalid())?;
        if raw.len() != RAW_LEN + MAC_LEN || raw[0] != kind as u8 {
            return Err(invalid());
        }
        let (body, tag) = raw.split_at(RAW_LEN);
        if !self.signer.verify(&Self::signed(body, owner), tag) {
            return Err(invalid());
        }
        let mut ts = [0u8; 8];
        let mut id = [0u8; 8];
        ts.copy_from_slice(&body[1..9]);
        id.copy_from_slice(&body[9..17]);
        Ok(Key {
            ts: i64::from_be_bytes(ts),
            id: i64::from_be_bytes(id),
        })
    }
}
