//! `fieldsV1` tries decoded into the leaf paths they own (managed_fields.py is the reference): `f:` fields, `k:`
//! keyed list items, `v:` set members, `i:` indexes, `.` the node itself. Decoded sets are shared: objects of
//! one shape owned by one controller carry identical tries.

use std::rc::Rc;

use pyo3::prelude::*;
use pyo3::types::PyString;
use serde_json::{Map, Value};

use crate::digest::{self, KeyedMap};
use crate::paths::{PathId, Paths, ROOT};

/// An owned field set: sorted, distinct path ids. Interned, so `Rc::ptr_eq` tells equal sets apart cheaply.
#[derive(PartialEq, Eq, Hash)]
pub struct FieldSet(pub Box<[PathId]>);

impl FieldSet {
    pub fn contains(&self, path: PathId) -> bool {
        self.0.binary_search(&path).is_ok()
    }

    pub fn contains_all(&self, paths: &[PathId]) -> bool {
        paths.iter().all(|p| self.contains(*p))
    }

    /// The paths of `self` not in `other`, in order.
    pub fn minus(&self, other: &FieldSet) -> Vec<PathId> {
        if std::ptr::eq(self, other) {
            return Vec::new(); // (sets are interned: mostly a writer's set is the one it had)
        }
        // (both sorted: one merge, no search per path)
        let (mut out, mut theirs) = (Vec::new(), other.0.iter().peekable());
        for &path in self.0.iter() {
            while theirs.next_if(|&&p| p < path).is_some() {}
            if theirs.peek() != Some(&&path) {
                out.push(path);
            }
        }
        out
    }
}

pub struct FieldSets {
    by_trie: KeyedMap<u64, Rc<FieldSet>>,
    interned: KeyedMap<Rc<FieldSet>, ()>,
    max: usize,
    opaque: PathId,
}

pub type Fallible<T> = Result<T, String>;

/// Python's `repr` of a string, as the reference's error messages quote keys and names.
pub fn repr(py: Python<'_>, text: &str) -> String {
    PyString::new(py, text).repr().map(|r| r.to_string()).unwrap_or_else(|_| format!("'{text}'"))
}

fn at(paths: &Paths, prefix: PathId) -> String {
    if prefix == ROOT {
        "the root".to_owned()
    } else {
        paths.text(prefix).to_owned()
    }
}

/// A JSON scalar as paths.py's `_scalar` renders it; None where only Python renders it alike (floats, nested).
fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Null => Some("null".to_owned()),
        Value::Bool(b) => Some(if *b { "true" } else { "false" }.to_owned()),
        Value::Number(n) if n.is_i64() || n.is_u64() => Some(n.to_string()),
        _ => None,
    }
}

impl FieldSets {
    pub fn new(paths: &mut Paths, max: usize) -> Self {
        let meta = paths.field(ROOT, "metadata");
        let opaque = paths.field(meta, "ownerReferences");
        FieldSets { by_trie: KeyedMap::default(), interned: KeyedMap::default(), max, opaque }
    }

    pub fn intern(&mut self, mut ids: Vec<PathId>) -> Rc<FieldSet> {
        ids.sort_unstable();
        ids.dedup();
        let set = FieldSet(ids.into_boxed_slice());
        if let Some((found, _)) = self.interned.get_key_value(&set) {
            return found.clone();
        }
        let set = Rc::new(set);
        self.interned.insert(set.clone(), ());
        set
    }

    /// The leaf paths of one writer's trie(s) (several when one manager wrote under two apiVersions).
    pub fn decode(&mut self, py: Python<'_>, paths: &mut Paths, tries: &[&str]) -> Fallible<Rc<FieldSet>> {
        if tries.len() == 1 {
            return self.get(py, paths, tries[0]);
        }
        let mut ids = Vec::new();
        for trie in tries {
            ids.extend_from_slice(&self.get(py, paths, trie)?.0);
        }
        Ok(self.intern(ids))
    }

    fn get(&mut self, py: Python<'_>, paths: &mut Paths, trie: &str) -> Fallible<Rc<FieldSet>> {
        let key = digest::bytes(b't', trie.as_bytes());
        if let Some(found) = self.by_trie.get(&key) {
            return Ok(found.clone());
        }
        let value: Value = serde_json::from_str(trie).map_err(|e| format!("invalid fieldsV1: {e}"))?;
        let mut out = Vec::new();
        match &value {
            Value::Object(node) => self.walk(py, paths, node, ROOT, &mut out)?,
            Value::Null => {}
            _ => return Err("fieldsV1 is not an object".to_owned()),
        }
        let found = self.intern(out);
        if self.by_trie.len() >= self.max {
            self.by_trie.clear();
            self.interned.clear();
        }
        self.by_trie.insert(key, found.clone());
        Ok(found)
    }

    fn walk(
        &self,
        py: Python<'_>,
        paths: &mut Paths,
        node: &Map<String, Value>,
        prefix: PathId,
        out: &mut Vec<PathId>,
    ) -> Fallible<()> {
        if prefix == self.opaque {
            out.push(prefix);
            return Ok(());
        }
        let mut leaf = true;
        for (key, child) in node {
            if key == "." {
                continue;
            }
            leaf = false;
            let child = match child {
                Value::Object(child) => child,
                _ => return Err(format!("unexpected fieldsV1 value under {} at {}", repr(py, key), at(paths, prefix))),
            };
            let path = child_path(py, paths, prefix, key)?;
            self.walk(py, paths, child, path, out)?;
        }
        if leaf && prefix != ROOT {
            out.push(prefix);
        }
        Ok(())
    }
}

fn child_path(py: Python<'_>, paths: &mut Paths, prefix: PathId, key: &str) -> Fallible<PathId> {
    let unexpected = || format!("unexpected fieldsV1 key {} under {}", repr(py, key), at(paths, prefix));
    let mut chars = key.chars();
    let tag = match (chars.next(), chars.next()) {
        (Some(tag), Some(':')) => tag,
        _ => return Err(unexpected()),
    };
    let text = chars.as_str();
    let json = |text: &str| -> Fallible<Value> {
        serde_json::from_str(text)
            .map_err(|_| format!("fieldsV1 key {} under {} holds invalid JSON", repr(py, key), at(paths, prefix)))
    };
    match tag {
        'f' => Ok(paths.field(prefix, text)),
        'i' => Ok(paths.item(prefix, text)),
        'k' => {
            let keys = match json(text)? {
                Value::Object(keys) => keys,
                _ => {
                    return Err(format!(
                        "fieldsV1 key {} under {} is not a JSON object",
                        repr(py, key),
                        at(paths, prefix)
                    ))
                }
            };
            let mut rendered = Vec::with_capacity(keys.len());
            for (k, v) in &keys {
                match scalar(v) {
                    Some(s) => rendered.push(format!("{k}={s}")),
                    None => return python_path(py, paths, prefix, "keyed_item", text),
                }
            }
            Ok(paths.item(prefix, &rendered.join(",")))
        }
        'v' => match scalar(&json(text)?) {
            Some(s) => Ok(paths.item(prefix, &s)),
            None => python_path(py, paths, prefix, "set_member", text),
        },
        _ => Err(unexpected()),
    }
}

/// Render through paths.py itself where Python's own `str()` of a value decides the text (floats, nested values).
fn python_path(py: Python<'_>, paths: &mut Paths, prefix: PathId, function: &str, text: &str) -> Fallible<PathId> {
    let rendered: PyResult<String> = (|| {
        let value = py.import("orjson")?.call_method1("loads", (text,))?;
        let module = py.import("watcher.detection.paths")?;
        module.call_method1(function, (paths.text(prefix), value))?.extract()
    })();
    rendered.map(|text| paths.intern(text)).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(trie: &str) -> Fallible<Vec<String>> {
        Python::initialize();
        Python::attach(|py| {
            let mut paths = Paths::new();
            let mut sets = FieldSets::new(&mut paths, 16);
            let set = sets.decode(py, &mut paths, &[trie])?;
            Ok(set.0.iter().map(|p| paths.text(*p).to_owned()).collect())
        })
    }

    #[test]
    fn a_trie_owns_its_leaves() {
        let trie = r#"{"f:metadata": {"f:labels": {".": {}, "f:app": {}}, "f:ownerReferences": {"k:{\"uid\":\"1\"}": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}}}, "f:finalizers": {"v:\"x\"": {}}}}"#;
        let mut found = decoded(trie).unwrap();
        found.sort();
        assert_eq!(
            found,
            [
                "metadata.labels.app",
                "metadata.ownerReferences",
                "spec.containers[name=app].image",
                "spec.finalizers[x]"
            ]
        );
    }

    #[test]
    fn a_malformed_trie_is_named() {
        assert_eq!(decoded(r#"{"x:y": {}}"#).unwrap_err(), "unexpected fieldsV1 key 'x:y' under the root");
        assert_eq!(decoded(r#"{"f:a": 1}"#).unwrap_err(), "unexpected fieldsV1 value under 'f:a' at the root");
    }

    #[test]
    fn equal_sets_are_one_set() {
        let mut paths = Paths::new();
        let mut sets = FieldSets::new(&mut paths, 16);
        let a = sets.intern(vec![3, 1, 2, 2]);
        let b = sets.intern(vec![1, 2, 3]);
        assert!(Rc::ptr_eq(&a, &b));
        assert_eq!(a.minus(&sets.intern(vec![2])), [1, 3]);
        assert_eq!(a.minus(&a), [0; 0]);
        assert_eq!(sets.intern(vec![0, 2, 5, 9]).minus(&sets.intern(vec![1, 2, 9, 12])), [0, 5]);
        assert!(a.contains_all(&[1, 3]) && !a.contains(4));
    }
}
