//! rlx-runtime's test files compare claim lists against
//! `rlx_mlx::supported_ops::SUPPORTED_OPS`, the in-tree MLX backend's
//! list. With the plugin serving `Device::Mlx`, the list that answers is
//! the plugin's: whatever backend is registered for the device when the
//! list is read (none registered: empty).

pub mod supported_ops {
    use rlx_ir::OpKind;
    use rlx_runtime::Device;

    /// Dereferences to the claim list of the backend registered for
    /// `Device::Mlx` (the plugin's supported ops).
    pub struct RegisteredClaims;

    impl std::ops::Deref for RegisteredClaims {
        type Target = [OpKind];
        fn deref(&self) -> &[OpKind] {
            rlx_runtime::registry::backend_for(Device::Mlx)
                .map(|b| b.supported_ops())
                .unwrap_or(&[])
        }
    }

    /// A reference, as the in-tree crate's `&[OpKind]` is, so that
    /// `f(SUPPORTED_OPS)` coerces to `&[OpKind]`.
    pub static SUPPORTED_OPS: &RegisteredClaims = &RegisteredClaims;
}
