//! A counting global allocator for memory measurements: a test binary of its own declares
//! `#[global_allocator] static GLOBAL: Counting = Counting;` and reads [`live`].

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};

/// The system allocator, counting the bytes live (every thread of the process).
pub struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);

/// Bytes allocated and not yet freed through [`Counting`].
pub fn live() -> i64 {
    LIVE.load(Ordering::Relaxed)
}

// SAFETY: every call is passed to the system allocator unchanged; only a counter is kept.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: as the caller's contract for `GlobalAlloc::alloc`.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: as the caller's contract for `GlobalAlloc::dealloc`.
        unsafe { System.dealloc(ptr, layout) }
    }
}
