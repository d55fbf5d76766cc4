/* The header's view of every ABI struct: its size and, for each field, the
 * offset and size. tests/c_layout.rs compares this table, row for row, with
 * the Rust definitions. */
#include "rlx_plugin.h"

typedef struct RlxLayoutRow {
    const char* type_name;
    const char* field; /* "" for the struct itself */
    size_t offset;
    size_t size;
} RlxLayoutRow;

#define S(T) {#T, "", 0, sizeof(T)},
#define F(T, f) {#T, #f, offsetof(T, f), sizeof(((T*)0)->f)},

const RlxLayoutRow rlx_c_layout_rows[] = {
    S(RlxStr) F(RlxStr, ptr) F(RlxStr, len)
    S(RlxKeyValue) F(RlxKeyValue, key) F(RlxKeyValue, value)
    S(RlxAbiVersion) F(RlxAbiVersion, major) F(RlxAbiVersion, minor) F(RlxAbiVersion, patch)
    S(RlxDataType) F(RlxDataType, code) F(RlxDataType, bits) F(RlxDataType, lanes)
    S(RlxDevice) F(RlxDevice, device_type) F(RlxDevice, device_id)
    S(RlxDlTensor) F(RlxDlTensor, data) F(RlxDlTensor, device) F(RlxDlTensor, ndim)
        F(RlxDlTensor, dtype) F(RlxDlTensor, shape) F(RlxDlTensor, strides)
        F(RlxDlTensor, byte_offset)
    S(RlxTensor) F(RlxTensor, struct_size) F(RlxTensor, ownership) F(RlxTensor, dl)
        F(RlxTensor, manager_ctx) F(RlxTensor, deleter)
    S(RlxNamedTensor) F(RlxNamedTensor, struct_size) F(RlxNamedTensor, name)
        F(RlxNamedTensor, tensor)
    S(RlxLogRecord) F(RlxLogRecord, struct_size) F(RlxLogRecord, level)
        F(RlxLogRecord, target) F(RlxLogRecord, message) F(RlxLogRecord, module_path)
        F(RlxLogRecord, file) F(RlxLogRecord, line) F(RlxLogRecord, reserved0)
    S(RlxHostApi) F(RlxHostApi, struct_size) F(RlxHostApi, abi_version)
        F(RlxHostApi, host_name) F(RlxHostApi, log_ctx) F(RlxHostApi, log)
        F(RlxHostApi, log_max_level) F(RlxHostApi, setting)
    S(RlxPluginApi) F(RlxPluginApi, struct_size) F(RlxPluginApi, abi_version)
        F(RlxPluginApi, refusal_code) F(RlxPluginApi, refusal_message)
        F(RlxPluginApi, rust_layout_tag) F(RlxPluginApi, rust_layout)
        F(RlxPluginApi, descriptor) F(RlxPluginApi, status_new)
        F(RlxPluginApi, status_code) F(RlxPluginApi, status_message)
        F(RlxPluginApi, status_free) F(RlxPluginApi, init)
        F(RlxPluginApi, supported_ops) F(RlxPluginApi, lowering_table)
        F(RlxPluginApi, compile) F(RlxPluginApi, executable_destroy)
        F(RlxPluginApi, executable_signature) F(RlxPluginApi, executable_bind_param)
        F(RlxPluginApi, executable_run) F(RlxPluginApi, custom_ops)
        F(RlxPluginApi, executable_device) F(RlxPluginApi, executable_run_into)
        F(RlxPluginApi, state) F(RlxPluginApi, sharing) F(RlxPluginApi, submits)
        F(RlxPluginApi, executable_bind_param_range) F(RlxPluginApi, executable_set_rng)
        F(RlxPluginApi, executable_set_active_extent) F(RlxPluginApi, memory_usage)
        F(RlxPluginApi, host_memory) F(RlxPluginApi, graph_forms)
    S(RlxMemoryUsage) F(RlxMemoryUsage, struct_size) F(RlxMemoryUsage, active_bytes)
        F(RlxMemoryUsage, peak_bytes) F(RlxMemoryUsage, cached_bytes)
    S(RlxPluginDescriptor) F(RlxPluginDescriptor, struct_size)
        F(RlxPluginDescriptor, name) F(RlxPluginDescriptor, version)
        F(RlxPluginDescriptor, description) F(RlxPluginDescriptor, devices)
        F(RlxPluginDescriptor, n_devices) F(RlxPluginDescriptor, build_info)
        F(RlxPluginDescriptor, n_build_info) F(RlxPluginDescriptor, opsets)
        F(RlxPluginDescriptor, n_opsets) F(RlxPluginDescriptor, device_infos)
        F(RlxPluginDescriptor, n_device_infos)
    S(RlxDeviceInfo) F(RlxDeviceInfo, struct_size) F(RlxDeviceInfo, kind)
        F(RlxDeviceInfo, ordinal) F(RlxDeviceInfo, name) F(RlxDeviceInfo, memory_bytes)
    S(RlxOpSupport) F(RlxOpSupport, struct_size) F(RlxOpSupport, op_kind)
        F(RlxOpSupport, dtypes) F(RlxOpSupport, n_dtypes)
    S(RlxOpList) F(RlxOpList, struct_size) F(RlxOpList, ops) F(RlxOpList, n_ops)
    S(RlxLoweringEntry) F(RlxLoweringEntry, struct_size) F(RlxLoweringEntry, op_kind)
        F(RlxLoweringEntry, dtypes) F(RlxLoweringEntry, n_dtypes)
        F(RlxLoweringEntry, strategy) F(RlxLoweringEntry, note)
        F(RlxLoweringEntry, execute) F(RlxLoweringEntry, execute_ctx)
    S(RlxLoweringTable) F(RlxLoweringTable, struct_size) F(RlxLoweringTable, entries)
        F(RlxLoweringTable, n_entries)
    S(RlxCompileOptions) F(RlxCompileOptions, struct_size) F(RlxCompileOptions, mode)
        F(RlxCompileOptions, rng_policy) F(RlxCompileOptions, rng_seed)
        F(RlxCompileOptions, device_kind) F(RlxCompileOptions, device_ordinal)
        F(RlxCompileOptions, memory_limit_bytes)
    S(RlxValueInfo) F(RlxValueInfo, struct_size) F(RlxValueInfo, role)
        F(RlxValueInfo, name) F(RlxValueInfo, dtype) F(RlxValueInfo, ndim)
        F(RlxValueInfo, shape)
    S(RlxValueVisitor) F(RlxValueVisitor, struct_size) F(RlxValueVisitor, ctx)
        F(RlxValueVisitor, visit)
    S(RlxCustomOpDesc) F(RlxCustomOpDesc, struct_size) F(RlxCustomOpDesc, name)
        F(RlxCustomOpDesc, description) F(RlxCustomOpDesc, n_inputs)
        F(RlxCustomOpDesc, n_outputs) F(RlxCustomOpDesc, kernel)
        F(RlxCustomOpDesc, kernel_ctx) F(RlxCustomOpDesc, kernel_ctx_drop)
        F(RlxCustomOpDesc, kernel_into) F(RlxCustomOpDesc, composite)
        F(RlxCustomOpDesc, shape_rule) F(RlxCustomOpDesc, shape_input)
        F(RlxCustomOpDesc, shape_fn)
    S(RlxCustomOpInfo) F(RlxCustomOpInfo, struct_size) F(RlxCustomOpInfo, name)
        F(RlxCustomOpInfo, description) F(RlxCustomOpInfo, n_inputs)
        F(RlxCustomOpInfo, n_outputs) F(RlxCustomOpInfo, origin)
        F(RlxCustomOpInfo, reserved0) F(RlxCustomOpInfo, kind)
        F(RlxCustomOpInfo, shape_rule) F(RlxCustomOpInfo, shape_input)
        F(RlxCustomOpInfo, reserved1)
    S(RlxCustomOpVisitor) F(RlxCustomOpVisitor, struct_size) F(RlxCustomOpVisitor, ctx)
        F(RlxCustomOpVisitor, visit)
    S(RlxCustomOpApi) F(RlxCustomOpApi, struct_size) F(RlxCustomOpApi, register_op)
        F(RlxCustomOpApi, unregister) F(RlxCustomOpApi, lookup) F(RlxCustomOpApi, list)
        F(RlxCustomOpApi, execute) F(RlxCustomOpApi, infer_shape)
        F(RlxCustomOpApi, execute_attrs)
    S(RlxShapeOut) F(RlxShapeOut, struct_size) F(RlxShapeOut, dtype)
        F(RlxShapeOut, ndim) F(RlxShapeOut, dims)
    S(RlxRowFeed) F(RlxRowFeed, struct_size) F(RlxRowFeed, row_elems)
        F(RlxRowFeed, n_rows) F(RlxRowFeed, src_row) F(RlxRowFeed, dst_row)
        F(RlxRowFeed, batch) F(RlxRowFeed, src_batch_rows) F(RlxRowFeed, dst_batch_rows)
        F(RlxRowFeed, dst_rows)
    S(RlxStateApi) F(RlxStateApi, struct_size) F(RlxStateApi, bind) F(RlxStateApi, unbind)
        F(RlxStateApi, read) F(RlxStateApi, list) F(RlxStateApi, set_feed)
        F(RlxStateApi, feed_rows) F(RlxStateApi, read_output) F(RlxStateApi, bind_from)
    S(RlxSharingApi) F(RlxSharingApi, struct_size) F(RlxSharingApi, clone)
        F(RlxSharingApi, share_params)
    S(RlxSubmitApi) F(RlxSubmitApi, struct_size) F(RlxSubmitApi, submit) F(RlxSubmitApi, wait)
    S(RlxHostMemoryApi) F(RlxHostMemoryApi, struct_size) F(RlxHostMemoryApi, dma_map)
        F(RlxHostMemoryApi, dma_unmap)
    S(RlxGraphFormApi) F(RlxGraphFormApi, struct_size) F(RlxGraphFormApi, forms)
        F(RlxGraphFormApi, n_forms) F(RlxGraphFormApi, compile)
};

const size_t rlx_c_layout_len = sizeof(rlx_c_layout_rows) / sizeof(rlx_c_layout_rows[0]);

/* The header's constants that a Rust peer must agree with. */
const uint32_t rlx_c_abi_version[3] = {RLX_ABI_VERSION_MAJOR, RLX_ABI_VERSION_MINOR,
                                       RLX_ABI_VERSION_PATCH};
const size_t rlx_c_plugin_api_header_size = RLX_PLUGIN_API_HEADER_SIZE;

/* The host table's sizes: its frozen header, and what a host before 1.10
 * wrote (RLX_HOST_API_SIZE_1_0). */
const size_t rlx_c_host_api_sizes[2] = {RLX_HOST_API_HEADER_SIZE, RLX_HOST_API_SIZE_1_0};

/* (1.5) The custom-op sizes and enums a Rust peer must agree with: the
 * sizes older writers used and RLX_CUSTOM_MAX_NDIM, then RLX_CUSTOM_KIND_*
 * and RLX_SHAPE_RULE_* in number order. */
const size_t rlx_c_custom_op_sizes[4] = {RLX_CUSTOM_OP_DESC_SIZE_1_1, RLX_CUSTOM_OP_INFO_SIZE_1_3,
                                         RLX_CUSTOM_OP_API_SIZE_1_1, RLX_CUSTOM_MAX_NDIM};
const uint32_t rlx_c_custom_op_enums[8] = {
    RLX_CUSTOM_KIND_KERNEL,  RLX_CUSTOM_KIND_NATIVE,       RLX_CUSTOM_KIND_COMPOSITE,
    RLX_SHAPE_RULE_NONE,     RLX_SHAPE_RULE_SAME_AS_INPUT, RLX_SHAPE_RULE_BROADCAST,
    RLX_SHAPE_RULE_CALLBACK, RLX_SHAPE_RULE_BODY};

/* (1.9) The state, slot and submit constants, in this order: the feed
 * kinds, RLX_ROLE_STATE, RLX_OWNERSHIP_SKIP, RLX_MAX_SUBMITTED. */
const uint32_t rlx_c_state_enums[6] = {RLX_FEED_NONE, RLX_FEED_REPLACE, RLX_FEED_ROWS,
                                       RLX_ROLE_STATE, RLX_OWNERSHIP_SKIP, RLX_MAX_SUBMITTED};

/* The status codes in number order (RESOURCE_EXHAUSTED from 1.6). */
const uint32_t rlx_c_status_codes[8] = {
    RLX_STATUS_INVALID_ARGUMENT, RLX_STATUS_UNSUPPORTED, RLX_STATUS_VERSION_MISMATCH,
    RLX_STATUS_INTERNAL,         RLX_STATUS_PANIC,       RLX_STATUS_NOT_FOUND,
    RLX_STATUS_ALREADY_EXISTS,   RLX_STATUS_RESOURCE_EXHAUSTED};
