//! Write attribution over native state (reference.py is the reference, line for line): per object the
//! managedFields entries (writer, time in whole seconds, shared field set) and the value tables (labels and
//! annotations, body; and the status of the few objects that need it, by object key). Only what the detectors
//! read crosses into Python: each write's `Write` (writers, changed paths, handovers).

use std::hash::Hasher;
use std::rc::Rc;

use pyo3::exceptions::{PyKeyError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyFrozenSet, PyList, PyString, PyTuple, PyType};
use pyo3::IntoPyObjectExt;
use smallvec::SmallVec;

use crate::digest::{self, KeyedMap, KeyedSet};
use crate::event::{self, text, Outcome, Parsed};
use crate::fields::{FieldSet, FieldSets};
use crate::paths::{PathId, Paths, ROOT};
use crate::values::{changed_leaves, Table, Tables};

type WriterId = u32;

/// The unattributed writer (model.py's `UNATTRIBUTED`) as a party to a handover: the first id `Writers` gives out.
const UNATTRIBUTED: WriterId = 0;
/// Fields an object remembers who removed (reference.py's `MAX_REMOVED`).
const MAX_REMOVED: usize = 8;
/// Seconds an entry's stamp may lie before a write's time and still be this write's (reference.py's `STAMP_SLACK`).
const STAMP_SLACK: i64 = 1;

#[derive(Clone)]
struct Entry {
    writer: WriterId,
    time: i64,
    fields: Rc<FieldSet>,
}

struct ObjectState {
    entries: Vec<Entry>,
    meta: Rc<Table>,
    body: Rc<Table>,
    controlled: bool,
    generation: i64,
    /// Fields a write removed, with its writer, oldest first (reference.py's `removed`): boxed, empty for most.
    removed: Box<[(PathId, WriterId)]>,
}

impl ObjectState {
    /// Remember who removed a field (reference.py's `_note_removed`).
    fn note_removed(&mut self, path: PathId, remover: WriterId) {
        let mut kept: Vec<(PathId, WriterId)> = self.removed.iter().copied().filter(|r| r.0 != path).collect();
        if kept.len() >= MAX_REMOVED {
            kept.drain(..kept.len() + 1 - MAX_REMOVED);
        }
        kept.push((path, remover));
        self.removed = kept.into_boxed_slice();
    }

    /// Who removed a field, forgotten now that it is set again (reference.py's `_pop_removed`).
    fn pop_removed(&mut self, path: PathId) -> Option<WriterId> {
        let i = self.removed.iter().position(|r| r.0 == path)?;
        let remover = self.removed[i].1;
        let mut kept = self.removed.to_vec();
        kept.remove(i);
        self.removed = kept.into_boxed_slice();
        Some(remover)
    }
}

/// The entries of one version grouped by writer (one manager may write under two apiVersions).
struct RawWriter<'a> {
    writer: WriterId,
    time: &'a str,
    tries: SmallVec<[&'a str; 2]>,
}

/// An event's writers, grouped (`Shared::group`): a few, so on the stack.
type Grouped<'a> = SmallVec<[RawWriter<'a>; 4]>;
/// Labels, annotations or body sections as (key, JSON text): on the stack up to a dozen.
type TextPairs<'a> = SmallVec<[(&'a str, &'a str); 12]>;

/// An event's members (`event::Members`) as the texts they are ranges of.
fn texts<'a>(members: &'a event::Members, data: &'a [u8]) -> TextPairs<'a> {
    members.iter().map(|(k, r)| (k.get(data), text(data, r.clone()))).collect()
}

struct Writers {
    ids: KeyedMap<u64, WriterId>,
    keys: Vec<[String; 3]>,
    py: Vec<Option<Py<PyAny>>>,
    /// Managers of the API server's own (model.py's `SERVER_MANAGERS`), by writer.
    server: Vec<bool>,
}

/// The managers the API server itself writes entries under (model.py's `SERVER_MANAGERS`).
const SERVER_MANAGERS: [&str; 2] = ["ancient-changes", "before-first-apply"];

impl Writers {
    fn id(&mut self, manager: &str, operation: &str, subresource: &str) -> WriterId {
        let mut hasher = digest::hasher();
        for part in [manager, operation, subresource] {
            hasher.write(part.as_bytes());
            hasher.write_u8(0);
        }
        let mut hash = hasher.finish();
        loop {
            match self.ids.get(&hash) {
                Some(&id) if self.keys[id as usize] == [manager, operation, subresource] => return id,
                Some(_) => hash = hash.wrapping_add(1), // (a 64-bit collision: probe on)
                None => break,
            }
        }
        let id = self.keys.len() as WriterId;
        self.keys.push([manager.to_owned(), operation.to_owned(), subresource.to_owned()]);
        self.py.push(None);
        self.server.push(SERVER_MANAGERS.contains(&manager));
        self.ids.insert(hash, id);
        id
    }

    fn manager(&self, id: WriterId) -> &str {
        &self.keys[id as usize][0]
    }

    fn subresource(&self, id: WriterId) -> &str {
        &self.keys[id as usize][2]
    }

    fn server(&self, id: WriterId) -> bool {
        self.server[id as usize]
    }
}

/// Everything but the objects, so that attribution can borrow both at once.
struct Shared {
    paths: Paths,
    fields: FieldSets,
    tables: Tables,
    writers: Writers,
    times: KeyedMap<String, f64>,
    /// The status tables of the few objects that need one, by object key (see `status_changes`).
    statuses: KeyedMap<i64, Rc<Table>>,
    /// The server stamps every write's writer: an entry with a subresource was seen (reference.py's `_note_server`).
    stamped: bool,
    untraced: PathId,
    writer_class: Py<PyType>,
    handover_class: Py<PyType>,
    unattributed: Py<PyAny>,
}

impl event::Context for Shared {
    fn writer(&mut self, manager: &str, operation: &str, subresource: &str) -> u32 {
        self.writers.id(manager, operation, subresource)
    }

    /// Cached: many entries share a second, and a stream moves on in time (recent seconds are all it needs).
    fn time(&mut self, py: Python<'_>, text: &str) -> PyResult<f64> {
        if let Some(&found) = self.times.get(text) {
            return Ok(found);
        }
        let seconds = event::parse_time(py, text)?;
        if self.times.len() >= 1024 {
            self.times.clear();
        }
        self.times.insert(text.to_owned(), seconds);
        Ok(seconds)
    }
}

/// Python's `ValueError` for what the engine cannot read in an event.
fn invalid(message: String) -> PyErr {
    PyValueError::new_err(message)
}

/// Python's `KeyError` for an event of an object the front end does not hold, named by its uid.
fn unknown(py: Python<'_>, p: &Parsed) -> PyErr {
    PyKeyError::new_err(p.uid.get(p.data.as_bytes(py)).to_owned())
}

impl Shared {
    fn writer(&mut self, py: Python<'_>, id: WriterId) -> PyResult<Py<PyAny>> {
        if let Some(found) = &self.writers.py[id as usize] {
            return Ok(found.clone_ref(py));
        }
        let [m, o, s] = &self.writers.keys[id as usize];
        let fields = [m, o, s].map(|part| PyString::new(py, part).into_any().unbind());
        let made = new_item(py, self.writer_class.bind(py), fields)?;
        self.writers.py[id as usize] = Some(made.clone_ref(py));
        Ok(made)
    }

    /// A managedFields time in whole seconds (0 for none).
    fn stamp(&mut self, py: Python<'_>, text: &str) -> PyResult<i64> {
        Ok(if text.is_empty() { 0 } else { event::Context::time(self, py, text)?.trunc() as i64 })
    }

    /// An event's entries grouped by writer; notes whether the server stamps writers (`note_server`).
    fn group<'a>(&mut self, p: &'a Parsed, data: &'a [u8]) -> Grouped<'a> {
        let mut grouped = Grouped::new();
        for entry in &p.entries {
            let writer = entry.writer;
            let time = entry.time.get(data);
            let trie = entry.fields.clone().map(|r| text(data, r));
            match grouped.iter_mut().find(|g| g.writer == writer) {
                Some(seen) => {
                    if time > seen.time {
                        seen.time = time;
                    }
                    seen.tries.extend(trie);
                }
                None => grouped.push(RawWriter { writer, time, tries: trie.into_iter().collect() }),
            }
        }
        self.note_server(&grouped);
        grouped
    }

    /// Servers from 1.22 on stamp every write's writer (reference.py's `_note_server`).
    fn note_server(&mut self, raw: &[RawWriter<'_>]) {
        if !self.stamped {
            self.stamped = raw.iter().any(|r| !self.writers.subresource(r.writer).is_empty());
        }
    }

    fn decode(&mut self, py: Python<'_>, raw: &RawWriter<'_>) -> PyResult<Rc<FieldSet>> {
        self.fields.decode(py, &mut self.paths, &raw.tries).map_err(invalid)
    }

    /// Paths in the order of their text (reference.py's order).
    fn sort_by_text(&self, paths: &mut [PathId]) {
        paths.sort_by(|a, b| self.paths.text(*a).cmp(self.paths.text(*b)));
    }

    /// Visible leaves whose value changed; updates the state's tables (a baseline only updates them).
    fn changed_values(
        &mut self,
        state: &mut ObjectState,
        p: &Parsed,
        data: &[u8],
        compare: bool,
    ) -> PyResult<Vec<PathId>> {
        let mut changed = Vec::new();
        let (labels, annotations) = (texts(&p.labels, data), texts(&p.annotations, data));
        let meta = self.tables.meta(&mut self.paths, &labels, &annotations, &state.meta).map_err(invalid)?;
        if !Rc::ptr_eq(&meta, &state.meta) {
            if compare {
                changed_leaves(&state.meta, &meta, &mut changed);
            }
            state.meta = meta;
        }
        let body = texts(&p.body, data);
        let digest = Tables::body_digest(&body);
        if digest != state.body.digest {
            let table = self.tables.body(&mut self.paths, &body, digest).map_err(invalid)?;
            if compare {
                changed_leaves(&state.body, &table, &mut changed);
            }
            state.body = table;
        }
        Ok(changed)
    }

    /// The status leaves a write changed when it changed nothing else visible (`quiet`); see reference.py's
    /// `_status`: the status is kept only from the first quiet write that no managedFields entry explains.
    fn status_changes(&mut self, p: &Parsed, data: &[u8], quiet: bool, explained: bool) -> PyResult<Vec<PathId>> {
        let raw = p.status.clone().map(|r| text(data, r));
        let old = match self.statuses.get(&p.key) {
            Some(old) => old.clone(),
            None => {
                if quiet && !explained && raw.is_some() {
                    let table = self.tables.status(&mut self.paths, raw).map_err(invalid)?;
                    self.statuses.insert(p.key, table);
                }
                return Ok(Vec::new());
            }
        };
        let new = self.tables.status(&mut self.paths, raw).map_err(invalid)?;
        if Rc::ptr_eq(&new, &old) || new.digest == old.digest {
            return Ok(Vec::new());
        }
        self.statuses.insert(p.key, new.clone());
        let mut changed = Vec::new();
        if quiet {
            changed_leaves(&old, &new, &mut changed);
        }
        Ok(changed)
    }

    fn handover(
        &mut self,
        py: Python<'_>,
        head: (f64, u64, PathId),
        by: Option<WriterId>,
        before: Option<WriterId>,
        after: Option<WriterId>,
        values: Option<(i64, i64)>,
    ) -> PyResult<Py<PyAny>> {
        let (at, seq, path) = head;
        let party = |shared: &mut Shared, w: Option<WriterId>| -> PyResult<Py<PyAny>> {
            w.map_or(Ok(py.None()), |w| shared.writer(py, w))
        };
        let by = match by {
            Some(w) => self.writer(py, w)?,
            None => self.unattributed.clone_ref(py),
        };
        let (was, now) = match values {
            Some((was, now)) => (was.into_py_any(py)?, now.into_py_any(py)?),
            None => (py.None(), py.None()),
        };
        let fields: [Py<PyAny>; 8] = [
            at.into_py_any(py)?,
            seq.into_py_any(py)?,
            self.paths.py(py, path).into_any(),
            by,
            party(self, before)?,
            party(self, after)?,
            was,
            now,
        ];
        new_item(py, self.handover_class.bind(py), fields)
    }

    /// A `Write` as attribution.py reads it: its writers (the unattributed writer for none), the paths it changed
    /// (visible ones, then the status's) and its handovers.
    fn write_tuple<'py>(
        &mut self,
        py: Python<'py>,
        writers: &[WriterId],
        changed: &[PathId],
        status: &[PathId],
        handovers: Bound<'py, PyList>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let py_writers = PyList::empty(py);
        for w in writers {
            py_writers.append(self.writer(py, *w)?)?;
        }
        if writers.is_empty() {
            py_writers.append(self.unattributed.clone_ref(py))?;
        }
        let py_changed = PyList::empty(py);
        for &path in changed.iter().chain(status.iter()) {
            py_changed.append(self.paths.py(py, path))?;
        }
        PyTuple::new(py, [py_writers.into_any(), py_changed.into_any(), handovers.into_any()])
    }
}

const REMOVED: i64 = -1;

fn value_of(meta: &Table, body: &Table, path: PathId) -> i64 {
    meta.get(path).or_else(|| body.get(path)).map_or(REMOVED, i64::from)
}

fn visible(meta: &Table, body: &Table, path: PathId) -> bool {
    meta.has(path) || body.has(path)
}

#[pyclass(unsendable, module = "watcher._native")]
pub struct Front {
    shared: Shared,
    objects: KeyedMap<i64, ObjectState>,
}

#[pymethods]
impl Front {
    #[new]
    fn new(
        writer_class: Bound<'_, PyType>,
        handover_class: Bound<'_, PyType>,
        unattributed: Py<PyAny>,
    ) -> PyResult<Self> {
        for class in [&writer_class, &handover_class] {
            if !class.is_subclass_of::<PyTuple>()? || !tuple_layout(class) {
                return Err(PyTypeError::new_err("the writer and handover classes must be NamedTuples"));
            }
        }
        let mut paths = Paths::new();
        let fields = FieldSets::new(&mut paths, 20_000);
        let tables = Tables::new(&mut paths, 4096);
        let spec = paths.field(ROOT, "spec");
        let untraced = paths.field(spec, "replicas");
        let mut writers = Writers { ids: KeyedMap::default(), keys: Vec::new(), py: Vec::new(), server: Vec::new() };
        // (a manager no entry can have: "\0", so that it is never one of a real writer's)
        let unattributed_id = writers.id("\0", "", "");
        debug_assert_eq!(unattributed_id, UNATTRIBUTED);
        writers.py[UNATTRIBUTED as usize] = Some(unattributed.clone_ref(writer_class.py()));
        Ok(Front {
            shared: Shared {
                paths,
                fields,
                tables,
                writers,
                times: KeyedMap::default(),
                statuses: KeyedMap::default(),
                stamped: false,
                untraced,
                writer_class: writer_class.unbind(),
                handover_class: handover_class.unbind(),
                unattributed,
            },
            objects: KeyedMap::default(),
        })
    }

    /// Parse one event's JSON text: a `Parsed`, None for BOOKMARK and ERROR events, or (a str) why this parser
    /// does not read it: the caller then asks the reference reader, which names the problem. `observed_at`,
    /// `api_version` and `kind` are what the source knows (see events.py's `decode`).
    fn parse(
        &mut self,
        py: Python<'_>,
        chunk: &Bound<'_, PyBytes>,
        observed_at: Option<f64>,
        api_version: Option<&str>,
        kind: Option<&str>,
    ) -> PyResult<Py<PyAny>> {
        let given = event::Given { observed_at, api_version, kind };
        Ok(match event::parse(py, chunk, &given, &mut self.shared)? {
            Outcome::Event(parsed) => Py::new(py, parsed)?.into_any(),
            Outcome::Skipped => py.None(),
            Outcome::Refused(why) => PyString::new(py, &why).into_any().unbind(),
        })
    }

    /// Take an object first seen: its baseline, no write.
    fn baseline(&mut self, py: Python<'_>, p: &Parsed) -> PyResult<()> {
        let empty = self.shared.tables.empty.clone();
        let mut state = ObjectState {
            entries: Vec::new(),
            meta: empty.clone(),
            body: empty,
            controlled: false,
            generation: event::NO_GENERATION,
            removed: Box::new([]),
        };
        self.take(py, &mut state, p)?;
        self.objects.insert(p.key, state);
        Ok(())
    }

    /// Take this version as the object's baseline without counting a write (a relist).
    fn resync(&mut self, py: Python<'_>, p: &Parsed) -> PyResult<()> {
        let mut state = self.objects.remove(&p.key).ok_or_else(|| unknown(py, p))?;
        let taken = self.take(py, &mut state, p);
        self.objects.insert(p.key, state);
        taken
    }

    /// Attribute a write, the object's `seq`-th: a `Write`'s writers, changed paths and handovers (see
    /// attribution.py).
    fn attribute<'py>(&mut self, py: Python<'py>, p: &Parsed, now: f64, seq: u64) -> PyResult<Bound<'py, PyTuple>> {
        let state = self.objects.get_mut(&p.key).ok_or_else(|| unknown(py, p))?;
        let shared = &mut self.shared;
        let data = p.data.as_bytes(py);
        let raw = shared.group(p, data);
        let prev = std::mem::take(&mut state.entries);
        let mut write = Write::compare(py, shared, &raw, prev, p.latest)?;
        let before = Version::of(state);
        let changed = shared.changed_values(state, p, data, true)?;
        let losses = write.losses(py, shared, state)?;
        let status = shared.status_changes(p, data, changed.is_empty(), !write.writers.is_empty())?;
        let owned = if changed.is_empty() { &status } else { &changed };
        let untraced = owned.len() == 1 && owned[0] == shared.untraced && !shared.stamped;
        if write.writers.is_empty() && !owned.is_empty() && !untraced {
            let owner = write.owner_of_changes(py, shared, owned)?;
            write.writers.extend(owner);
        }
        // (A write that removed fields leaves its writer's entry as it was, if it did nothing else: an entry stamped
        // seconds before was not stamped by this write.)
        let stale = !losses.is_empty() && (now.trunc() as i64) - p.latest > STAMP_SLACK;
        if write.writers.is_empty() && shared.stamped && p.latest != 0 && !stale {
            let stamped = write.stamped_in(shared, p, state.generation, owned);
            write.writers.extend(stamped);
        }
        state.generation = p.generation;
        state.controlled = p.controlled; // (as of this version: a controller may adopt or orphan)
        let mut handovers = Handovers {
            list: PyList::empty(py),
            taken: KeyedSet::default(),
            at: now,
            seq,
            versions: Versions { before, after: Version::of(state) },
        };
        handovers.ownership(shared, &mut write)?;
        handovers.removals(shared, &write, state)?;
        handovers.losses(shared, &write.writers, &losses, state)?;
        if !(state.controlled && write.writers.len() == 1) {
            handovers.values(shared, &write, &changed, state)?;
        }
        state.entries = write.entries.into_iter().map(|(e, _)| e).collect();
        shared.write_tuple(py, &write.writers, &changed, &status, handovers.list)
    }

    /// Whether an entry with a subresource was seen (reference.py's `stamped`).
    #[getter]
    fn stamped(&self) -> bool {
        self.shared.stamped
    }

    /// Forget an object (deleted, or let go by the engine).
    fn forget(&mut self, key: i64) {
        self.objects.remove(&key);
        self.shared.statuses.remove(&key);
    }

    /// The paths a writer owns in the object's last version (None when it owns none there).
    fn owned(&mut self, py: Python<'_>, key: i64, writer: (Option<&str>, &str, &str)) -> PyResult<Py<PyAny>> {
        let manager = match writer.0 {
            Some(manager) => manager,
            None => return Ok(py.None()),
        };
        let id = self.shared.writers.id(manager, writer.1, writer.2);
        let entry = match self.objects.get(&key).and_then(|s| s.entries.iter().find(|e| e.writer == id)) {
            Some(entry) => entry,
            None => return Ok(py.None()),
        };
        let fields = entry.fields.clone();
        let texts: Vec<Py<PyString>> = fields.0.iter().map(|p| self.shared.paths.py(py, *p)).collect();
        PyFrozenSet::new(py, &texts)?.into_py_any(py)
    }

    fn __len__(&self) -> usize {
        self.objects.len()
    }
}

impl Front {
    fn take(&mut self, py: Python<'_>, state: &mut ObjectState, p: &Parsed) -> PyResult<()> {
        let shared = &mut self.shared;
        let data = p.data.as_bytes(py);
        let raw = shared.group(p, data);
        let mut entries = Vec::with_capacity(raw.len());
        for rw in &raw {
            let time = shared.stamp(py, rw.time)?;
            entries.push(Entry { writer: rw.writer, time, fields: shared.decode(py, rw)? });
        }
        state.entries = entries;
        shared.changed_values(state, p, data, false)?;
        if let std::collections::hash_map::Entry::Occupied(mut kept) = shared.statuses.entry(p.key) {
            let raw = p.status.clone().map(|r| text(data, r));
            kept.insert(shared.tables.status(&mut shared.paths, raw).map_err(invalid)?);
        }
        state.controlled = p.controlled;
        state.generation = p.generation;
        Ok(())
    }
}

/// Fields a write removed from their owners: (owner, field).
type Losses = Vec<(WriterId, PathId)>;

/// One write's managedFields entries against the object's previous ones.
struct Write<'r, 'a> {
    raw: &'r [RawWriter<'a>],
    prev: Vec<Entry>,
    entries: Vec<(Entry, bool)>, // (entry, kept from `prev` as is)
    writers: Vec<WriterId>,
    /// The leaves each writer's entry gained.
    gained: Vec<(WriterId, Vec<PathId>)>,
}

impl<'r, 'a> Write<'r, 'a> {
    /// The writers: entries whose time advanced, which appeared, or whose field set grew (see `_entries`).
    fn compare(
        py: Python<'_>,
        shared: &mut Shared,
        raw: &'r [RawWriter<'a>],
        prev: Vec<Entry>,
        latest: i64,
    ) -> PyResult<Self> {
        let mut entries = Vec::with_capacity(raw.len());
        let mut writers = Vec::new();
        let mut gained = Vec::new();
        for rw in raw {
            let old = prev.iter().find(|e| e.writer == rw.writer);
            let time = shared.stamp(py, rw.time)?;
            if let Some(old) = old {
                if old.time == time && time != latest {
                    entries.push((old.clone(), true));
                    continue;
                }
            }
            let fields = shared.decode(py, rw)?;
            let server = shared.writers.server(rw.writer);
            let old = match old {
                Some(old) => old,
                None => {
                    if !server {
                        gained.push((rw.writer, fields.0.to_vec()));
                        writers.push(rw.writer);
                    }
                    entries.push((Entry { writer: rw.writer, time, fields }, false));
                    continue;
                }
            };
            let same = Rc::ptr_eq(&old.fields, &fields);
            let grew = if same { Vec::new() } else { fields.minus(&old.fields) };
            entries.push(if same && old.time == time {
                (old.clone(), true)
            } else {
                (Entry { writer: rw.writer, time, fields }, false)
            });
            if (time > old.time || !grew.is_empty()) && !server {
                writers.push(rw.writer);
                if !grew.is_empty() {
                    gained.push((rw.writer, grew));
                }
            }
        }
        Ok(Write { raw, prev, entries, writers, gained })
    }

    /// The fields this write removed: lost by an entry, owned by none now, their value not there to see, in a
    /// version that has managedFields (see `_losses`). An entry kept as it was may have lost fields: each is decoded
    /// again (from the cache).
    fn losses(&mut self, py: Python<'_>, shared: &mut Shared, state: &ObjectState) -> PyResult<Losses> {
        let mut losses = Vec::new();
        if self.raw.is_empty() {
            return Ok(losses);
        }
        for entry in self.entries.iter_mut() {
            if entry.1 {
                refresh(py, shared, self.raw, entry)?;
            }
        }
        for old in &self.prev {
            if shared.writers.server(old.writer) {
                continue;
            }
            let mut lost = match self.entries.iter().find(|e| e.0.writer == old.writer) {
                Some(now) => old.fields.minus(&now.0.fields),
                None => old.fields.0.to_vec(),
            };
            shared.sort_by_text(&mut lost);
            for path in lost {
                if !visible(&state.meta, &state.body, path) && !self.entries.iter().any(|e| e.0.fields.contains(path)) {
                    losses.push((old.writer, path));
                }
            }
        }
        Ok(losses)
    }

    /// The one writer that owns every changed field (see `_owner_of_changes`).
    fn owner_of_changes(
        &mut self,
        py: Python<'_>,
        shared: &mut Shared,
        owned: &[PathId],
    ) -> PyResult<Option<WriterId>> {
        let mut owners = Vec::new();
        for entry in self.entries.iter_mut() {
            if shared.writers.server(entry.0.writer) {
                continue;
            }
            if entry.0.fields.contains_all(owned) {
                refresh(py, shared, self.raw, entry)?;
                if entry.0.fields.contains_all(owned) {
                    owners.push(entry.0.writer);
                }
            }
        }
        Ok(if owners.len() == 1 { Some(owners[0]) } else { None })
    }

    /// The one entry stamped in the write's second (see `_stamped_in`): of several, those that own a changed field;
    /// of several still, the status writer's when the spec's generation stayed, the others' when it moved.
    fn stamped_in(&self, shared: &Shared, p: &Parsed, generation: i64, owned: &[PathId]) -> Option<WriterId> {
        let no = event::NO_GENERATION;
        let spec = (p.generation != no && generation != no).then_some(p.generation != generation);
        let mut found: Vec<&Entry> = self
            .entries
            .iter()
            .map(|e| &e.0)
            .filter(|e| e.time == p.latest && !shared.writers.server(e.writer))
            .collect();
        if found.len() > 1 && !owned.is_empty() {
            let owning: Vec<&Entry> =
                found.iter().copied().filter(|e| owned.iter().any(|p| e.fields.contains(*p))).collect();
            if !owning.is_empty() {
                found = owning;
            }
        }
        if let (true, Some(spec)) = (found.len() > 1, spec) {
            found.retain(|e| (shared.writers.subresource(e.writer) == "status") != spec);
        }
        (found.len() == 1).then(|| found[0].writer)
    }

    /// The fields a writer's entry holds in this version.
    fn fields_of(&self, writer: WriterId) -> Option<Rc<FieldSet>> {
        self.entries.iter().find(|e| e.0.writer == writer).map(|e| e.0.fields.clone())
    }

    /// Whether any entry of this version holds a field.
    fn owns(&self, path: PathId) -> bool {
        self.entries.iter().any(|e| e.0.fields.contains(path))
    }
}

/// An object's visible values in one version: its labels and annotations (`meta`) and its body.
struct Version {
    meta: Rc<Table>,
    body: Rc<Table>,
}

impl Version {
    fn of(state: &ObjectState) -> Version {
        Version { meta: state.meta.clone(), body: state.body.clone() }
    }
}

/// An object's visible values before and after a write.
struct Versions {
    before: Version,
    after: Version,
}

impl Versions {
    /// A field's value before and after (REMOVED where it is not there).
    fn was_now(&self, path: PathId) -> (i64, i64) {
        let (before, after) = (&self.before, &self.after);
        (value_of(&before.meta, &before.body, path), value_of(&after.meta, &after.body, path))
    }

    /// A field's value before and after, if it is visible in either.
    fn visible(&self, path: PathId) -> Option<(i64, i64)> {
        let (before, after) = (&self.before, &self.after);
        (visible(&before.meta, &before.body, path) || visible(&after.meta, &after.body, path))
            .then(|| self.was_now(path))
    }
}

/// A write's handovers, in order, and the fields an ownership handover took (no value handover repeats them).
struct Handovers<'py> {
    list: Bound<'py, PyList>,
    taken: KeyedSet<PathId>,
    at: f64,
    seq: u64,
    versions: Versions,
}

impl Handovers<'_> {
    /// A field `taker` took from `loser`: an ownership handover, with its values where they are visible.
    fn taken_from(&mut self, shared: &mut Shared, path: PathId, taker: WriterId, loser: WriterId) -> PyResult<()> {
        let head = (self.at, self.seq, path);
        let values = self.versions.visible(path);
        self.list.append(shared.handover(self.list.py(), head, Some(taker), Some(loser), Some(taker), values)?)?;
        self.taken.insert(path);
        Ok(())
    }

    /// Ownership: leaves a writer gained that another manager owned before and no longer owns.
    fn ownership(&mut self, shared: &mut Shared, write: &mut Write<'_, '_>) -> PyResult<()> {
        for (taker, paths) in &mut write.gained {
            shared.sort_by_text(paths); // (reference.py's order)
            for &path in paths.iter() {
                for owned in &write.prev {
                    let loser = owned.writer;
                    if loser == *taker
                        || !owned.fields.contains(path)
                        || shared.writers.manager(loser) == shared.writers.manager(*taker)
                    {
                        continue;
                    }
                    if let Some(i) = write.entries.iter().position(|e| e.0.writer == loser) {
                        if write.entries[i].1 {
                            refresh(self.list.py(), shared, write.raw, &mut write.entries[i])?;
                        }
                        if write.entries[i].0.fields.contains(path) {
                            continue;
                        }
                    }
                    self.taken_from(shared, path, *taker, loser)?;
                }
            }
        }
        Ok(())
    }

    /// Removals (see `_removals`): a field set again after a write removed it is taken back from its remover ...
    fn removals(&mut self, shared: &mut Shared, write: &Write<'_, '_>, state: &mut ObjectState) -> PyResult<()> {
        for (taker, paths) in &write.gained {
            for &path in paths.iter() {
                if self.taken.contains(&path)
                    || write.prev.iter().any(|e| e.writer != *taker && e.fields.contains(path))
                {
                    continue;
                }
                let remover = match state.pop_removed(path) {
                    Some(remover) if shared.writers.manager(remover) != shared.writers.manager(*taker) => remover,
                    _ => continue,
                };
                self.taken_from(shared, path, *taker, remover)?;
            }
        }
        Ok(())
    }

    /// ... and a field removed from its owner is taken by the write's writer (unattributed when none or several).
    fn losses(
        &mut self,
        shared: &mut Shared,
        writers: &[WriterId],
        losses: &[(WriterId, PathId)],
        state: &mut ObjectState,
    ) -> PyResult<()> {
        let remover = if writers.len() == 1 { writers[0] } else { UNATTRIBUTED };
        for &(loser, path) in losses {
            if self.taken.contains(&path) || shared.writers.manager(remover) == shared.writers.manager(loser) {
                continue;
            }
            self.taken_from(shared, path, remover, loser)?;
            state.note_removed(path, remover);
        }
        Ok(())
    }

    /// Values: each changed visible value not already an ownership handover (see `_value_handovers`).
    fn values(
        &mut self,
        shared: &mut Shared,
        write: &Write<'_, '_>,
        changed: &[PathId],
        state: &mut ObjectState,
    ) -> PyResult<()> {
        let writers = &write.writers;
        let sole = if writers.len() == 1 { write.fields_of(writers[0]) } else { None };
        for &path in changed {
            if self.taken.contains(&path) {
                continue;
            }
            let (was, now) = self.versions.was_now(path);
            // A value that appears is taken from its remover, if a write removed it; set for the first time, from
            // nobody: no handover.
            let remover = if was == REMOVED {
                match state.pop_removed(path) {
                    Some(remover) => Some(remover),
                    None => continue,
                }
            } else {
                None
            };
            let by = match &sole {
                // (a field nobody owns, such as one the API server derives, was changed by the one writer)
                Some(fields) => (fields.contains(path) || !write.owns(path)).then_some(writers[0]),
                None => writers.iter().copied().find(|w| write.fields_of(*w).is_some_and(|f| f.contains(path))),
            };
            let mut owner = if writers.is_empty() {
                write.entries.iter().find(|e| e.0.fields.contains(path)).map(|e| e.0.writer)
            } else {
                None
            };
            let by_id = by.unwrap_or(UNATTRIBUTED);
            if let Some(remover) = remover.filter(|r| *r != by_id) {
                owner = Some(remover);
            }
            let head = (self.at, self.seq, path);
            self.list.append(shared.handover(self.list.py(), head, by, owner, None, Some((was, now)))?)?;
            if now == REMOVED {
                state.note_removed(path, by_id);
            }
        }
        Ok(())
    }
}

/// Whether instances of a tuple subclass are laid out as tuples (no `__dict__`, no slots: a NamedTuple).
fn tuple_layout(class: &Bound<'_, PyType>) -> bool {
    // SAFETY: reading the size fields of a live type object.
    unsafe {
        let class = class.as_type_ptr();
        let tuple = std::ptr::addr_of_mut!(ffi::PyTuple_Type);
        (*class).tp_basicsize == (*tuple).tp_basicsize && (*class).tp_itemsize == (*tuple).tp_itemsize
    }
}

/// An instance of a NamedTuple class (checked by `tuple_layout`) holding `items`, made as `tuple.__new__` makes one
/// (its allocator, then the items), without the call and the intermediate tuple: one is made per handover.
fn new_item<const N: usize>(py: Python<'_>, class: &Bound<'_, PyType>, items: [Py<PyAny>; N]) -> PyResult<Py<PyAny>> {
    // SAFETY: the class's allocator returns a zeroed tuple of N items (or NULL with an exception set); each item is
    // set once, to an owned reference, before the object is handed out.
    unsafe {
        let class = class.as_type_ptr();
        let alloc = (*class).tp_alloc.unwrap_or(ffi::PyType_GenericAlloc);
        let made = Bound::from_owned_ptr_or_err(py, alloc(class, N as ffi::Py_ssize_t))?;
        for (i, item) in items.into_iter().enumerate() {
            ffi::PyTuple_SET_ITEM(made.as_ptr(), i as ffi::Py_ssize_t, item.into_ptr());
        }
        Ok(made.unbind())
    }
}

/// What a writer owns now: an entry kept from the previous version may since have lost fields.
fn refresh(py: Python<'_>, shared: &mut Shared, raw: &[RawWriter<'_>], entry: &mut (Entry, bool)) -> PyResult<()> {
    let rw = match raw.iter().find(|r| r.writer == entry.0.writer) {
        Some(rw) => rw,
        None => return Ok(()),
    };
    let fresh = shared.decode(py, rw)?;
    if !Rc::ptr_eq(&fresh, &entry.0.fields) {
        *entry = (Entry { writer: entry.0.writer, time: entry.0.time, fields: fresh }, false);
    }
    Ok(())
}
