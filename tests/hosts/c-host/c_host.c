/*
 * rlx-c-host — an RLX host written in plain C11 against rlx_plugin.h alone.
 *
 * It plays a host of one ABI minor (the host half of the version-skew
 * matrix): every struct it hands the plugin has the size that minor's host
 * wrote, and every padding or unused byte is 0xAB, because a real host's
 * stack holds garbage there and a plugin must not read it.
 *
 *   rlx-c-host --claim MAJOR.MINOR [options] PLUGIN_LIBRARY
 *
 *   --claim 1.N        the ABI the host claims (1.0 ..= 1.13; another major
 *                      is sent as is, to be refused)
 *   --mode M           lazy (default), eager or compiled
 *   --activation A     exp (default) or relu: the graph's activation
 *   --graph FILE       compile FILE's .rlxmodel text instead of the built-in
 *                      graph; it must compute the same function,
 *                      y = act(x[2,3] . w[3,2] + b[2,2])
 *   --print-graph      print the built-in graph text and exit
 *   --setting KEY=VAL  (1.10) the host's setting KEY, answered through the
 *                      host table's `setting`; other keys are answered from
 *                      this process's environment. A host claiming less
 *                      has no `setting` (its table ends before it)
 *   --huge             also compile a graph with a 16 TB tensor, which the
 *                      plugin must refuse: RESOURCE_EXHAUSTED at a 1.6
 *                      claim, INTERNAL (the unknown code) before
 *
 * Claiming 1.8 it lends output buffers (executable_run_into); claiming 1.9
 * it uses every 1.9 entry the plugin's table reaches and holds (state,
 * clones and shared params, submitted runs, the 1.9 root functions; see
 * that section), and says which are absent; claiming 1.10 its host table
 * also offers `setting`.
 *
 * Exit codes: 0 ok; 1 a check failed; 2 usage or load error; 3 the plugin
 * refused the handshake; 4 the host refused the plugin (another major, a
 * malformed table).
 *
 * Build (tests/build.rs does this):
 *   cc -std=c11 -O1 -Wall -Werror -I plugin-api/include c_host.c -ldl
 * No libm: build.rs links only -ldl, so the reference exp is written here.
 */
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rlx_plugin.h"

enum {
    EXIT_OK = 0,
    EXIT_CHECK = 1,
    EXIT_USAGE = 2,
    EXIT_REFUSED = 3,
    EXIT_HOST_REFUSED = 4,
};

/* The byte every host-written struct is filled with before its fields are
 * set: garbage a plugin must never interpret. */
#define GARBAGE 0xAB

/* ======================================================================
 * Small helpers
 * ====================================================================== */

static void fail(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    fprintf(stderr, "rlx-c-host: FAIL: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(EXIT_CHECK);
}

static void step(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

static RlxStr str_of(const char* s) {
    RlxStr r = {s, strlen(s)};
    return r;
}

/* printf arguments for "%.*s" of an RlxStr ({NULL, 0} prints as ""). */
#define STR_ARG(s) (int)(s).len, ((s).ptr ? (s).ptr : "")

static int str_is(RlxStr s, const char* want) {
    size_t n = strlen(want);
    return s.len == n && (n == 0 || memcmp(s.ptr, want, n) == 0);
}

static int str_contains(RlxStr s, const char* needle) {
    size_t n = strlen(needle);
    for (size_t i = 0; s.ptr && i + n <= s.len; i++)
        if (memcmp(s.ptr + i, needle, n) == 0) return 1;
    return 0;
}

/* Does a struct written by the plugin reach the end of `field`? Every
 * reader check goes through this: fields beyond struct_size are absent. */
#define COVERS(p, type, field) ((p)->struct_size >= RLX_STRUCT_SIZE(type, field))

static double absd(double x) { return x < 0 ? -x : x; }

/* exp in double precision without libm: exp(x) = 2^k * exp(r) with
 * |r| <= ln2/2, and exp(r) by its Taylor series (30 terms is far past
 * double precision for |r| < 0.35). */
static double ref_exp(double x) {
    const double ln2 = 0.69314718055994530942;
    long k = (long)(x / ln2 + (x < 0 ? -0.5 : 0.5));
    double r = x - (double)k * ln2, term = 1.0, sum = 1.0;
    for (int i = 1; i < 30; i++) {
        term *= r / i;
        sum += term;
    }
    for (; k > 0; k--) sum *= 2.0;
    for (; k < 0; k++) sum *= 0.5;
    return sum;
}

/* The tolerance of every value check: f32 results against a double
 * reference, |got - want| <= 1e-5 * max(|want|, 1) — 1e-5 relative, and
 * 1e-5 absolute below 1, where relative error means nothing (relu's
 * zeros). A 3-term f32 dot product and an f32 exp are a few ulps (~1e-7)
 * off; 1e-5 leaves room for a backend's vectorised exp. */
static int close_enough(double got, double want) {
    double scale = absd(want) > 1.0 ? absd(want) : 1.0;
    return absd(got - want) <= 1e-5 * scale;
}

/* ======================================================================
 * The host as it claims to be
 * ====================================================================== */

static struct {
    unsigned major, minor;
    uint32_t mode;
    const char* mode_name;
    int relu;
    const char* graph_file;
    const char* library;
    /* 1.4: the device to compile for (--device cpu|gpu[:N]). */
    uint32_t device_kind, device_ordinal;
    /* --huge: the plugin refuses a graph with a 16 TB tensor, which a 1.6
     * host reads as RESOURCE_EXHAUSTED and an older one as INTERNAL. */
    int huge;
    /* 1.10: --setting KEY=VALUE, at most 8 of them. */
    const char* settings[8];
    int n_settings;
} g_opt = {1, RLX_ABI_VERSION_MINOR, RLX_MODE_LAZY, "lazy", 0, NULL, NULL,
           RLX_DEVICE_DEFAULT, 0, 0, {NULL}, 0};

/* The plugin's root table, set once the handshake and table checks pass. */
static const RlxPluginApi* g_api;

/* Log counters; the plugin may log from any thread. */
static struct {
    atomic_uint records;
    atomic_uint too_verbose;
    atomic_uint malformed;
} g_log;

/* Host-owned, static: valid for the rest of the process (ABI §4). */
static RlxHostApi g_host;

static const char* level_name(uint32_t level) {
    switch (level) {
    case RLX_LOG_ERROR: return "ERROR";
    case RLX_LOG_WARN: return "WARN";
    case RLX_LOG_INFO: return "INFO";
    case RLX_LOG_DEBUG: return "DEBUG";
    case RLX_LOG_TRACE: return "TRACE";
    default: return "?";
    }
}

/* Print one record as `[plugin LEVEL target] message`. Only the fields the
 * plugin's struct_size covers are read. */
static void host_log(void* ctx, const RlxLogRecord* r) {
    (void)ctx;
    atomic_fetch_add(&g_log.records, 1);
    if (!r || !COVERS(r, RlxLogRecord, message)) {
        atomic_fetch_add(&g_log.malformed, 1);
        return;
    }
    /* We asked for INFO; a more verbose record is allowed through the ABI
     * ("the most verbose level the host wants") but we drop it. */
    if (r->level > RLX_LOG_INFO) {
        atomic_fetch_add(&g_log.too_verbose, 1);
        return;
    }
    fprintf(stderr, "[plugin %s %.*s] %.*s\n", level_name(r->level),
            STR_ARG(r->target), STR_ARG(r->message));
}

static uint32_t host_log_max_level(void* ctx) {
    (void)ctx;
    return RLX_LOG_INFO;
}

/* (1.10) The host's setting `key`: a --setting pair, else this process's
 * environment. Copies at most cap bytes; the value's length, or -1. */
static int64_t host_setting(void* ctx, RlxStr key, uint8_t* buf, size_t cap) {
    (void)ctx;
    if (!key.ptr || key.len == 0 || key.len > 255) return -1;
    char k[256];
    memcpy(k, key.ptr, key.len);
    k[key.len] = 0;
    const char* v = NULL;
    for (int i = 0; i < g_opt.n_settings && !v; i++) {
        const char* eq = strchr(g_opt.settings[i], '=');
        if ((size_t)(eq - g_opt.settings[i]) == key.len &&
            memcmp(g_opt.settings[i], k, key.len) == 0)
            v = eq + 1;
    }
    if (!v) v = getenv(k);
    if (!v) return -1;
    size_t n = strlen(v);
    if (buf && cap) memcpy(buf, v, n < cap ? n : cap);
    return (int64_t)n;
}

static void fill_host_table(void) {
    /* The claimed minor's table: 1.0-1.9 hosts ended at log_max_level
     * (RLX_HOST_API_SIZE_1_0), and the bytes beyond stay 0xAB; 1.10 adds
     * `setting`. Its 4 bytes of padding after abi_version stay 0xAB. */
    memset(&g_host, GARBAGE, sizeof g_host);
    int knows_1_10 = g_opt.major != 1 || g_opt.minor >= 10;
    g_host.struct_size = knows_1_10 ? RLX_HOST_API_STRUCT_SIZE : RLX_HOST_API_SIZE_1_0;
    g_host.abi_version.major = g_opt.major;
    g_host.abi_version.minor = g_opt.minor;
    g_host.abi_version.patch = 0;
    g_host.host_name = str_of("rlx-c-host");
    g_host.log_ctx = &g_log;
    g_host.log = host_log;
    g_host.log_max_level = host_log_max_level;
    if (knows_1_10) g_host.setting = host_setting;
}

/* ======================================================================
 * Statuses
 * ====================================================================== */

static const char* code_name(uint32_t code) {
    switch (code) {
    case 0: return "OK";
    case RLX_STATUS_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case RLX_STATUS_UNSUPPORTED: return "UNSUPPORTED";
    case RLX_STATUS_VERSION_MISMATCH: return "VERSION_MISMATCH";
    case RLX_STATUS_INTERNAL: return "INTERNAL";
    case RLX_STATUS_PANIC: return "PANIC";
    case RLX_STATUS_NOT_FOUND: return "NOT_FOUND";
    case RLX_STATUS_ALREADY_EXISTS: return "ALREADY_EXISTS";
    case RLX_STATUS_RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    default: return "INTERNAL (unknown code)";
    }
}

/* A code this host does not know (from a newer peer) reads as INTERNAL:
 * RESOURCE_EXHAUSTED is known from 1.6. */
static uint32_t known_code(uint32_t code) {
    uint32_t newest = g_opt.minor >= 6 ? RLX_STATUS_RESOURCE_EXHAUSTED : RLX_STATUS_ALREADY_EXISTS;
    return code <= newest ? code : RLX_STATUS_INTERNAL;
}

/* Success or fail: a non-null status is printed, freed, and ends the run. */
static void must(RlxStatus* s, const char* what) {
    if (!s) return;
    uint32_t code = g_api->status_code(s);
    RlxStr msg = g_api->status_message(s);
    fprintf(stderr, "rlx-c-host: %s: %s (%u): %.*s\n", what, code_name(code), code,
            STR_ARG(msg));
    g_api->status_free(s);
    fail("%s failed", what);
}

/* An error path: the call must fail, with code `want` (0 = any error) and,
 * if `needle` is set, a message containing it. The status is freed. */
static void expect_error(RlxStatus* s, uint32_t want, const char* needle,
                         const char* what) {
    if (!s) fail("%s: expected an error, got success", what);
    uint32_t code = known_code(g_api->status_code(s));
    RlxStr msg = g_api->status_message(s);
    step("error path: %s -> %s (%u): %.*s", what, code_name(code), code, STR_ARG(msg));
    int code_ok = want == 0 || code == want;
    int msg_ok = !needle || str_contains(msg, needle);
    g_api->status_free(s);
    if (!code_ok) fail("%s: expected %s, got %s", what, code_name(want), code_name(code));
    if (!msg_ok) fail("%s: the message does not mention \"%s\"", what, needle);
}

/* ======================================================================
 * Tensors (frozen structs: always sizeof)
 * ====================================================================== */

static const RlxDataType F32 = {RLX_DL_FLOAT, 32, 1};

static int is_f32(RlxDataType d) {
    return d.code == RLX_DL_FLOAT && d.bits == 32 && d.lanes == 1;
}

/* A BORROWED f32 host tensor. strides may be NULL (compact row-major). */
static void borrowed_f32(RlxTensor* t, float* data, uint64_t byte_offset,
                         int64_t* shape, int32_t ndim, int64_t* strides) {
    memset(t, GARBAGE, sizeof *t); /* the 4 bytes after ownership */
    t->struct_size = sizeof(RlxTensor);
    t->ownership = RLX_OWNERSHIP_BORROWED;
    t->dl.data = data;
    t->dl.device.device_type = 1; /* kDLCPU */
    t->dl.device.device_id = 0;
    t->dl.ndim = ndim;
    t->dl.dtype = F32;
    t->dl.shape = shape;
    t->dl.strides = strides;
    t->dl.byte_offset = byte_offset;
    t->manager_ctx = NULL;
    t->deleter = NULL;
}

static void named(RlxNamedTensor* n, const char* name, const RlxTensor* t) {
    memset(n, GARBAGE, sizeof *n);
    n->struct_size = sizeof(RlxNamedTensor);
    n->name = str_of(name);
    n->tensor = *t;
}

/* Caller-owned output slots: garbage until the plugin writes them. */
static void garbage_slots(RlxTensor* slots, size_t n) {
    memset(slots, GARBAGE, n * sizeof *slots);
}

/* Element `i` (row-major index) of a 2-D f32 tensor, honouring strides and
 * byte_offset as DLPack defines them. */
static double element_2d(const RlxTensor* t, size_t i) {
    int64_t cols = t->dl.shape[1];
    int64_t r = (int64_t)i / cols, c = (int64_t)i % cols;
    int64_t s0 = t->dl.strides ? t->dl.strides[0] : cols;
    int64_t s1 = t->dl.strides ? t->dl.strides[1] : 1;
    const char* base = (const char*)t->dl.data + t->dl.byte_offset;
    return ((const float*)base)[r * s0 + c * s1];
}

/* Check an output the plugin handed over: a well-formed OWNED f32[rows,
 * cols] host tensor whose values match `want`. */
static void check_output(const RlxTensor* t, const double* want, int64_t rows,
                         int64_t cols, const char* what) {
    if (t->struct_size != sizeof(RlxTensor))
        fail("%s: tensor struct_size %zu, the frozen size is %zu", what, t->struct_size,
             sizeof(RlxTensor));
    if (t->ownership != RLX_OWNERSHIP_OWNED)
        fail("%s: ownership %u, outputs are OWNED", what, t->ownership);
    if (!t->deleter) fail("%s: an OWNED tensor with no deleter cannot be released", what);
    if (t->dl.device.device_type != 1) fail("%s: not host memory", what);
    if (!is_f32(t->dl.dtype))
        fail("%s: dtype %u/%u/%u, want f32", what, t->dl.dtype.code, t->dl.dtype.bits,
             t->dl.dtype.lanes);
    if (t->dl.ndim != 2 || !t->dl.shape || t->dl.shape[0] != rows || t->dl.shape[1] != cols)
        fail("%s: shape is not [%lld, %lld]", what, (long long)rows, (long long)cols);
    if (!t->dl.data) fail("%s: null data", what);
    for (size_t i = 0; i < (size_t)(rows * cols); i++) {
        double got = element_2d(t, i);
        if (!close_enough(got, want[i]))
            fail("%s: element %zu is %.9g, want %.9g", what, i, got, want[i]);
    }
}

/* Release an OWNED tensor through its own deleter, exactly once. */
static void release(RlxTensor* t) {
    if (t->ownership == RLX_OWNERSHIP_OWNED && t->deleter) t->deleter(t->manager_ctx);
    memset(t, GARBAGE, sizeof *t);
}

/* ======================================================================
 * The graph and its reference
 * ====================================================================== */

/* y = act(x . w + b): two inputs, one param, three ops. The syntax is what
 * rlx-ir 0.2.19's rlxmodel::to_text writes (the test compares them). */
static const char* builtin_graph(void) {
    return g_opt.relu ? "rlxmodel 1\n"
                        "opset 1\n"
                        "\n"
                        "graph @g {\n"
                        "  %x = input : f32[2, 3]\n"
                        "  %w = param : f32[3, 2]\n"
                        "  %2 = MatMul %x, %w : f32[2, 2]\n"
                        "  %b = input : f32[2, 2]\n"
                        "  %4 = Binary(Add) %2, %b : f32[2, 2]\n"
                        "  %5 = Activation(Relu) %4 : f32[2, 2]\n"
                        "  return %5\n"
                        "}\n"
                      : "rlxmodel 1\n"
                        "opset 1\n"
                        "\n"
                        "graph @g {\n"
                        "  %x = input : f32[2, 3]\n"
                        "  %w = param : f32[3, 2]\n"
                        "  %2 = MatMul %x, %w : f32[2, 2]\n"
                        "  %b = input : f32[2, 2]\n"
                        "  %4 = Binary(Add) %2, %b : f32[2, 2]\n"
                        "  %5 = Activation(Exp) %4 : f32[2, 2]\n"
                        "  return %5\n"
                        "}\n";
}

/* The values, chosen so x.w + b has both signs (relu keeps some, zeroes
 * others) and stays O(1) (exp stays O(1)). */
static const float X[6] = {0.5f, -1.0f, 2.0f, 1.5f, 0.25f, -0.75f};
static const float W[6] = {0.2f, -0.4f, 0.6f, 0.1f, -0.3f, 0.5f};
static const float B1[4] = {0.1f, -0.2f, 0.3f, 0.05f};
static const float B2[4] = {-0.5f, 0.25f, 0.0f, 1.0f};

/* y[2,2] = act(x[2,3] . w[3,2] + b[2,2]) in double, from the f32 values. */
static void reference(const float* x, const float* w, const float* b, double* y) {
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            double acc = b[i * 2 + j];
            for (int k = 0; k < 3; k++) acc += (double)x[i * 3 + k] * (double)w[k * 2 + j];
            y[i * 2 + j] = g_opt.relu ? (acc > 0 ? acc : 0.0) : ref_exp(acc);
        }
}

static char* read_file(const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) fail("cannot open %s", path);
    size_t cap = 4096, n = 0;
    char* buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (!buf) fail("out of memory reading %s", path);
    buf[n] = 0;
    return buf;
}

/* ======================================================================
 * Handshake
 * ====================================================================== */

/* dlopen the library and call its entry. RTLD_NOW so a missing symbol fails
 * here, RTLD_LOCAL so plugins keep their own copies of shared libraries.
 * Never dlclose (ABI §9: the plugin's threads and statics outlive us). */
static const RlxPluginApi* call_entry(const char* path) {
    void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "rlx-c-host: dlopen %s: %s\n", path, dlerror());
        exit(EXIT_USAGE);
    }
    void* sym = dlsym(lib, RLX_ENTRY_SYMBOL);
    if (!sym) {
        fprintf(stderr, "rlx-c-host: %s has no %s symbol\n", path, RLX_ENTRY_SYMBOL);
        exit(EXIT_USAGE);
    }
    /* ISO C has no object-to-function pointer conversion; POSIX guarantees
     * the representation, so copy the bits. */
    RlxEntryFn entry;
    memcpy(&entry, &sym, sizeof entry);
    const RlxPluginApi* api = entry(&g_host);
    if (!api) {
        fprintf(stderr, "rlx-c-host: the entry returned NULL\n");
        exit(EXIT_USAGE);
    }
    return api;
}

/* The fields every 1.0 table has: everything before custom_ops. */
#define PLUGIN_API_SIZE_1_0 offsetof(RlxPluginApi, custom_ops)

/* Read the frozen header; stop at a refusal or another major before
 * touching anything past it. */
static void check_header(const RlxPluginApi* api) {
    RlxAbiVersion v = api->abi_version;
    step("handshake: plugin ABI %u.%u.%u, table struct_size %zu (host claims %u.%u)", v.major,
         v.minor, v.patch, api->struct_size, g_opt.major, g_opt.minor);
    if (api->refusal_code != 0) {
        printf("refused: %s (%u): %.*s\n", code_name(known_code(api->refusal_code)),
               api->refusal_code, STR_ARG(api->refusal_message));
        exit(EXIT_REFUSED);
    }
    if (api->struct_size < RLX_PLUGIN_API_HEADER_SIZE) {
        printf("host refuses: table struct_size %zu is smaller than the frozen header\n",
               api->struct_size);
        exit(EXIT_HOST_REFUSED);
    }
    if (v.major != g_opt.major) {
        printf("host refuses: VERSION_MISMATCH: plugin ABI %u.%u.%u, host ABI %u.%u "
               "(majors differ)\n",
               v.major, v.minor, v.patch, g_opt.major, g_opt.minor);
        exit(EXIT_HOST_REFUSED);
    }
}

/* The size the table must have: every field both the plugin's minor and
 * this host's minor define (ABI §3). */
static void check_table(const RlxPluginApi* api) {
    size_t need = PLUGIN_API_SIZE_1_0;
    if (api->abi_version.minor >= 1 && g_opt.minor >= 1) need = RLX_PLUGIN_API_SIZE_1_1;
    if (api->abi_version.minor >= 4 && g_opt.minor >= 4) need = RLX_PLUGIN_API_SIZE_1_4;
    if (api->abi_version.minor >= 8 && g_opt.minor >= 8) need = RLX_PLUGIN_API_SIZE_1_8;
    if (api->abi_version.minor >= 9 && g_opt.minor >= 9) need = RLX_PLUGIN_API_SIZE_1_9;
    if (api->struct_size < need) {
        printf("host refuses: a %u.%u table of %zu bytes, at least %zu expected\n",
               api->abi_version.major, api->abi_version.minor, api->struct_size, need);
        exit(EXIT_HOST_REFUSED);
    }
#define REQUIRE(f)                                                               \
    if (!api->f) {                                                               \
        printf("host refuses: the required field `" #f "` is null\n");           \
        exit(EXIT_HOST_REFUSED);                                                 \
    }
    REQUIRE(descriptor) REQUIRE(status_new) REQUIRE(status_code)
    REQUIRE(status_message) REQUIRE(status_free) REQUIRE(init) REQUIRE(supported_ops)
    REQUIRE(lowering_table) REQUIRE(compile) REQUIRE(executable_destroy)
    REQUIRE(executable_signature) REQUIRE(executable_bind_param) REQUIRE(executable_run)
#undef REQUIRE
    step("table: all required functions present; rust_layout_tag \"%.*s\"",
         STR_ARG(api->rust_layout_tag));
}

static void print_descriptor(const RlxPluginDescriptor* d) {
    if (!COVERS(d, RlxPluginDescriptor, version))
        fail("descriptor struct_size %zu does not reach `version`", d->struct_size);
    printf("descriptor: %.*s %.*s", STR_ARG(d->name), STR_ARG(d->version));
    if (COVERS(d, RlxPluginDescriptor, description))
        printf(" \"%.*s\"", STR_ARG(d->description));
    if (COVERS(d, RlxPluginDescriptor, n_devices)) {
        printf("; devices:");
        for (size_t i = 0; i < d->n_devices; i++) printf(" %.*s", STR_ARG(d->devices[i]));
    }
    if (COVERS(d, RlxPluginDescriptor, n_opsets)) {
        printf("; opsets:");
        for (size_t i = 0; i < d->n_opsets; i++) printf(" %u", d->opsets[i]);
    }
    printf("\n");
    if (COVERS(d, RlxPluginDescriptor, n_build_info))
        for (size_t i = 0; i < d->n_build_info; i++)
            step("build_info: %.*s = %.*s", STR_ARG(d->build_info[i].key),
                 STR_ARG(d->build_info[i].value));
    /* 1.4: the device list, only when both sides know it. */
    if (g_opt.minor >= 4 && COVERS(d, RlxPluginDescriptor, n_device_infos))
        for (size_t i = 0; i < d->n_device_infos; i++) {
            const RlxDeviceInfo* di = d->device_infos[i];
            if (!di) fail("device_infos[%zu] is NULL", i);
            step("device %zu: %s:%u %.*s (%llu bytes)%s", i,
                 di->kind == RLX_DEVICE_GPU ? "gpu" : "cpu", di->ordinal, STR_ARG(di->name),
                 (unsigned long long)di->memory_bytes, i == 0 ? " [default]" : "");
        }
}

/* 1.4: which device an executable runs on (an out-struct we size). */
static void print_executable_device(const RlxExecutable* exe) {
    if (g_opt.minor < 4 || !COVERS(g_api, RlxPluginApi, executable_device) ||
        !g_api->executable_device)
        return;
    RlxDeviceInfo out;
    memset(&out, GARBAGE, sizeof out);
    out.struct_size = RLX_DEVICE_INFO_STRUCT_SIZE;
    RlxStatus* s = g_api->executable_device(exe, &out);
    must(s, "executable_device");
    step("executable device: %s:%u %.*s", out.kind == RLX_DEVICE_GPU ? "gpu" : "cpu",
         out.ordinal, STR_ARG(out.name));
}

/* ======================================================================
 * Registration tables
 * ====================================================================== */

static void check_supported_ops(void) {
    RlxOpList list;
    memset(&list, GARBAGE, sizeof list);
    list.struct_size = sizeof list;
    must(g_api->supported_ops(&list), "supported_ops");
    if (!COVERS(&list, RlxOpList, n_ops)) fail("op list struct_size %zu", list.struct_size);
    int seen_matmul = 0, seen_binary = 0, seen_act = 0;
    printf("supported ops: %zu:", list.n_ops);
    for (size_t i = 0; i < list.n_ops; i++) {
        const RlxOpSupport* op = list.ops[i];
        if (!op || !COVERS(op, RlxOpSupport, op_kind)) fail("op %zu is malformed", i);
        if (i < 8) printf(" %.*s", STR_ARG(op->op_kind));
        int f32 = 0;
        if (COVERS(op, RlxOpSupport, n_dtypes))
            for (size_t k = 0; k < op->n_dtypes; k++) f32 |= is_f32(op->dtypes[k]);
        seen_matmul |= str_is(op->op_kind, "MatMul") && f32;
        seen_binary |= str_is(op->op_kind, "Binary") && f32;
        seen_act |= str_is(op->op_kind, "Activation") && f32;
    }
    printf("%s\n", list.n_ops > 8 ? " ..." : "");
    if (!seen_matmul || !seen_binary || !seen_act)
        fail("the plugin does not list MatMul, Binary and Activation for f32");
    expect_error(g_api->supported_ops(NULL), RLX_STATUS_INVALID_ARGUMENT, NULL,
                 "supported_ops(NULL)");
}

/* The eager single-op path of a lowering entry: Binary(Add) on two
 * borrowed tensors, up to two output slots offered. */
static void run_eager_binary(const RlxLoweringEntry* e) {
    static const char* node = "rlxmodel 1\n"
                              "opset 1\n"
                              "\n"
                              "graph @add {\n"
                              "  %a = input : f32[2, 2]\n"
                              "  %b = input : f32[2, 2]\n"
                              "  %2 = Binary(Add) %a, %b : f32[2, 2]\n"
                              "  return %2\n"
                              "}\n";
    float a[4] = {1, 2, 3, 4}, b[4] = {0.5f, -0.5f, 0.25f, -0.25f};
    int64_t shape[2] = {2, 2};
    RlxTensor in[2], out[2];
    borrowed_f32(&in[0], a, 0, shape, 2, NULL);
    borrowed_f32(&in[1], b, 0, shape, 2, NULL);
    garbage_slots(out, 2);
    size_t n_out = 12345;
    must(e->execute(e->execute_ctx, str_of(node), in, 2, out, 2, &n_out),
         "lowering entry Binary: execute");
    if (n_out != 1) fail("eager Binary wrote %zu outputs, want 1", n_out);
    double want[4];
    for (int i = 0; i < 4; i++) want[i] = (double)a[i] + (double)b[i];
    check_output(&out[0], want, 2, 2, "eager Binary(Add)");
    release(&out[0]);
    step("lowering entry Binary: eager execute ok (1 output, released)");
}

static void check_lowering_table(void) {
    RlxLoweringTable t;
    memset(&t, GARBAGE, sizeof t);
    t.struct_size = sizeof t;
    must(g_api->lowering_table(&t), "lowering_table");
    if (!COVERS(&t, RlxLoweringTable, n_entries)) fail("lowering table struct_size");
    size_t eager = 0, by_strategy[3] = {0, 0, 0}, unknown = 0;
    const RlxLoweringEntry* binary = NULL;
    for (size_t i = 0; i < t.n_entries; i++) {
        const RlxLoweringEntry* e = t.entries[i];
        if (!e || !COVERS(e, RlxLoweringEntry, execute_ctx)) fail("entry %zu malformed", i);
        if (e->strategy > RLX_STRATEGY_HOST_EVALUATED) {
            unknown++; /* skipped, as the header says */
            continue;
        }
        by_strategy[e->strategy]++;
        if (e->execute) eager++;
        if (str_is(e->op_kind, "Binary") && e->execute) binary = e;
    }
    step("lowering table: %zu entries (native %zu, composite %zu, host-evaluated %zu, "
         "unknown %zu), %zu eager",
         t.n_entries, by_strategy[0], by_strategy[1], by_strategy[2], unknown, eager);
    expect_error(g_api->lowering_table(NULL), RLX_STATUS_INVALID_ARGUMENT, NULL,
                 "lowering_table(NULL)");
    if (!binary) fail("no eager Binary entry");
    run_eager_binary(binary);
}

/* ======================================================================
 * Compile options: as each minor's host wrote them
 * ====================================================================== */

/* RlxCompileOptions as the 1.0 and 1.1 headers declared it. sizeof is 16:
 * 4 bytes of tail padding after mode, where 1.2 later put rng_policy. */
typedef struct RlxCompileOptions_1_0 {
    size_t struct_size;
    uint32_t mode;
} RlxCompileOptions_1_0;
_Static_assert(sizeof(RlxCompileOptions_1_0) == RLX_COMPILE_OPTIONS_SIZE_1_0,
               "a 1.0 host wrote 16");

/* What the claimed minor's host wrote in RlxCompileOptions.struct_size. */
static size_t options_size(void) {
    if (g_opt.minor < 2) return RLX_COMPILE_OPTIONS_SIZE_1_0;
    if (g_opt.minor < 4) return RLX_COMPILE_OPTIONS_SIZE_1_2;
    if (g_opt.minor < 7) return RLX_COMPILE_OPTIONS_SIZE_1_4;
    return RLX_COMPILE_OPTIONS_SIZE_1_7;
}

/* A heap block of exactly the size the claimed minor's host wrote, filled
 * with garbage first: a reader that takes rng_policy from a 1.0/1.1 host
 * sees 0xABABABAB, and one that reads past the block is caught by
 * valgrind. Free with free(). */
static RlxCompileOptions* new_compile_options(uint32_t mode) {
    if (g_opt.minor < 2) {
        RlxCompileOptions_1_0* o = malloc(sizeof *o);
        if (!o) fail("out of memory");
        memset(o, GARBAGE, sizeof *o);
        o->struct_size = sizeof *o; /* sizeof, padding included, as 1.0 did */
        o->mode = mode;
        return (RlxCompileOptions*)o;
    }
    RlxCompileOptions* o = malloc(sizeof *o);
    if (!o) fail("out of memory");
    memset(o, GARBAGE, sizeof *o);
    /* 1.2 wrote 24 = sizeof; 1.3 wrote RLX_STRUCT_SIZE(.., rng_seed), the
     * same 24; 1.4 wrote through device_ordinal (32), 1.7 writes through
 * memory_limit_bytes (40). The bytes a minor
     * did not know stay garbage. */
    o->struct_size = options_size();
    o->mode = mode;
    o->rng_policy = RLX_RNG_PHILOX;
    o->rng_seed = RLX_DEFAULT_RNG_SEED;
    if (g_opt.minor >= 4) {
        o->device_kind = g_opt.device_kind;
        o->device_ordinal = g_opt.device_ordinal;
    }
    /* 1.7: no limit of the host's own. */
    if (g_opt.minor >= 7) o->memory_limit_bytes = 0;
    return o;
}

static RlxExecutable* compile_text(const char* text, uint32_t mode, RlxStatus** status) {
    RlxCompileOptions* opts = new_compile_options(mode);
    RlxExecutable* exe = (RlxExecutable*)(uintptr_t)0xABABABABu; /* must be overwritten */
    *status = g_api->compile(str_of(text), opts, &exe);
    free(opts);
    return *status ? NULL : exe;
}

/* ======================================================================
 * Signature
 * ====================================================================== */

typedef struct {
    uint32_t role;
    char name[64];
    RlxDataType dtype;
    int32_t ndim;
    int64_t shape[8];
} Value;

typedef struct {
    Value v[16];
    size_t n;
    unsigned malformed, skipped, out_of_order;
    uint32_t last_role;
} Signature;

/* Copy one value (info is borrowed for the call). */
static void visit_value(void* ctx, const RlxValueInfo* info) {
    Signature* s = ctx;
    if (!info || !COVERS(info, RlxValueInfo, shape) || info->name.len >= 64 || info->ndim < 0 ||
        info->ndim > 8 || (info->ndim > 0 && !info->shape) || s->n == 16) {
        s->malformed++;
        return;
    }
    if (info->role > RLX_ROLE_OUTPUT) {
        fprintf(stderr, "rlx-c-host: warning: skipping a value of unknown role %u\n",
                info->role);
        s->skipped++;
        return;
    }
    if (s->n > 0 && info->role < s->last_role) s->out_of_order++;
    s->last_role = info->role;
    Value* v = &s->v[s->n++];
    v->role = info->role;
    memcpy(v->name, info->name.ptr, info->name.len);
    v->name[info->name.len] = 0;
    v->dtype = info->dtype;
    v->ndim = info->ndim;
    for (int32_t i = 0; i < info->ndim; i++) v->shape[i] = info->shape[i];
}

static const Value* find_value(const Signature* s, uint32_t role, const char* name) {
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i].role == role && (!name || strcmp(s->v[i].name, name) == 0)) return &s->v[i];
    return NULL;
}

static void expect_value(const Signature* s, uint32_t role, const char* name, int64_t d0,
                         int64_t d1) {
    const Value* v = find_value(s, role, name);
    if (!v) fail("the signature has no %s", name ? name : "output");
    if (!is_f32(v->dtype) || v->ndim != 2 || v->shape[0] != d0 || v->shape[1] != d1)
        fail("signature: %s is not f32[%lld, %lld]", v->name, (long long)d0, (long long)d1);
}

static void check_signature(RlxExecutable* exe) {
    Signature s;
    memset(&s, 0, sizeof s);
    RlxValueVisitor vis;
    memset(&vis, GARBAGE, sizeof vis);
    vis.struct_size = RLX_VALUE_VISITOR_STRUCT_SIZE;
    vis.ctx = &s;
    vis.visit = visit_value;
    must(g_api->executable_signature(exe, &vis), "executable_signature");
    if (s.malformed || s.out_of_order)
        fail("signature: %u malformed values, %u out of order (inputs, params, outputs)",
             s.malformed, s.out_of_order);
    size_t counts[3] = {0, 0, 0};
    for (size_t i = 0; i < s.n; i++) counts[s.v[i].role]++;
    if (counts[0] != 2 || counts[1] != 1 || counts[2] != 1)
        fail("signature: %zu inputs, %zu params, %zu outputs; want 2, 1, 1", counts[0],
             counts[1], counts[2]);
    expect_value(&s, RLX_ROLE_INPUT, "x", 2, 3);
    expect_value(&s, RLX_ROLE_INPUT, "b", 2, 2);
    expect_value(&s, RLX_ROLE_PARAM, "w", 3, 2);
    expect_value(&s, RLX_ROLE_OUTPUT, NULL, 2, 2);
    step("signature: inputs x f32[2, 3], b f32[2, 2]; param w f32[3, 2]; output %s f32[2, 2]",
         find_value(&s, RLX_ROLE_OUTPUT, NULL)->name);
    expect_error(g_api->executable_signature(exe, NULL), RLX_STATUS_INVALID_ARGUMENT, NULL,
                 "executable_signature(visitor NULL)");
}

/* ======================================================================
 * Bind, run, error paths
 * ====================================================================== */

static int64_t SHAPE_X[2] = {2, 3}, SHAPE_W[2] = {3, 2}, SHAPE_B[2] = {2, 2};

static void bind_param(RlxExecutable* exe) {
    /* BORROWED: valid only during the call, so the plugin must copy. To
     * prove it did, the buffer is scribbled over after the call. */
    float w[6];
    memcpy(w, W, sizeof w);
    RlxTensor t;
    borrowed_f32(&t, w, 0, SHAPE_W, 2, NULL);
    must(g_api->executable_bind_param(exe, str_of("w"), &t), "bind_param w");
    memset(w, GARBAGE, sizeof w);
    step("bind_param: w (BORROWED; host buffer scribbled over after the call)");
    expect_error(g_api->executable_bind_param(exe, str_of("no_such_param"), &t), 0, NULL,
                 "bind_param of an unknown name");
}

/* x and b, copies of X and B1 in the caller's arrays, lent as the run's
 * named inputs. */
static void lend_inputs(float x[6], float b[4], RlxTensor* tx, RlxTensor* tb,
                        RlxNamedTensor in[2]) {
    memcpy(x, X, 6 * sizeof *x);
    memcpy(b, B1, 4 * sizeof *b);
    borrowed_f32(tx, x, 0, SHAPE_X, 2, NULL);
    borrowed_f32(tb, b, 0, SHAPE_B, 2, NULL);
    named(&in[0], "x", tx);
    named(&in[1], "b", tb);
}

/* Run with x compact, then with x stored transposed (strides {1, 2}) one
 * float into its buffer (byte_offset 4), and another b. */
static void run_and_check(RlxExecutable* exe) {
    float x[6], b[4];
    RlxTensor tx, tb, out[1];
    RlxNamedTensor in[2];
    lend_inputs(x, b, &tx, &tb, in);
    garbage_slots(out, 1);
    must(g_api->executable_run(exe, in, 2, out, 1), "run 1");
    double want[4];
    reference(X, W, B1, want);
    check_output(&out[0], want, 2, 2, "run 1");
    step("run 1: output f32[2, 2] = [%.6f %.6f; %.6f %.6f] matches the C reference",
         element_2d(&out[0], 0), element_2d(&out[0], 1), element_2d(&out[0], 2),
         element_2d(&out[0], 3));
    release(&out[0]);

    /* xt[1 + c*2 + r] = x[r][c]: column-major, after one leading float. */
    float xt[7] = {-99.0f};
    int64_t strides[2] = {1, 2};
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 3; c++) xt[1 + c * 2 + r] = X[r * 3 + c];
    borrowed_f32(&tx, xt, sizeof(float), SHAPE_X, 2, strides);
    memcpy(b, B2, sizeof b);
    named(&in[0], "x", &tx);
    named(&in[1], "b", &tb);
    garbage_slots(out, 1);
    must(g_api->executable_run(exe, in, 2, out, 1), "run 2 (strided x)");
    reference(X, W, B2, want);
    check_output(&out[0], want, 2, 2, "run 2");
    release(&out[0]);
    step("run 2: strided x with byte_offset, new b: matches the C reference");
}

/* 1.8, when both sides know it: the output written into a buffer this
 * host lends (filled with garbage first, so a write that did not happen
 * shows), then a lent buffer of the wrong shape, which must be refused. */
static void run_into_and_check(RlxExecutable* exe) {
    if (g_opt.minor < 8 || !COVERS(g_api, RlxPluginApi, executable_run_into) ||
        !g_api->executable_run_into) {
        step("run_into: not offered (plugin %u.%u, host %u.%u); executable_run serves",
             g_api->abi_version.major, g_api->abi_version.minor, g_opt.major, g_opt.minor);
        return;
    }
    float x[6], b[4], y[4];
    RlxTensor tx, tb, out[1];
    RlxNamedTensor in[2];
    lend_inputs(x, b, &tx, &tb, in);
    memset(y, GARBAGE, sizeof y);
    borrowed_f32(&out[0], y, 0, SHAPE_B, 2, NULL);
    must(g_api->executable_run_into(exe, in, 2, out, 1), "run_into");
    if (out[0].dl.data != y || out[0].ownership != RLX_OWNERSHIP_BORROWED)
        fail("run_into: the lent slot was not left as it was");
    double want[4];
    reference(X, W, B1, want);
    for (size_t i = 0; i < 4; i++)
        if (!close_enough(y[i], want[i]))
            fail("run_into: element %zu is %.9g, want %.9g", i, y[i], want[i]);
    step("run_into: output written into the host's buffer = [%.6f %.6f; %.6f %.6f], matches "
         "the C reference",
         y[0], y[1], y[2], y[3]);

    /* A NULL-data slot receives an OWNED tensor, as from executable_run. */
    garbage_slots(out, 1);
    out[0].struct_size = sizeof(RlxTensor);
    out[0].dl.data = NULL;
    must(g_api->executable_run_into(exe, in, 2, out, 1), "run_into, owned slot");
    check_output(&out[0], want, 2, 2, "run_into, owned slot");
    release(&out[0]);
    step("run_into: a NULL-data slot received an OWNED output");

    int64_t wrong[2] = {4, 1};
    borrowed_f32(&out[0], y, 0, wrong, 2, NULL);
    expect_error(g_api->executable_run_into(exe, in, 2, out, 1), RLX_STATUS_INVALID_ARGUMENT,
                 NULL, "run_into with a lent f32[4, 1] for an f32[2, 2] output");
}

static void run_error_paths(RlxExecutable* exe) {
    float x[6], b[4];
    RlxTensor tx, tb, out[2];
    RlxNamedTensor in[2];
    lend_inputs(x, b, &tx, &tb, in);

    /* On error no slot holds a tensor: nothing to release after these. */
    garbage_slots(out, 2);
    expect_error(g_api->executable_run(exe, in, 1, out, 1), 0, NULL, "run without input b");
    garbage_slots(out, 2);
    expect_error(g_api->executable_run(exe, in, 2, out, 2), RLX_STATUS_INVALID_ARGUMENT, NULL,
                 "run with 2 output slots for 1 output");

    int64_t wrong[2] = {3, 2};
    RlxTensor bad;
    borrowed_f32(&bad, x, 0, wrong, 2, NULL);
    named(&in[0], "x", &bad);
    garbage_slots(out, 2);
    expect_error(g_api->executable_run(exe, in, 2, out, 1), 0, NULL, "run with x of shape [3, 2]");

    /* RlxTensor is frozen: a descriptor of another size is refused. */
    borrowed_f32(&bad, x, 0, SHAPE_X, 2, NULL);
    bad.struct_size = sizeof(size_t);
    named(&in[0], "x", &bad);
    garbage_slots(out, 2);
    expect_error(g_api->executable_run(exe, in, 2, out, 1), RLX_STATUS_INVALID_ARGUMENT, NULL,
                 "run with tensor struct_size 8");

    /* The header also refuses a larger struct_size ("any other value"),
     * but a plugin that accepts one does no harm: report, do not fail. */
    bad.struct_size = sizeof(RlxTensor) + 8;
    named(&in[0], "x", &bad);
    garbage_slots(out, 2);
    RlxStatus* s = g_api->executable_run(exe, in, 2, out, 1);
    if (s) {
        step("note: tensor struct_size %zu -> %s", bad.struct_size,
             code_name(known_code(g_api->status_code(s))));
        g_api->status_free(s);
    } else {
        step("note: tensor struct_size %zu accepted (the header says a reader refuses it)",
             bad.struct_size);
        release(&out[0]);
    }
}

static void compile_error_paths(void) {
    RlxStatus* s;
    compile_text("this is not an rlxmodel", g_opt.mode, &s);
    expect_error(s, RLX_STATUS_INVALID_ARGUMENT, NULL, "compile of bad text");
    compile_text(builtin_graph(), 7, &s);
    expect_error(s, RLX_STATUS_UNSUPPORTED, NULL, "compile in unknown mode 7");
    RlxCompileOptions* opts = new_compile_options(g_opt.mode);
    expect_error(g_api->compile(str_of(builtin_graph()), opts, NULL),
                 RLX_STATUS_INVALID_ARGUMENT, NULL, "compile with out NULL");
    free(opts);
    if (g_opt.huge) {
        /* exp(expand(x)) of 200000 x 200000 x 100 f32: 16 TB. */
        compile_text("rlxmodel 1\n"
                     "opset 1\n"
                     "\n"
                     "graph @huge {\n"
                     "  %x = input : f32[1, 1, 100]\n"
                     "  %1 = Expand{target_shape: [200000, 200000, 100]} %x : f32[200000, 200000, 100]\n"
                     "  %2 = Activation(Exp) %1 : f32[200000, 200000, 100]\n"
                     "  return %2\n"
                     "}\n",
                     g_opt.mode, &s);
        expect_error(s, g_opt.minor >= 6 ? RLX_STATUS_RESOURCE_EXHAUSTED : RLX_STATUS_INTERNAL,
                     "16000000000000 bytes", "compile of a 16 TB graph");
    }
}

static void check_statuses(void) {
    RlxStatus* s = g_api->status_new(RLX_STATUS_NOT_FOUND, str_of("made by the C host"));
    if (!s) fail("status_new returned NULL");
    if (g_api->status_code(s) != RLX_STATUS_NOT_FOUND || !str_is(g_api->status_message(s), "made by the C host"))
        fail("status_new did not round-trip");
    g_api->status_free(s);
    g_api->status_free(NULL);     /* a no-op */
    g_api->executable_destroy(NULL); /* a no-op */
    step("statuses: status_new round trip; status_free(NULL), executable_destroy(NULL) ok");
}

static void run_graph(void) {
    char* file_text = g_opt.graph_file ? read_file(g_opt.graph_file) : NULL;
    const char* text = file_text ? file_text : builtin_graph();
    RlxStatus* s;
    RlxExecutable* exe = compile_text(text, g_opt.mode, &s);
    must(s, "compile");
    if (!exe) fail("compile succeeded without an executable");
    step("compile: %s graph (%s, %s mode, options struct_size %zu)",
         file_text ? g_opt.graph_file : "built-in", g_opt.relu ? "relu" : "exp", g_opt.mode_name,
         options_size());
    print_executable_device(exe);
    check_signature(exe);
    bind_param(exe);
    run_and_check(exe);
    run_into_and_check(exe);
    run_error_paths(exe);
    g_api->executable_destroy(exe);
    step("executable destroyed");
    free(file_text);
    compile_error_paths();
}

/* ======================================================================
 * Custom ops (1.1)
 * ====================================================================== */

/* The host kernel's context. Ownership moves to the plugin at register;
 * its drop callback records what it saw, then frees it. */
typedef struct {
    unsigned magic;
    int slot; /* which drops[] entry it reports to */
    unsigned calls;
} KernelCtx;

#define KERNEL_MAGIC 0xC0DEu

static struct {
    unsigned drops[2];       /* drop callbacks run, per context */
    unsigned calls_at_drop;  /* KernelCtx.calls of context 0 when dropped */
    unsigned outputs_made;   /* OWNED outputs the kernel handed over */
    unsigned outputs_freed;  /* ... and released through our deleter */
} g_kernel;

static KernelCtx* new_kernel_ctx(int slot) {
    KernelCtx* c = malloc(sizeof *c);
    if (!c) fail("out of memory");
    c->magic = KERNEL_MAGIC;
    c->slot = slot;
    c->calls = 0;
    return c;
}

static void kernel_ctx_drop(void* ctx) {
    KernelCtx* c = ctx;
    if (c->magic != KERNEL_MAGIC) fail("kernel_ctx_drop got a foreign context");
    g_kernel.drops[c->slot]++;
    if (c->slot == 0) g_kernel.calls_at_drop = c->calls;
    c->magic = 0;
    free(c);
}

/* One OWNED output's memory: the descriptor's shape and data in one block,
 * which is also its manager_ctx. */
typedef struct {
    int64_t shape[8];
    float data[];
} OutBlock;

static void out_block_free(void* ctx) {
    g_kernel.outputs_freed++;
    free(ctx);
}

/* c_host.add1: y = x + 1 for one f32 tensor of any shape. Errors are made
 * with the plugin's status_new, as the ABI requires. */
static RlxStatus* add1_kernel(void* ctx, const RlxTensor* inputs, size_t n_inputs,
                              RlxTensor* outputs, size_t n_outputs) {
    KernelCtx* c = ctx;
    if (!c || c->magic != KERNEL_MAGIC)
        return g_api->status_new(RLX_STATUS_INTERNAL, str_of("c_host.add1: bad kernel_ctx"));
    c->calls++;
    if (n_inputs != 1 || n_outputs != 1)
        return g_api->status_new(RLX_STATUS_INVALID_ARGUMENT,
                                 str_of("c_host.add1 takes 1 input and makes 1 output"));
    const RlxTensor* x = &inputs[0];
    if (x->struct_size != sizeof(RlxTensor) || !is_f32(x->dl.dtype) || x->dl.ndim < 0 ||
        x->dl.ndim > 8 || (x->dl.ndim > 0 && !x->dl.shape) || x->dl.device.device_type != 1)
        return g_api->status_new(RLX_STATUS_INVALID_ARGUMENT,
                                 str_of("c_host.add1 takes one f32 host tensor"));
    /* The plugin passes its own compact copies; to stay short the kernel
     * refuses strided inputs rather than gathering them. */
    if (x->dl.strides)
        return g_api->status_new(RLX_STATUS_UNSUPPORTED, str_of("c_host.add1: strided input"));
    size_t n = 1;
    for (int32_t i = 0; i < x->dl.ndim; i++) n *= (size_t)x->dl.shape[i];
    if (n > 0 && !x->dl.data)
        return g_api->status_new(RLX_STATUS_INVALID_ARGUMENT, str_of("c_host.add1: null data"));
    OutBlock* blk = malloc(sizeof *blk + n * sizeof(float));
    if (!blk) return g_api->status_new(RLX_STATUS_INTERNAL, str_of("c_host.add1: no memory"));
    const float* src = (const float*)((const char*)x->dl.data + x->dl.byte_offset);
    for (size_t i = 0; i < n; i++) blk->data[i] = src[i] + 1.0f;
    for (int32_t i = 0; i < x->dl.ndim; i++) blk->shape[i] = x->dl.shape[i];

    RlxTensor* y = &outputs[0];
    memset(y, GARBAGE, sizeof *y);
    y->struct_size = sizeof(RlxTensor);
    y->ownership = RLX_OWNERSHIP_OWNED;
    y->dl.data = blk->data;
    y->dl.device.device_type = 1;
    y->dl.device.device_id = 0;
    y->dl.ndim = x->dl.ndim;
    y->dl.dtype = F32;
    y->dl.shape = blk->shape;
    y->dl.strides = NULL;
    y->dl.byte_offset = 0;
    y->manager_ctx = blk;
    y->deleter = out_block_free;
    g_kernel.outputs_made++;
    return NULL;
}

typedef struct {
    const char* prefix; /* how each visited op is printed */
    unsigned n;
    int seen_add1;
    uint32_t add1_origin, add1_in, add1_out;
    int add1_desc_ok;
} OpVisit;

/* (1.5) RlxCustomOpInfo.kind for people; an unknown kind reads as a
 * kernel (ABI §13). */
static const char* kind_name(uint32_t kind) {
    switch (kind) {
    case RLX_CUSTOM_KIND_NATIVE: return "native";
    case RLX_CUSTOM_KIND_COMPOSITE: return "composite";
    default: return "kernel";
    }
}

/* (1.5) RlxCustomOpInfo.shape_rule for people, into buf; an unknown rule
 * reads as not declared (ABI §13). */
static const char* rule_name(uint32_t rule, uint32_t input, char* buf, size_t len) {
    switch (rule) {
    case RLX_SHAPE_RULE_SAME_AS_INPUT: snprintf(buf, len, "same as input %u", input); break;
    case RLX_SHAPE_RULE_BROADCAST: snprintf(buf, len, "broadcast of the inputs"); break;
    case RLX_SHAPE_RULE_CALLBACK: snprintf(buf, len, "callback"); break;
    case RLX_SHAPE_RULE_BODY: snprintf(buf, len, "from the body"); break;
    default: snprintf(buf, len, "not declared"); break;
    }
    return buf;
}

static void visit_op(void* ctx, const RlxCustomOpInfo* info) {
    OpVisit* v = ctx;
    v->n++;
    if (!info || !COVERS(info, RlxCustomOpInfo, name)) return;
    /* origin is a 1.1 field; reserved0 (1.3) and reserved1 (1.5) are never
     * read. */
    uint32_t origin = COVERS(info, RlxCustomOpInfo, origin) ? info->origin : RLX_ORIGIN_HOST;
    printf("  %s %.*s (%s, %u in, %u out)", v->prefix, STR_ARG(info->name),
           origin == RLX_ORIGIN_PLUGIN ? "plugin" : "host",
           COVERS(info, RlxCustomOpInfo, n_inputs) ? info->n_inputs : 0,
           COVERS(info, RlxCustomOpInfo, n_outputs) ? info->n_outputs : 0);
    /* 1.5: kind and shape rule, only when both sides know them. */
    if (g_opt.minor >= 5 && COVERS(info, RlxCustomOpInfo, kind)) {
        printf(" kind %s", kind_name(info->kind));
        if (COVERS(info, RlxCustomOpInfo, shape_input)) {
            char rule[64];
            printf(", shape %s", rule_name(info->shape_rule, info->shape_input, rule, sizeof rule));
        }
    }
    printf("\n");
    if (str_is(info->name, "c_host.add1")) {
        v->seen_add1 = 1;
        v->add1_origin = origin;
        v->add1_in = info->n_inputs;
        v->add1_out = info->n_outputs;
        v->add1_desc_ok = COVERS(info, RlxCustomOpInfo, description) &&
                          str_is(info->description, "y = x + 1, written in C");
    }
}

static OpVisit list_ops(const RlxCustomOpApi* reg, const char* when) {
    OpVisit v;
    memset(&v, 0, sizeof v);
    v.prefix = "custom op";
    RlxCustomOpVisitor vis;
    memset(&vis, GARBAGE, sizeof vis);
    vis.struct_size = RLX_CUSTOM_OP_VISITOR_STRUCT_SIZE;
    vis.ctx = &v;
    vis.visit = visit_op;
    printf("custom ops (%s):\n", when);
    must(reg->list(&vis), "custom_ops.list");
    step("custom ops (%s): %u listed", when, v.n);
    return v;
}

/* The desc as the claimed minor's host writes it: 1.1-1.4 hosts wrote
 * through kernel_ctx_drop, and a 1.5 host does so too for a plugin older
 * than 1.5 (which never sees the 1.5 fields). The bytes not written stay
 * garbage. */
static void fill_desc(RlxCustomOpDesc* d, KernelCtx* ctx) {
    memset(d, GARBAGE, sizeof *d);
    int full = g_opt.minor >= 5 && g_api->abi_version.minor >= 5;
    d->struct_size = full ? RLX_CUSTOM_OP_DESC_STRUCT_SIZE : RLX_CUSTOM_OP_DESC_SIZE_1_1;
    d->name = str_of("c_host.add1");
    d->description = str_of("y = x + 1, written in C");
    d->n_inputs = 1;
    d->n_outputs = 1;
    d->kernel = add1_kernel;
    d->kernel_ctx = ctx;
    d->kernel_ctx_drop = kernel_ctx_drop;
    if (full) {
        /* 1.5: a 1.1-form kernel, no composite, no shape rule. */
        d->kernel_into = NULL;
        d->composite.ptr = NULL;
        d->composite.len = 0;
        d->shape_rule = RLX_SHAPE_RULE_NONE;
        d->shape_input = 0;
        d->shape_fn = NULL;
    }
}

static void execute_add1(const RlxCustomOpApi* reg) {
    float x[6];
    memcpy(x, X, sizeof x);
    RlxTensor in, out[1];
    borrowed_f32(&in, x, 0, SHAPE_X, 2, NULL);
    garbage_slots(out, 1);
    must(reg->execute(str_of("c_host.add1"), &in, 1, out, 1), "custom_ops.execute c_host.add1");
    double want[6];
    for (int i = 0; i < 6; i++) want[i] = (double)X[i] + 1.0;
    check_output(&out[0], want, 2, 3, "c_host.add1");
    release(&out[0]);
    if (g_kernel.outputs_made != 1 || g_kernel.outputs_freed != 1)
        fail("the kernel made %u OWNED outputs, the plugin released %u", g_kernel.outputs_made,
             g_kernel.outputs_freed);
    step("custom op c_host.add1: executed through the registry, y = x + 1; the plugin "
         "released the kernel's OWNED output");

    /* The kernel's own error, made with status_new, comes back to us. */
    int32_t ints[2] = {1, 2};
    int64_t shape[1] = {2};
    RlxTensor bad;
    borrowed_f32(&bad, (float*)ints, 0, shape, 1, NULL);
    bad.dl.dtype.code = RLX_DL_INT;
    garbage_slots(out, 1);
    expect_error(reg->execute(str_of("c_host.add1"), &bad, 1, out, 1),
                 RLX_STATUS_INVALID_ARGUMENT, "takes one f32 host tensor",
                 "custom op c_host.add1 on i32 (the kernel's own status)");
}

/* Register c_host.add1, then try the taken name again: that fails with
 * ALREADY_EXISTS and the plugin drops the second context at once. */
static void register_add1(const RlxCustomOpApi* reg) {
    RlxCustomOpDesc d;
    fill_desc(&d, new_kernel_ctx(0));
    must(reg->register_op(&d), "custom_ops.register_op c_host.add1");
    step("custom op c_host.add1 registered (kernel_ctx now owned by the plugin)");

    fill_desc(&d, new_kernel_ctx(1));
    expect_error(reg->register_op(&d), RLX_STATUS_ALREADY_EXISTS, NULL,
                 "register c_host.add1 twice");
    if (g_kernel.drops[1] != 1)
        fail("the refused registration dropped its context %u times, want 1", g_kernel.drops[1]);
}

/* Look c_host.add1 up; returns the error status (or NULL) and checks what
 * was visited on success. */
static RlxStatus* lookup_add1(const RlxCustomOpApi* reg) {
    OpVisit one;
    memset(&one, 0, sizeof one);
    one.prefix = "lookup:";
    RlxCustomOpVisitor vis;
    memset(&vis, GARBAGE, sizeof vis);
    vis.struct_size = RLX_CUSTOM_OP_VISITOR_STRUCT_SIZE;
    vis.ctx = &one;
    vis.visit = visit_op;
    RlxStatus* s = reg->lookup(str_of("c_host.add1"), &vis);
    if (!s && (one.n != 1 || !one.seen_add1 || one.add1_origin != RLX_ORIGIN_HOST ||
               one.add1_in != 1 || one.add1_out != 1 || !one.add1_desc_ok))
        fail("lookup c_host.add1: visited %u, origin %u, %u in, %u out", one.n, one.add1_origin,
             one.add1_in, one.add1_out);
    return s;
}

/* Unregister: the context is dropped exactly once, having seen both kernel
 * calls; afterwards every use of the name is NOT_FOUND. */
static void unregister_add1(const RlxCustomOpApi* reg) {
    must(reg->unregister(str_of("c_host.add1")), "custom_ops.unregister c_host.add1");
    if (g_kernel.drops[0] != 1)
        fail("unregister ran kernel_ctx_drop %u times, want exactly 1", g_kernel.drops[0]);
    if (g_kernel.calls_at_drop != 2)
        fail("the dropped context counted %u kernel calls, want 2", g_kernel.calls_at_drop);
    step("custom op c_host.add1 unregistered: kernel_ctx_drop ran once (context saw %u calls)",
         g_kernel.calls_at_drop);

    expect_error(reg->unregister(str_of("c_host.add1")), RLX_STATUS_NOT_FOUND, NULL,
                 "unregister c_host.add1 again");
    expect_error(lookup_add1(reg), RLX_STATUS_NOT_FOUND, NULL, "lookup of the unregistered op");
    float x[6];
    memcpy(x, X, sizeof x);
    RlxTensor in, out[1];
    borrowed_f32(&in, x, 0, SHAPE_X, 2, NULL);
    garbage_slots(out, 1);
    expect_error(reg->execute(str_of("c_host.add1"), &in, 1, out, 1), RLX_STATUS_NOT_FOUND, NULL,
                 "execute of the unregistered op");
    if (list_ops(reg, "after").seen_add1) fail("c_host.add1 is still listed");
    if (g_kernel.drops[0] != 1 || g_kernel.drops[1] != 1) fail("a context was dropped twice");
}

static void custom_ops(void) {
    if (g_opt.minor < 1) {
        step("custom ops: not used (an ABI 1.0 host has no custom_ops field)");
        return;
    }
    /* custom_ops is a 1.1 field: read only when the table reaches it. */
    if (g_api->struct_size < RLX_PLUGIN_API_SIZE_1_1 || !g_api->custom_ops) {
        step("custom ops: the plugin has no registry (struct_size %zu)", g_api->struct_size);
        return;
    }
    const RlxCustomOpApi* reg = g_api->custom_ops;
    if (!COVERS(reg, RlxCustomOpApi, execute) || !reg->register_op || !reg->unregister ||
        !reg->lookup || !reg->list || !reg->execute)
        fail("custom-op registry struct_size %zu: functions missing", reg->struct_size);
    if (list_ops(reg, "before").seen_add1) fail("c_host.add1 is registered before we did");

    register_add1(reg);
    must(lookup_add1(reg), "custom_ops.lookup c_host.add1");
    if (!list_ops(reg, "registered").seen_add1) fail("list does not show c_host.add1");
    execute_add1(reg);
    if (g_kernel.drops[0] != 0) fail("the kernel context was dropped while registered");
    unregister_add1(reg);
}

/* ======================================================================
 * 1.9: executable state, clones and shared params, submitted runs, and
 * the root table's 1.9 functions
 *
 * Used only when this host claims 1.9 and the plugin's table reaches the
 * field (the size rule) and holds it (NULL: not offered); every value is
 * checked against small-integer arithmetic, exact in f32.
 * ====================================================================== */

/* next = x + s (output 0), y = next * w (output 1): a counter whose state
 * s is the running sum when output 0 feeds it. */
static const char* const COUNTER_GRAPH = "rlxmodel 1\n"
                                         "opset 1\n"
                                         "\n"
                                         "graph @counter {\n"
                                         "  %x = input : f32[2, 3]\n"
                                         "  %s = input : f32[2, 3]\n"
                                         "  %w = param : f32[2, 3]\n"
                                         "  %3 = Binary(Add) %x, %s : f32[2, 3]\n"
                                         "  %4 = Binary(Mul) %3, %w : f32[2, 3]\n"
                                         "  return %3, %4\n"
                                         "}\n";

/* A cache k of 4 rows of 2: output 0 is the new row 2t (fed ROWS into
 * k), output 1 is k + 2t (every row), which shows what k held. */
static const char* const KV_GRAPH = "rlxmodel 1\n"
                                    "opset 1\n"
                                    "\n"
                                    "graph @kv {\n"
                                    "  %k = input : f32[4, 2]\n"
                                    "  %t = input : f32[1, 2]\n"
                                    "  %2 = Binary(Add) %t, %t : f32[1, 2]\n"
                                    "  %3 = Binary(Add) %k, %2 : f32[4, 2]\n"
                                    "  return %2, %3\n"
                                    "}\n";

/* 16 uniform samples plus x: what a seed changes. */
static const char* const RNG_GRAPH = "rlxmodel 1\n"
                                     "opset 1\n"
                                     "\n"
                                     "graph @rng {\n"
                                     "  %x = input : f32[16]\n"
                                     "  %u = RngUniform{low: 0.0, high: 1.0, key: 7} : f32[16]\n"
                                     "  %2 = Binary(Add) %x, %u : f32[16]\n"
                                     "  return %2\n"
                                     "}\n";

/* x[1, 512] . w[512, 2048]: 4 MiB of weights for the memory figures. */
static const char* const BIG_GRAPH = "rlxmodel 1\n"
                                     "opset 1\n"
                                     "\n"
                                     "graph @big {\n"
                                     "  %x = input : f32[1, 512]\n"
                                     "  %w = param : f32[512, 2048]\n"
                                     "  %2 = MatMul %x, %w : f32[1, 2048]\n"
                                     "  return %2\n"
                                     "}\n";

static int64_t SHAPE_23[2] = {2, 3}, SHAPE_32[2] = {3, 2};
static const float CW[6] = {1, 2, 3, 4, 5, 6};
static const float CX[6] = {1, 1, 1, 2, 2, 2};

/* Is the 1.9 root-table field `f` there: claimed by both sides, inside the
 * plugin's struct_size, and not NULL? Says why when it is not. */
#define OFFERED_1_9(f) offered_1_9(#f, COVERS(g_api, RlxPluginApi, f), g_api->f != NULL)
static int offered_1_9(const char* what, int covered, int set) {
    if (covered && set) return 1;
    if (!covered)
        step("%s: not offered (plugin ABI %u.%u: its table of %zu bytes ends before it)", what,
             g_api->abi_version.major, g_api->abi_version.minor, g_api->struct_size);
    else
        step("%s: not offered (NULL)", what);
    return 0;
}

/* Is the function `f` of a 1.9 sub-table `t` (of type T) there? */
#define HAS_FN(t, T, f) (COVERS(t, T, f) && (t)->f)

static RlxExecutable* compile_or_fail(const char* text, const char* what) {
    RlxStatus* s;
    RlxExecutable* exe = compile_text(text, g_opt.mode, &s);
    must(s, what);
    if (!exe) fail("%s: success without an executable", what);
    return exe;
}

/* The names of the executable's outputs (exactly `n` of them). */
static void output_names(RlxExecutable* exe, char names[][64], size_t n) {
    Signature s;
    memset(&s, 0, sizeof s);
    RlxValueVisitor vis;
    memset(&vis, GARBAGE, sizeof vis);
    vis.struct_size = RLX_VALUE_VISITOR_STRUCT_SIZE;
    vis.ctx = &s;
    vis.visit = visit_value;
    must(g_api->executable_signature(exe, &vis), "executable_signature");
    size_t k = 0;
    for (size_t i = 0; i < s.n; i++)
        if (s.v[i].role == RLX_ROLE_OUTPUT) {
            if (k == n) fail("more than %zu outputs", n);
            memcpy(names[k++], s.v[i].name, sizeof s.v[i].name);
        }
    if (k != n) fail("%zu outputs, want %zu", k, n);
}

static void bind_f32(RlxExecutable* exe, const char* name, const float* v, size_t n,
                     int64_t* shape, int32_t ndim) {
    float* copy = malloc(n * sizeof(float));
    if (!copy) fail("out of memory");
    memcpy(copy, v, n * sizeof(float));
    RlxTensor t;
    borrowed_f32(&t, copy, 0, shape, ndim, NULL);
    char what[96];
    snprintf(what, sizeof what, "bind_param %s", name);
    must(g_api->executable_bind_param(exe, str_of(name), &t), what);
    free(copy);
}

/* Exact comparison of n floats (every value here is a small integer). */
static void expect_floats(const float* got, const float* want, size_t n, const char* what) {
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i])
            fail("%s: element %zu is %.9g, want %.9g", what, i, got[i], want[i]);
}

/* A well-formed OWNED f32 output with exactly these values; released. */
static void expect_owned(RlxTensor* t, const float* want, size_t n, const char* what) {
    if (t->struct_size != sizeof(RlxTensor) || t->ownership != RLX_OWNERSHIP_OWNED ||
        !t->deleter || !t->dl.data || !is_f32(t->dl.dtype) || t->dl.device.device_type != 1)
        fail("%s: not a well-formed OWNED f32 host tensor", what);
    size_t numel = 1;
    for (int32_t i = 0; i < t->dl.ndim; i++) numel *= (size_t)t->dl.shape[i];
    if (numel != n) fail("%s: %zu elements, want %zu", what, numel, n);
    if (t->dl.strides) {
        for (size_t i = 0; i < n; i++)
            if (element_2d(t, i) != want[i]) fail("%s: element %zu differs", what, i);
    } else {
        expect_floats((const float*)((const char*)t->dl.data + t->dl.byte_offset), want, n,
                      what);
    }
    release(t);
}

/* x and (optionally) s as named inputs. */
static size_t counter_inputs(RlxNamedTensor in[2], RlxTensor* tx, RlxTensor* ts, float* x,
                             const float* s) {
    borrowed_f32(tx, x, 0, SHAPE_23, 2, NULL);
    named(&in[0], "x", tx);
    if (!s) return 1;
    borrowed_f32(ts, (float*)s, 0, SHAPE_23, 2, NULL);
    named(&in[1], "s", ts);
    return 2;
}

/* Run the counter, its two outputs into out0 and out1. */
static RlxStatus* run_counter(RlxExecutable* exe, const float* s, float out0[6],
                              float out1[6]) {
    float x[6];
    memcpy(x, CX, sizeof x);
    RlxTensor tx, ts, slots[2];
    RlxNamedTensor in[2];
    size_t n = counter_inputs(in, &tx, &ts, x, s);
    garbage_slots(slots, 2);
    RlxStatus* st = g_api->executable_run(exe, in, n, slots, 2);
    if (st) return st;
    RlxTensor* t[2] = {&slots[0], &slots[1]};
    float* dst[2] = {out0, out1};
    for (int k = 0; k < 2; k++) {
        if (t[k]->struct_size != sizeof(RlxTensor) || t[k]->ownership != RLX_OWNERSHIP_OWNED ||
            !t[k]->dl.data || t[k]->dl.ndim != 2 || t[k]->dl.shape[0] != 2 ||
            t[k]->dl.shape[1] != 3)
            fail("counter output %d is not an OWNED f32[2, 3]", k);
        for (size_t i = 0; i < 6; i++) dst[k][i] = (float)element_2d(t[k], i);
        release(t[k]);
    }
    return NULL;
}

/* A BORROWED 1-D f32 buffer of n elements lent to a read. */
static void lend_1d(RlxTensor* t, float* buf, int64_t* shape, size_t n) {
    shape[0] = (int64_t)n;
    borrowed_f32(t, buf, 0, shape, 1, NULL);
}

static RlxStatus* state_read(const RlxStateApi* st, RlxExecutable* exe, const char* name,
                             uint64_t first, float* out, size_t n) {
    int64_t shape[1];
    RlxTensor t;
    lend_1d(&t, out, shape, n);
    return st->read(exe, str_of(name), first, &t);
}

static RlxStatus* output_read(const RlxStateApi* st, RlxExecutable* exe, const char* output,
                              uint64_t first, float* out, size_t n) {
    int64_t shape[1];
    RlxTensor t;
    lend_1d(&t, out, shape, n);
    return st->read_output(exe, str_of(output), first, &t);
}

typedef struct {
    unsigned n, malformed, wrong_role;
    char names[4][64];
    int shape_ok[4];
} StateList;

static void visit_state(void* ctx, const RlxValueInfo* info) {
    StateList* l = ctx;
    if (!info || !COVERS(info, RlxValueInfo, shape) || info->name.len >= 64 || l->n == 4) {
        l->malformed++;
        return;
    }
    if (info->role != RLX_ROLE_STATE) l->wrong_role++;
    memcpy(l->names[l->n], info->name.ptr, info->name.len);
    l->names[l->n][info->name.len] = 0;
    l->shape_ok[l->n] = is_f32(info->dtype) && info->ndim == 2 && info->shape &&
                        info->shape[0] == 2 && info->shape[1] == 3;
    l->n++;
}

static StateList state_list(const RlxStateApi* st, RlxExecutable* exe) {
    StateList l;
    memset(&l, 0, sizeof l);
    RlxValueVisitor vis;
    memset(&vis, GARBAGE, sizeof vis);
    vis.struct_size = RLX_VALUE_VISITOR_STRUCT_SIZE;
    vis.ctx = &l;
    vis.visit = visit_state;
    must(st->list(exe, &vis), "state list");
    if (l.malformed || l.wrong_role)
        fail("state list: %u malformed records, %u not of role STATE", l.malformed, l.wrong_role);
    return l;
}

/* The counter's outputs for state s (before the run) and input x. */
static void counter_ref(const float* s, float next[6], float y[6]) {
    for (int i = 0; i < 6; i++) {
        next[i] = CX[i] + s[i];
        y[i] = next[i] * CW[i];
    }
}

/* 1.9 row feeds: a KV cache grown one row a step without leaving the
 * plugin, and every range checked before a row is written. */
static void state_rows(const RlxStateApi* st) {
    RlxExecutable* exe = compile_or_fail(KV_GRAPH, "compile the kv graph");
    char out[2][64];
    output_names(exe, out, 2);
    float zeros[8] = {0};
    int64_t shape_k[2] = {4, 2}, shape_t[2] = {1, 2};
    RlxTensor tk;
    borrowed_f32(&tk, zeros, 0, shape_k, 2, NULL);
    must(st->bind(exe, str_of("k"), &tk), "state bind k");
    expect_error(st->set_feed(exe, str_of("k"), RLX_FEED_REPLACE, str_of(out[0])),
                 RLX_STATUS_INVALID_ARGUMENT, NULL,
                 "state set_feed REPLACE from an output of another shape");
    must(st->set_feed(exe, str_of("k"), RLX_FEED_ROWS, str_of(out[0])), "state set_feed ROWS");
    RlxRowFeed rows;
    memset(&rows, GARBAGE, sizeof rows);
    rows.struct_size = RLX_ROW_FEED_STRUCT_SIZE;
    rows.row_elems = 2;
    rows.n_rows = 1;
    rows.src_row = 0;
    rows.dst_row = 0;
    rows.batch = 1;
    rows.src_batch_rows = 1;
    rows.dst_batch_rows = 4;
    rows.dst_rows = NULL;
    expect_error(st->feed_rows(exe, str_of(""), &rows), RLX_STATUS_INVALID_ARGUMENT, NULL,
                 "state feed_rows before any run");
    float want[8] = {0};
    for (int p = 0; p < 4; p++) {
        float t[2] = {(float)(p + 1), (float)-p};
        RlxTensor tt, slots[2];
        RlxNamedTensor in[1];
        borrowed_f32(&tt, t, 0, shape_t, 2, NULL);
        named(&in[0], "t", &tt);
        garbage_slots(slots, 2);
        must(g_api->executable_run(exe, in, 1, slots, 2), "run the kv step");
        /* Output 1 is k + 2t: the cache as it was before this step's row. */
        float sum[8];
        for (int i = 0; i < 8; i++) sum[i] = want[i] + 2 * t[i % 2];
        float row[2] = {2 * t[0], 2 * t[1]};
        expect_owned(&slots[0], row, 2, "kv step: the new row");
        expect_owned(&slots[1], sum, 8, "kv step: k + 2t");
        rows.dst_row = (uint64_t)p;
        must(st->feed_rows(exe, str_of(p % 2 ? "k" : ""), &rows), "state feed_rows");
        want[p * 2] = row[0];
        want[p * 2 + 1] = row[1];
        float k[8];
        must(state_read(st, exe, "k", 0, k, 8), "state read k");
        expect_floats(k, want, 8, "the cache after a row feed");
    }
    step("state ROWS feed: 4 steps each wrote its row of k on the plugin's side; k = [%g %g; "
         "%g %g; %g %g; %g %g]",
         want[0], want[1], want[2], want[3], want[4], want[5], want[6], want[7]);
    /* Out of range, and misuse: refused, and nothing is written. */
    rows.dst_row = 4;
    expect_error(st->feed_rows(exe, str_of(""), &rows), RLX_STATUS_INVALID_ARGUMENT, NULL,
                 "state feed_rows to row 4 of a 4-row state");
    rows.dst_row = 0;
    rows.src_row = 1;
    expect_error(st->feed_rows(exe, str_of(""), &rows), RLX_STATUS_INVALID_ARGUMENT, NULL,
                 "state feed_rows from row 1 of a 1-row output");
    rows.src_row = 0;
    expect_error(st->feed_rows(exe, str_of("nope"), &rows), RLX_STATUS_NOT_FOUND, NULL,
                 "state feed_rows into an unknown state");
    expect_error(st->feed_rows(exe, str_of(""), NULL), RLX_STATUS_INVALID_ARGUMENT, NULL,
                 "state feed_rows(rows NULL)");
    rows.struct_size = RLX_STRUCT_SIZE(RlxRowFeed, batch);
    expect_error(st->feed_rows(exe, str_of(""), &rows), RLX_STATUS_INVALID_ARGUMENT, NULL,
                 "state feed_rows with a row feed short of dst_rows");
    float k[8];
    must(state_read(st, exe, "k", 0, k, 8), "state read k");
    expect_floats(k, want, 8, "the cache after refused row feeds");
    g_api->executable_destroy(exe);
}

/* 1.9 executable state on the counter: bind, list, REPLACE feeds, reads
 * of states and of the last run's outputs, overrides, skipped outputs,
 * unbind; each misuse with its code. */
static void state_1_9(void) {
    if (!OFFERED_1_9(state)) return;
    const RlxStateApi* st = g_api->state;
    if (!HAS_FN(st, RlxStateApi, bind) || !HAS_FN(st, RlxStateApi, unbind) ||
        !HAS_FN(st, RlxStateApi, read) || !HAS_FN(st, RlxStateApi, list) ||
        !HAS_FN(st, RlxStateApi, set_feed) || !HAS_FN(st, RlxStateApi, read_output)) {
        step("state: the table (struct_size %zu) lacks a function this host uses; not used",
             st->struct_size);
        return;
    }
    RlxExecutable* exe = compile_or_fail(COUNTER_GRAPH, "compile the counter");
    char out[2][64];
    output_names(exe, out, 2);
    bind_f32(exe, "w", CW, 6, SHAPE_23, 2);
    if (state_list(st, exe).n != 0) fail("a new executable lists states");
    float buf[6];
    expect_error(output_read(st, exe, out[0], 0, buf, 6), RLX_STATUS_INVALID_ARGUMENT, NULL,
                 "state read_output before any run");

    /* Bind: a graph input, of its dtype and shape. */
    float zeros[6] = {0}, s0[6] = {0};
    RlxTensor ts;
    borrowed_f32(&ts, zeros, 0, SHAPE_23, 2, NULL);
    expect_error(st->bind(exe, str_of("nope"), &ts), RLX_STATUS_NOT_FOUND, NULL,
                 "state bind of an unknown name");
    expect_error(st->bind(exe, str_of("w"), &ts), RLX_STATUS_NOT_FOUND, NULL,
                 "state bind of a param (not a graph input)");
    RlxTensor wrong;
    borrowed_f32(&wrong, zeros, 0, SHAPE_32, 2, NULL);
    expect_error(st->bind(exe, str_of("s"), &wrong), RLX_STATUS_INVALID_ARGUMENT, "f32[2, 3]",
                 "state bind of s with shape [3, 2]");
    expect_error(st->bind(exe, str_of("s"), NULL), RLX_STATUS_INVALID_ARGUMENT, NULL,
                 "state bind(value NULL)");
    expect_error(st->unbind(exe, str_of("s")), RLX_STATUS_NOT_FOUND, NULL,
                 "state unbind of s before it is bound");
    must(st->bind(exe, str_of("s"), &ts), "state bind s");
    memset(zeros, GARBAGE, sizeof zeros); /* copied: ours again */
    StateList l = state_list(st, exe);
    if (l.n != 1 || strcmp(l.names[0], "s") != 0 || !l.shape_ok[0])
        fail("state list: %u states; want s f32[2, 3]", l.n);
    step("state bind: s f32[2, 3] held (host buffer scribbled over after the call); list: s, "
         "role STATE");

    /* Feeds. */
    expect_error(st->set_feed(exe, str_of("s"), 9, str_of(out[0])), RLX_STATUS_INVALID_ARGUMENT,
                 NULL, "state set_feed of unknown kind 9");
    expect_error(st->set_feed(exe, str_of("nope"), RLX_FEED_REPLACE, str_of(out[0])),
                 RLX_STATUS_NOT_FOUND, NULL, "state set_feed of an unknown state");
    expect_error(st->set_feed(exe, str_of("s"), RLX_FEED_REPLACE, str_of("no_such_output")),
                 RLX_STATUS_NOT_FOUND, NULL, "state set_feed from an unknown output");
    must(st->set_feed(exe, str_of("s"), RLX_FEED_REPLACE, str_of(out[0])),
         "state set_feed REPLACE");
    float next[6], y[6], want_next[6], want_y[6];
    for (int k = 1; k <= 3; k++) {
        must(run_counter(exe, NULL, next, y), "run the counter on its state");
        counter_ref(s0, want_next, want_y);
        expect_floats(next, want_next, 6, "counter output 0");
        expect_floats(y, want_y, 6, "counter output 1");
        memcpy(s0, want_next, sizeof s0);
        must(state_read(st, exe, "s", 0, buf, 6), "state read s");
        expect_floats(buf, s0, 6, "the state after a REPLACE-fed run");
    }
    step("state REPLACE feed: 3 runs given only x; s = [%g %g %g; %g %g %g] (3x), read back",
         s0[0], s0[1], s0[2], s0[3], s0[4], s0[5]);

    /* Reads of a part, and misuse of the lent buffer. */
    must(state_read(st, exe, "s", 3, buf, 2), "state read s[3..5]");
    expect_floats(buf, s0 + 3, 2, "state read s[3..5]");
    expect_error(state_read(st, exe, "s", 5, buf, 2), RLX_STATUS_INVALID_ARGUMENT, NULL,
                 "state read of elements 5..7 of 6");
    expect_error(state_read(st, exe, "nope", 0, buf, 2), RLX_STATUS_NOT_FOUND, NULL,
                 "state read of an unknown state");
    int64_t shape1[1] = {2};
    RlxTensor lent;
    borrowed_f32(&lent, buf, 0, shape1, 1, NULL);
    lent.dl.dtype.code = RLX_DL_INT;
    expect_error(st->read(exe, str_of("s"), 0, &lent), RLX_STATUS_INVALID_ARGUMENT, NULL,
                 "state read into an i32 buffer");
    borrowed_f32(&lent, buf, 0, shape1, 1, NULL);
    lent.ownership = RLX_OWNERSHIP_OWNED;
    expect_error(st->read(exe, str_of("s"), 0, &lent), RLX_STATUS_INVALID_ARGUMENT, NULL,
                 "state read into an OWNED buffer");
    expect_error(st->read(exe, str_of("s"), 0, NULL), RLX_STATUS_INVALID_ARGUMENT, NULL,
                 "state read(into NULL)");
    float part[2];
    must(output_read(st, exe, out[1], 4, part, 2), "state read_output");
    expect_floats(part, want_y + 4, 2, "read_output of output 1, elements 4..6");
    expect_error(output_read(st, exe, "no_such_output", 0, part, 2), RLX_STATUS_NOT_FOUND, NULL,
                 "state read_output of an unknown output");
    step("state read: s[3..5] = [%g %g]; read_output: y[4..6] = [%g %g]", buf[0], buf[1],
         part[0], part[1]);

    /* A given input overrides the state for that run; the feed then
     * takes that run's output. */
    float ten[6] = {10, 10, 10, 10, 10, 10};
    must(run_counter(exe, ten, next, y), "run the counter with s given");
    counter_ref(ten, want_next, want_y);
    expect_floats(next, want_next, 6, "output 0 of a run that overrides s");
    expect_floats(y, want_y, 6, "output 1 of a run that overrides s");
    memcpy(s0, want_next, sizeof s0);
    must(state_read(st, exe, "s", 0, buf, 6), "state read s");
    expect_floats(buf, s0, 6, "the state after an overriding run");
    step("state override: s given for one run (10) -> output 0 = [%g ...], fed into s", next[0]);

    /* A skipped output slot (run_into): nothing handed over, the slot left
     * as it was, and the feed from that output still applied. */
    if (COVERS(g_api, RlxPluginApi, executable_run_into) && g_api->executable_run_into) {
        float x[6], ylent[6];
        memcpy(x, CX, sizeof x);
        RlxTensor tx, ts2, slots[2], before;
        RlxNamedTensor in[2];
        size_t n = counter_inputs(in, &tx, &ts2, x, NULL);
        memset(&slots[0], GARBAGE, sizeof slots[0]);
        slots[0].struct_size = sizeof(RlxTensor);
        slots[0].ownership = RLX_OWNERSHIP_SKIP;
        slots[0].dl.data = NULL;
        before = slots[0];
        memset(ylent, GARBAGE, sizeof ylent);
        borrowed_f32(&slots[1], ylent, 0, SHAPE_23, 2, NULL);
        must(g_api->executable_run_into(exe, in, n, slots, 2), "run_into with a SKIP slot");
        if (memcmp(&slots[0], &before, sizeof before) != 0)
            fail("run_into: the SKIP slot was written");
        counter_ref(s0, want_next, want_y);
        expect_floats(ylent, want_y, 6, "run_into: the lent output beside a SKIP slot");
        memcpy(s0, want_next, sizeof s0);
        must(state_read(st, exe, "s", 0, buf, 6), "state read s");
        expect_floats(buf, s0, 6, "the state fed from a skipped output");
        step("run_into: a SKIP slot was left as it was; the state it feeds still advanced");
    }

    /* NONE: the state keeps its value. */
    must(st->set_feed(exe, str_of("s"), RLX_FEED_NONE, str_of("")), "state set_feed NONE");
    must(run_counter(exe, NULL, next, y), "run the counter on its state");
    must(state_read(st, exe, "s", 0, buf, 6), "state read s");
    expect_floats(buf, s0, 6, "a state fed NONE after a run");

    /* Unbound: the input is the caller's again. */
    must(st->unbind(exe, str_of("s")), "state unbind s");
    if (state_list(st, exe).n != 0) fail("state list after unbind is not empty");
    float o0[6], o1[6];
    expect_error(run_counter(exe, NULL, o0, o1), RLX_STATUS_INVALID_ARGUMENT, NULL,
                 "run without s after unbind");
    expect_error(st->unbind(exe, str_of("s")), RLX_STATUS_NOT_FOUND, NULL,
                 "state unbind of s twice");
    step("state unbind: s is the caller's again (a run without it is refused)");
    g_api->executable_destroy(exe);

    if (HAS_FN(st, RlxStateApi, feed_rows))
        state_rows(st);
    else
        step("state feed_rows: not offered (NULL): no row feeds");
}

/* A counter with w bound, s held as state (value s) and fed REPLACE from
 * output 0; the output names into out. */
static RlxExecutable* fed_counter(const RlxStateApi* st, const float* s, char out[2][64]) {
    RlxExecutable* exe = compile_or_fail(COUNTER_GRAPH, "compile the counter");
    output_names(exe, out, 2);
    bind_f32(exe, "w", CW, 6, SHAPE_23, 2);
    float v[6];
    memcpy(v, s, sizeof v);
    RlxTensor t;
    borrowed_f32(&t, v, 0, SHAPE_23, 2, NULL);
    must(st->bind(exe, str_of("s"), &t), "state bind s");
    must(st->set_feed(exe, str_of("s"), RLX_FEED_REPLACE, str_of(out[0])), "state set_feed");
    return exe;
}

/* 1.9 clones and shared params. */
static void sharing_1_9(void) {
    if (!OFFERED_1_9(sharing)) return;
    const RlxSharingApi* sh = g_api->sharing;
    const RlxStateApi* st =
        COVERS(g_api, RlxPluginApi, state) && g_api->state && HAS_FN(g_api->state, RlxStateApi,
                                                                      read)
            ? g_api->state
            : NULL;
    if (!HAS_FN(sh, RlxSharingApi, clone) || !HAS_FN(sh, RlxSharingApi, share_params) || !st) {
        step("sharing: clone, share_params or the state this host checks clones with is "
             "missing; not used");
        return;
    }
    float ones[6] = {1, 1, 1, 1, 1, 1}, next[6], y[6], want_next[6], want_y[6], buf[6];
    char out[2][64];
    RlxExecutable* a = fed_counter(st, ones, out);
    RlxExecutable* b = (RlxExecutable*)(uintptr_t)0xABABABABu;
    must(sh->clone(a, &b), "clone");
    if (!b || b == a) fail("clone wrote no new executable");
    /* a runs twice; the clone keeps the state it was cloned with. */
    float sa[6];
    memcpy(sa, ones, sizeof sa);
    for (int k = 0; k < 2; k++) {
        must(run_counter(a, NULL, next, y), "run the original");
        counter_ref(sa, want_next, want_y);
        memcpy(sa, want_next, sizeof sa);
    }
    must(state_read(st, b, "s", 0, buf, 6), "state read of the clone");
    expect_floats(buf, ones, 6, "the clone's state after the original ran");
    must(run_counter(b, NULL, next, y), "run the clone");
    counter_ref(ones, want_next, want_y);
    expect_floats(next, want_next, 6, "the clone's output 0 (its own state, fed)");
    expect_floats(y, want_y, 6, "the clone's output 1 (the shared w)");
    must(state_read(st, a, "s", 0, buf, 6), "state read of the original");
    expect_floats(buf, sa, 6, "the original's state after the clone ran");
    step("clone: the clone started from s = 1 and ran on its own state and a's w; a's state "
         "(1 + 2x) untouched");

    /* A param bound on the clone afterwards is its own. */
    float zeros[6] = {0};
    bind_f32(b, "w", zeros, 6, SHAPE_23, 2);
    must(run_counter(a, NULL, next, y), "run the original");
    counter_ref(sa, want_next, want_y);
    expect_floats(y, want_y, 6, "the original's output 1 after the clone rebound w");
    memcpy(sa, want_next, sizeof sa);

    /* share_params: c takes a's w (n_shared 1), and with n_shared NULL. */
    RlxExecutable* c = compile_or_fail(COUNTER_GRAPH, "compile the counter");
    size_t n = 12345;
    must(sh->share_params(c, a, &n), "share_params");
    if (n != 1) fail("share_params shared %zu params, want 1", n);
    must(sh->share_params(c, a, NULL), "share_params (n_shared NULL)");
    float s5[6] = {5, 5, 5, 5, 5, 5};
    must(run_counter(c, s5, next, y), "run with shared params");
    counter_ref(s5, want_next, want_y);
    expect_floats(y, want_y, 6, "output 1 with w shared from another executable");
    step("share_params: 1 param shared (w); the receiver computes with it");

    /* Misuse: a src that is not a live executable of this plugin, itself,
     * or one whose params are not bound. */
    RlxExecutable* unbound = compile_or_fail(COUNTER_GRAPH, "compile the counter");
    expect_error(sh->share_params(c, unbound, &n), RLX_STATUS_INVALID_ARGUMENT, NULL,
                 "share_params from an executable whose w is not bound");
    expect_error(sh->share_params(c, c, &n), RLX_STATUS_INVALID_ARGUMENT, NULL,
                 "share_params of an executable with itself");
    expect_error(sh->share_params(c, (const RlxExecutable*)(uintptr_t)0x1000, &n),
                 RLX_STATUS_INVALID_ARGUMENT, NULL,
                 "share_params from a pointer that is no executable of the plugin");
    RlxExecutable* dead = compile_or_fail(COUNTER_GRAPH, "compile the counter");
    g_api->executable_destroy(dead);
    expect_error(sh->share_params(c, dead, &n), RLX_STATUS_INVALID_ARGUMENT, NULL,
                 "share_params from a destroyed executable");
    RlxExecutable* none = NULL;
    expect_error(sh->clone(dead, &none), RLX_STATUS_INVALID_ARGUMENT, NULL,
                 "clone of a destroyed executable");
    expect_error(sh->clone(a, NULL), RLX_STATUS_INVALID_ARGUMENT, NULL, "clone(out NULL)");

    /* The clone outlives the original and keeps its own w (zeros). */
    g_api->executable_destroy(a);
    must(run_counter(b, NULL, next, y), "run the clone after the original is destroyed");
    expect_floats(y, zeros, 6, "the clone's output 1 with its own w = 0");
    step("clone: outlives the original, with its own rebound w");
    g_api->executable_destroy(b);
    g_api->executable_destroy(c);
    g_api->executable_destroy(unbound);
}

/* A slot for wait: lent (a garbage-filled host buffer), OWNED (data NULL)
 * or SKIP. */
enum { SLOT_LENT, SLOT_OWNED, SLOT_SKIP };

static void make_slot(RlxTensor* t, int kind, float* buf) {
    memset(t, GARBAGE, sizeof *t);
    if (kind == SLOT_LENT) {
        memset(buf, GARBAGE, 6 * sizeof(float));
        borrowed_f32(t, buf, 0, SHAPE_23, 2, NULL);
        return;
    }
    t->struct_size = sizeof(RlxTensor);
    t->ownership = kind == SLOT_SKIP ? RLX_OWNERSHIP_SKIP : RLX_OWNERSHIP_BORROWED;
    t->dl.data = NULL;
}

static const char* slot_name(int kind) {
    return kind == SLOT_LENT ? "lent" : kind == SLOT_OWNED ? "OWNED" : "SKIP";
}

/* Check a slot after wait against the output it was for. */
static void check_slot(RlxTensor* t, const RlxTensor* before, int kind, const float* buf,
                       const float* want, const char* what) {
    if (kind == SLOT_OWNED) {
        expect_owned(t, want, 6, what);
        return;
    }
    if (memcmp(t, before, sizeof *t) != 0)
        fail("%s: the %s slot was written", what, slot_name(kind));
    if (kind == SLOT_LENT) expect_floats(buf, want, 6, what);
}

/* 1.9 submitted runs: three in flight, each reading the state the one
 * before made; their outputs waited for into a lent, an OWNED and a
 * skipped slot in turn. */
static void submits_1_9(void) {
    if (!OFFERED_1_9(submits)) return;
    const RlxSubmitApi* su = g_api->submits;
    const RlxStateApi* st =
        COVERS(g_api, RlxPluginApi, state) && g_api->state && HAS_FN(g_api->state, RlxStateApi,
                                                                      set_feed)
            ? g_api->state
            : NULL;
    if (!HAS_FN(su, RlxSubmitApi, submit) || !HAS_FN(su, RlxSubmitApi, wait) || !st) {
        step("submits: submit, wait or the state this host chains runs with is missing; not "
             "used");
        return;
    }
    float zeros[6] = {0};
    char out[2][64];
    RlxExecutable* exe = fed_counter(st, zeros, out);
    RlxTensor slots[2];
    float unused[6];
    make_slot(&slots[0], SLOT_OWNED, unused);
    make_slot(&slots[1], SLOT_OWNED, unused);
    expect_error(su->wait(exe, slots, 2), RLX_STATUS_INVALID_ARGUMENT, NULL,
                 "wait with nothing submitted");
    expect_error(su->wait(exe, NULL, 0), RLX_STATUS_INVALID_ARGUMENT, NULL,
                 "wait (outputs dropped) with nothing submitted");
    /* Each run's inputs are read before submit returns: the buffer is
     * scribbled over after each. */
    for (int k = 0; k < 3; k++) {
        float x[6];
        memcpy(x, CX, sizeof x);
        RlxTensor tx;
        RlxNamedTensor in[1];
        borrowed_f32(&tx, x, 0, SHAPE_23, 2, NULL);
        named(&in[0], "x", &tx);
        must(su->submit(exe, in, 1), "submit");
        memset(x, GARBAGE, sizeof x);
    }
    static const int kinds[3][2] = {
        {SLOT_LENT, SLOT_OWNED}, {SLOT_SKIP, SLOT_LENT}, {SLOT_OWNED, SLOT_SKIP}};
    float s[6] = {0};
    for (int k = 0; k < 3; k++) {
        float b0[6], b1[6], want_next[6], want_y[6];
        RlxTensor before[2];
        make_slot(&slots[0], kinds[k][0], b0);
        make_slot(&slots[1], kinds[k][1], b1);
        memcpy(before, slots, sizeof before);
        must(su->wait(exe, slots, 2), "wait");
        counter_ref(s, want_next, want_y);
        char what[64];
        snprintf(what, sizeof what, "submitted run %d, output 0", k + 1);
        check_slot(&slots[0], &before[0], kinds[k][0], b0, want_next, what);
        snprintf(what, sizeof what, "submitted run %d, output 1", k + 1);
        check_slot(&slots[1], &before[1], kinds[k][1], b1, want_y, what);
        memcpy(s, want_next, sizeof s);
        step("wait %d: output 0 %s, output 1 %s: as synchronous runs give", k + 1,
             slot_name(kinds[k][0]), slot_name(kinds[k][1]));
    }
    make_slot(&slots[0], SLOT_OWNED, unused);
    make_slot(&slots[1], SLOT_OWNED, unused);
    expect_error(su->wait(exe, slots, 2), RLX_STATUS_INVALID_ARGUMENT, NULL,
                 "wait after every run was waited for");
    /* One more, its outputs dropped (n_out 0); the state still follows. */
    float x[6];
    memcpy(x, CX, sizeof x);
    RlxTensor tx;
    RlxNamedTensor in[1];
    borrowed_f32(&tx, x, 0, SHAPE_23, 2, NULL);
    named(&in[0], "x", &tx);
    must(su->submit(exe, in, 1), "submit");
    must(su->wait(exe, NULL, 0), "wait dropping the outputs");
    float want_next[6], want_y[6], buf[6];
    counter_ref(s, want_next, want_y);
    must(state_read(st, exe, "s", 0, buf, 6), "state read s");
    expect_floats(buf, want_next, 6, "the state after 4 submitted runs");
    step("submits: 3 runs in flight chained through the state; a 4th waited for with its "
         "outputs dropped; s = 4x");
    /* A bad input is refused at submit, as executable_run refuses it. */
    int64_t shape_wrong[2] = {3, 2};
    borrowed_f32(&tx, x, 0, shape_wrong, 2, NULL);
    named(&in[0], "x", &tx);
    expect_error(su->submit(exe, in, 1), RLX_STATUS_INVALID_ARGUMENT, NULL,
                 "submit with x of shape [3, 2]");
    /* Destroyed with a run submitted: the run is dropped. */
    borrowed_f32(&tx, x, 0, SHAPE_23, 2, NULL);
    named(&in[0], "x", &tx);
    must(su->submit(exe, in, 1), "submit");
    g_api->executable_destroy(exe);
    step("submits: an executable destroyed with a run submitted");
}

/* The 1.9 root functions: param ranges, RNG, active extents, memory. */
static void root_1_9(void) {
    if (OFFERED_1_9(executable_bind_param_range)) {
        RlxExecutable* exe = compile_or_fail(COUNTER_GRAPH, "compile the counter");
        float part[2] = {10, 20}, zeros[6] = {0}, next[6], y[6];
        expect_error(g_api->executable_bind_param_range(exe, str_of("w"), 0, part, 8),
                     RLX_STATUS_INVALID_ARGUMENT, NULL, "bind_param_range of an unbound param");
        bind_f32(exe, "w", CW, 6, SHAPE_23, 2);
        must(g_api->executable_bind_param_range(exe, str_of("w"), 8, part, 8),
             "bind_param_range w bytes 8..16");
        expect_error(g_api->executable_bind_param_range(exe, str_of("w"), 2, part, 4),
                     RLX_STATUS_INVALID_ARGUMENT, NULL,
                     "bind_param_range at byte 2 (not a whole element)");
        expect_error(g_api->executable_bind_param_range(exe, str_of("w"), 20, part, 8),
                     RLX_STATUS_INVALID_ARGUMENT, NULL,
                     "bind_param_range past the param's end");
        expect_error(g_api->executable_bind_param_range(exe, str_of("w"), 0, NULL, 4),
                     RLX_STATUS_INVALID_ARGUMENT, NULL, "bind_param_range(data NULL)");
        expect_error(g_api->executable_bind_param_range(exe, str_of("nope"), 0, part, 4),
                     RLX_STATUS_NOT_FOUND, NULL, "bind_param_range of an unknown param");
        must(run_counter(exe, zeros, next, y), "run after bind_param_range");
        float want[6] = {1, 2, 10, 40, 10, 12}; /* x * {1, 2, 10, 20, 5, 6} */
        expect_floats(y, want, 6, "output 1 with w's elements 2..4 overwritten");
        step("bind_param_range: w[2..4] = [10 20]; output 1 = [%g %g %g %g %g %g]", y[0], y[1],
             y[2], y[3], y[4], y[5]);
        g_api->executable_destroy(exe);
    }
    if (OFFERED_1_9(executable_set_rng)) {
        RlxExecutable* exe = compile_or_fail(RNG_GRAPH, "compile the rng graph");
        float draws[3][16];
        uint64_t seeds[3] = {RLX_DEFAULT_RNG_SEED, 1234, RLX_DEFAULT_RNG_SEED};
        for (int k = 0; k < 3; k++) {
            if (k > 0)
                must(g_api->executable_set_rng(exe, RLX_RNG_PHILOX, seeds[k]), "set_rng");
            float x[16] = {0};
            int64_t shape[1] = {16};
            RlxTensor tx, slot[1];
            RlxNamedTensor in[1];
            borrowed_f32(&tx, x, 0, shape, 1, NULL);
            named(&in[0], "x", &tx);
            garbage_slots(slot, 1);
            must(g_api->executable_run(exe, in, 1, slot, 1), "run the rng graph");
            if (slot[0].ownership != RLX_OWNERSHIP_OWNED || !slot[0].dl.data)
                fail("rng graph: no OWNED output");
            memcpy(draws[k], (const char*)slot[0].dl.data + slot[0].dl.byte_offset,
                   sizeof draws[k]);
            release(&slot[0]);
            for (int i = 0; i < 16; i++)
                if (!(draws[k][i] >= 0.0f && draws[k][i] < 1.0f))
                    fail("rng draw %d element %d is %g, outside [0, 1)", k, i, draws[k][i]);
        }
        if (memcmp(draws[0], draws[1], sizeof draws[0]) == 0)
            fail("set_rng: seed 1234 draws what seed 42 drew");
        if (memcmp(draws[0], draws[2], sizeof draws[0]) != 0)
            fail("set_rng: seed 42 again does not draw what the compile's seed 42 drew");
        expect_error(g_api->executable_set_rng(exe, 99, 1), RLX_STATUS_UNSUPPORTED, NULL,
                     "set_rng with unknown policy 99");
        step("set_rng: seed 1234 draws another stream; seed 42 again draws the compile's, bit "
             "for bit");
        g_api->executable_destroy(exe);
    }
    if (OFFERED_1_9(executable_set_active_extent)) {
        RlxExecutable* exe = compile_or_fail(COUNTER_GRAPH, "compile the counter");
        bind_f32(exe, "w", CW, 6, SHAPE_23, 2);
        float s[6] = {1, 2, 3, 4, 5, 6}, next[6], y[6], want_next[6], want_y[6];
        counter_ref(s, want_next, want_y);
        must(g_api->executable_set_active_extent(exe, 1, 2), "set_active_extent 1 of 2");
        must(run_counter(exe, s, next, y), "run with 1 live row of 2");
        expect_floats(y, want_y, 3, "the live row of output 1");
        expect_error(g_api->executable_set_active_extent(exe, 3, 2), RLX_STATUS_INVALID_ARGUMENT,
                     NULL, "set_active_extent 3 of 2");
        expect_error(g_api->executable_set_active_extent(exe, 0, 2), RLX_STATUS_INVALID_ARGUMENT,
                     NULL, "set_active_extent 0 of 2");
        must(g_api->executable_set_active_extent(exe, 0, 0), "set_active_extent cleared");
        must(run_counter(exe, s, next, y), "run with every row");
        expect_floats(y, want_y, 6, "output 1 with the extent cleared");
        step("set_active_extent: row 0 of 2 computed as the whole run computes it; cleared, "
             "every row");
        g_api->executable_destroy(exe);
    }
    if (OFFERED_1_9(memory_usage)) {
        expect_error(g_api->memory_usage(NULL), RLX_STATUS_INVALID_ARGUMENT, NULL,
                     "memory_usage(NULL)");
        RlxMemoryUsage before, after, part;
        memset(&before, GARBAGE, sizeof before);
        before.struct_size = RLX_MEMORY_USAGE_STRUCT_SIZE;
        after = before;
        must(g_api->memory_usage(&before), "memory_usage");
        if (before.struct_size != RLX_MEMORY_USAGE_STRUCT_SIZE ||
            before.peak_bytes < before.active_bytes)
            fail("memory_usage: struct_size %zu, active %llu, peak %llu", before.struct_size,
                 (unsigned long long)before.active_bytes, (unsigned long long)before.peak_bytes);
        RlxExecutable* exe = compile_or_fail(BIG_GRAPH, "compile the 4 MiB graph");
        size_t n = 512 * 2048;
        float* w = malloc(n * sizeof(float));
        if (!w) fail("out of memory");
        for (size_t i = 0; i < n; i++) w[i] = 0.5f;
        int64_t shape[2] = {512, 2048};
        RlxTensor t;
        borrowed_f32(&t, w, 0, shape, 2, NULL);
        must(g_api->executable_bind_param(exe, str_of("w"), &t), "bind_param w (4 MiB)");
        free(w);
        must(g_api->memory_usage(&after), "memory_usage");
        uint64_t grew = after.active_bytes - before.active_bytes;
        if (after.active_bytes < before.active_bytes || grew < 3u * 1024 * 1024 ||
            after.peak_bytes < after.active_bytes)
            fail("memory_usage: binding 4 MiB moved active bytes from %llu to %llu (peak %llu)",
                 (unsigned long long)before.active_bytes, (unsigned long long)after.active_bytes,
                 (unsigned long long)after.peak_bytes);
        /* An out-struct: a caller that knows only active_bytes gets that,
         * and no byte beyond. */
        memset(&part, GARBAGE, sizeof part);
        part.struct_size = RLX_STRUCT_SIZE(RlxMemoryUsage, active_bytes);
        must(g_api->memory_usage(&part), "memory_usage (active_bytes only)");
        RlxMemoryUsage garbage;
        memset(&garbage, GARBAGE, sizeof garbage);
        if (part.struct_size != RLX_STRUCT_SIZE(RlxMemoryUsage, active_bytes) ||
            part.peak_bytes != garbage.peak_bytes || part.cached_bytes != garbage.cached_bytes)
            fail("memory_usage wrote past the caller's struct_size %zu",
                 (size_t)RLX_STRUCT_SIZE(RlxMemoryUsage, active_bytes));
        step("memory_usage: binding 4 MiB of weights grew the plugin's active bytes by %llu; a "
             "16-byte out-struct got active bytes only",
             (unsigned long long)grew);
        g_api->executable_destroy(exe);
    }
}

static void abi_1_9(void) {
    if (g_opt.minor < 9) {
        step("1.9 entries: not used (an ABI %u.%u host has none)", g_opt.major, g_opt.minor);
        return;
    }
    state_1_9();
    sharing_1_9();
    submits_1_9();
    root_1_9();
}

/* ======================================================================
 * main
 * ====================================================================== */

static void usage(void) {
    fprintf(stderr,
            "usage: rlx-c-host --claim MAJOR.MINOR [--mode lazy|eager|compiled] "
            "[--activation exp|relu] [--device cpu|gpu[:N]] [--graph FILE] [--huge] [--print-graph] "
            "[--setting KEY=VALUE] "
            "PLUGIN_LIBRARY\n");
    exit(EXIT_USAGE);
}

static void parse_args(int argc, char** argv, int* print_graph) {
    int claimed = 0;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--claim") == 0 && v) {
            char dot = 0, extra = 0;
            if (sscanf(v, "%u%c%u%c", &g_opt.major, &dot, &g_opt.minor, &extra) != 3 || dot != '.')
                usage();
            /* Only 1.0 ..= this header's minor have layouts this host knows; another major
             * is sent as is, to be refused. */
            if (g_opt.major == 1 && g_opt.minor > RLX_ABI_VERSION_MINOR) usage();
            claimed = 1;
            i++;
        } else if (strcmp(a, "--device") == 0 && v) {
            unsigned ord = 0;
            if (strncmp(v, "gpu", 3) == 0) g_opt.device_kind = RLX_DEVICE_GPU;
            else if (strncmp(v, "cpu", 3) == 0) g_opt.device_kind = RLX_DEVICE_CPU;
            else usage();
            if (v[3] == ':' && sscanf(v + 4, "%u", &ord) == 1) g_opt.device_ordinal = ord;
            else if (v[3] != 0) usage();
            i++;
        } else if (strcmp(a, "--mode") == 0 && v) {
            if (strcmp(v, "lazy") == 0) g_opt.mode = RLX_MODE_LAZY;
            else if (strcmp(v, "eager") == 0) g_opt.mode = RLX_MODE_EAGER;
            else if (strcmp(v, "compiled") == 0) g_opt.mode = RLX_MODE_COMPILED;
            else usage();
            g_opt.mode_name = v;
            i++;
        } else if (strcmp(a, "--activation") == 0 && v) {
            if (strcmp(v, "relu") == 0) g_opt.relu = 1;
            else if (strcmp(v, "exp") == 0) g_opt.relu = 0;
            else usage();
            i++;
        } else if (strcmp(a, "--graph") == 0 && v) {
            g_opt.graph_file = v;
            i++;
        } else if (strcmp(a, "--setting") == 0 && v) {
            if (!strchr(v, '=') || g_opt.n_settings == 8) usage();
            g_opt.settings[g_opt.n_settings++] = v;
            i++;
        } else if (strcmp(a, "--huge") == 0) {
            g_opt.huge = 1;
        } else if (strcmp(a, "--print-graph") == 0) {
            *print_graph = 1;
        } else if (a[0] != '-' && !g_opt.library) {
            g_opt.library = a;
        } else {
            usage();
        }
    }
    if (!*print_graph && (!claimed || !g_opt.library)) usage();
}

int main(int argc, char** argv) {
    /* Line-buffered, so the steps interleave with the plugin's log lines. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    int print_graph = 0;
    parse_args(argc, argv, &print_graph);
    if (print_graph) {
        fputs(builtin_graph(), stdout);
        return EXIT_OK;
    }

    fill_host_table();
    step("host: ABI %u.%u (host table struct_size %zu), mode %s, plugin %s", g_opt.major,
         g_opt.minor, g_host.struct_size, g_opt.mode_name, g_opt.library);
    const RlxPluginApi* api = call_entry(g_opt.library);
    check_header(api); /* exits on a refusal: nothing past the header is read */
    check_table(api);
    g_api = api;
    print_descriptor(api->descriptor);

    must(api->init(), "init");
    step("init: ok");
    check_statuses();
    check_supported_ops();
    check_lowering_table();
    run_graph();
    custom_ops();
    abi_1_9();

    unsigned dropped = atomic_load(&g_log.too_verbose), bad = atomic_load(&g_log.malformed);
    step("log: %u records, %u above INFO dropped, %u malformed", atomic_load(&g_log.records),
         dropped, bad);
    if (bad) fail("malformed log records");
    printf("ok\n");
    return EXIT_OK;
}
