//! Keyed signatures (HMAC-SHA256, truncated) for values the server hands out
//! and must recognise later: page cursors, local media URLs and local upload
//! URLs. Each use derives its own key from the server secret, so a signature
//! made for one purpose is worthless for another.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Signs and checks byte strings for one purpose.
#[derive(Clone)]
pub struct Signer {
    key: Vec<u8>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer(..)")
    }
}

impl Signer {
    /// A signer for `purpose` (e.g. `"cursor v1"`) under the server secret.
    pub fn new(purpose: &str, secret: &[u8]) -> Self {
        let mut key = format!("ephemera {purpose}:").into_bytes();
        key.extend_from_slice(secret);
        Self { key }
    }

    fn mac(&self, raw: &[u8]) -> Hmac<Sha256> {
        let mut mac = match Hmac::<Sha256>::new_from_slice(&self.key) {
            Ok(m) => m,
            Err(_) => unreachable!("HMAC takes a key of any length"),
        };
        mac.update(raw);
        mac
    }

    /// The first `len` bytes (at most 32) of the signature of `raw`.
    pub fn tag(&self, raw: &[u8], len: usize) -> Vec<u8> {
        let full = self.mac(raw).finalize().into_bytes();
        full[..len.min(full.len())].to_vec()
    }

    /// Whether `tag` is a (truncated) signature of `raw`, compared in constant time.
    pub fn verify(&self, raw: &[u8], tag: &[u8]) -> bool {
        !tag.is_empty() && self.mac(raw).verify_truncated_left(tag).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purposes_do_not_mix() {
        let a = Signer::new("a", b"secret");
        let b = Signer::new("b", b"secret");
        let tag = a.tag(b"value", 16);
        assert!(a.verify(b"value", &tag));
        assert!(!a.verify(b"other", &tag));
        assert!(!b.verify(b"value", &tag));
        assert!(!a.verify(b"value", &[]));
    }
}
