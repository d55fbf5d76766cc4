//! A shared library that is not an RLX plugin: no `rlx_plugin_entry`.
#[no_mangle]
pub extern "C" fn some_other_library_function() -> i32 {
    42
}
