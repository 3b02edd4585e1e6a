//! 64-bit hashes of bytes, keyed with fixed seeds: the same input hashes alike in every run, and a tag byte keeps
//! hashes of different kinds of input (a string, a number's text, a trie) apart.

use std::hash::{BuildHasher, Hasher};

const STATE: ahash::RandomState = ahash::RandomState::with_seeds(
    0x243f_6a88_85a3_08d3,
    0x1319_8a2e_0370_7344,
    0xa409_3822_299f_31d0,
    0x082e_fa98_ec4e_6c89,
);

pub fn bytes(tag: u8, data: &[u8]) -> u64 {
    let mut hasher = STATE.build_hasher();
    hasher.write_u8(tag);
    hasher.write(data);
    hasher.finish()
}

/// A hasher for inputs made of several parts.
pub fn hasher() -> impl Hasher {
    STATE.build_hasher()
}
