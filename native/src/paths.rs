//! Readable field paths, interned: each distinct path is one `PathId`. Rendered exactly as
//! `watcher/detection/paths.py` renders them (the reference), so both engines name every field alike.

use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::digest::KeyedMap;

pub type PathId = u32;
pub const ROOT: PathId = 0;

/// Memo of one parent's children by their raw key: tries and objects of one shape repeat the same keys.
type Children = KeyedMap<Box<str>, PathId>;

pub struct Paths {
    texts: Vec<Box<str>>,
    ids: KeyedMap<Box<str>, PathId>,
    fields: KeyedMap<PathId, Children>,
    items: KeyedMap<PathId, Children>,
    py: Vec<Option<Py<PyString>>>,
}

/// `[A-Za-z_][A-Za-z0-9_-]*`: a name shown as `.name`; any other as `[name]` (paths.py's `_PLAIN_NAME`).
fn plain(name: &str) -> bool {
    let mut chars = name.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' => {}
        _ => return false,
    }
    chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl Paths {
    pub fn new() -> Self {
        let mut paths = Paths {
            texts: Vec::new(),
            ids: KeyedMap::default(),
            fields: KeyedMap::default(),
            items: KeyedMap::default(),
            py: Vec::new(),
        };
        paths.intern(String::new());
        paths
    }

    pub fn intern(&mut self, text: String) -> PathId {
        if let Some(&id) = self.ids.get(text.as_str()) {
            return id;
        }
        let id = self.texts.len() as PathId;
        let text: Box<str> = text.into_boxed_str();
        self.texts.push(text.clone());
        self.ids.insert(text, id);
        self.py.push(None);
        id
    }

    pub fn text(&self, id: PathId) -> &str {
        &self.texts[id as usize]
    }

    /// The path as a Python string (made once per path, interned as `sys.intern` would).
    pub fn py(&mut self, py: Python<'_>, id: PathId) -> Py<PyString> {
        let slot = &mut self.py[id as usize];
        if let Some(found) = slot {
            return found.clone_ref(py);
        }
        let made = PyString::intern(py, &self.texts[id as usize]).unbind();
        *slot = Some(made.clone_ref(py));
        made
    }

    /// A struct field or map key: `.name` when it reads as an identifier, else `[name]`.
    pub fn field(&mut self, parent: PathId, name: &str) -> PathId {
        if let Some(&id) = self.fields.get(&parent).and_then(|m| m.get(name)) {
            return id;
        }
        let prefix = self.text(parent);
        let text = if !plain(name) {
            format!("{prefix}[{name}]")
        } else if prefix.is_empty() {
            name.to_owned()
        } else {
            format!("{prefix}.{name}")
        };
        let id = self.intern(text);
        self.fields.entry(parent).or_default().insert(name.into(), id);
        id
    }

    /// A bracketed child: a list item by its merge keys (`containers[name=app]`, `rendered` = `name=app`), a set
    /// member (`finalizers[x]`) or an index (`args[0]`).
    pub fn item(&mut self, parent: PathId, rendered: &str) -> PathId {
        if let Some(&id) = self.items.get(&parent).and_then(|m| m.get(rendered)) {
            return id;
        }
        let text = format!("{}[{rendered}]", self.text(parent));
        let id = self.intern(text);
        self.items.entry(parent).or_default().insert(rendered.into(), id);
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_rendered_as_paths_py_renders_them() {
        let mut paths = Paths::new();
        let meta = paths.field(ROOT, "metadata");
        let annotations = paths.field(meta, "annotations");
        let key = paths.field(annotations, "example.com/last-reconciled");
        assert_eq!(paths.text(key), "metadata.annotations[example.com/last-reconciled]");
        let labels = paths.field(meta, "labels");
        let plain = paths.field(labels, "app_name-2");
        assert_eq!(paths.text(plain), "metadata.labels.app_name-2");
        let bracketed = paths.field(labels, "2fast");
        assert_eq!(paths.text(bracketed), "metadata.labels[2fast]");
        let spec = paths.field(ROOT, "spec");
        let containers = paths.field(spec, "containers");
        let app = paths.item(containers, "name=app");
        let image = paths.field(app, "image");
        assert_eq!(paths.text(image), "spec.containers[name=app].image");
    }

    #[test]
    fn a_path_is_interned_once() {
        let mut paths = Paths::new();
        let spec = paths.field(ROOT, "spec");
        let replicas = paths.field(spec, "replicas");
        assert_eq!(paths.field(spec, "replicas"), replicas);
        assert_eq!(paths.intern("spec.replicas".to_owned()), replicas);
        assert_ne!(paths.field(spec, "paused"), replicas);
    }
}
