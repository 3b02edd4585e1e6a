//! The values a watch event lets us see, as tables of 32-bit leaf hashes (values.py is the reference): labels and
//! annotations in one table, the body (every top-level section but apiVersion, kind, metadata and status) in
//! another, made only when the body's digest moved, and the status in a third, kept only for objects that need
//! it (see front.rs). Tables of one shape share their path index. The hashes are hashing.py's (see digest.rs).

use std::hash::Hasher;
use std::rc::Rc;

use std::fmt;

use indexmap::IndexMap;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::digest::{self, KeyedMap, KeyedSet};
use crate::event::Key;
use crate::fields::Fallible;
use crate::paths::{PathId, Paths, ROOT};

pub struct Shape {
    pub paths: Box<[PathId]>,
    index: KeyedMap<PathId, u32>,
}

pub struct Table {
    pub shape: Rc<Shape>,
    pub hashes: Box<[u32]>,
    pub digest: u64, // of the text the table was made from (0: none)
}

impl Table {
    pub fn get(&self, path: PathId) -> Option<u32> {
        self.shape.index.get(&path).map(|&i| self.hashes[i as usize])
    }

    pub fn has(&self, path: PathId) -> bool {
        self.shape.index.contains_key(&path)
    }
}

pub type Leaves = IndexMap<PathId, u32, digest::Fixed>;

const MAX_SHAPES: usize = 50_000;
const MAX_ESCAPED: usize = 4096;
const LIST_KEYS: [&str; 2] = ["name", "type"];
const NOT_STRINGS: &str = "metadata.labels and metadata.annotations must map strings to strings";

pub struct Tables {
    shapes: KeyedMap<Box<[PathId]>, Rc<Shape>>,
    meta_shapes: KeyedMap<u64, Rc<Shape>>, // by the digest of the label and annotation keys, in order
    bodies: KeyedMap<u64, Rc<Table>>,
    max_bodies: usize,
    escaped: KeyedMap<u64, u32>,
    pub empty: Rc<Table>,
    labels: PathId,
    annotations: PathId,
}

/// The value hash of a scalar (`hashing.value_hash`); lists and maps are flattened, or hashed whole, by the caller.
fn scalar_hash(value: &Value) -> u32 {
    match value {
        Value::String(s) => digest::crc(digest::STRING, s.as_bytes()),
        Value::Number(n) => digest::crc(digest::NUMBER, number_text(n).as_bytes()),
        Value::Bool(b) => digest::crc(digest::BOOLEAN, &[*b as u8]),
        Value::Null => digest::crc(digest::NULL, b""),
        _ => digest::crc(digest::OTHER, &digest::compact_json(value)),
    }
}

/// A number's canonical text: an integer in decimal, a float as Python's `repr` writes it.
fn number_text(n: &Number) -> String {
    match n.as_f64() {
        Some(f) if !(n.is_i64() || n.is_u64()) => digest::py_float(f),
        _ => n.to_string(),
    }
}

/// The hash of a label or annotation value, from its JSON text (a string's hash is of its content).
fn meta_value_hash(text: &str) -> Fallible<u32> {
    if text.starts_with('"') {
        if !text.contains('\\') {
            return Ok(digest::crc(digest::STRING, &text.as_bytes()[1..text.len() - 1]));
        }
        if let Some(hash) = unescaped_crc(text) {
            return Ok(hash);
        }
        let unescaped: String = serde_json::from_str(text).map_err(|e| e.to_string())?;
        return Ok(digest::crc(digest::STRING, unescaped.as_bytes()));
    }
    if text.starts_with('{') || text.starts_with('[') {
        return Err(NOT_STRINGS.to_owned());
    }
    let value: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    Ok(scalar_hash(&value))
}

/// The value hash of a JSON string with escapes (its text, quotes included, as the event's parse validated it), from
/// its text as it goes, without unescaping it into a copy first. None for what it leaves to serde_json: a `\u`
/// escape of a surrogate (a pair, or one alone, which serde_json refuses), or text that is not a whole string.
fn unescaped_crc(text: &str) -> Option<u32> {
    let inner = text.as_bytes().strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    let mut crc = crc32fast::Hasher::new_with_initial(digest::STRING);
    let mut rest = inner;
    while let Some(at) = rest.iter().position(|&b| b == b'\\' || b == b'"') {
        if rest[at] == b'"' {
            return None; // (not one string)
        }
        crc.update(&rest[..at]);
        let (byte, used) = match *rest.get(at + 1)? {
            b'"' => (b'"', 2),
            b'\\' => (b'\\', 2),
            b'/' => (b'/', 2),
            b'b' => (0x08, 2),
            b'f' => (0x0c, 2),
            b'n' => (b'\n', 2),
            b'r' => (b'\r', 2),
            b't' => (b'\t', 2),
            b'u' => {
                let hex = rest.get(at + 2..at + 6)?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                let hex = std::str::from_utf8(hex).ok()?;
                let code = char::from_u32(u32::from_str_radix(hex, 16).ok()?)?; // (None for a surrogate)
                crc.update(code.encode_utf8(&mut [0; 4]).as_bytes());
                rest = &rest[at + 6..];
                continue;
            }
            _ => return None,
        };
        crc.update(&[byte]);
        rest = &rest[at + used..];
    }
    crc.update(rest);
    Some(crc.finalize())
}

impl Tables {
    pub fn new(paths: &mut Paths, max_bodies: usize) -> Self {
        let meta = paths.field(ROOT, "metadata");
        let shape = Rc::new(Shape { paths: Box::new([]), index: KeyedMap::default() });
        Tables {
            shapes: KeyedMap::default(),
            meta_shapes: KeyedMap::default(),
            bodies: KeyedMap::default(),
            escaped: KeyedMap::default(),
            max_bodies,
            empty: Rc::new(Table { shape, hashes: Box::new([]), digest: 0 }),
            labels: paths.field(meta, "labels"),
            annotations: paths.field(meta, "annotations"),
        }
    }

    fn shape(&mut self, paths: Vec<PathId>) -> Rc<Shape> {
        if let Some(found) = self.shapes.get(paths.as_slice()) {
            return found.clone();
        }
        if self.shapes.len() >= MAX_SHAPES {
            self.shapes.clear(); // live tables keep their own shape
        }
        let index = paths.iter().enumerate().map(|(i, p)| (*p, i as u32)).collect();
        let paths: Box<[PathId]> = paths.into_boxed_slice();
        let shape = Rc::new(Shape { paths: paths.clone(), index });
        self.shapes.insert(paths, shape.clone());
        shape
    }

    fn table(&mut self, leaves: Leaves, digest: u64) -> Rc<Table> {
        if leaves.is_empty() && digest == 0 {
            return self.empty.clone();
        }
        let (ids, hashes): (Vec<PathId>, Vec<u32>) = leaves.into_iter().unzip();
        Rc::new(Table { shape: self.shape(ids), hashes: hashes.into_boxed_slice(), digest })
    }

    /// Labels and annotations as a table; `old` itself when nothing changed. The table's digest is of their text:
    /// a version whose labels and annotations read as the last one's is not hashed again.
    pub fn meta(
        &mut self,
        paths: &mut Paths,
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
        old: &Rc<Table>,
    ) -> Fallible<Rc<Table>> {
        if labels.is_empty() && annotations.is_empty() {
            return Ok(self.empty.clone());
        }
        let (mut hasher, mut keys) = (digest::hasher(), digest::hasher());
        for map in [labels, annotations] {
            for (key, value) in map {
                hasher.write(key.as_bytes());
                hasher.write_u8(0);
                hasher.write(value.as_bytes());
                hasher.write_u8(0);
                keys.write(key.as_bytes());
                keys.write_u8(0);
            }
            hasher.write_u8(1);
            keys.write_u8(1);
        }
        let digest = hasher.finish().max(1);
        if digest == old.digest {
            return Ok(old.clone());
        }
        let keys = keys.finish();
        // (keys seen before in this order: their paths are known, the values only are hashed)
        if let Some(shape) = self.meta_shapes.get(&keys).cloned() {
            let mut hashes = Vec::with_capacity(shape.paths.len());
            for (_, value) in labels.iter().chain(annotations) {
                hashes.push(self.meta_hash(value)?);
            }
            if Rc::ptr_eq(&shape, &old.shape) && hashes[..] == old.hashes[..] {
                return Ok(old.clone());
            }
            return Ok(Rc::new(Table { shape, hashes: hashes.into_boxed_slice(), digest }));
        }
        let mut leaves = Leaves::with_capacity_and_hasher(labels.len() + annotations.len(), digest::Fixed);
        for (section, map) in [(self.labels, labels), (self.annotations, annotations)] {
            for (key, value) in map {
                leaves.insert(paths.field(section, key), self.meta_hash(value)?);
            }
        }
        let same = old.shape.paths.len() == leaves.len()
            && leaves.iter().zip(old.shape.paths.iter().zip(old.hashes.iter())).all(|(a, b)| a.0 == b.0 && a.1 == b.1);
        let distinct = leaves.len() == labels.len() + annotations.len(); // (a key repeated keeps one leaf)
        let table = if same { old.clone() } else { self.table(leaves, digest) };
        if distinct {
            if self.meta_shapes.len() >= MAX_SHAPES {
                self.meta_shapes.clear();
            }
            self.meta_shapes.insert(keys, table.shape.clone());
        }
        Ok(table)
    }

    /// The hash of a label or annotation value from its JSON text.
    fn meta_hash(&mut self, value: &str) -> Fallible<u32> {
        if value.starts_with('"') && value.contains('\\') {
            self.escaped(value)
        } else {
            meta_value_hash(value)
        }
    }

    /// `meta_value_hash` of a string with escapes, cached by its text: such values are long (kubectl's
    /// last-applied-configuration is a whole object as JSON) and mostly the same from one write to the next.
    fn escaped(&mut self, text: &str) -> Fallible<u32> {
        let key = digest::bytes(b'e', text.as_bytes());
        if let Some(&found) = self.escaped.get(&key) {
            return Ok(found);
        }
        let hash = meta_value_hash(text)?;
        if self.escaped.len() >= MAX_ESCAPED {
            self.escaped.clear();
        }
        self.escaped.insert(key, hash);
        Ok(hash)
    }

    /// The digest of the body sections (0 for none: a metadata-only object).
    pub fn body_digest(body: &[(&str, &str)]) -> u64 {
        if body.is_empty() {
            return 0;
        }
        let mut hasher = digest::hasher();
        for (key, value) in body {
            hasher.write(key.as_bytes());
            hasher.write_u8(0);
            hasher.write(value.as_bytes());
            hasher.write_u8(0);
        }
        hasher.finish().max(1)
    }

    /// The body's table, made once per digest while cached: objects of one template share it.
    pub fn body(&mut self, paths: &mut Paths, body: &[(&str, &str)], digest: u64) -> Fallible<Rc<Table>> {
        if digest == 0 {
            return Ok(self.empty.clone());
        }
        let sections: Vec<(PathId, &str)> = body.iter().map(|(key, raw)| (paths.field(ROOT, key), *raw)).collect();
        self.cached(paths, &sections, digest)
    }

    /// The table of an object's status (`empty` without one), made once per digest while cached; the digest is
    /// the table's, so that the next version's tells whether the status changed at all.
    pub fn status(&mut self, paths: &mut Paths, status: Option<&str>) -> Fallible<Rc<Table>> {
        let raw = match status {
            Some(raw) => raw,
            None => return Ok(self.empty.clone()),
        };
        let mut hasher = digest::hasher();
        hasher.write(b"status\0");
        hasher.write(raw.as_bytes());
        let status = paths.field(ROOT, "status");
        self.cached(paths, &[(status, raw)], hasher.finish().max(1))
    }

    /// The table of top-level sections (their path and JSON text) by its digest: from the cache, or flattened.
    fn cached(&mut self, paths: &mut Paths, sections: &[(PathId, &str)], digest: u64) -> Fallible<Rc<Table>> {
        if let Some(found) = self.bodies.get(&digest) {
            return Ok(found.clone());
        }
        let mut leaves = Leaves::default();
        for &(prefix, raw) in sections {
            let mut de = serde_json::Deserializer::from_str(raw);
            Flatten { paths, prefix, out: &mut leaves }.deserialize(&mut de).map_err(|e| e.to_string())?;
            de.end().map_err(|e| e.to_string())?;
        }
        let table = self.table(leaves, digest);
        if self.bodies.len() >= self.max_bodies {
            self.bodies.clear();
        }
        self.bodies.insert(digest, table.clone());
        Ok(table)
    }
}

/// `flatten_value` straight from the JSON text, without a `Value` for the objects on the way: the body of every
/// write whose body changed goes through here. (Lists are still read as values: their items' paths depend on
/// their keys. A key repeated in one object, which no API server writes, would leave the leaves of both.)
struct Flatten<'p> {
    paths: &'p mut Paths,
    prefix: PathId,
    out: &'p mut Leaves,
}

impl<'de, 'p> DeserializeSeed<'de> for Flatten<'p> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de, 'p> Visitor<'de> for Flatten<'p> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut empty = true;
        while let Some(key) = map.next_key::<Key<'de>>()? {
            empty = false;
            let prefix = self.paths.field(self.prefix, &key.0);
            map.next_value_seed(Flatten { paths: self.paths, prefix, out: self.out })?;
        }
        if empty {
            self.out.insert(self.prefix, 0);
        }
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element::<Value>()? {
            items.push(item);
        }
        flatten_list(self.paths, &items, self.prefix, self.out);
        Ok(())
    }
    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        self.out.insert(self.prefix, digest::crc(digest::STRING, v.as_bytes()));
        Ok(())
    }
    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        self.number(Number::from(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        self.number(Number::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        // (JSON has no NaN or infinity: serde_json never reads one)
        Number::from_f64(v).map_or(Ok(()), |n| self.number(n))
    }
    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.out.insert(self.prefix, scalar_hash(&Value::Bool(v)));
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        self.out.insert(self.prefix, scalar_hash(&Value::Null));
        Ok(())
    }
}

impl Flatten<'_> {
    fn number<E>(self, n: Number) -> Result<(), E> {
        self.out.insert(self.prefix, scalar_hash(&Value::Number(n)));
        Ok(())
    }
}

fn flatten_value(paths: &mut Paths, path: PathId, value: &Value, out: &mut Leaves) {
    match value {
        Value::Object(map) if map.is_empty() => {
            out.insert(path, 0);
        }
        Value::Object(map) => flatten(paths, map, path, out),
        Value::Array(items) => flatten_list(paths, items, path, out),
        _ => {
            out.insert(path, scalar_hash(value));
        }
    }
}

fn flatten(paths: &mut Paths, node: &Map<String, Value>, prefix: PathId, out: &mut Leaves) {
    for (key, value) in node {
        let path = paths.field(prefix, key);
        flatten_value(paths, path, value, out);
    }
}

fn flatten_list(paths: &mut Paths, items: &[Value], prefix: PathId, out: &mut Leaves) {
    match list_key(items) {
        None => {
            out.insert(prefix, digest::crc(digest::LIST, &digest::compact_json(items)));
        }
        Some(key) => {
            for item in items {
                let (map, name) = match item {
                    Value::Object(map) => match map.get(key) {
                        Some(Value::String(name)) => (map, name),
                        _ => continue,
                    },
                    _ => continue,
                };
                let path = paths.item(prefix, &format!("{key}={name}"));
                flatten(paths, map, path, out);
            }
        }
    }
}

/// The merge key of a list of objects (`name`, `type`) when every item has a distinct string one.
fn list_key(items: &[Value]) -> Option<&'static str> {
    if items.is_empty() || !items.iter().all(Value::is_object) {
        return None;
    }
    'keys: for key in LIST_KEYS {
        let mut seen = KeyedSet::with_capacity_and_hasher(items.len(), Default::default());
        for item in items {
            match item.get(key) {
                Some(Value::String(s)) if seen.insert(s.as_str()) => {}
                _ => continue 'keys,
            }
        }
        return Some(key);
    }
    None
}

/// Leaves whose value changed, appeared or vanished (in the new table's order, then the vanished).
pub fn changed_leaves(old: &Table, new: &Table, out: &mut Vec<PathId>) {
    if Rc::ptr_eq(&old.shape, &new.shape) {
        if old.hashes != new.hashes {
            out.extend(
                new.shape
                    .paths
                    .iter()
                    .zip(old.hashes.iter().zip(new.hashes.iter()))
                    .filter(|(_, (a, b))| a != b)
                    .map(|(p, _)| *p),
            );
        }
        return;
    }
    if old.shape.paths.is_empty() {
        out.extend_from_slice(&new.shape.paths);
        return;
    }
    for (path, hash) in new.shape.paths.iter().zip(new.hashes.iter()) {
        if old.get(*path) != Some(*hash) {
            out.push(*path);
        }
    }
    out.extend(old.shape.paths.iter().filter(|p| !new.has(**p)));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaves(paths: &Paths, table: &Table) -> Vec<(String, u32)> {
        table.shape.paths.iter().zip(table.hashes.iter()).map(|(p, h)| (paths.text(*p).to_owned(), *h)).collect()
    }

    #[test]
    fn escaped_strings_hash_as_their_unescaped_text() {
        let texts = [
            r##""a \"quoted\" \\ path\/x""##,
            r##""\b\f\n\r\t end""##,
            r##""{\"apiVersion\":\"v1\",\"data\":{\"k\":\"# revision 1\\n\"}}\n""##,
            r##""caf\u00e9 \u2603 \u0041 \u001f""##,
            r##""no escapes at all""##,
            r##""\\""##,
        ];
        for text in texts {
            let unescaped: String = serde_json::from_str(text).unwrap();
            assert_eq!(unescaped_crc(text), Some(digest::crc(digest::STRING, unescaped.as_bytes())), "{text}");
        }
        // surrogates (a pair, or one alone, which serde_json refuses) are serde_json's to read
        for text in [r##""\ud83d\ude00""##, r##""\ud83d""##, r##""a" "b""##, r##""\x""##] {
            assert_eq!(unescaped_crc(text), None, "{text}");
        }
        let pair: String = serde_json::from_str(r##""\ud83d\ude00""##).unwrap();
        assert_eq!(meta_value_hash(r##""\ud83d\ude00""##), Ok(digest::crc(digest::STRING, pair.as_bytes())));
    }

    #[test]
    fn a_body_is_flattened_by_merge_keys_and_hashed_by_type() {
        let mut paths = Paths::new();
        let mut tables = Tables::new(&mut paths, 16);
        let body = [
            ("data", r#"{"key": "1", "n": 1, "f": 1.0, "t": true, "z": null, "e": {}}"#),
            ("spec", r#"{"ports": [{"name": "http", "port": 80}], "args": ["a", 1.5]}"#),
        ];
        let table = tables.body(&mut paths, &body, Tables::body_digest(&body)).unwrap();
        let found = leaves(&paths, &table);
        let expected = [
            ("data.key", digest::crc(digest::STRING, b"1")),
            ("data.n", digest::crc(digest::NUMBER, b"1")),
            ("data.f", digest::crc(digest::NUMBER, b"1.0")),
            ("data.t", digest::crc(digest::BOOLEAN, &[1])),
            ("data.z", digest::crc(digest::NULL, b"")),
            ("data.e", 0),
            ("spec.ports[name=http].name", digest::crc(digest::STRING, b"http")),
            ("spec.ports[name=http].port", digest::crc(digest::NUMBER, b"80")),
            ("spec.args", digest::crc(digest::LIST, br#"["a",1.5]"#)),
        ];
        assert_eq!(found, expected.iter().map(|(p, h)| (p.to_string(), *h)).collect::<Vec<_>>());
    }

    #[test]
    fn changed_leaves_are_the_changed_then_the_vanished() {
        let mut paths = Paths::new();
        let mut tables = Tables::new(&mut paths, 16);
        let before = [("data", r#"{"a": "1", "b": "2", "c": "3"}"#)];
        let after = [("data", r#"{"a": "1", "b": "9", "d": "4"}"#)];
        let old = tables.body(&mut paths, &before, Tables::body_digest(&before)).unwrap();
        let new = tables.body(&mut paths, &after, Tables::body_digest(&after)).unwrap();
        let mut changed = Vec::new();
        changed_leaves(&old, &new, &mut changed);
        let names: Vec<&str> = changed.iter().map(|p| paths.text(*p)).collect();
        assert_eq!(names, ["data.b", "data.d", "data.c"]);
    }

    #[test]
    fn label_values_hash_their_unescaped_text_and_must_be_strings() {
        let mut paths = Paths::new();
        let mut tables = Tables::new(&mut paths, 16);
        let empty = tables.empty.clone();
        let table = tables.meta(&mut paths, &[("app", r#""w\u00e9b""#)], &[], &empty).unwrap();
        assert_eq!(
            leaves(&paths, &table),
            [("metadata.labels.app".to_owned(), digest::crc(digest::STRING, "wéb".as_bytes()))]
        );
        assert_eq!(
            tables.meta(&mut paths, &[("app", r#""w\u00e9b""#)], &[], &table).map(|t| Rc::ptr_eq(&t, &table)),
            Ok(true)
        );
        assert!(tables.meta(&mut paths, &[("app", "{}")], &[], &empty).is_err());
    }

    #[test]
    fn a_status_table_is_made_once_per_text_and_none_is_the_empty_table() {
        let mut paths = Paths::new();
        let mut tables = Tables::new(&mut paths, 16);
        let status = r#"{"phase": "Ready", "conditions": [{"type": "Ready", "status": "True"}]}"#;
        let table = tables.status(&mut paths, Some(status)).unwrap();
        let names: Vec<String> = leaves(&paths, &table).into_iter().map(|(p, _)| p).collect();
        assert_eq!(
            names,
            ["status.phase", "status.conditions[type=Ready].type", "status.conditions[type=Ready].status"]
        );
        assert!(Rc::ptr_eq(&table, &tables.status(&mut paths, Some(status)).unwrap()));
        assert_eq!(tables.status(&mut paths, None).unwrap().digest, 0);
    }
}
