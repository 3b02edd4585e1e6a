//! fightwatch's native attribution front end, a Python extension module (`watcher._native`).
//!
//! The Python engine (`watcher/detection`) is the reference: this module parses watch events and attributes
//! writes exactly as it does, with the per-object state in native structures instead of Python objects, and
//! hands the detectors only what they read. A test replays every recorded capture through both and compares the
//! findings byte for byte.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::prelude::*;

mod digest;
mod event;
mod fields;
mod front;
mod log;
mod paths;
mod values;

/// The system allocator, counting the bytes this module holds (tracemalloc sees only Python's allocations).
struct Counting;

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATED.fetch_add(new_size.wrapping_sub(layout.size()), Ordering::Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Bytes allocated by this module and not yet freed (its state and caches).
#[pyfunction]
fn allocated() -> usize {
    ALLOCATED.load(Ordering::Relaxed)
}

/// The key an object is tracked by (`Parsed.key`): a 64-bit hash of its uid.
#[pyfunction]
fn object_key(uid: &str) -> i64 {
    event::object_key(uid)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<front::Front>()?;
    m.add_class::<event::Parsed>()?;
    m.add_class::<log::HandoverLog>()?;
    m.add_function(wrap_pyfunction!(allocated, m)?)?;
    m.add_function(wrap_pyfunction!(object_key, m)?)?;
    Ok(())
}
