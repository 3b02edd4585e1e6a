//! One object's handover log, for the fight rule (handovers.py's `HandoverLog` is the reference, method for method:
//! tests/unit/test_handovers.py runs both on the same handovers and compares every answer).
//!
//! The same five 32-bit words a handover as the reference: the time in microseconds (52 bits, over two words) with the
//! handover's key index (12 bits), the write counter, and the value hashes before and after, cut to 32 bits; and the
//! same tuple of keys (path and parties), shared with every log that names the same keys in the same order, from the
//! same kind of pools. What the reference does a word at a time in Python (logging a write's handovers, trimming,
//! counting the returns of a path) runs here without a Python object per word.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyString, PyTuple, PyType};
use pyo3::IntoPyObjectExt;

const SLOTS: usize = 5;
const LOW: u64 = (1 << 32) - 1;
const KEY_BITS: u32 = 12;
const KEY_MASK: u32 = (1 << KEY_BITS) - 1;
const MAX_TIME: i64 = 1 << 52;
/// The value hash of no value.
const NONE: u32 = u32::MAX;
/// The pools start again when full (handovers.py's `_MAX_KEYS`).
const MAX_KEYS: usize = 10_000;
/// A key's members: path, by, before, after (None when no party).
const PATH: usize = 0;
const BY: usize = 1;
const BEFORE: usize = 2;
const AFTER: usize = 3;

/// The keys every log shares, and the tuples of keys (handovers.py's `_keys` and `_key_tuples`).
static KEYS: PyOnceLock<Py<PyDict>> = PyOnceLock::new();
static KEY_TUPLES: PyOnceLock<Py<PyDict>> = PyOnceLock::new();

/// An object's recent handovers, oldest first, bounded by count and age (see `trim`).
#[pyclass(module = "watcher._native")]
pub struct HandoverLog {
    words: Vec<u32>,
    /// Its keys, each a tuple (path, by, before, after), in the order the words index them.
    keys: Py<PyTuple>,
    handover_class: Py<PyType>,
}

/// The copy of `item` every log shares (handovers.py's `_shared`).
fn shared<'py>(pool: &PyOnceLock<Py<PyDict>>, item: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = item.py();
    let pool = pool.get_or_init(py, || PyDict::new(py).unbind()).bind(py);
    if let Some(found) = pool.get_item(&item)? {
        return Ok(found);
    }
    if pool.len() >= MAX_KEYS {
        pool.clear();
    }
    pool.set_item(&item, &item)?;
    Ok(item)
}

fn item<'a, 'py>(tuple: &'a Bound<'py, PyTuple>, i: usize) -> Borrowed<'a, 'py, PyAny> {
    // SAFETY: callers index within the tuple (keys have four members; key indices are below the keys' length).
    unsafe { tuple.get_borrowed_item_unchecked(i) }
}

/// Python's `==`, with its shortcut for the same object.
fn same(a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>) -> PyResult<bool> {
    if a.is(b) {
        return Ok(true);
    }
    a.eq(b)
}

fn party<'py>(value: Bound<'py, PyAny>) -> Option<Bound<'py, PyAny>> {
    (!value.is_none()).then_some(value)
}

/// The low 32 bits of a Python int (`value & 0xFFFFFFFF`, negative ones as two's complement).
fn low_word(value: &Bound<'_, PyAny>) -> PyResult<u32> {
    // SAFETY: any object may be passed; a non-int sets an exception and returns the all-ones value.
    let bits = unsafe { ffi::PyLong_AsUnsignedLongLongMask(value.as_ptr()) };
    if bits == u64::MAX {
        if let Some(err) = PyErr::take(value.py()) {
            return Err(err);
        }
    }
    Ok((bits & LOW) as u32)
}

/// handovers.py's `cut`: a value hash as the log keeps it.
fn cut(value: &Bound<'_, PyAny>) -> PyResult<u32> {
    if value.is_none() {
        return Ok(NONE);
    }
    let low = low_word(value)?;
    Ok(if low == NONE { low - 1 } else { low })
}

/// handovers.py's `_micros`: Python's `round` (half to even), clamped.
fn micros(at: f64) -> i64 {
    ((at * 1e6).round_ties_even() as i64).clamp(0, MAX_TIME - 1)
}

/// The members of a `Handover` (a NamedTuple of eight).
fn members<'py>(handover: &Bound<'py, PyAny>) -> PyResult<[Bound<'py, PyAny>; 8]> {
    let tuple = handover.cast::<PyTuple>().map_err(|_| PyTypeError::new_err("a Handover is a NamedTuple"))?;
    if tuple.len() != 8 {
        return Err(PyTypeError::new_err("a Handover has eight members"));
    }
    Ok(std::array::from_fn(|i| {
        // SAFETY: the tuple has eight items (checked above).
        unsafe { tuple.get_borrowed_item_unchecked(i) }.to_owned()
    }))
}

/// `handovers[-limit:]`, as Python slices it.
fn last(len: usize, limit: i64) -> usize {
    match limit {
        0 => 0,
        l if l > 0 => len.saturating_sub(l as usize),
        l => (l.unsigned_abs() as usize).min(len),
    }
}

impl HandoverLog {
    fn size(&self) -> usize {
        self.words.len() / SLOTS
    }

    fn time(&self, i: usize) -> i64 {
        let base = i * SLOTS;
        (((self.words[base + 1] >> KEY_BITS) as i64) << 32) | self.words[base] as i64
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the words' memory, read as bytes in the machine's order (as `array.tobytes` does).
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.words.len() * 4) }
    }

    /// handovers.py's `_may_come_back`: the value hash's bytes anywhere among the words' bytes say maybe.
    fn may_come_back_of(&self, handover: &[Bound<'_, PyAny>; 8]) -> PyResult<bool> {
        if !handover[5].is_none() {
            return Ok(true);
        }
        if handover[7].is_none() {
            return Ok(false);
        }
        let wanted = cut(&handover[7])?.to_ne_bytes();
        Ok(self.bytes().windows(4).any(|w| w == wanted))
    }

    fn index_of(&self, handover: &[Bound<'_, PyAny>; 8]) -> PyResult<Option<usize>> {
        let keys = self.keys.bind(handover[2].py());
        for (i, key) in keys.iter().enumerate() {
            let key = key.cast_into::<PyTuple>()?;
            // (a key is (path, by, before, after), a handover (at, seq, path, by, before, after, was, now))
            if same(&item(&key, PATH), &handover[2])?
                && same(&item(&key, BY), &handover[3])?
                && same(&item(&key, BEFORE), &handover[4])?
                && same(&item(&key, AFTER), &handover[5])?
            {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    fn push(&mut self, handover: &Bound<'_, PyAny>) -> PyResult<()> {
        let members = members(handover)?;
        let py = handover.py();
        let index = match self.index_of(&members)? {
            Some(found) => found,
            None => {
                let keys = self.keys.bind(py);
                let index = keys.len();
                if index > KEY_MASK as usize {
                    return Err(PyValueError::new_err("too many distinct handovers for one log"));
                }
                let key = PyTuple::new(py, &members[2..6])?.into_any();
                let mut all: Vec<Bound<'_, PyAny>> = keys.iter().collect();
                all.push(shared(&KEYS, key)?);
                let all = shared(&KEY_TUPLES, PyTuple::new(py, all)?.into_any())?;
                self.keys = all.cast_into::<PyTuple>()?.unbind();
                index
            }
        };
        let at = micros(members[0].extract::<f64>()?) as u64;
        let words = [
            (at & LOW) as u32,
            ((at >> 32) << KEY_BITS) as u32 | index as u32,
            low_word(&members[1])?,
            cut(&members[6])?,
            cut(&members[7])?,
        ];
        if self.words.capacity() < self.words.len() + SLOTS {
            // (grown by an eighth, as Python's array grows, not doubled: most logs stay short)
            self.words.reserve_exact(SLOTS + self.words.len() / 8);
        }
        self.words.extend_from_slice(&words);
        Ok(())
    }

    fn trim_to(&mut self, py: Python<'_>, horizon: f64, limit: i64) -> PyResult<()> {
        let count = self.size();
        if count == 0 {
            return Ok(());
        }
        let oldest = micros(horizon);
        if count as i64 <= limit && self.time(0) >= oldest {
            return Ok(());
        }
        let expired = (0..count).find(|&i| self.time(i) >= oldest).unwrap_or(count);
        let over = (count as i64).saturating_sub(limit).clamp(0, count as i64) as usize;
        self.words.drain(..expired.max(over) * SLOTS);
        if self.words.capacity() > 2 * self.words.len() + 4 * SLOTS {
            self.words.shrink_to(self.words.len() + self.words.len() / 8);
        }
        if self.keys.bind_borrowed(py).len() > 2 * self.size() + 4 {
            self.compact(py)?;
        }
        Ok(())
    }

    /// Keep only the keys still indexed, renumbered in the order they are first used.
    fn compact(&mut self, py: Python<'_>) -> PyResult<()> {
        let old = self.keys.bind(py).clone();
        let mut keys: Vec<Bound<'_, PyAny>> = Vec::new();
        let mut renumbered: Vec<Option<u32>> = vec![None; old.len()];
        for i in (1..self.words.len()).step_by(SLOTS) {
            let index = (self.words[i] & KEY_MASK) as usize;
            let new = match renumbered[index] {
                Some(new) => new,
                None => {
                    let new = keys.len() as u32;
                    renumbered[index] = Some(new);
                    keys.push(item(&old, index).to_owned());
                    new
                }
            };
            self.words[i] = self.words[i] & !KEY_MASK | new;
        }
        self.keys = shared(&KEY_TUPLES, PyTuple::new(py, keys)?.into_any())?.cast_into::<PyTuple>()?.unbind();
        Ok(())
    }

    /// Which keys are of `path` (Python's `==`).
    fn of_path(&self, path: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
        (0..self.keys.bind(path.py()).len()).map(|i| same(&item(&self.key(path.py(), i)?, PATH), path)).collect()
    }

    fn key<'py>(&self, py: Python<'py>, index: usize) -> PyResult<Bound<'py, PyTuple>> {
        Ok(item(self.keys.bind(py), index).to_owned().cast_into::<PyTuple>()?)
    }

    fn at<'py>(&self, py: Python<'py>, i: usize) -> PyResult<Bound<'py, PyAny>> {
        let base = i * SLOTS;
        let key = self.key(py, (self.words[base + 1] & KEY_MASK) as usize)?;
        let value = |word: u32| if word == NONE { Ok(py.None()) } else { word.into_py_any(py) };
        let members = (
            self.time(i) as f64 / 1e6,
            self.words[base + 2],
            item(&key, PATH),
            item(&key, BY),
            item(&key, BEFORE),
            item(&key, AFTER),
            value(self.words[base + 3])?,
            value(self.words[base + 4])?,
        );
        self.handover_class.bind(py).call1(members)
    }
}

#[pymethods]
impl HandoverLog {
    /// An empty log; `handover_class` is the `Handover` NamedTuple its handovers are read back as.
    #[new]
    fn new(py: Python<'_>, handover_class: Py<PyType>) -> Self {
        HandoverLog { words: Vec::new(), keys: PyTuple::empty(py).unbind(), handover_class }
    }

    /// How many handovers the log holds.
    #[pyo3(name = "size")]
    fn py_size(&self) -> usize {
        self.size()
    }

    /// Log one write's handovers, then trim the log; return the paths of those that may have come back (each once,
    /// in order; see `may_come_back_of`), as tested before they were logged.
    #[pyo3(signature = (handovers, *, horizon, limit))]
    fn record<'py>(
        &mut self,
        handovers: &Bound<'py, PyList>,
        horizon: f64,
        limit: i64,
    ) -> PyResult<Bound<'py, PyList>> {
        let py = handovers.py();
        let candidates = PyList::empty(py);
        for handover in handovers.iter() {
            let members = members(&handover)?;
            if self.may_come_back_of(&members)? && !candidates.contains(&members[2])? {
                candidates.append(&members[2])?;
            }
        }
        for handover in handovers.iter().skip(last(handovers.len(), limit)) {
            self.push(&handover)?;
        }
        self.trim_to(py, horizon, limit)?;
        Ok(candidates)
    }

    /// How many handovers of `path` returned it to an owner or a value it had before (within the log).
    fn backs(&self, path: &Bound<'_, PyAny>) -> PyResult<usize> {
        let py = path.py();
        let mine = self.of_path(path)?;
        let mut back = 0;
        let mut owners: Vec<Bound<'_, PyAny>> = Vec::new();
        let mut values: Vec<u32> = Vec::new();
        for base in (0..self.words.len()).step_by(SLOTS) {
            let index = (self.words[base + 1] & KEY_MASK) as usize;
            if !mine[index] {
                continue;
            }
            let key = self.key(py, index)?;
            let (before, after) = (party(item(&key, BEFORE).to_owned()), party(item(&key, AFTER).to_owned()));
            let (was, now) = (self.words[base + 3], self.words[base + 4]);
            let mut owner_back = false;
            if let Some(after) = &after {
                for owner in &owners {
                    if same(owner, after)? {
                        owner_back = true;
                        break;
                    }
                }
            }
            if owner_back || (now != NONE && values.contains(&now)) {
                back += 1;
            }
            if let Some(before) = before {
                owners.push(before);
            }
            if was != NONE && !values.contains(&was) {
                values.push(was);
            }
        }
        Ok(back)
    }

    /// The one writer behind every handover of `path`, when they are all value flips (handovers.py's
    /// `single_writer`); None otherwise.
    fn single_writer<'py>(&self, path: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let py = path.py();
        let mut found: Option<Bound<'py, PyAny>> = None;
        for i in 0..self.keys.bind(py).len() {
            let key = self.key(py, i)?;
            if !same(&item(&key, PATH), path)? {
                continue;
            }
            if !item(&key, AFTER).is_none() {
                return Ok(None);
            }
            for party in [item(&key, BY), item(&key, BEFORE)] {
                if party.is_none() {
                    continue;
                }
                match &found {
                    None => found = Some(party.to_owned()),
                    Some(f) if !same(&party, f)? => return Ok(None),
                    Some(_) => {}
                }
            }
        }
        match found {
            Some(f) if !f.getattr(pyo3::intern!(py, "manager"))?.is_none() => Ok(Some(f)),
            _ => Ok(None),
        }
    }

    /// The handovers of one path, or of any path in a set, oldest first.
    fn of<'py>(&self, paths: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let py = paths.py();
        let mine: Vec<bool> = if paths.is_instance_of::<PyString>() {
            self.of_path(paths)?
        } else {
            let count = self.keys.bind(py).len();
            (0..count).map(|i| paths.contains(item(&self.key(py, i)?, PATH))).collect::<PyResult<_>>()?
        };
        let found = PyList::empty(py);
        for i in 0..self.size() {
            if mine[(self.words[i * SLOTS + 1] & KEY_MASK) as usize] {
                found.append(self.at(py, i)?)?;
            }
        }
        Ok(found)
    }

    /// Every handover logged, oldest first (value hashes cut to 32 bits).
    fn handovers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let all = PyList::empty(py);
        for i in 0..self.size() {
            all.append(self.at(py, i)?)?;
        }
        Ok(all)
    }
}
