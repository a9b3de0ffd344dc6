//! Storage in a `static` handed out once as `&'static mut`: where the image keeps its two
//! devices and their HALs, so that no stack frame holds a device (tens of KiB each).
//!
//! The value is a constant (`None`), so it is in the image (`.data`) rather than written at
//! run time: writing a `None` of a device type through a pointer makes the compiler build
//! the whole value on the stack first, which is what this storage is for avoiding.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};

/// A `static` that gives out one `&'static mut` to its value.
pub struct StaticCell<T> {
    taken: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through the one `&'static mut` that `take` gives out, so
// sharing the cell between threads shares nothing (`T: Send`: the reference may move).
unsafe impl<T: Send> Sync for StaticCell<T> {}

impl<T> StaticCell<T> {
    /// A cell holding `value`.
    pub const fn new(value: T) -> Self {
        StaticCell {
            taken: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// The value, the first time; `None` afterwards.
    // One `&mut` from `&self` ever: `taken` guards it.
    #[allow(clippy::mut_from_ref)]
    pub fn take(&'static self) -> Option<&'static mut T> {
        if self.taken.swap(true, Ordering::AcqRel) {
            return None;
        }
        // SAFETY: `taken` was false: no reference to the value exists, and none will be given
        // out again.
        Some(unsafe { &mut *self.value.get() })
    }
}
