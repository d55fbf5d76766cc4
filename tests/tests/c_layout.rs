//! The C header is the ABI: every struct and field of
//! `plugin-api/include/rlx_plugin.h`, as the system C compiler lays it out
//! (tests/c/layout.c), has the size and offset of the Rust definition of
//! the same name, and the Rust structs have no field the header lacks.

use abi_stable::StableAbi;
use rlx_plugin_api::tables::*;
use rlx_plugin_api::tensor::{RlxDataType, RlxDevice, RlxDlTensor, RlxNamedTensor, RlxTensor};
use rlx_plugin_api::{AbiStruct, RlxAbiVersion, RlxKeyValue, RlxStr};
use rlx_plugin_tests::{c_constants, c_layout, LayoutRow};
use std::collections::BTreeSet;
use std::mem::{offset_of, size_of};

extern "C" {
    // tests/c/layout.c: the header's custom-op constants.
    static rlx_c_custom_op_sizes: [usize; 4];
    static rlx_c_custom_op_enums: [u32; 8];
    // The header's RLX_STATUS_* in number order.
    static rlx_c_status_codes: [u32; 8];
    // RLX_FEED_*, RLX_ROLE_STATE, RLX_OWNERSHIP_SKIP, RLX_MAX_SUBMITTED.
    static rlx_c_state_enums: [u32; 6];
    // RLX_HOST_API_HEADER_SIZE, RLX_HOST_API_SIZE_1_0.
    static rlx_c_host_api_sizes: [usize; 2];
}

fn field_size<T, F>(_: fn(&T) -> &F) -> usize {
    size_of::<F>()
}

/// For each listed struct: a row for the struct, a row per field, and the
/// field names abi_stable records for the type (so a Rust field missing
/// from this list, and hence from the header check, fails the test).
macro_rules! rust_layout {
    ($($t:ident { $($f:ident),* $(,)? }),* $(,)?) => {{
        let mut rows = Vec::new();
        let mut names: Vec<(&'static str, Vec<&'static str>, Vec<String>)> = Vec::new();
        $(
            rows.push(LayoutRow {
                type_name: stringify!($t).into(),
                field: String::new(),
                offset: 0,
                size: size_of::<$t>(),
            });
            $(
                rows.push(LayoutRow {
                    type_name: stringify!($t).into(),
                    field: stringify!($f).into(),
                    offset: offset_of!($t, $f),
                    size: field_size(|t: &$t| &t.$f),
                });
            )*
            let recorded = <$t as StableAbi>::LAYOUT
                .get_fields()
                .map(|fs| fs.iter().map(|f| f.name().to_string()).collect())
                .unwrap_or_default();
            names.push((stringify!($t), vec![$(stringify!($f)),*], recorded));
        )*
        (rows, names)
    }};
}

#[test]
fn every_header_struct_and_field_matches_the_rust_layout() {
    let (rust, names) = rust_layout! {
        RlxStr { ptr, len },
        RlxKeyValue { key, value },
        RlxAbiVersion { major, minor, patch },
        RlxDataType { code, bits, lanes },
        RlxDevice { device_type, device_id },
        RlxDlTensor { data, device, ndim, dtype, shape, strides, byte_offset },
        RlxTensor { struct_size, ownership, dl, manager_ctx, deleter },
        RlxNamedTensor { struct_size, name, tensor },
        RlxLogRecord { struct_size, level, target, message, module_path, file, line, reserved0 },
        RlxHostApi { struct_size, abi_version, host_name, log_ctx, log, log_max_level, setting },
        RlxPluginApi {
            struct_size, abi_version, refusal_code, refusal_message, rust_layout_tag,
            rust_layout, descriptor, status_new, status_code, status_message, status_free,
            init, supported_ops, lowering_table, compile, executable_destroy,
            executable_signature, executable_bind_param, executable_run, custom_ops,
            executable_device, executable_run_into, state, sharing, submits,
            executable_bind_param_range, executable_set_rng, executable_set_active_extent,
            memory_usage, host_memory, graph_forms,
        },
        RlxMemoryUsage { struct_size, active_bytes, peak_bytes, cached_bytes },
        RlxPluginDescriptor {
            struct_size, name, version, description, devices, n_devices, build_info,
            n_build_info, opsets, n_opsets, device_infos, n_device_infos,
        },
        RlxDeviceInfo { struct_size, kind, ordinal, name, memory_bytes },
        RlxOpSupport { struct_size, op_kind, dtypes, n_dtypes },
        RlxOpList { struct_size, ops, n_ops },
        RlxLoweringEntry {
            struct_size, op_kind, dtypes, n_dtypes, strategy, note, execute, execute_ctx,
        },
        RlxLoweringTable { struct_size, entries, n_entries },
        RlxCompileOptions { struct_size, mode, rng_policy, rng_seed, device_kind, device_ordinal, memory_limit_bytes },
        RlxValueInfo { struct_size, role, name, dtype, ndim, shape },
        RlxValueVisitor { struct_size, ctx, visit },
        RlxCustomOpDesc {
            struct_size, name, description, n_inputs, n_outputs, kernel, kernel_ctx,
            kernel_ctx_drop, kernel_into, composite, shape_rule, shape_input, shape_fn,
        },
        RlxCustomOpInfo {
            struct_size, name, description, n_inputs, n_outputs, origin, reserved0, kind,
            shape_rule, shape_input, reserved1,
        },
        RlxCustomOpVisitor { struct_size, ctx, visit },
        RlxCustomOpApi {
            struct_size, register_op, unregister, lookup, list, execute, infer_shape,
            execute_attrs,
        },
        RlxShapeOut { struct_size, dtype, ndim, dims },
        RlxRowFeed {
            struct_size, row_elems, n_rows, src_row, dst_row, batch, src_batch_rows,
            dst_batch_rows, dst_rows,
        },
        RlxStateApi { struct_size, bind, unbind, read, list, set_feed, feed_rows, read_output, bind_from },
        RlxSharingApi { struct_size, clone, share_params },
        RlxSubmitApi { struct_size, submit, wait },
        RlxHostMemoryApi { struct_size, dma_map, dma_unmap },
        RlxGraphFormApi { struct_size, forms, n_forms, compile },
    };
    for (t, listed, recorded) in &names {
        assert_eq!(
            listed.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            *recorded,
            "{t}: the Rust struct's fields (right) differ from those this test and the header check (left)"
        );
    }
    let c: BTreeSet<LayoutRow> = c_layout().into_iter().collect();
    let r: BTreeSet<LayoutRow> = rust.into_iter().collect();
    let only_c: Vec<_> = c.difference(&r).collect();
    let only_rust: Vec<_> = r.difference(&c).collect();
    assert!(
        only_c.is_empty() && only_rust.is_empty(),
        "the header and the Rust definitions disagree\n  header only: {only_c:#?}\n  Rust only: {only_rust:#?}"
    );
    // Every type the root table reaches is checked (no struct is left out).
    let types: BTreeSet<&str> = c.iter().map(|r| r.type_name.as_str()).collect();
    assert_eq!(types.len(), names.len());
}

#[test]
fn header_constants_match_the_rust_build() {
    let (version, header) = c_constants();
    let v = rlx_plugin_api::ABI_VERSION;
    assert_eq!(version, [v.major, v.minor, v.patch]);
    assert_eq!(header, PLUGIN_API_HEADER_SIZE);
    // SAFETY: constant data of layout.c, linked into the test crate.
    let (sizes, enums) = unsafe { (rlx_c_custom_op_sizes, rlx_c_custom_op_enums) };
    assert_eq!(
        sizes,
        [
            CUSTOM_OP_DESC_SIZE_1_1,
            CUSTOM_OP_INFO_SIZE_1_3,
            CUSTOM_OP_API_SIZE_1_1,
            CUSTOM_MAX_NDIM
        ],
        "RLX_CUSTOM_OP_DESC_SIZE_1_1, RLX_CUSTOM_OP_INFO_SIZE_1_3, RLX_CUSTOM_OP_API_SIZE_1_1, \
         RLX_CUSTOM_MAX_NDIM"
    );
    assert_eq!(
        enums,
        [
            custom_kind::KERNEL,
            custom_kind::NATIVE,
            custom_kind::COMPOSITE,
            shape_rule::NONE,
            shape_rule::SAME_AS_INPUT,
            shape_rule::BROADCAST,
            shape_rule::CALLBACK,
            shape_rule::BODY,
        ],
        "RLX_CUSTOM_KIND_* and RLX_SHAPE_RULE_*"
    );
    // SAFETY: constant data of layout.c.
    let codes = unsafe { rlx_c_status_codes };
    let rust: Vec<u32> = rlx_plugin_api::StatusCode::ALL
        .iter()
        .map(|c| *c as u32)
        .collect();
    assert_eq!(codes.to_vec(), rust, "RLX_STATUS_* against StatusCode::ALL");
    // SAFETY: constant data of layout.c.
    let state = unsafe { rlx_c_state_enums };
    assert_eq!(
        state,
        [
            feed_kind::NONE,
            feed_kind::REPLACE,
            feed_kind::ROWS,
            role::STATE,
            rlx_plugin_api::tensor::ownership::SKIP,
            MAX_SUBMITTED as u32,
        ],
        "RLX_FEED_*, RLX_ROLE_STATE, RLX_OWNERSHIP_SKIP, RLX_MAX_SUBMITTED"
    );
    // SAFETY: constant data of layout.c.
    let host = unsafe { rlx_c_host_api_sizes };
    assert_eq!(
        host,
        [HOST_API_HEADER_SIZE, HOST_API_SIZE_1_0],
        "RLX_HOST_API_HEADER_SIZE, RLX_HOST_API_SIZE_1_0"
    );
}

#[test]
fn struct_size_is_the_end_of_the_last_field_with_no_tail_padding() {
    // The size rule (docs/ABI.md §2): what a writer puts in struct_size.
    assert_eq!(
        RlxLogRecord::STRUCT_SIZE,
        offset_of!(RlxLogRecord, reserved0) + 4
    );
    assert_eq!(
        RlxCustomOpInfo::STRUCT_SIZE,
        offset_of!(RlxCustomOpInfo, reserved1) + 4
    );
    assert_eq!(RlxCustomOpInfo::STRUCT_SIZE, size_of::<RlxCustomOpInfo>());
    assert_eq!(
        RlxCustomOpDesc::STRUCT_SIZE,
        offset_of!(RlxCustomOpDesc, shape_fn) + size_of::<usize>()
    );
    assert_eq!(RlxCustomOpDesc::STRUCT_SIZE, size_of::<RlxCustomOpDesc>());
    assert_eq!(
        RlxCustomOpApi::STRUCT_SIZE,
        offset_of!(RlxCustomOpApi, execute_attrs) + size_of::<usize>()
    );
    assert_eq!(RlxCustomOpApi::STRUCT_SIZE, size_of::<RlxCustomOpApi>());
    assert_eq!(
        RlxShapeOut::STRUCT_SIZE,
        offset_of!(RlxShapeOut, dims) + 8 * CUSTOM_MAX_NDIM
    );
    assert_eq!(RlxShapeOut::STRUCT_SIZE, size_of::<RlxShapeOut>());
    // What 1.1-1.4 writers put in struct_size: 1.5's fields start right
    // after (never inside bytes an older writer counted).
    assert_eq!(
        CUSTOM_OP_DESC_SIZE_1_1,
        offset_of!(RlxCustomOpDesc, kernel_into)
    );
    assert_eq!(
        CUSTOM_OP_DESC_SIZE_1_1,
        offset_of!(RlxCustomOpDesc, kernel_ctx_drop) + size_of::<usize>()
    );
    assert_eq!(CUSTOM_OP_INFO_SIZE_1_3, offset_of!(RlxCustomOpInfo, kind));
    assert_eq!(
        CUSTOM_OP_INFO_SIZE_1_3,
        offset_of!(RlxCustomOpInfo, reserved0) + 4
    );
    assert_eq!(
        CUSTOM_OP_API_SIZE_1_1,
        offset_of!(RlxCustomOpApi, infer_shape)
    );
    assert_eq!(
        CUSTOM_OP_API_SIZE_1_1,
        offset_of!(RlxCustomOpApi, execute) + size_of::<usize>()
    );
    if size_of::<usize>() == 8 {
        // The sizes docs/ABI.md §12 gives for 64-bit targets.
        assert_eq!(
            (CUSTOM_OP_DESC_SIZE_1_1, RlxCustomOpDesc::STRUCT_SIZE),
            (72, 112)
        );
        assert_eq!(
            (CUSTOM_OP_INFO_SIZE_1_3, RlxCustomOpInfo::STRUCT_SIZE),
            (56, 72)
        );
        assert_eq!(
            (CUSTOM_OP_API_SIZE_1_1, RlxCustomOpApi::STRUCT_SIZE),
            (48, 64)
        );
        assert_eq!(RlxShapeOut::STRUCT_SIZE, 144);
    }
    assert_eq!(RlxCompileOptions::STRUCT_SIZE, COMPILE_OPTIONS_SIZE_1_7);
    assert_eq!(
        COMPILE_OPTIONS_SIZE_1_4,
        offset_of!(RlxCompileOptions, memory_limit_bytes)
    );
    assert_eq!(
        COMPILE_OPTIONS_SIZE_1_2,
        offset_of!(RlxCompileOptions, device_kind)
    );
    assert_eq!(RlxDeviceInfo::STRUCT_SIZE, 40);
    assert_eq!(
        RlxPluginApi::STRUCT_SIZE,
        offset_of!(RlxPluginApi, graph_forms) + 8
    );
    assert_eq!(plugin_api_min_size(8), offset_of!(RlxPluginApi, state));
    // The host table: 1.10's `setting` starts where a 1.0-1.9 host's
    // struct_size ended (64 bytes on 64-bit targets), with no padding.
    assert_eq!(
        HOST_API_SIZE_1_0,
        offset_of!(RlxHostApi, log_max_level) + size_of::<usize>()
    );
    assert_eq!(
        RlxHostApi::STRUCT_SIZE,
        offset_of!(RlxHostApi, setting) + size_of::<usize>()
    );
    assert_eq!(RlxHostApi::STRUCT_SIZE, size_of::<RlxHostApi>());
    if size_of::<usize>() == 8 {
        assert_eq!((HOST_API_SIZE_1_0, RlxHostApi::STRUCT_SIZE), (64, 72));
    }
    // 1.0/1.1 hosts' options: {struct_size, mode} and 4 bytes of padding.
    assert_eq!(
        COMPILE_OPTIONS_SIZE_1_0,
        offset_of!(RlxCompileOptions, rng_policy) + 4
    );
}
