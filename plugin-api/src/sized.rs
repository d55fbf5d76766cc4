//! Header §1, the size rule: every growable struct starts with
//! `struct_size`, the end of the last field its writer knows
//! (`offsetof(last) + sizeof(last)`, PJRT's convention), never `sizeof`
//! with tail padding. A reader uses a field only when `struct_size` reaches
//! its end and never reads a byte beyond `struct_size`.
//!
//! [`abi_struct!`] gives each struct its [`AbiStruct::STRUCT_SIZE`] and
//! checks at compile time that the named field is the last one and that no
//! tail padding follows it (explicit `reserved` fields fill it), so the
//! next minor's field can never start inside bytes an older writer counted
//! as padding.

/// A struct that crosses the ABI and starts with `struct_size`.
pub trait AbiStruct: Sized {
    /// What this build writes in `struct_size`: the end of its last field.
    const STRUCT_SIZE: usize;
}

/// `abi_struct!(Type, last_field: FieldType)`: implement [`AbiStruct`] and
/// assert, at compile time, that `last_field` ends exactly at
/// `size_of::<Type>()`.
#[macro_export]
macro_rules! abi_struct {
    ($t:ty, $f:ident : $ft:ty) => {
        impl $crate::sized::AbiStruct for $t {
            const STRUCT_SIZE: usize =
                ::std::mem::offset_of!($t, $f) + ::std::mem::size_of::<$ft>();
        }
        const _: () = assert!(
            <$t as $crate::sized::AbiStruct>::STRUCT_SIZE == ::std::mem::size_of::<$t>(),
            concat!(
                stringify!($t),
                ": `",
                stringify!($f),
                "` is not the last field, or tail padding follows it"
            )
        );
    };
}

/// Copy `*p` over `base`, as far as the writer's `struct_size` and this
/// build's `size_of::<T>()` both reach: the bytes beyond the writer's
/// `struct_size` are never read.
///
/// # Safety
/// `p` points at a readable struct whose first field is a `usize` giving
/// its size, that size is readable, and every field of `T` accepts any bit
/// pattern the writer may have put there (integers, pointers, `Option<fn>`).
pub unsafe fn read_over<T>(p: *const T, base: T) -> T {
    // SAFETY: the caller guarantees `p` is readable for at least a usize.
    let declared = unsafe { std::ptr::read_unaligned(p as *const usize) };
    let mut out = std::mem::MaybeUninit::new(base);
    // SAFETY: `p` is readable for `declared` bytes (the writer's promise),
    // `out` is writable for size_of::<T>(), and every field accepts any
    // bit pattern (the caller's promise).
    unsafe {
        std::ptr::copy_nonoverlapping(
            p as *const u8,
            out.as_mut_ptr() as *mut u8,
            declared.min(std::mem::size_of::<T>()),
        );
        out.assume_init()
    }
}

/// [`read_over`] with every field the writer lacks zero: for tables, where
/// zero means absent (null pointer, `None` function, empty string).
///
/// # Safety
/// As for [`read_over`], and all-zero must be a valid `T`.
pub unsafe fn read_zero_filled<T>(p: *const T) -> T {
    // SAFETY: the caller guarantees all-zero is a valid T and `p` is as
    // read_over requires.
    unsafe { read_over(p, std::mem::zeroed()) }
}

/// The `struct_size` a peer declared, for checks before reading.
///
/// # Safety
/// `p` is null or readable for a `usize`.
pub unsafe fn declared_size<T>(p: *const T) -> Option<usize> {
    // SAFETY: non-null `p` is readable for a usize (the caller's promise).
    (!p.is_null()).then(|| unsafe { std::ptr::read_unaligned(p as *const usize) })
}
