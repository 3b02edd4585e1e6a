//! Hashes. Two kinds, as `watcher/detection/hashing.py` defines them:
//!
//! - value hashes (32 bits): CRC-32 (IEEE, as zlib computes it) of a value's canonical text, started from a seed
//!   that tells the value's JSON type apart. They are the very numbers the Python reference computes, so both
//!   implementations record identical handovers.
//! - keys (64 bits): of bytes, keyed with fixed seeds (the same input hashes alike in every run), for lookups
//!   inside this module only (objects, tries, bodies); a tag byte keeps keys of different kinds of input apart.
//!
//! The module's own maps and sets (`KeyedMap`, `KeyedSet`) hash with ahash too, keyed at random per map: several
//! times cheaper than std's SipHash on the short keys they hold (path ids, names, keys), and as unpredictable to a
//! writer choosing label names. Nothing iterates them where the order would show.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::io;

use serde::Serialize;

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

/// The hasher of `KeyedMap` and `KeyedSet`: ahash, keyed from std's random keys (a new key for each map, as std's).
#[derive(Clone)]
pub struct Keyed(ahash::RandomState);

impl Default for Keyed {
    fn default() -> Self {
        let random = std::collections::hash_map::RandomState::new();
        let key = |i: u64| random.hash_one(i);
        Keyed(ahash::RandomState::with_seeds(key(0), key(1), key(2), key(3)))
    }
}

impl BuildHasher for Keyed {
    type Hasher = ahash::AHasher;
    fn build_hasher(&self) -> ahash::AHasher {
        self.0.build_hasher()
    }
}

/// The hasher of maps keyed by this module's own ids (path ids, handed out in order: no input chooses them): ahash
/// with the fixed seeds, made without drawing keys (an event's leaves are a new map each time).
#[derive(Clone, Default)]
pub struct Fixed;

impl BuildHasher for Fixed {
    type Hasher = ahash::AHasher;
    fn build_hasher(&self) -> ahash::AHasher {
        STATE.build_hasher()
    }
}

pub type KeyedMap<K, V> = HashMap<K, V, Keyed>;
pub type KeyedSet<K> = HashSet<K, Keyed>;

// CRC seeds by JSON type (hashing.py's STRING, NUMBER, ...).
pub const STRING: u32 = 0x73;
pub const NUMBER: u32 = 0x6e;
pub const BOOLEAN: u32 = 0x62;
pub const NULL: u32 = 0x7a;
pub const LIST: u32 = 0x6c;
pub const OTHER: u32 = 0x6a;

/// `zlib.crc32(data, seed)`.
pub fn crc(seed: u32, data: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new_with_initial(seed);
    hasher.update(data);
    hasher.finalize()
}

/// A float as Python's `repr` writes it: the shortest text that reads back as the same float, in positional
/// notation for decimal exponents from -4 to 15 (`0.0001`, `1e+16`, `1.5e-07`, `2.0`).
pub fn py_float(value: f64) -> String {
    // `{:e}` is the shortest round-trip form too, always in scientific notation: `-1.5e-7`, `1e16`, `0e0`.
    let text = format!("{value:e}");
    let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let mut digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let mut exponent = exponent;
    if let Some((even, moved)) = half_even(value.abs(), &digits, exponent) {
        (digits, exponent) = (even, moved);
    }
    if (-4..16).contains(&exponent) {
        if exponent < 0 {
            return format!("{sign}0.{}{digits}", "0".repeat((-exponent - 1) as usize));
        }
        let point = exponent as usize + 1;
        if digits.len() <= point {
            return format!("{sign}{digits}{}.0", "0".repeat(point - digits.len()));
        }
        return format!("{sign}{}.{}", &digits[..point], &digits[point..]);
    }
    let (first, rest) = digits.split_at(1);
    let fraction = if rest.is_empty() { String::new() } else { format!(".{rest}") };
    let exp_sign = if exponent < 0 { '-' } else { '+' };
    format!("{sign}{first}{fraction}e{exp_sign}{:02}", exponent.abs())
}

/// Rust's shortest digits and Python's `repr` differ in one case only: the float lies exactly halfway between two
/// shortest candidates (562949953421312.25, between ...312.2 and ...312.3, both of which read back as it), where
/// Python takes the one whose last digit is even and Rust need not. The other candidate's digits and exponent when
/// that is so, else None (an even last digit is already Python's; a neighbor that reads back as another float, or a
/// float off the midpoint, leaves no choice).
fn half_even(value: f64, digits: &str, exponent: i32) -> Option<(String, i32)> {
    let last = digits.bytes().last()? - b'0';
    if last % 2 == 0 || digits.len() < 2 {
        return None;
    }
    let scientific = |d: &str, e: i32| format!("{}.{}e{e}", &d[..1], &d[1..]);
    for neighbor in [last - 1, last + 1] {
        let mut other = digits[..digits.len() - 1].to_owned();
        if neighbor == 10 {
            other = increment(&other);
            other.push('0');
        } else {
            other.push(char::from(b'0' + neighbor));
        }
        let (other, moved) = if other.len() > digits.len() {
            (other[..digits.len()].to_owned(), exponent + 1)
        } else {
            (other, exponent)
        };
        if scientific(&other, moved).parse::<f64>() != Ok(value) {
            continue;
        }
        // The exact decimal value of the float (it has at most 767 significant digits): on the midpoint it is the
        // lower candidate's digits, then a 5, then zeros only.
        let exact = format!("{value:.800e}");
        let exact: String = exact.split_once('e')?.0.chars().filter(|c| *c != '.').collect();
        let lower = if neighbor < last { &other } else { digits };
        let (head, tail) = exact.split_at(digits.len());
        if head == lower && tail.starts_with('5') && tail[1..].bytes().all(|b| b == b'0') {
            return Some((other.trim_end_matches('0').to_owned().max("0".to_owned()), moved));
        }
    }
    None
}

/// A string of decimal digits plus one (`129` -> `130`, `99` -> `100`).
fn increment(digits: &str) -> String {
    let mut out: Vec<u8> = digits.bytes().collect();
    for d in out.iter_mut().rev() {
        if *d == b'9' {
            *d = b'0';
        } else {
            *d += 1;
            return String::from_utf8(out).unwrap_or_default();
        }
    }
    out.insert(0, b'1');
    String::from_utf8(out).unwrap_or_default()
}

/// serde_json's compact output with floats as Python's `repr` writes them: the JSON text `hashing.py` hashes
/// (`json.dumps(value, separators=(",", ":"), ensure_ascii=False)`).
struct PyFloats;

impl serde_json::ser::Formatter for PyFloats {
    fn write_f64<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: f64) -> io::Result<()> {
        writer.write_all(py_float(value).as_bytes())
    }
}

pub fn compact_json<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    let mut out = Vec::new();
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, PyFloats);
    // (serializing a JSON value into memory cannot fail)
    let _ = value.serialize(&mut serializer);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_is_zlibs_crc32_from_a_seed() {
        // zlib.crc32(b"abc", 0x73) and zlib.crc32(b"", 0x7a), as Python computes them.
        assert_eq!(crc(STRING, b"abc"), 1_670_617_035);
        assert_eq!(crc(0, b"abc"), 891_568_578);
    }

    #[test]
    fn floats_are_written_as_python_repr_writes_them() {
        let cases = [
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1.5e-7, "1.5e-07"),
            (123_456_789.0, "123456789.0"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (0.1 + 0.2, "0.30000000000000004"),
            (-0.0, "-0.0"),
            (2.0, "2.0"),
            (-1234.5, "-1234.5"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (1.2345678901234567e19, "1.2345678901234567e+19"),
            // halfway between two shortest candidates: Python's repr takes the even one
            (562_949_953_421_312.2, "562949953421312.2"),
            (-562_949_953_421_312.2, "-562949953421312.2"),
        ];
        for (value, python) in cases {
            assert_eq!(py_float(value), python, "{value:e}");
        }
    }

    #[test]
    fn compact_json_writes_floats_as_python_does() {
        let value: serde_json::Value = serde_json::from_str(r#"[1, 1.0, 1e20, "a\nb", {"k": [true, null]}]"#).unwrap();
        assert_eq!(compact_json(&value), br#"[1,1.0,1e+20,"a\nb",{"k":[true,null]}]"#.to_vec());
    }
}
