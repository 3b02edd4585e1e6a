//! One watch event parsed from its JSON text, without a Python object per JSON node: the fields the engine reads
//! are copied out, and the parts it only hashes or decodes on demand (tries, values, body sections) are kept as
//! ranges of the event's own bytes. capture.py's `to_event` is the reference for what is accepted; where this
//! parser refuses an event, the caller asks the reference for its message.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::digest;
use crate::fields::repr;

/// The ordered members of a JSON object, values left as their text.
struct Pairs<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

/// A string of the text (an object's key, or a value read as a string), borrowed from it unless it holds escapes.
pub struct Key<'a>(pub Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Key<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        deserializer.deserialize_str(V)
    }
}

impl<'a> Key<'a> {
    /// The text of a member that may be missing ("" then).
    fn or_empty(key: Option<Key<'a>>) -> Cow<'a, str> {
        key.map(|k| k.0).unwrap_or_default()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Pairs<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Pairs<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Pairs<'de>, A::Error> {
                let mut pairs = Vec::with_capacity(8);
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    let value: &'de RawValue = map.next_value()?;
                    pairs.push((key.0, value));
                }
                Ok(Pairs(pairs))
            }
        }
        deserializer.deserialize_map(V)
    }
}

#[derive(Deserialize)]
struct Doc<'a> {
    #[serde(rename = "type", default, borrow)]
    kind_of_event: Option<Key<'a>>,
    #[serde(default, borrow)]
    object: Option<ObjectDoc<'a>>,
    #[serde(rename = "observedAt", default, borrow)]
    observed_at: Option<Key<'a>>,
    #[serde(default, borrow)]
    metadata: Option<&'a RawValue>,
    #[serde(default, borrow)]
    kind: Option<Key<'a>>,
}

/// The object's members in one pass: apiVersion, kind and metadata read, status and the rest (the body) kept as
/// text.
struct ObjectDoc<'a> {
    api_version: Option<Key<'a>>,
    kind: Option<Key<'a>>,
    meta: Option<Meta<'a>>,
    status: Option<&'a RawValue>,
    body: Vec<(Cow<'a, str>, &'a RawValue)>,
}

impl<'de: 'a, 'a> Deserialize<'de> for ObjectDoc<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ObjectDoc<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a Kubernetes object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ObjectDoc<'de>, A::Error> {
                let mut doc = ObjectDoc { api_version: None, kind: None, meta: None, status: None, body: Vec::new() };
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    match key.0.as_ref() {
                        "apiVersion" => doc.api_version = map.next_value()?,
                        "kind" => doc.kind = map.next_value()?,
                        "metadata" => doc.meta = map.next_value()?,
                        "status" => doc.status = map.next_value()?,
                        _ => doc.body.push((key.0, map.next_value()?)),
                    }
                }
                Ok(doc)
            }
        }
        deserializer.deserialize_map(V)
    }
}

#[derive(Deserialize)]
struct Meta<'a> {
    #[serde(default, borrow)]
    uid: Option<Key<'a>>,
    #[serde(default, borrow)]
    name: Option<Key<'a>>,
    #[serde(default, borrow)]
    namespace: Option<Key<'a>>,
    #[serde(rename = "resourceVersion", default, borrow)]
    resource_version: Option<Key<'a>>,
    #[serde(rename = "managedFields", default, borrow)]
    managed_fields: Option<Vec<EntryDoc<'a>>>,
    #[serde(default, borrow)]
    labels: Option<Pairs<'a>>,
    #[serde(default, borrow)]
    annotations: Option<Pairs<'a>>,
    #[serde(rename = "ownerReferences", default)]
    owner_references: Option<Vec<Owner>>,
    #[serde(default, borrow)]
    generation: Option<&'a RawValue>,
}

/// `Owner`'s visitor methods for the values that name no controller: scalars and null.
macro_rules! no_controller {
    ($($visit:ident($($kind:ty)?)),*) => {
        $(fn $visit<E>(self $(, _: $kind)?) -> Result<Owner, E> {
            Ok(Owner(false))
        })*
    };
}

/// One ownerReference, read in the same pass for whether it names the object's controller (reference.py's
/// `controlled`: an object whose `controller` is truthy, the last one when repeated; anything else is no controller).
struct Owner(bool);

impl<'de> Deserialize<'de> for Owner {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Owner;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an ownerReference")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Owner, A::Error> {
                let mut controller = false;
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    if key.0 == "controller" {
                        controller = truthy(&map.next_value::<Value>()?);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(Owner(controller))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Owner, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Owner(false))
            }
            no_controller!(
                visit_bool(bool),
                visit_i64(i64),
                visit_u64(u64),
                visit_f64(f64),
                visit_str(&str),
                visit_unit()
            );
        }
        deserializer.deserialize_any(V)
    }
}

/// One managedFields entry, read in the same pass as the rest (an entry that is not an object, or whose members
/// are not strings, fails the parse: the reference reader then names the problem).
#[derive(Deserialize)]
struct EntryDoc<'a> {
    #[serde(default, borrow)]
    manager: Option<Key<'a>>,
    #[serde(default, borrow)]
    operation: Option<Key<'a>>,
    #[serde(default, borrow)]
    subresource: Option<Key<'a>>,
    #[serde(default, borrow)]
    time: Option<Key<'a>>,
    #[serde(rename = "fieldsV1", default, borrow)]
    fields_v1: Option<&'a RawValue>,
}

/// Where the one-pass parse failed: a managedFields entry that is not an object of strings (and fieldsV1) is the
/// engine's error, as in the reference (`raw_entries`); anything else the reference reader names.
#[derive(Deserialize)]
struct Lenient<'a> {
    #[serde(default, borrow)]
    object: Option<LenientObject<'a>>,
    #[serde(default, borrow)]
    metadata: Option<LenientMeta<'a>>,
}

#[derive(Deserialize)]
struct LenientObject<'a> {
    #[serde(default, borrow)]
    metadata: Option<LenientMeta<'a>>,
}

#[derive(Deserialize)]
struct LenientMeta<'a> {
    #[serde(rename = "managedFields", default, borrow)]
    managed_fields: Option<Vec<&'a RawValue>>,
}

fn bad_entry(json: &str) -> bool {
    let meta = match serde_json::from_str::<Lenient>(json) {
        Ok(Lenient { object: Some(LenientObject { metadata }), .. }) => metadata,
        Ok(Lenient { object: None, metadata }) => metadata,
        Err(_) => None,
    };
    let entries = meta.and_then(|m| m.managed_fields).unwrap_or_default();
    entries.iter().any(|raw| serde_json::from_str::<EntryDoc>(raw.get()).is_err())
}

/// A string of the event: where it is in the event's text, or (it held escapes) its own copy.
pub enum Text {
    At(Range<usize>),
    Owned(String),
}

impl Text {
    pub fn of(base: &[u8], text: Cow<'_, str>) -> Text {
        match text {
            Cow::Borrowed(s) => Text::At(span(base, s)),
            // (also a missing member's default: `Cow::default()` is an empty owned string, not in the text)
            Cow::Owned(s) => Text::Owned(s),
        }
    }

    pub fn get<'a>(&'a self, data: &'a [u8]) -> &'a str {
        match self {
            Text::At(range) => text(data, range.clone()),
            Text::Owned(s) => s,
        }
    }

    fn py<'py>(&self, py: Python<'py>, data: &Py<PyBytes>) -> Bound<'py, PyString> {
        PyString::new(py, self.get(data.as_bytes(py)))
    }
}

/// The members of a JSON object: each key (see `Text`) and where its value's text is.
pub type Members = Vec<(Text, Range<usize>)>;

pub struct RawEntry {
    pub writer: u32, // (manager, operation, subresource) as the front end numbers writers
    pub time: Text,
    pub fields: Option<Range<usize>>, // the trie's text in the event's bytes (None: no or empty fieldsV1)
}

pub const ADDED: u8 = 0;
pub const MODIFIED: u8 = 1;
pub const DELETED: u8 = 2;

/// A parsed event: what the engine needs before attribution, plus ranges of `data` for the rest.
// (frozen: the engine reads it without borrowing it, on any thread)
#[pyclass(frozen, module = "watcher._native")]
pub struct Parsed {
    pub data: Py<PyBytes>,
    pub event_type: u8,
    #[pyo3(get)]
    pub observed_at: Option<f64>,
    // (the strings are kept as ranges of `data` where they can be, and made Python strings when asked for)
    api_version: Text,
    kind: Text,
    namespace: Option<Text>,
    name: Text,
    pub uid: Text,
    resource_version: Text,
    #[pyo3(get)]
    pub rv: i64, // the resourceVersion as the engine compares it (see attribution.py's `version_key`)
    #[pyo3(get)]
    pub written_at: Option<f64>, // the newest managedFields time
    #[pyo3(get)]
    pub time: Option<f64>, // observedAt, else `written_at`
    pub latest: i64, // the newest managedFields time in whole seconds (0 for none)
    #[pyo3(get)]
    pub has_managed_fields: bool,
    pub entries: Vec<RawEntry>,
    pub labels: Members,
    pub annotations: Members,
    pub body: Members,
    pub status: Option<Range<usize>>,
    pub controlled: bool,
    /// `metadata.generation`, NO_GENERATION for none (see reference.py's `generation`).
    pub generation: i64,
    #[pyo3(get)]
    pub key: i64,
}

/// An object without a `metadata.generation` (or one that is not a number).
pub const NO_GENERATION: i64 = -1;

/// `metadata.generation` as reference.py's `generation` reads it: a non-negative integer, else NO_GENERATION.
fn generation(raw: Option<&RawValue>) -> i64 {
    match raw.map(|r| serde_json::from_str::<Value>(r.get())) {
        Some(Ok(Value::Number(n))) if !n.is_f64() => n.as_i64().filter(|g| *g >= 0).unwrap_or(NO_GENERATION),
        _ => NO_GENERATION,
    }
}

#[pymethods]
impl Parsed {
    #[getter]
    fn r#type<'py>(&self, py: Python<'py>) -> Bound<'py, PyString> {
        match self.event_type {
            ADDED => intern!(py, "ADDED"),
            MODIFIED => intern!(py, "MODIFIED"),
            _ => intern!(py, "DELETED"),
        }
        .clone()
    }

    /// The event's JSON text (the object is decoded from it only where a finding needs to look at values).
    #[getter]
    fn data(&self, py: Python<'_>) -> Py<PyBytes> {
        self.data.clone_ref(py)
    }

    #[getter]
    fn api_version<'py>(&self, py: Python<'py>) -> Bound<'py, PyString> {
        self.api_version.py(py, &self.data)
    }

    #[getter]
    fn kind<'py>(&self, py: Python<'py>) -> Bound<'py, PyString> {
        self.kind.py(py, &self.data)
    }

    #[getter]
    fn namespace<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyString>> {
        self.namespace.as_ref().map(|n| n.py(py, &self.data))
    }

    #[getter]
    fn name<'py>(&self, py: Python<'py>) -> Bound<'py, PyString> {
        self.name.py(py, &self.data)
    }

    #[getter]
    fn uid<'py>(&self, py: Python<'py>) -> Bound<'py, PyString> {
        self.uid.py(py, &self.data)
    }

    #[getter]
    fn resource_version<'py>(&self, py: Python<'py>) -> Bound<'py, PyString> {
        self.resource_version.py(py, &self.data)
    }

    /// The text of a label or annotation named by its path (`metadata.labels.app`), None for other paths
    /// (events.py's `meta_value`).
    fn meta_value(&self, py: Python<'_>, path: &str) -> Option<String> {
        let data = self.data.as_bytes(py);
        for (prefix, pairs) in [("metadata.annotations", &self.annotations), ("metadata.labels", &self.labels)] {
            let rest = match path.strip_prefix(prefix) {
                Some(rest) => rest,
                None => continue,
            };
            let key = if let Some(inner) = rest.strip_prefix('[') {
                inner.strip_suffix(']').unwrap_or(inner)
            } else if let Some(name) = rest.strip_prefix('.') {
                name
            } else {
                continue;
            };
            let value = pairs.iter().find(|(k, _)| k.get(data) == key).map(|(_, range)| text(data, range.clone()))?;
            return serde_json::from_str::<String>(value).ok();
        }
        None
    }
}

/// The key an object is tracked by: a 64-bit hash of its uid.
pub fn object_key(uid: &str) -> i64 {
    digest::bytes(b'u', uid.as_bytes()) as i64
}

/// Where `text`, a slice of `base`, is in it.
fn span(base: &[u8], text: &str) -> Range<usize> {
    let start = text.as_ptr() as usize - base.as_ptr() as usize;
    debug_assert!(start + text.len() <= base.len());
    start..start + text.len()
}

fn range(base: &[u8], raw: &RawValue) -> Range<usize> {
    span(base, raw.get())
}

/// A range of an event's text that `parse` cut out of it.
pub fn text(data: &[u8], range: Range<usize>) -> &str {
    // SAFETY: `parse` checked that the whole text is UTF-8 and cuts ranges only at the ends of JSON tokens
    // (strings' contents, whole values), which are character boundaries; the bytes object is immutable.
    unsafe { std::str::from_utf8_unchecked(&data[range]) }
}

fn members(base: &[u8], pairs: Vec<(Cow<'_, str>, &RawValue)>) -> Members {
    pairs.into_iter().map(|(k, v)| (Text::of(base, k), range(base, v))).collect()
}

fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// RFC 3339 time to seconds since the epoch; what chrono does not read goes to model.py's `parse_time`. (chrono
/// also reads a minus sign written U+2212, which Python's `datetime.fromisoformat` refuses: only ASCII text is
/// chrono's.)
pub fn parse_time(py: Python<'_>, text: &str) -> PyResult<f64> {
    if text.is_ascii() {
        if let Ok(moment) = chrono::DateTime::parse_from_rfc3339(text) {
            return Ok(moment.timestamp() as f64 + f64::from(moment.timestamp_subsec_nanos()) / 1e9);
        }
    }
    py.import("watcher.model")?.call_method1("parse_time", (text,))?.extract()
}

// (an event is moved straight into its Python object: boxing it would only add an allocation)
#[allow(clippy::large_enum_variant)]
pub enum Outcome {
    Event(Parsed),
    Skipped,         // BOOKMARK or ERROR
    Refused(String), // not read here: the reference decides (and words the error)
}

/// What parsing needs of the front end's shared state.
pub trait Context {
    /// The number of a writer: a managedFields entry's (manager, operation, subresource).
    fn writer(&mut self, manager: &str, operation: &str, subresource: &str) -> u32;
    /// A managedFields time in seconds since the epoch (see `parse_time`), cached.
    fn time(&mut self, py: Python<'_>, text: &str) -> PyResult<f64>;
}

/// A resourceVersion as the engine compares it (events.py's `version_key`): etcd's decimal versions as they are,
/// others as 62 bits of a hash, 0 for none.
fn version_key(rv: &str) -> i64 {
    if rv.is_empty() {
        0
    } else if rv.len() < 19 && rv.bytes().all(|b| b.is_ascii_digit()) {
        rv.parse().unwrap_or(0)
    } else {
        (digest::bytes(b'r', rv.as_bytes()) as i64) >> 2
    }
}

/// What the source knows of an event beyond its text: when it was received (unless the event says), and the
/// apiVersion and kind of the resource watched (a metadata-only watch sends PartialObjectMetadata).
pub struct Given<'a> {
    pub observed_at: Option<f64>,
    pub api_version: Option<&'a str>,
    pub kind: Option<&'a str>,
}

/// Parse one event: its text as a document, the document as an event this parser reads (or the outcome without
/// one), then what the engine needs of it.
pub fn parse(py: Python<'_>, chunk: &Bound<'_, PyBytes>, given: &Given<'_>, cx: &mut dyn Context) -> PyResult<Outcome> {
    let data = chunk.as_bytes();
    // UTF-8 checked once here, so that the parse below and every later use of the text's ranges need not.
    let json = match std::str::from_utf8(data) {
        Ok(json) => json,
        Err(e) => return Ok(Outcome::Refused(e.to_string())),
    };
    let doc: Doc = match serde_json::from_str(json) {
        Ok(doc) => doc,
        Err(_) if bad_entry(json) => {
            return Err(pyo3::exceptions::PyValueError::new_err("a managedFields entry is not an object"))
        }
        Err(e) => return Ok(Outcome::Refused(e.to_string())),
    };
    match accept(py, doc, json, given) {
        Ok(event) => Ok(Outcome::Event(read(py, chunk, event, cx)?)),
        Err(NoEvent::Skipped) => Ok(Outcome::Skipped),
        Err(NoEvent::Refused(why)) => Ok(Outcome::Refused(why)),
    }
}

/// An event this parser reads: its type, when it was observed, and its object's identity, checked present.
struct Accepted<'a> {
    event_type: u8,
    observed_at: Option<f64>,
    api_version: Cow<'a, str>,
    kind: Cow<'a, str>,
    uid: Cow<'a, str>,
    name: Cow<'a, str>,
    meta: Meta<'a>, // (its uid and name taken)
    body: Vec<(Cow<'a, str>, &'a RawValue)>,
    status: Option<&'a RawValue>,
}

/// Why a document is no event the engine reads: `Outcome`'s other two cases.
enum NoEvent {
    Skipped,
    Refused(String),
}

fn refused(why: &str) -> NoEvent {
    NoEvent::Refused(why.to_owned())
}

/// The event of a document, if this parser reads it.
fn accept<'a>(py: Python<'_>, mut doc: Doc<'a>, json: &'a str, given: &Given<'_>) -> Result<Accepted<'a>, NoEvent> {
    let observed = doc.observed_at.take();
    let (event_type, object) = watched(doc, json)?;
    // (what the source knows replaces the object's own)
    let given_text = |given: Option<&str>| given.map(|g| Key(Cow::Owned(g.to_owned())));
    let api_version = given_text(given.api_version).or(object.api_version);
    let kind = given_text(given.kind).or(object.kind);
    let (api_version, kind, mut meta) = match (api_version, kind, object.meta) {
        (Some(api_version), Some(kind), Some(meta)) => (api_version.0, kind.0, meta),
        _ => return Err(refused("no apiVersion, kind or metadata")),
    };
    let (uid, name) = match (meta.uid.take(), meta.name.take()) {
        (Some(uid), Some(name)) if !uid.0.is_empty() && !name.0.is_empty() => (uid.0, name.0),
        _ => return Err(refused("no uid or name")),
    };
    let observed_at = match observed {
        None => given.observed_at,
        Some(text) => Some(parse_time(py, &text.0).map_err(|_| refused("observedAt"))?),
    };
    let (body, status) = (object.body, object.status);
    Ok(Accepted { event_type, observed_at, api_version, kind, uid, name, meta, body, status })
}

/// A document's event type and object: a watch event's, or a bare object's (`kubectl get -w -o json` without
/// --output-watch-events), read as a modification.
fn watched<'a>(doc: Doc<'a>, json: &'a str) -> Result<(u8, ObjectDoc<'a>), NoEvent> {
    let (event_type, object) = match doc.kind_of_event.as_ref().map(|k| k.0.as_ref()) {
        Some("ADDED") => (ADDED, doc.object),
        Some("MODIFIED") => (MODIFIED, doc.object),
        Some("DELETED") => (DELETED, doc.object),
        Some("BOOKMARK" | "ERROR") => return Err(NoEvent::Skipped),
        None if doc.object.is_none()
            && doc.metadata.is_some()
            && doc.kind.as_ref().is_some_and(|k| !k.0.ends_with("List")) =>
        {
            (MODIFIED, serde_json::from_str::<ObjectDoc>(json).ok())
        }
        _ => return Err(refused("not an event this parser reads")),
    };
    object.map(|object| (event_type, object)).ok_or_else(|| refused("no object"))
}

/// What the engine needs of an accepted event: its writers' entries and their newest time, its version, and the
/// ranges of its text the front end reads later.
fn read(py: Python<'_>, chunk: &Bound<'_, PyBytes>, event: Accepted<'_>, cx: &mut dyn Context) -> PyResult<Parsed> {
    let data = chunk.as_bytes();
    let meta = event.meta;
    let managed_fields = meta.managed_fields.unwrap_or_default();
    let has_managed_fields = !managed_fields.is_empty();
    let entries = raw_entries(py, data, managed_fields, cx)?;
    let newest = newest_time(&entries, data);
    let newest = if newest.is_empty() { None } else { Some(cx.time(py, newest)?) };
    let resource_version = Key::or_empty(meta.resource_version);
    Ok(Parsed {
        data: chunk.clone().unbind(),
        event_type: event.event_type,
        observed_at: event.observed_at,
        key: object_key(&event.uid),
        api_version: Text::of(data, event.api_version),
        kind: Text::of(data, event.kind),
        namespace: meta.namespace.filter(|n| !n.0.is_empty()).map(|n| Text::of(data, n.0)),
        name: Text::of(data, event.name),
        uid: Text::of(data, event.uid),
        rv: version_key(&resource_version),
        resource_version: Text::of(data, resource_version),
        written_at: newest,
        time: event.observed_at.or(newest),
        latest: newest.map_or(0, |t| t.trunc() as i64),
        has_managed_fields,
        entries,
        labels: members(data, meta.labels.map(|p| p.0).unwrap_or_default()),
        annotations: members(data, meta.annotations.map(|p| p.0).unwrap_or_default()),
        body: members(data, event.body),
        status: event.status.map(|raw| range(data, raw)),
        controlled: meta.owner_references.unwrap_or_default().iter().any(|o| o.0),
        generation: generation(meta.generation),
    })
}

/// The managedFields entries, each with its writer numbered and where its trie is.
fn raw_entries(
    py: Python<'_>,
    data: &[u8],
    managed_fields: Vec<EntryDoc<'_>>,
    cx: &mut dyn Context,
) -> PyResult<Vec<RawEntry>> {
    let mut entries = Vec::with_capacity(managed_fields.len());
    for entry in managed_fields {
        let manager = Key::or_empty(entry.manager);
        let fields = match entry.fields_v1 {
            Some(t) if t.get().starts_with('{') => (t.get() != "{}").then(|| range(data, t)),
            // (as `raw.get("fieldsV1") or {}`: an empty value of another type owns nothing)
            Some(t) if serde_json::from_str::<Value>(t.get()).is_ok_and(|v| !truthy(&v)) => None,
            Some(_) => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "fieldsV1 of manager {} is not an object",
                    repr(py, &manager)
                )))
            }
            None => None,
        };
        let time = Text::of(data, Key::or_empty(entry.time));
        let written = cx.writer(&manager, &Key::or_empty(entry.operation), &Key::or_empty(entry.subresource));
        entries.push(RawEntry { writer: written, time, fields });
    }
    Ok(entries)
}

/// The greatest of the entries' times as text ("" for none).
fn newest_time<'a>(entries: &'a [RawEntry], data: &'a [u8]) -> &'a str {
    let mut newest: &str = "";
    for entry in entries {
        let time = entry.time.get(data);
        if time > newest {
            newest = time;
        }
    }
    newest
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Plain;

    impl Context for Plain {
        fn writer(&mut self, _manager: &str, _operation: &str, _subresource: &str) -> u32 {
            0
        }
        fn time(&mut self, py: Python<'_>, text: &str) -> PyResult<f64> {
            parse_time(py, text)
        }
    }

    #[test]
    fn strings_are_ranges_of_the_text_unless_escaped() {
        Python::initialize();
        Python::attach(|py| {
            let text = br#"{"type": "MODIFIED", "object": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a", "namespace": "n", "uid": "u-1", "resourceVersion": "7", "labels": {"app": "x"},
                "managedFields": [{"manager": "m", "operation": "Update", "time": "2021-03-04T09:12:22Z"}]},
                "data": {"k": "v"}, "spec\u0041": {}}}"#;
            let chunk = PyBytes::new(py, text);
            let given = Given { observed_at: None, api_version: None, kind: None };
            let parsed = match parse(py, &chunk, &given, &mut Plain) {
                Ok(Outcome::Event(parsed)) => parsed,
                _ => panic!("not parsed"),
            };
            let kept =
                [&parsed.uid, &parsed.name, &parsed.resource_version, &parsed.entries[0].time, &parsed.labels[0].0];
            assert!(kept.iter().all(|t| matches!(t, Text::At(_))));
            assert_eq!(
                [parsed.uid.get(text), parsed.name.get(text), parsed.labels[0].0.get(text)],
                ["u-1", "a", "app"]
            );
            assert!(matches!(&parsed.body[1].0, Text::Owned(key) if key == "specA"));
        });
    }

    #[test]
    fn etcd_versions_are_kept_as_numbers_others_hashed() {
        assert_eq!(version_key(""), 0);
        assert_eq!(version_key("48000123"), 48_000_123);
        assert_ne!(version_key("a1"), version_key("a2"));
        assert_ne!(version_key("99999999999999999999"), 0); // (too long for an i64: hashed)
    }
}
