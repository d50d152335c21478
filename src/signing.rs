//! Keyed signatures (HMAC-SHA256, truncated) for values the server hands out
//! and must recognise later: page cursors, local media URLs and local upload
//! URLs. Each use derives its own key from the server secret, so a signature
//! made for one purpose is worthless for another, and has one tag length: a
//! tag is accepted only at exactly the length issued (a shorter prefix of
//! the right tag is as wrong as any other bytes), so forging one takes
//! 2^(8 × length) tries, never 256.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Signs and checks byte strings for one purpose.
#[derive(Clone)]
pub struct Signer {
    key: Vec<u8>,
    len: usize,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer(..)")
    }
}

impl Signer {
    /// A signer for `purpose` (e.g. `"cursor v1"`) under the server secret,
    /// whose tags are `len` bytes (8 to 32).
    pub fn new(purpose: &str, secret: &[u8], len: usize) -> Self {
        let mut key = format!("ephemera {purpose}:").into_bytes();
        key.extend_from_slice(secret);
        Self {
            key,
            len: len.clamp(8, 32),
        }
    }

    /// The length of the tags this signer issues and accepts.
    pub fn tag_len(&self) -> usize {
        self.len
    }

    fn mac(&self, raw: &[u8]) -> Hmac<Sha256> {
        let mut mac = match Hmac::<Sha256>::new_from_slice(&self.key) {
            Ok(m) => m,
            Err(_) => unreachable!("HMAC takes a key of any length"),
        };
        mac.update(raw);
        mac
    }

    /// The signature of `raw`: its first [`Self::tag_len`] bytes.
    pub fn tag(&self, raw: &[u8]) -> Vec<u8> {
        let full = self.mac(raw).finalize().into_bytes();
        full[..self.len].to_vec()
    }

    /// Whether `tag` is the signature of `raw` at its full issued length,
    /// compared in constant time.
    pub fn verify(&self, raw: &[u8], tag: &[u8]) -> bool {
        tag.len() == self.len && self.mac(raw).verify_truncated_left(tag).is_ok()
    }
}

/// Whether `given` is `secret`, compared in time that does not depend on
/// where they differ (a token checked against a setting).
pub fn same_secret(given: &[u8], secret: &[u8]) -> bool {
    use sha2::Digest;
    // Equal-length digests, compared byte for byte in full.
    let (a, b) = (Sha256::digest(given), Sha256::digest(secret));
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purposes_do_not_mix() {
        let a = Signer::new("a", b"secret", 16);
        let b = Signer::new("b", b"secret", 16);
        let tag = a.tag(b"value");
        assert_eq!(tag.len(), 16);
        assert!(a.verify(b"value", &tag));
        assert!(!a.verify(b"other", &tag));
        assert!(!b.verify(b"value", &tag));
        assert!(!a.verify(b"value", &[]));
    }

    #[test]
    fn only_the_full_tag_is_accepted() {
        let a = Signer::new("a", b"secret", 16);
        let tag = a.tag(b"value");
        // Every prefix of the right tag, down to one byte, is refused.
        for n in 0..tag.len() {
            assert!(!a.verify(b"value", &tag[..n]), "a {n}-byte prefix");
        }
        // And so is the tag with bytes after it, or the untruncated MAC.
        let mut longer = tag.clone();
        longer.push(0);
        assert!(!a.verify(b"value", &longer));
        let full = Signer::new("a", b"secret", 32).tag(b"value");
        assert_eq!(&full[..16], &tag[..]);
        assert!(!a.verify(b"value", &full));
    }
}
