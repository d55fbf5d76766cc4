//! Reading a struct that starts with `struct_size` as written by a peer of
//! another minor version: the fields the writer had are copied, the rest
//! keep the reader's defaults.

/// Copy `*p` over `base`, as far as the writer's `struct_size` and this
/// build's `size_of::<T>()` both reach.
///
/// # Safety
/// `p` points at a readable struct whose first field is a `usize` giving
/// its size, and every field of `T` accepts any bit pattern the writer may
/// have put there (integers, pointers, `Option<fn>`).
pub unsafe fn read_over<T>(p: *const T, base: T) -> T {
    let declared = std::ptr::read_unaligned(p as *const usize);
    let mut out = std::mem::MaybeUninit::new(base);
    std::ptr::copy_nonoverlapping(
        p as *const u8,
        out.as_mut_ptr() as *mut u8,
        declared.min(std::mem::size_of::<T>()),
    );
    out.assume_init()
}

/// [`read_over`] with every field the writer lacks zero: for tables, where
/// zero means absent (null pointer, `None` function, empty string).
///
/// # Safety
/// As for [`read_over`], and all-zero must be a valid `T`.
pub unsafe fn read_zero_filled<T>(p: *const T) -> T {
    read_over(p, std::mem::zeroed())
}
