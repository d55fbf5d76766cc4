/*
 * rlx_plugin.h — the RLX backend plugin ABI, version 1.13.0.
 *
 * This header *is* the ABI: every struct, field, constant and function
 * pointer type that crosses between an RLX host and a backend plugin. The
 * Rust definitions in plugin-api/src carry the same names, and a test
 * (tests/tests/c_layout.rs) checks every size and offset of this header
 * against them. docs/ABI.md is the prose of the same contract, in the same
 * section order (each section below names its section of docs/ABI.md).
 *
 * Conventions (docs/ABI.md §2):
 * - Every growable struct starts with `size_t struct_size`: the end of the
 *   last field the writer knows, RLX_STRUCT_SIZE(type, last_field), never
 *   sizeof with tail padding. Fields are only appended. A reader uses a
 *   field only when struct_size reaches its end, and never reads a byte
 *   beyond struct_size. Growable structs have no tail padding (explicit
 *   `reserved` fields fill it), so RLX_STRUCT_SIZE(T, last) == sizeof(T).
 *   One exception, laid out before this rule: RlxCompileOptions' RNG
 *   fields are read only when struct_size >= 24 (see that struct).
 * - Out-structs (RlxOpList, RlxLoweringTable, RlxDeviceInfo from
 *   executable_device, RlxShapeOut, written through an `out` pointer):
 *   the caller sets struct_size to the size it knows before the call
 *   (0 = its 1.0 size); the callee writes no byte beyond it and sets
 *   struct_size to what it wrote.
 * - Frozen structs (RlxStr, RlxKeyValue, RlxAbiVersion, RlxDataType,
 *   RlxDevice, RlxDlTensor, RlxTensor, RlxNamedTensor) travel by value or
 *   in arrays and never grow within a major.
 * - Ownership is written on every pointer: "plugin-owned, static" (valid
 *   for the rest of the process, never freed), "host-owned, static",
 *   "borrowed for the call" (valid only during the call that receives it),
 *   "owned by the caller" (released with the named function).
 * - Every function pointer is nullable; "required" ones must be set.
 * - Strings are UTF-8 with a length (RlxStr), no terminator required.
 *
 * C11 or C++11. Only the C standard headers below are needed.
 */
#ifndef RLX_PLUGIN_H
#define RLX_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================
 * 1. Basics: the size rule, strings, versions       ABI.md §2, §3, §5
 *                                         (sized.rs, strings.rs, version.rs)
 * ====================================================================== */

/* The struct_size a writer puts in a struct whose last known field is
 * `last` (PJRT's convention). */
#define RLX_STRUCT_SIZE(type, last) \
    (offsetof(type, last) + sizeof(((type*)0)->last))

#define RLX_ABI_VERSION_MAJOR 1
#define RLX_ABI_VERSION_MINOR 13
#define RLX_ABI_VERSION_PATCH 0

/* A borrowed UTF-8 string. {NULL, 0} is the empty (or absent) string.
 * Frozen: it travels by value and in arrays. Owner and lifetime are those
 * of the field or parameter that carries it. */
typedef struct RlxStr {
    const char* ptr;
    size_t len;
} RlxStr;

/* A key/value pair of strings (build info). Frozen: it travels in arrays. */
typedef struct RlxKeyValue {
    RlxStr key;
    RlxStr value;
} RlxKeyValue;

/* Semver of the ABI. Frozen forever, so any two majors can read each
 * other's version. */
typedef struct RlxAbiVersion {
    uint32_t major;
    uint32_t minor;
    uint32_t patch;
} RlxAbiVersion;

/* ======================================================================
 * 2. Errors                                        ABI.md §6 (error.rs)
 * ====================================================================== */

/* Opaque error. NULL means success. Made by the plugin's status_new,
 * released exactly once by the receiver with the same plugin's
 * status_free. status_code(NULL) is 0 and status_message(NULL) is empty. */
typedef struct RlxStatus RlxStatus;

/* Status codes: stable numbers, never reused. A reader maps a code it does
 * not know (from a newer peer) to RLX_STATUS_INTERNAL. */
#define RLX_STATUS_INVALID_ARGUMENT 1u
#define RLX_STATUS_UNSUPPORTED 2u
#define RLX_STATUS_VERSION_MISMATCH 3u
#define RLX_STATUS_INTERNAL 4u
#define RLX_STATUS_PANIC 5u
#define RLX_STATUS_NOT_FOUND 6u
#define RLX_STATUS_ALREADY_EXISTS 7u
/* A tensor too large for the memory available (the machine's, the
 * device's, or a limit the user set); the message names the tensor, its
 * shape and its bytes, and nothing was allocated. */
#define RLX_STATUS_RESOURCE_EXHAUSTED 8u

/* ======================================================================
 * 3. Tensors                                      ABI.md §7 (tensor/mod.rs)
 * ====================================================================== */

/* DLPack DLDataType. Frozen. */
typedef struct RlxDataType {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} RlxDataType;

/* DLPack DLDataTypeCode values the ABI uses. The dtypes (code/bits, lanes
 * 1): f32 2/32, f16 2/16, bf16 4/16, f64 2/64, i8..i64 0/n, u8 1/8,
 * u32 1/32, bool 6/8, c64 5/64. */
#define RLX_DL_INT 0u
#define RLX_DL_UINT 1u
#define RLX_DL_FLOAT 2u
#define RLX_DL_BFLOAT 4u
#define RLX_DL_COMPLEX 5u
#define RLX_DL_BOOL 6u

/* DLPack DLDevice. Only host memory (device_type 1, kDLCPU) crosses. */
typedef struct RlxDevice {
    int32_t device_type;
    int32_t device_id;
} RlxDevice;

/* DLPack DLTensor, field for field. Frozen. */
typedef struct RlxDlTensor {
    /* Start of the buffer; the first element is at data + byte_offset.
     * Owned as RlxTensor.ownership says. */
    void* data;
    RlxDevice device;
    int32_t ndim;
    RlxDataType dtype;
    /* ndim sizes. Owned like data. */
    int64_t* shape;
    /* ndim strides in elements, or NULL for compact row-major. Owned like
     * data. */
    int64_t* strides;
    uint64_t byte_offset;
} RlxDlTensor;

/* RlxTensor.ownership */
/* Valid only during the call that receives it; the receiver copies what
 * it keeps. */
#define RLX_OWNERSHIP_BORROWED 0u
/* Borrowed, and the sender guarantees the memory outlives what the
 * receiver binds it to (for executable_bind_param: the executable). */
#define RLX_OWNERSHIP_BORROWED_PERSISTENT 1u
/* Ownership moves to the receiver, which calls deleter(manager_ctx)
 * exactly once when it no longer needs data, shape and strides, also when
 * the call that received it fails (and when it refuses the descriptor, if
 * struct_size reaches `deleter`). Only bind_param and outputs take OWNED
 * tensors: run, eager and custom-op inputs are borrowed for the call
 * whatever their ownership says, and never released by the receiver. */
#define RLX_OWNERSHIP_OWNED 2u
/* An output slot of executable_run_into or wait (section 11) whose
 * output the caller does not want (its dl.data NULL): nothing is written
 * there and nothing is copied off the device for it. A plugin whose minor
 * is below 9 hands an OWNED tensor over in it instead: a caller checks the
 * slot's ownership after the call and releases such a tensor. */
#define RLX_OWNERSHIP_SKIP 3u

/* A tensor crossing the ABI. Frozen within major 1: tensors travel in
 * arrays (run inputs and outputs), indexed by this size, so struct_size
 * must be exactly sizeof(RlxTensor); a reader refuses any other value. */
typedef struct RlxTensor {
    size_t struct_size;
    uint32_t ownership;
    RlxDlTensor dl;
    /* The manager's state, passed to deleter. NULL when borrowed. */
    void* manager_ctx;
    /* Releases data/shape/strides when ownership == OWNED. */
    void (*deleter)(void* manager_ctx);
} RlxTensor;

/* A named tensor (run inputs). Frozen like RlxTensor: struct_size must be
 * exactly sizeof(RlxNamedTensor). */
typedef struct RlxNamedTensor {
    size_t struct_size;
    /* Borrowed for the call. */
    RlxStr name;
    RlxTensor tensor;
} RlxNamedTensor;

/* ======================================================================
 * 4. The host table and logging            ABI.md §8 (tables/host.rs)
 * ====================================================================== */

/* Log levels, numbered like Rust's log::LevelFilter. */
#define RLX_LOG_OFF 0u
#define RLX_LOG_ERROR 1u
#define RLX_LOG_WARN 2u
#define RLX_LOG_INFO 3u
#define RLX_LOG_DEBUG 4u
#define RLX_LOG_TRACE 5u

/* One log record, plugin -> host. The struct and every string are
 * borrowed for the log call. A record of a level outside 1..=5 is
 * dropped. */
typedef struct RlxLogRecord {
    size_t struct_size;
    /* RLX_LOG_ERROR ..= RLX_LOG_TRACE. */
    uint32_t level;
    /* The emitter's own target (e.g. its module path). */
    RlxStr target;
    RlxStr message;
    RlxStr module_path;
    RlxStr file;
    /* 0 when unknown. */
    uint32_t line;
    /* Written as 0, never read: fills the bytes that would be tail
     * padding, which writers count in struct_size (88 on 64-bit), so that
     * no later field can start inside them. */
    uint32_t reserved0;
} RlxLogRecord;
#define RLX_LOG_RECORD_STRUCT_SIZE RLX_STRUCT_SIZE(RlxLogRecord, reserved0)

/* What the host offers the plugin. Host-owned, static (valid for the rest
 * of the process). The first three fields are its frozen header, identical
 * in every major; a plugin refuses a table whose struct_size is smaller
 * (INVALID_ARGUMENT), as it refuses a NULL one. */
typedef struct RlxHostApi {
    size_t struct_size;
    /* The host's ABI version. */
    RlxAbiVersion abi_version;
    /* The host program, for messages. Host-owned, static. */
    RlxStr host_name;
    /* Opaque to the plugin; passed back to log, log_max_level and
     * setting. */
    void* log_ctx;
    /* Optional: deliver one record (borrowed for the call). Callable from
     * any thread. */
    void (*log)(void* ctx, const RlxLogRecord* record);
    /* Optional (absent = RLX_LOG_TRACE): the most verbose level the host
     * wants now. Callable from any thread. */
    uint32_t (*log_max_level)(void* ctx);

    /* --- 1.10 --- */
    /* Optional: the host's value of the setting `key` (an RLX_*
     * switch, such as RLX_MLX_RNN_F16). Copies at most `cap` bytes of the
     * value (UTF-8, no terminator) into `buf` and returns the value's whole
     * length in bytes, or -1 when the setting is unset. A length above
     * `cap` means the copy was cut: ask again with a buffer that large.
     * `key` is borrowed for the call; `buf` may be NULL when `cap` is 0.
     * Absent (or beyond struct_size): the plugin reads its own process
     * environment. The Rust host answers with rlx_ir::env (its in-process
     * overrides first, then the process environment). Callable from any
     * thread. */
    int64_t (*setting)(void* ctx, RlxStr key, uint8_t* buf, size_t cap);
} RlxHostApi;
#define RLX_HOST_API_STRUCT_SIZE RLX_STRUCT_SIZE(RlxHostApi, setting)
#define RLX_HOST_API_HEADER_SIZE offsetof(RlxHostApi, log_ctx)
/* What a host before 1.10 writes in struct_size (the end of
 * log_max_level; 64 on 64-bit targets). */
#define RLX_HOST_API_SIZE_1_0 offsetof(RlxHostApi, setting)

/* ======================================================================
 * 5. The root table and the descriptor      ABI.md §9 (tables/root.rs)
 * ====================================================================== */

typedef struct RlxPluginDescriptor RlxPluginDescriptor;
typedef struct RlxDeviceInfo RlxDeviceInfo;
typedef struct RlxOpList RlxOpList;
typedef struct RlxLoweringTable RlxLoweringTable;
typedef struct RlxCompileOptions RlxCompileOptions;
typedef struct RlxExecutable RlxExecutable;
typedef struct RlxValueVisitor RlxValueVisitor;
typedef struct RlxCustomOpApi RlxCustomOpApi;
typedef struct RlxStateApi RlxStateApi;
typedef struct RlxSharingApi RlxSharingApi;
typedef struct RlxSubmitApi RlxSubmitApi;
typedef struct RlxHostMemoryApi RlxHostMemoryApi;
typedef struct RlxGraphFormApi RlxGraphFormApi;
typedef struct RlxMemoryUsage RlxMemoryUsage;

/* The plugin's root table. Plugin-owned, static. The first four fields
 * are its frozen header (40 bytes on 64-bit targets), identical in every
 * major. When refusal_code != 0 nothing after the header may be used. */
typedef struct RlxPluginApi {
    /* --- frozen header --- */
    size_t struct_size;
    /* The ABI the plugin was built for. */
    RlxAbiVersion abi_version;
    /* 0 = accepted, else an RLX_STATUS_* code: the plugin refused. */
    uint32_t refusal_code;
    /* Why, when refusal_code != 0. Plugin-owned, static. */
    RlxStr refusal_message;

    /* --- 1.0 --- */
    /* "abi_stable 0.11" when rust_layout is set; empty otherwise.
     * Plugin-owned, static. */
    RlxStr rust_layout_tag;
    /* A Rust plugin's abi_stable TypeLayout of this table; NULL for
     * plugins not written in Rust. Plugin-owned, static. */
    const void* rust_layout;
    /* Required. Plugin-owned, static. */
    const RlxPluginDescriptor* descriptor;
    /* Required. Make a status in this plugin's allocator; message is
     * copied. Any party that must hand this plugin an error (a host
     * custom-op kernel) makes it here. */
    RlxStatus* (*status_new)(uint32_t code, RlxStr message);
    /* Required. */
    uint32_t (*status_code)(const RlxStatus* status);
    /* Required. Borrowed from status; valid until status_free(status). */
    RlxStr (*status_message)(const RlxStatus* status);
    /* Required. Release a status; NULL is a no-op. */
    void (*status_free)(RlxStatus* status);
    /* Required. Registration: called once by the host after the handshake,
     * before any function below. Idempotent. */
    RlxStatus* (*init)(void);
    /* Required. *out is written with plugin-owned, static data. */
    RlxStatus* (*supported_ops)(RlxOpList* out);
    /* Required. As supported_ops. */
    RlxStatus* (*lowering_table)(RlxLoweringTable* out);
    /* Required. Compile .rlxmodel text (borrowed for the call; other
     * forms of a graph: graph_forms); options borrowed for the call,
     * NULL = defaults. On success *out is a new executable owned by the
     * caller, released with executable_destroy. */
    RlxStatus* (*compile)(RlxStr graph, const RlxCompileOptions* options,
                          RlxExecutable** out);
    /* Required. NULL is a no-op. */
    void (*executable_destroy)(RlxExecutable* exe);
    /* Required. Calls visitor->visit once per input, param and output, in
     * that order. visitor is borrowed for the call. */
    RlxStatus* (*executable_signature)(const RlxExecutable* exe,
                                       const RlxValueVisitor* visitor);
    /* Required. Bind a param by name. tensor (borrowed for the call) says
     * by its ownership whether the plugin must copy, may alias, or now
     * owns the buffer (OWNED: released by the plugin even on failure). */
    RlxStatus* (*executable_bind_param)(RlxExecutable* exe, RlxStr name,
                                        const RlxTensor* tensor);
    /* Required. inputs (borrowed for the call) are n_inputs named tensors;
     * outputs points at n_outputs caller-owned slots, exactly the output
     * count. On success each slot holds an OWNED tensor the caller
     * releases; on error none does. An output stays valid until released,
     * across later runs and executable_destroy; its deleter may be called
     * on any thread (docs/ABI.md section 7). */
    RlxStatus* (*executable_run)(RlxExecutable* exe,
                                 const RlxNamedTensor* inputs, size_t n_inputs,
                                 RlxTensor* outputs, size_t n_outputs);

    /* --- 1.1 --- */
    /* The custom-op registry. Plugin-owned, static. NULL: none. */
    const RlxCustomOpApi* custom_ops;

    /* --- 1.4 --- */
    /* Optional. Which device exe runs on, written into the out-struct
     * *out (the caller sets out->struct_size); out->name is plugin-owned,
     * valid until executable_destroy(exe). */
    RlxStatus* (*executable_device)(const RlxExecutable* exe,
                                    RlxDeviceInfo* out);

    /* --- 1.8 --- */
    /* Optional. As executable_run, with outputs written into the caller's
     * memory where it lends some. outputs points at n_outputs slots,
     * exactly the output count. A slot whose dl.data is non-NULL is the
     * caller's: a BORROWED tensor of the frozen size, compact row-major,
     * in host memory, of the output's dtype and exact shape, writable for
     * the call and overlapping no input and no other slot; the plugin
     * writes the output's bytes there and leaves the slot as it was (an
     * output that comes out otherwise fails the call with
     * INVALID_ARGUMENT). A slot whose dl.data is NULL receives an OWNED
     * tensor, as from executable_run. On error no slot holds an OWNED
     * tensor and the lent buffers' bytes are unspecified. Absent (NULL, or
     * beyond struct_size), a host calls executable_run and copies. */
    RlxStatus* (*executable_run_into)(RlxExecutable* exe,
                                      const RlxNamedTensor* inputs,
                                      size_t n_inputs, RlxTensor* outputs,
                                      size_t n_outputs);

    /* --- 1.9 --- */
    /* Executable state (section 9). Plugin-owned, static. NULL: none. */
    const RlxStateApi* state;
    /* Clones and shared params (section 10). Plugin-owned, static. NULL:
     * none. */
    const RlxSharingApi* sharing;
    /* Submitted runs (section 11). Plugin-owned, static. NULL: none. */
    const RlxSubmitApi* submits;
    /* Optional. Overwrite len bytes of the bound param name, starting
     * byte_offset bytes into its compact row-major storage, with data
     * (borrowed for the call): whole elements, inside the param, which
     * must be bound (INVALID_ARGUMENT otherwise; a name that is no param
     * is NOT_FOUND). */
    RlxStatus* (*executable_bind_param_range)(RlxExecutable* exe,
                                              RlxStr name,
                                              uint64_t byte_offset,
                                              const void* data, size_t len);
    /* Optional. The RNG policy (RLX_RNG_*) and seed for the graph's random
     * ops from the next run on, as if it had been compiled with them. */
    RlxStatus* (*executable_set_rng)(RlxExecutable* exe, uint32_t policy,
                                     uint64_t seed);
    /* Optional. From the next run on, compute only the first `active` of
     * `upper` rows along axis 0 of every input whose axis 0 is `upper` (a
     * bucketed graph with fewer live rows); active == upper == 0 clears
     * it, and 0 < active <= upper otherwise. Outputs keep their declared
     * shapes; their rows past `active` are unspecified. A plugin that
     * cannot narrow a graph runs it whole. */
    RlxStatus* (*executable_set_active_extent)(RlxExecutable* exe,
                                               uint64_t active,
                                               uint64_t upper);
    /* Optional. What the plugin's tensors hold now, written into the
     * out-struct *out (the caller sets out->struct_size). */
    RlxStatus* (*memory_usage)(RlxMemoryUsage* out);

    /* --- 1.11 --- */
    /* Host memory mapped for transfers (§12). Plugin-owned, static; NULL:
     * the plugin has no use for it. */
    const RlxHostMemoryApi* host_memory;

    /* --- 1.12 --- */
    /* Graph forms besides .rlxmodel text (§13). Plugin-owned, static;
     * NULL: the plugin reads text only. */
    const RlxGraphFormApi* graph_forms;
} RlxPluginApi;
#define RLX_PLUGIN_API_STRUCT_SIZE \
    RLX_STRUCT_SIZE(RlxPluginApi, graph_forms)
#define RLX_PLUGIN_API_HEADER_SIZE offsetof(RlxPluginApi, rust_layout_tag)
/* The least struct_size a plugin claiming 1.minor may declare: every field
 * that minor defines (a smaller table is refused). */
#define RLX_PLUGIN_API_SIZE_1_0 offsetof(RlxPluginApi, custom_ops)
#define RLX_PLUGIN_API_SIZE_1_1 RLX_STRUCT_SIZE(RlxPluginApi, custom_ops)
#define RLX_PLUGIN_API_SIZE_1_4 RLX_STRUCT_SIZE(RlxPluginApi, executable_device)
/* A plugin claiming 1.5 to 1.7 declares at least RLX_PLUGIN_API_SIZE_1_4
 * (those minors define no root-table field). */
#define RLX_PLUGIN_API_SIZE_1_8 \
    RLX_STRUCT_SIZE(RlxPluginApi, executable_run_into)
#define RLX_PLUGIN_API_SIZE_1_9 RLX_STRUCT_SIZE(RlxPluginApi, memory_usage)
/* A plugin claiming 1.10 declares at least RLX_PLUGIN_API_SIZE_1_9 (that
 * minor defines no root-table field). */
#define RLX_PLUGIN_API_SIZE_1_11 RLX_STRUCT_SIZE(RlxPluginApi, host_memory)
#define RLX_PLUGIN_API_SIZE_1_12 RLX_STRUCT_SIZE(RlxPluginApi, graph_forms)
/* A plugin claiming 1.13 declares at least RLX_PLUGIN_API_SIZE_1_12 (that
 * minor defines no root-table field). */

/* What the plugin's tensors hold, in bytes, across all its
 * executables (params, state, run buffers). An out-struct. */
struct RlxMemoryUsage {
    size_t struct_size;
    /* Held by live tensors now. */
    uint64_t active_bytes;
    /* The most held at once since the plugin loaded. */
    uint64_t peak_bytes;
    /* Freed by tensors but kept by the plugin's allocator for reuse. */
    uint64_t cached_bytes;
};
#define RLX_MEMORY_USAGE_STRUCT_SIZE RLX_STRUCT_SIZE(RlxMemoryUsage, cached_bytes)

/* RlxDeviceInfo.kind and RlxCompileOptions.device_kind. */
#define RLX_DEVICE_DEFAULT 0u /* compile options only: the default device */
#define RLX_DEVICE_CPU 1u
#define RLX_DEVICE_GPU 2u

/* One device a plugin can run on. Plugin-owned, static in the
 * descriptor; an out-struct of executable_device. */
struct RlxDeviceInfo {
    size_t struct_size;
    /* RLX_DEVICE_CPU or RLX_DEVICE_GPU. A reader skips (with a warning) a
     * device whose kind it does not know. */
    uint32_t kind;
    /* The index among devices of its kind. */
    uint32_t ordinal;
    /* For people ("NVIDIA H200"). Plugin-owned, static (in the
     * descriptor) or until executable_destroy (executable_device). */
    RlxStr name;
    /* Total memory in bytes; 0 when unknown. */
    uint64_t memory_bytes;
};
#define RLX_DEVICE_INFO_STRUCT_SIZE RLX_STRUCT_SIZE(RlxDeviceInfo, memory_bytes)

/* Who the plugin is. Plugin-owned; every pointer is plugin-owned, static. */
struct RlxPluginDescriptor {
    size_t struct_size;
    /* Unique plugin name ("mlx"). Two plugins with one name shadow. */
    RlxStr name;
    /* The plugin's own semver version. */
    RlxStr version;
    RlxStr description;
    /* Device names it runs on, n_devices of them. */
    const RlxStr* devices;
    size_t n_devices;
    /* Free-form build facts (mlx.version, blas), n_build_info pairs. */
    const RlxKeyValue* build_info;
    size_t n_build_info;
    /* The .rlxmodel opsets it reads, n_opsets of them. */
    const uint32_t* opsets;
    size_t n_opsets;

    /* --- 1.4 --- */
    /* The devices it can run on now (found when it loaded), an array of
     * pointers; the first is the default device. */
    const RlxDeviceInfo* const* device_infos;
    size_t n_device_infos;
};
#define RLX_PLUGIN_DESCRIPTOR_STRUCT_SIZE \
    RLX_STRUCT_SIZE(RlxPluginDescriptor, n_device_infos)

/* ======================================================================
 * 6. Registration tables          ABI.md §10 (tables/registration.rs)
 * ====================================================================== */

/* One supported op kind and the dtypes it takes. Plugin-owned, static
 * after init. */
typedef struct RlxOpSupport {
    size_t struct_size;
    /* The rlx-ir op-kind name ("MatMul"). */
    RlxStr op_kind;
    const RlxDataType* dtypes;
    size_t n_dtypes;
} RlxOpSupport;
#define RLX_OP_SUPPORT_STRUCT_SIZE RLX_STRUCT_SIZE(RlxOpSupport, n_dtypes)

/* The supported-op list: an array of pointers, so the element can grow.
 * An out-struct written by supported_ops (the caller sets struct_size);
 * every pointer plugin-owned, static. A graph's leaves count as ops: a
 * plugin that takes graphs lists Input and Param (and Constant). */
struct RlxOpList {
    size_t struct_size;
    const RlxOpSupport* const* ops;
    size_t n_ops;
};
#define RLX_OP_LIST_STRUCT_SIZE RLX_STRUCT_SIZE(RlxOpList, n_ops)

/* RlxLoweringEntry.strategy. A reader skips (with a warning) an entry
 * whose strategy it does not know. */
#define RLX_STRATEGY_NATIVE 0u         /* one backend op */
#define RLX_STRATEGY_COMPOSITE 1u      /* several backend ops */
#define RLX_STRATEGY_HOST_EVALUATED 2u /* host CPU inside the plugin */

/* Eagerly execute one op. node (borrowed) is a .rlxmodel graph whose only
 * non-input node is the op; inputs (borrowed) are bound to the graph's
 * Input nodes in node order. Up to out_capacity OWNED tensors are written to outputs (caller
 * slots) and their count to *n_outputs. */
typedef RlxStatus* (*RlxExecuteOpFn)(const void* ctx, RlxStr node,
                                     const RlxTensor* inputs, size_t n_inputs,
                                     RlxTensor* outputs, size_t out_capacity,
                                     size_t* n_outputs);

/* One row of the lowering table. Plugin-owned, static after init. */
typedef struct RlxLoweringEntry {
    size_t struct_size;
    /* The rlx-ir op-kind name. */
    RlxStr op_kind;
    const RlxDataType* dtypes;
    size_t n_dtypes;
    /* One of RLX_STRATEGY_*. */
    uint32_t strategy;
    /* A short note (what it maps to); may be empty. */
    RlxStr note;
    /* Eager single-op execution; NULL if the entry cannot run alone. */
    RlxExecuteOpFn execute;
    /* Passed to execute. Plugin-owned, static. */
    const void* execute_ctx;
} RlxLoweringEntry;
#define RLX_LOWERING_ENTRY_STRUCT_SIZE \
    RLX_STRUCT_SIZE(RlxLoweringEntry, execute_ctx)

/* The lowering table: an array of pointers. An out-struct written by
 * lowering_table (the caller sets struct_size); every pointer
 * plugin-owned, static. */
struct RlxLoweringTable {
    size_t struct_size;
    const RlxLoweringEntry* const* entries;
    size_t n_entries;
};
#define RLX_LOWERING_TABLE_STRUCT_SIZE \
    RLX_STRUCT_SIZE(RlxLoweringTable, n_entries)

/* ======================================================================
 * 7. Executables                    ABI.md §11 (tables/executable.rs)
 * ====================================================================== */

/* RlxCompileOptions.mode; an unknown mode is UNSUPPORTED. */
#define RLX_MODE_LAZY 0u
#define RLX_MODE_EAGER 1u
#define RLX_MODE_COMPILED 2u

/* RlxCompileOptions.rng_policy (rlx-ir's RngBackend by number). */
#define RLX_RNG_PHILOX 0u
#define RLX_RNG_ORT 1u
#define RLX_RNG_BNNS 2u
#define RLX_RNG_ZERO 3u
#define RLX_DEFAULT_RNG_SEED 42u

/* Options for compile. Borrowed for the call; NULL = defaults.
 *
 * rng_policy and rng_seed are one group: a reader takes them only when
 * struct_size >= RLX_COMPILE_OPTIONS_SIZE_1_2 (24), never when struct_size
 * covers rng_policy alone: a writer of RLX_COMPILE_OPTIONS_SIZE_1_0 (16)
 * counts rng_policy's bytes as tail padding, whatever they hold
 * (docs/ABI.md §3.1). */
struct RlxCompileOptions {
    size_t struct_size;
    /* One of RLX_MODE_*. */
    uint32_t mode;
    /* One of RLX_RNG_*. Absent = RLX_RNG_PHILOX. */
    uint32_t rng_policy;
    /* The global seed mixed into every random op's key. Absent =
     * RLX_DEFAULT_RNG_SEED. */
    uint64_t rng_seed;
    /* RLX_DEVICE_*: the device to compile for. Absent or
     * RLX_DEVICE_DEFAULT = the plugin's default device. A device the
     * plugin does not have now is UNSUPPORTED, naming those it has. */
    uint32_t device_kind;
    /* The index among devices of that kind. */
    uint32_t device_ordinal;
    /* The most bytes any one tensor of the graph may take. 0 or
     * absent = no limit from the host: the plugin's own (its device's
     * memory). A graph with a larger tensor fails to compile with
     * RLX_STATUS_RESOURCE_EXHAUSTED naming the node, its shape and bytes. */
    uint64_t memory_limit_bytes;
};
#define RLX_COMPILE_OPTIONS_STRUCT_SIZE \
    RLX_STRUCT_SIZE(RlxCompileOptions, memory_limit_bytes)
/* What each minor's hosts wrote in struct_size (sizeof, padding included). */
#define RLX_COMPILE_OPTIONS_SIZE_1_0 16u
#define RLX_COMPILE_OPTIONS_SIZE_1_2 24u
#define RLX_COMPILE_OPTIONS_SIZE_1_4 32u
#define RLX_COMPILE_OPTIONS_SIZE_1_7 40u

/* RlxValueInfo.role. A reader skips (with a warning) a value whose role it
 * does not know. */
#define RLX_ROLE_INPUT 0u
#define RLX_ROLE_PARAM 1u
#define RLX_ROLE_OUTPUT 2u
/* A state tensor: in RlxStateApi.list only, never in a signature. */
#define RLX_ROLE_STATE 3u

/* One input, param or output. Borrowed for the visit call. */
/* The most dimensions a value in a signature has. */
#define RLX_MAX_NDIM 64

typedef struct RlxValueInfo {
    size_t struct_size;
    /* One of RLX_ROLE_*. */
    uint32_t role;
    RlxStr name;
    RlxDataType dtype;
    /* 0 ..= RLX_MAX_NDIM: a host refuses a signature with more. */
    int32_t ndim;
    /* ndim sizes; -1 = known only at run time. */
    const int64_t* shape;
} RlxValueInfo;
#define RLX_VALUE_INFO_STRUCT_SIZE RLX_STRUCT_SIZE(RlxValueInfo, shape)

/* A callback over an executable's signature. Borrowed for the call that
 * receives it. */
struct RlxValueVisitor {
    size_t struct_size;
    /* Passed back to visit. */
    void* ctx;
    /* Required. info is borrowed for the call. */
    void (*visit)(void* ctx, const RlxValueInfo* info);
};
#define RLX_VALUE_VISITOR_STRUCT_SIZE RLX_STRUCT_SIZE(RlxValueVisitor, visit)

/* ======================================================================
 * 8. Custom ops: kernels, attributes, shape rules, composites and
 *    in-place kernels                ABI.md §12 (tables/custom_ops.rs)
 * ====================================================================== */

/* RlxCustomOpInfo.origin; an unknown origin reads as "plugin". */
#define RLX_ORIGIN_PLUGIN 0u
#define RLX_ORIGIN_HOST 1u

/* RlxCustomOpInfo.kind: how an op is carried out. An unknown kind reads
 * as RLX_CUSTOM_KIND_KERNEL, as an absent one does. */
#define RLX_CUSTOM_KIND_KERNEL 0u    /* a kernel the registering party supplied */
#define RLX_CUSTOM_KIND_NATIVE 1u    /* built by the plugin from its own backend's
                                        ops; registered by the plugin only */
#define RLX_CUSTOM_KIND_COMPOSITE 2u /* an .rlxmodel body, inlined where used */

/* RlxCustomOpDesc.shape_rule and RlxCustomOpInfo.shape_rule: how an
 * op's output dtype and shape follow from its inputs. register_op refuses
 * a rule it does not know (INVALID_ARGUMENT); in an RlxCustomOpInfo an
 * unknown rule reads as RLX_SHAPE_RULE_NONE. */
/* Not declared (also what a desc too short to hold shape_rule means,
 * RLX_CUSTOM_OP_DESC_SIZE_1_1): infer_shape is
 * UNSUPPORTED and a graph's node declares the shape. On a composite it
 * means RLX_SHAPE_RULE_BODY. */
#define RLX_SHAPE_RULE_NONE 0u
/* The dtype and shape of input shape_input. */
#define RLX_SHAPE_RULE_SAME_AS_INPUT 1u
/* The NumPy broadcast of every input's shape; the dtype of input 0. */
#define RLX_SHAPE_RULE_BROADCAST 2u
/* shape_fn says. */
#define RLX_SHAPE_RULE_CALLBACK 3u
/* The composite body's output (composite ops only). */
#define RLX_SHAPE_RULE_BODY 4u

/* The most dimensions an RlxShapeOut holds. */
#define RLX_CUSTOM_MAX_NDIM 16

/* An output's dtype and shape, written by infer_shape or a shape
 * callback. An out-struct: the caller sets struct_size (to
 * RLX_SHAPE_OUT_STRUCT_SIZE); the callee writes no byte beyond it and sets
 * struct_size to what it wrote. */
typedef struct RlxShapeOut {
    size_t struct_size;
    RlxDataType dtype;
    /* 0 ..= RLX_CUSTOM_MAX_NDIM. */
    int32_t ndim;
    /* The first ndim entries are the sizes; -1 = known only at run time.
     * The rest are unused. */
    int64_t dims[RLX_CUSTOM_MAX_NDIM];
} RlxShapeOut;
#define RLX_SHAPE_OUT_STRUCT_SIZE RLX_STRUCT_SIZE(RlxShapeOut, dims)

/* A custom-op kernel that returns its outputs (RlxCustomOpDesc.kernel,
 * beside the in-place kernel_into). Writes exactly n_outputs OWNED
 * tensors into the caller's slots; inputs are borrowed for the call. It
 * receives no attributes. An error status must be made with the plugin's
 * status_new, and a kernel that fails releases any output it wrote (the
 * caller ignores the slots). Callable from any thread, concurrently. */
typedef RlxStatus* (*RlxCustomKernelFn)(void* ctx, const RlxTensor* inputs,
                                        size_t n_inputs, RlxTensor* outputs,
                                        size_t n_outputs);

/* An in-place kernel: writes into outputs the plugin allocated.
 * attrs (attrs_len bytes, borrowed for the call) are the node's
 * attributes, unchanged. inputs are borrowed for the call. outputs are
 * n_outputs (always 1) BORROWED descriptors, compact row-major, of the
 * node's dtype and shape: their data is writable for the call only, and
 * the kernel writes the data, never the descriptors. No data is copied on
 * the way in or out. An error status must be made with the plugin's
 * status_new. Callable from any thread, concurrently. */
typedef RlxStatus* (*RlxCustomKernelIntoFn)(void* ctx, const uint8_t* attrs,
                                            size_t attrs_len,
                                            const RlxTensor* inputs,
                                            size_t n_inputs,
                                            const RlxTensor* outputs,
                                            size_t n_outputs);

/* A shape callback: the output's dtype and shape for inputs of
 * these dtypes and shapes and these attributes. inputs is an array of
 * n_inputs pointers (as for every growable struct) to records borrowed for
 * the call (role RLX_ROLE_INPUT, name empty); attrs is borrowed for the
 * call; *out is an out-struct (see RlxShapeOut). An error status must be
 * made with the plugin's status_new. Callable from any thread,
 * concurrently. */
typedef RlxStatus* (*RlxCustomShapeFn)(void* ctx, const uint8_t* attrs,
                                       size_t attrs_len,
                                       const RlxValueInfo* const* inputs,
                                       size_t n_inputs, RlxShapeOut* out);

/* A custom op to register. Borrowed for the register call (every string
 * too; the plugin copies what it keeps), except kernel_ctx, whose
 * ownership moves to the plugin: it calls kernel_ctx_drop(kernel_ctx)
 * exactly once, when no one holds the op any more (it was unregistered
 * and every executable that resolved it has been destroyed), or at once
 * when registration fails (a taken name is ALREADY_EXISTS, never a
 * replacement).
 *
 * How a plugin reads it: a non-empty composite wins, else kernel_into,
 * else kernel; with none of them it is INVALID_ARGUMENT. A host sends a
 * plugin older than 1.5 struct_size RLX_CUSTOM_OP_DESC_SIZE_1_1, and
 * refuses itself (UNSUPPORTED) an op that needs a 1.5 field. */
typedef struct RlxCustomOpDesc {
    size_t struct_size;
    /* A dotted name ("myorg.fused_gelu"): non-empty, no whitespace. */
    RlxStr name;
    RlxStr description;
    uint32_t n_inputs;
    /* 1 for an op with a shape rule, an in-place kernel or a composite. */
    uint32_t n_outputs;
    /* The kernel that returns its outputs; one of kernel, kernel_into
     * or composite is required. */
    RlxCustomKernelFn kernel;
    /* Passed to kernel, kernel_into and shape_fn. Owned by the plugin
     * from the call on (see above). */
    void* kernel_ctx;
    /* Releases kernel_ctx; may be NULL (nothing to release). Called once,
     * from any thread. */
    void (*kernel_ctx_drop)(void* ctx);

    /* --- 1.5 --- */
    /* Preferred over kernel when set: receives the node's attributes and
     * writes into plugin-allocated outputs. */
    RlxCustomKernelIntoFn kernel_into;
    /* Non-empty: the op is this .rlxmodel graph (its Input nodes, in
     * order, are the op's inputs; its one output the op's), inlined where
     * the op is used. Borrowed for the call; the plugin copies it. */
    RlxStr composite;
    /* One of RLX_SHAPE_RULE_*. */
    uint32_t shape_rule;
    /* The input RLX_SHAPE_RULE_SAME_AS_INPUT copies (< n_inputs). */
    uint32_t shape_input;
    /* Required when shape_rule is RLX_SHAPE_RULE_CALLBACK; called with
     * kernel_ctx. */
    RlxCustomShapeFn shape_fn;
} RlxCustomOpDesc;
#define RLX_CUSTOM_OP_DESC_STRUCT_SIZE \
    RLX_STRUCT_SIZE(RlxCustomOpDesc, shape_fn)
/* What 1.1-1.4 writers put in struct_size: the end of kernel_ctx_drop
 * (72 on 64-bit). */
#define RLX_CUSTOM_OP_DESC_SIZE_1_1 offsetof(RlxCustomOpDesc, kernel_into)

/* What the registry knows of one op. Borrowed for the visit call (every
 * string too). */
typedef struct RlxCustomOpInfo {
    size_t struct_size;
    RlxStr name;
    RlxStr description;
    uint32_t n_inputs;
    uint32_t n_outputs;
    /* One of RLX_ORIGIN_*. */
    uint32_t origin;
    /* Written as 0, never read: fills the bytes that would be tail
     * padding, which writers count in struct_size (56 on 64-bit), so that
     * the fields below cannot start inside them. */
    uint32_t reserved0;

    /* --- 1.5 --- */
    /* One of RLX_CUSTOM_KIND_*. Absent = RLX_CUSTOM_KIND_KERNEL. */
    uint32_t kind;
    /* One of RLX_SHAPE_RULE_*. Absent = RLX_SHAPE_RULE_NONE. */
    uint32_t shape_rule;
    /* The input an RLX_SHAPE_RULE_SAME_AS_INPUT rule copies. */
    uint32_t shape_input;
    /* Written as 0, never read. */
    uint32_t reserved1;
} RlxCustomOpInfo;
#define RLX_CUSTOM_OP_INFO_STRUCT_SIZE \
    RLX_STRUCT_SIZE(RlxCustomOpInfo, reserved1)
/* What 1.1-1.4 writers put in struct_size: the end of reserved0 (56 on
 * 64-bit). */
#define RLX_CUSTOM_OP_INFO_SIZE_1_3 offsetof(RlxCustomOpInfo, kind)

/* A callback over custom ops. Borrowed for the call that receives it. */
typedef struct RlxCustomOpVisitor {
    size_t struct_size;
    /* Passed back to visit. */
    void* ctx;
    /* Required. info is borrowed for the call. */
    void (*visit)(void* ctx, const RlxCustomOpInfo* info);
} RlxCustomOpVisitor;
#define RLX_CUSTOM_OP_VISITOR_STRUCT_SIZE \
    RLX_STRUCT_SIZE(RlxCustomOpVisitor, visit)

/* The custom-op registry. Plugin-owned, static. Thread-safe: every
 * function may be called from any thread, concurrently. */
struct RlxCustomOpApi {
    size_t struct_size;
    /* ALREADY_EXISTS when the name is taken. desc borrowed for the call. */
    RlxStatus* (*register_op)(const RlxCustomOpDesc* desc);
    /* NOT_FOUND when the name is unknown. name borrowed for the call.
     * Executables that use the op keep it until they are destroyed; new
     * compiles no longer find it. */
    RlxStatus* (*unregister)(RlxStr name);
    /* Visit the op `name`; NOT_FOUND when unknown. name and visitor
     * borrowed for the call. */
    RlxStatus* (*lookup)(RlxStr name, const RlxCustomOpVisitor* visitor);
    /* Visit every op, in name order. visitor borrowed for the call. */
    RlxStatus* (*list)(const RlxCustomOpVisitor* visitor);
    /* Run the op `name` on borrowed inputs, writing its n_outputs OWNED
     * outputs into the caller's slots; another n_outputs than the op's is
     * INVALID_ARGUMENT. The op gets no attributes. */
    RlxStatus* (*execute)(RlxStr name, const RlxTensor* inputs, size_t n_inputs,
                          RlxTensor* outputs, size_t n_outputs);

    /* --- 1.5 (optional) --- */
    /* The output dtype and shape of op `name` for these inputs (an array
     * of n_inputs pointers to records borrowed for the call; role
     * RLX_ROLE_INPUT, name ignored) and attributes (borrowed for the
     * call), by the op's rule, into the out-struct *out (the caller sets
     * out->struct_size). UNSUPPORTED when the op declares no rule. */
    RlxStatus* (*infer_shape)(RlxStr name, const uint8_t* attrs,
                              size_t attrs_len,
                              const RlxValueInfo* const* inputs,
                              size_t n_inputs, RlxShapeOut* out);
    /* execute with attributes (borrowed for the call), passed to the op
     * unchanged. */
    RlxStatus* (*execute_attrs)(RlxStr name, const uint8_t* attrs,
                                size_t attrs_len, const RlxTensor* inputs,
                                size_t n_inputs, RlxTensor* outputs,
                                size_t n_outputs);
};
#define RLX_CUSTOM_OP_API_STRUCT_SIZE \
    RLX_STRUCT_SIZE(RlxCustomOpApi, execute_attrs)
/* What 1.1-1.4 plugins put in struct_size: the end of execute (48 on
 * 64-bit). */
#define RLX_CUSTOM_OP_API_SIZE_1_1 offsetof(RlxCustomOpApi, infer_shape)

/* ======================================================================
 * 9. Executable state                     ABI.md §20 (tables/state.rs)
 * ====================================================================== */

/* Tensors an executable keeps on its device across runs. A state is held
 * under the name of a graph input, in that input's dtype and shape; from
 * then on a run reads that input from the state and the caller passes
 * nothing for it (an input passed anyway overrides the state for that run
 * only). After each run that succeeds, a state fed REPLACE becomes the
 * named output (on the device: no copy crosses the ABI); a state fed ROWS
 * takes rows of the named output when the caller asks (feed_rows), for a
 * KV cache that grows by one row a step. Calls on one executable follow
 * section 14's threading rule; a state belongs to its executable alone. */

/* RlxStateApi.set_feed's kind. */
#define RLX_FEED_NONE 0u    /* changes only when bound again (the default) */
#define RLX_FEED_REPLACE 1u /* after each run, the named output */
#define RLX_FEED_ROWS 2u    /* rows of the named output, by feed_rows */

/* Which rows feed_rows copies from an output of the last run into a
 * state. A row is row_elems consecutive elements of the flat, row-major
 * tensor; a batched tensor is `batch` blocks of *_batch_rows rows. For
 * batch b and r in 0..n_rows, output row b * src_batch_rows + src_row + r
 * goes to state row b * dst_batch_rows + dst + r, where dst is
 * dst_rows[b] when dst_rows is given, else dst_row. With batch > 1 each
 * batch's rows must stay inside its block. Borrowed for the call; every
 * field is required (struct_size at least RLX_ROW_FEED_STRUCT_SIZE). */
typedef struct RlxRowFeed {
    size_t struct_size;
    /* Elements in one row; more than 0. */
    uint64_t row_elems;
    /* Consecutive rows copied per batch; at least 1. */
    uint64_t n_rows;
    /* The first row read in each batch of the output. */
    uint64_t src_row;
    /* The first row written in each batch of the state (unless dst_rows). */
    uint64_t dst_row;
    /* How many batches; at least 1. */
    uint64_t batch;
    /* Rows per batch in the output and in the state; read when batch > 1. */
    uint64_t src_batch_rows;
    uint64_t dst_batch_rows;
    /* NULL, or `batch` first rows, one per batch, in place of dst_row
     * (sequences at different lengths). Borrowed for the call. */
    const uint64_t* dst_rows;
} RlxRowFeed;
#define RLX_ROW_FEED_STRUCT_SIZE RLX_STRUCT_SIZE(RlxRowFeed, dst_rows)

/* The state entries. Plugin-owned, static; NULL in the root table when
 * the plugin keeps no state. A function is NULL when not offered (a
 * plugin may keep state without row feeds). Every name, value and visitor
 * is borrowed for the call. Errors: a name that is not a graph input, or
 * not a state, or not an output, is NOT_FOUND naming those there are; a
 * value of another dtype or shape than its input (bind), an output of
 * another dtype (or, for REPLACE, shape) than its state (set_feed), a row
 * range past a tensor, a read before any run, a lent buffer that is not
 * BORROWED, compact host memory of the tensor's dtype, are
 * INVALID_ARGUMENT naming what differs; ROWS without feed_rows is
 * UNSUPPORTED; nothing is changed by a call that fails. */
struct RlxStateApi {
    size_t struct_size;
    /* Hold value (borrowed for the call, whatever its ownership: the
     * plugin copies it to the executable's device) as the state `name`,
     * a graph input of the value's dtype and shape. Binding again
     * replaces the value and keeps the feed. */
    RlxStatus* (*bind)(RlxExecutable* exe, RlxStr name,
                       const RlxTensor* value);
    /* Forget the state `name` and its feed: its input is the caller's to
     * pass again. */
    RlxStatus* (*unbind)(RlxExecutable* exe, RlxStr name);
    /* Copy elements first_elem.. of the state `name` (flat, row-major)
     * into `into`: memory the caller lends, a BORROWED compact tensor of
     * the state's dtype whose element count says how many to copy. */
    RlxStatus* (*read)(const RlxExecutable* exe, RlxStr name,
                       uint64_t first_elem, RlxTensor* into);
    /* Visit each state (role RLX_ROLE_STATE), in name order. */
    RlxStatus* (*list)(const RlxExecutable* exe,
                       const RlxValueVisitor* visitor);
    /* How the state `name` follows the runs: RLX_FEED_*, from the output
     * called `output` (ignored for NONE). REPLACE needs an output of the
     * state's dtype and shape, ROWS one of its dtype. */
    RlxStatus* (*set_feed)(RlxExecutable* exe, RlxStr name, uint32_t kind,
                           RlxStr output);
    /* Copy `rows` from the last run's outputs into every state fed ROWS
     * (or only the one called `name`, when not empty). Every range is
     * checked before any row is written. */
    RlxStatus* (*feed_rows)(RlxExecutable* exe, RlxStr name,
                            const RlxRowFeed* rows);
    /* Copy elements first_elem.. of the output called `output` of the last
     * run that succeeded (or was submitted) into `into`, lent as for read:
     * a row of the logits without reading the rest back. The plugin keeps
     * the last run's outputs until the next run. */
    RlxStatus* (*read_output)(const RlxExecutable* exe, RlxStr output,
                              uint64_t first_elem, RlxTensor* into);
    /* Optional: absent when NULL or when struct_size does not reach it (a
     * plugin whose minor is below 13 ends its table at
     * RLX_STATE_API_SIZE_1_9): check both before calling. Hold as the state
     * `name` of exe the value called `value` of src (another live
     * executable of this plugin on the same device, or exe itself): src's
     * state of that name if it has one, else the output of that name of its
     * last run. The value must have the input `name`'s dtype and shape.
     * Nothing is copied: each executable replaces its own value as it runs.
     * Binding this way keeps the feed, as bind does. With `name` and
     * `value` empty, every state src holds is taken, under its own name and
     * with its feed, all or nothing (each an input of exe of its dtype and
     * shape, each feed an output of exe of the dtype, and for REPLACE the
     * shape, it had in src). A src that is not live, or on another device,
     * is INVALID_ARGUMENT; no such state or output NOT_FOUND. */
    RlxStatus* (*bind_from)(RlxExecutable* exe, RlxStr name,
                            const RlxExecutable* src, RlxStr value);
};
#define RLX_STATE_API_STRUCT_SIZE RLX_STRUCT_SIZE(RlxStateApi, bind_from)
/* A 1.9-1.12 state table ends after read_output. */
#define RLX_STATE_API_SIZE_1_9 RLX_STRUCT_SIZE(RlxStateApi, read_output)

/* ======================================================================
 * 10. Clones and shared params          ABI.md §21 (tables/sharing.rs)
 * ====================================================================== */

/* Plugin-owned, static; NULL in the root table when the plugin shares
 * nothing between executables. A function is NULL when not offered. An
 * executable passed here must be a live one of this plugin (compiled or
 * cloned by it, not destroyed): anything else, another plugin's or a
 * destroyed one included, is INVALID_ARGUMENT, never a crash. */
struct RlxSharingApi {
    size_t struct_size;
    /* A new executable like exe: the same signature, device and mode,
     * sharing its compiled program and bound params, with a copy of its
     * state (values and feeds) and nothing submitted. *out is owned by the
     * caller, released with executable_destroy; the two are then used,
     * bound and destroyed independently. */
    RlxStatus* (*clone)(const RlxExecutable* exe, RlxExecutable** out);
    /* Make every param of dst the param of the same name in src: one copy
     * of the weights on the device for both. src must be another
     * executable on the same device with every one of dst's params bound,
     * of the same dtype and shape; otherwise nothing changes and the
     * status names the first param that differs. *n_shared (optional:
     * may be NULL) is set to the number shared. A later
     * executable_bind_param on either replaces only its own. */
    RlxStatus* (*share_params)(RlxExecutable* dst, const RlxExecutable* src,
                               size_t* n_shared);
};
#define RLX_SHARING_API_STRUCT_SIZE RLX_STRUCT_SIZE(RlxSharingApi, share_params)

/* ======================================================================
 * 11. Submitted runs                      ABI.md §22 (tables/submit.rs)
 * ====================================================================== */

/* The most runs one executable keeps submitted at once. */
#define RLX_MAX_SUBMITTED 64

/* Plugin-owned, static; NULL in the root table when the plugin only runs
 * synchronously. Both functions are offered together. */
struct RlxSubmitApi {
    size_t struct_size;
    /* Start a run with these inputs (borrowed for the call, checked as
     * executable_run checks them) and return without waiting for it. Its
     * state feeds take effect now, so a run submitted next reads the state
     * this one makes. Runs queue, oldest first, up to RLX_MAX_SUBMITTED
     * (more is RESOURCE_EXHAUSTED). */
    RlxStatus* (*submit)(RlxExecutable* exe, const RlxNamedTensor* inputs,
                         size_t n_inputs);
    /* Wait for the oldest submitted run and hand its outputs over as
     * executable_run_into does (n_outputs slots: lent, OWNED or SKIP), or
     * drop them all when n_outputs is 0. INVALID_ARGUMENT when nothing is
     * submitted. When that run failed, every run submitted after it is
     * dropped and the state is put back as it was before the failed run
     * was submitted. */
    RlxStatus* (*wait)(RlxExecutable* exe, RlxTensor* outputs,
                       size_t n_outputs);
};
#define RLX_SUBMIT_API_STRUCT_SIZE RLX_STRUCT_SIZE(RlxSubmitApi, wait)

/* ======================================================================
 * 12. Host memory for transfers         ABI.md §23 (tables/host_memory.rs)
 * ====================================================================== */

/* Plugin-owned, static; NULL in the root table when the plugin has no use
 * for mapped memory. Both functions are offered together. A host maps
 * memory it owns once (a batch buffer it refills every step, an output
 * buffer it lends every run) so that the plugin copies between it and a
 * device at the bus's speed: on a GPU the range is page-locked and copied
 * by the DMA engine. Mapping changes no byte, and mapped memory is used as
 * any other (inputs, lent outputs, state binds); PJRT's DmaMap and
 * DmaUnmap are the model. */
struct RlxHostMemoryApi {
    size_t struct_size;
    /* Map the len bytes at data (host-owned; they must stay allocated
     * until dma_unmap). A range overlapping a mapped one, a NULL data or a
     * len of 0 is INVALID_ARGUMENT; more than the device can lock is
     * RESOURCE_EXHAUSTED. */
    RlxStatus* (*dma_map)(void* data, size_t len);
    /* Undo dma_map of the range that starts at data (the same pointer);
     * NOT_FOUND when none does. Not while a call that reads or writes the
     * range is running. */
    RlxStatus* (*dma_unmap)(void* data);
};
#define RLX_HOST_MEMORY_API_STRUCT_SIZE \
    RLX_STRUCT_SIZE(RlxHostMemoryApi, dma_unmap)

/* ======================================================================
 * 13. Graph forms                       ABI.md §24 (tables/graph_forms.rs)
 * ====================================================================== */

/* Plugin-owned, static; NULL in the root table when the plugin reads no
 * form but .rlxmodel text. Text is rlx's interchange form, read by any
 * plugin of any rlx release; writing and parsing it costs a few
 * microseconds a node. A plugin may also read forms that are cheaper to
 * make and read but bind both sides tighter (ABI.md §24 names them: rlx-ir's
 * own serialisation of a graph, for one rlx-ir release); a host that
 * writes one of them may send it instead of the text. PJRT's PJRT_Program
 * (code plus a format) is the model. */
struct RlxGraphFormApi {
    size_t struct_size;
    /* The forms the plugin reads, n_forms names. Plugin-owned, static. */
    const RlxStr* forms;
    size_t n_forms;
    /* As the root table's compile, for the len bytes at data (borrowed
     * for the call) in the form named form. A form the plugin does not
     * list is UNSUPPORTED; bytes that are not a graph in that form are
     * INVALID_ARGUMENT. */
    RlxStatus* (*compile)(RlxStr form, const void* data, size_t len,
                          const RlxCompileOptions* options,
                          RlxExecutable** out);
};
#define RLX_GRAPH_FORM_API_STRUCT_SIZE \
    RLX_STRUCT_SIZE(RlxGraphFormApi, compile)

/* ======================================================================
 * 14. The entry symbol                  ABI.md §1 (export/entry.rs)
 * ====================================================================== */

#define RLX_ENTRY_SYMBOL "rlx_plugin_entry"

/* The one symbol a plugin exports. host is host-owned, static. Returns the
 * plugin's root table (plugin-owned, static; a refusal is a table whose
 * refusal_code != 0), or NULL on a failure it could not describe. Calling
 * it again returns the same table. */
typedef const RlxPluginApi* (*RlxEntryFn)(const RlxHostApi* host);

#if defined(_WIN32)
#define RLX_PLUGIN_EXPORT __declspec(dllexport)
#else
#define RLX_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

#ifdef RLX_BUILDING_PLUGIN
RLX_PLUGIN_EXPORT const RlxPluginApi* rlx_plugin_entry(const RlxHostApi* host);
#endif

/* ======================================================================
 * 15. The manifest (optional)                ABI.md §19 (manifest/)
 * ====================================================================== */

/* A manifest is data the build embeds in the library, in its own section
 * (ELF ".rlx_manifest"; Mach-O segment "__DATA", section "__rlx_manifest"),
 * so that a host can read the plugin's name, version, ABI version, device
 * kinds and ops from the file without loading it, and refuse a library of
 * another ABI major before dlopen. Little-endian on every platform: the
 * fixed header below, then `total_size - header_size` bytes of
 * NUL-terminated "key=value" entries (name and version exactly once;
 * device and op any number of times; any other key is the plugin's own,
 * e.g. "mlx.version=0.32.4", and a reader that does not know it skips it;
 * empty strings are padding). Bytes after total_size in the section must be
 * zero. Optional: a library without one loads as before. */
#define RLX_MANIFEST_SECTION_ELF ".rlx_manifest"
#define RLX_MANIFEST_SEGMENT_MACHO "__DATA"
#define RLX_MANIFEST_SECTION_MACHO "__rlx_manifest"
#define RLX_MANIFEST_FORMAT_VERSION 1u
#define RLX_MANIFEST_HEADER_SIZE 32u

typedef struct RlxManifestHeader {
    char magic[8];           /* 'R','L','X','M','A','N','I','F', no NUL */
    uint16_t format_version; /* RLX_MANIFEST_FORMAT_VERSION */
    uint16_t header_size;    /* where the entries start */
    uint32_t total_size;     /* header and entries, in bytes */
    uint32_t abi_major;      /* what the entry claims (ABI.md §3) */
    uint32_t abi_minor;
    uint32_t abi_patch;
    uint32_t reserved; /* 0 */
} RlxManifestHeader;

/* RLX_PLUGIN_MANIFEST(major, minor, patch, strings), at file scope, embeds
 * a manifest; `strings` is a string literal of NUL-terminated entries:
 *
 *   RLX_PLUGIN_MANIFEST(RLX_ABI_VERSION_MAJOR, RLX_ABI_VERSION_MINOR, 0,
 *                       "name=c-demo\0" "version=0.1.0\0" "device=cpu\0"
 *                       "op=Binary\0")
 *
 * The header is written in the compiler's byte order, so the macro is
 * offered for GCC and Clang on little-endian targets only (every target
 * this ABI runs on); elsewhere write the bytes by hand. The literal's own
 * terminating NUL and the struct's tail padding are empty strings, which
 * readers skip. */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__BYTE_ORDER__) && \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#if defined(__APPLE__)
#define RLX_MANIFEST_PLACEMENT_ __attribute__((used, section("__DATA,__rlx_manifest")))
#else
#define RLX_MANIFEST_PLACEMENT_ __attribute__((used, section(".rlx_manifest")))
#endif
#define RLX_PLUGIN_MANIFEST(major, minor, patch, strings)                     \
    struct RlxManifestImage_ {                                                \
        RlxManifestHeader header;                                             \
        char entries[sizeof(strings)];                                        \
    };                                                                        \
    RLX_MANIFEST_PLACEMENT_ static const struct RlxManifestImage_             \
        rlx_plugin_manifest_ = {                                              \
            {{'R', 'L', 'X', 'M', 'A', 'N', 'I', 'F'},                        \
             RLX_MANIFEST_FORMAT_VERSION, RLX_MANIFEST_HEADER_SIZE,           \
             (uint32_t)sizeof(struct RlxManifestImage_), (major), (minor),    \
             (patch), 0},                                                     \
            strings}
#endif

/* Layout checks every compiler of this header makes. */
#if defined(__cplusplus)
#define RLX_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define RLX_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif
RLX_STATIC_ASSERT(sizeof(RlxLogRecord) == RLX_LOG_RECORD_STRUCT_SIZE,
                  "RlxLogRecord has tail padding");
RLX_STATIC_ASSERT(sizeof(RlxHostApi) == RLX_HOST_API_STRUCT_SIZE,
                  "RlxHostApi has tail padding");
/* setting starts exactly where RLX_HOST_API_SIZE_1_0 ends. */
RLX_STATIC_ASSERT(RLX_HOST_API_SIZE_1_0 == RLX_STRUCT_SIZE(RlxHostApi, log_max_level),
                  "RlxHostApi.setting starts inside 1.0 bytes");
RLX_STATIC_ASSERT(sizeof(RlxPluginApi) == RLX_PLUGIN_API_STRUCT_SIZE,
                  "RlxPluginApi has tail padding");
RLX_STATIC_ASSERT(sizeof(RlxCompileOptions) == RLX_COMPILE_OPTIONS_STRUCT_SIZE,
                  "RlxCompileOptions has tail padding");
RLX_STATIC_ASSERT(sizeof(RlxCustomOpInfo) == RLX_CUSTOM_OP_INFO_STRUCT_SIZE,
                  "RlxCustomOpInfo has tail padding");
RLX_STATIC_ASSERT(sizeof(RlxCustomOpDesc) == RLX_CUSTOM_OP_DESC_STRUCT_SIZE,
                  "RlxCustomOpDesc has tail padding");
RLX_STATIC_ASSERT(sizeof(RlxCustomOpApi) == RLX_CUSTOM_OP_API_STRUCT_SIZE,
                  "RlxCustomOpApi has tail padding");
RLX_STATIC_ASSERT(sizeof(RlxShapeOut) == RLX_SHAPE_OUT_STRUCT_SIZE,
                  "RlxShapeOut has tail padding");
/* The fields beyond each older size start exactly where it ends. */
RLX_STATIC_ASSERT(RLX_CUSTOM_OP_DESC_SIZE_1_1 ==
                      RLX_STRUCT_SIZE(RlxCustomOpDesc, kernel_ctx_drop),
                  "RlxCustomOpDesc.kernel_into starts inside 1.1 bytes");
RLX_STATIC_ASSERT(RLX_CUSTOM_OP_INFO_SIZE_1_3 ==
                      RLX_STRUCT_SIZE(RlxCustomOpInfo, reserved0),
                  "RlxCustomOpInfo.kind starts inside 1.3 bytes");
RLX_STATIC_ASSERT(RLX_CUSTOM_OP_API_SIZE_1_1 ==
                      RLX_STRUCT_SIZE(RlxCustomOpApi, execute),
                  "RlxCustomOpApi.infer_shape starts inside 1.1 bytes");
RLX_STATIC_ASSERT(sizeof(RlxDeviceInfo) == RLX_DEVICE_INFO_STRUCT_SIZE,
                  "RlxDeviceInfo has tail padding");
RLX_STATIC_ASSERT(sizeof(RlxPluginDescriptor) == RLX_PLUGIN_DESCRIPTOR_STRUCT_SIZE,
                  "RlxPluginDescriptor has tail padding");
RLX_STATIC_ASSERT(sizeof(RlxMemoryUsage) == RLX_MEMORY_USAGE_STRUCT_SIZE,
                  "RlxMemoryUsage has tail padding");
RLX_STATIC_ASSERT(sizeof(RlxRowFeed) == RLX_ROW_FEED_STRUCT_SIZE,
                  "RlxRowFeed has tail padding");
RLX_STATIC_ASSERT(sizeof(RlxStateApi) == RLX_STATE_API_STRUCT_SIZE,
                  "RlxStateApi has tail padding");
RLX_STATIC_ASSERT(sizeof(RlxSharingApi) == RLX_SHARING_API_STRUCT_SIZE,
                  "RlxSharingApi has tail padding");
RLX_STATIC_ASSERT(sizeof(RlxSubmitApi) == RLX_SUBMIT_API_STRUCT_SIZE,
                  "RlxSubmitApi has tail padding");
/* The manifest header's offsets are the format's (ABI.md §19). */
RLX_STATIC_ASSERT(sizeof(RlxManifestHeader) == RLX_MANIFEST_HEADER_SIZE &&
                      offsetof(RlxManifestHeader, total_size) == 12 &&
                      offsetof(RlxManifestHeader, abi_major) == 16,
                  "RlxManifestHeader is not the manifest's layout");

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RLX_PLUGIN_H */
