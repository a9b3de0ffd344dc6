//! Storage in a `static` handed out once as `&'static mut`: where an image keeps its devices
//! (tens of KiB each) so that no stack frame holds one.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};

/// A `static` that gives out one `&'static mut` to its value.
///
/// Give it a constant value (`None`): it is then in the image (`.data`) rather than written at
/// run time, and writing a large value at run time makes the compiler build it on the stack
/// first, which is what this storage is for avoiding.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_gives_its_value_once() {
        static CELL: StaticCell<Option<u32>> = StaticCell::new(None);
        let v = CELL.take().unwrap();
        *v = Some(7);
        assert_eq!(*v, Some(7));
        assert!(CELL.take().is_none());
    }
}
