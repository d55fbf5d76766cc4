/*
 * c_plugin.c — "c-demo", an RLX backend plugin in plain C11.
 *
 * It is written against plugin-api/include/rlx_plugin.h alone (no Rust,
 * no library but libc, libm and pthreads) to show that the header is the
 * whole ABI. It is a small f32 interpreter over .rlxmodel text:
 *
 *   Input, Param, Constant            graph values
 *   Binary(Add|Sub|Mul|Div)           numpy broadcasting
 *   Activation(Exp|Relu|Neg|Abs|Tanh|Sigmoid|Log|Sqrt)
 *   MatMul                            [M,K]x[K,N], batched with batch
 *                                     broadcasting ([B,M,K]x[K,N], ...)
 *
 * and, from ABI 1.1, a custom-op registry holding one op of its own,
 * "c_demo.scale2" (y = 2x), to which a host may add its own kernels (the
 * 1.1 form only: the 1.5 build lists each op's kind and shape rule, and
 * refuses a desc that needs what 1.5 added, composites, in-place kernels
 * and shape rules, rather than ignoring it; its registry table has none
 * of 1.5's optional functions). From ABI 1.8 it writes outputs into
 * memory the host lends (executable_run_into), and from 1.9 it keeps
 * executable state (bind, unbind, read, list, REPLACE feeds, reads of the
 * last run's outputs; no row feeds) and honours skipped output slots; its
 * 1.9 table has no clones, shared params, submitted runs or 1.9 root
 * functions (those fields are NULL). From 1.10 it asks the host for its
 * setting RLX_C_DEMO_GREETING at init (the host table's `setting`, else
 * its process environment) and logs it when set.
 *
 * tests/build.rs compiles this file once per ABI minor it claims, with
 * -DRLX_C_PLUGIN_MINOR=N (0..=13): build 1.N writes its root table the way a
 * plugin of that minor did, which is what the host's version-skew tests
 * load. Every mode (lazy, eager, compiled) runs the same interpreter.
 *
 * Layout of this file:
 *   1. configuration, small helpers
 *   2. statuses
 *   3. logging to the host
 *   4. tensors: validation, strided reads, owned outputs
 *   5. the .rlxmodel lexer and parser (the executable's graph)
 *   6. the interpreter
 *   7. the executable functions of the root table
 *   8. executable state (1.9)
 *   9. eager single-op execution (lowering entries)
 *  10. the custom-op registry (1.1+)
 *  11. descriptor, registration tables, init
 *  12. the entry point and the handshake
 */
#define _POSIX_C_SOURCE 200809L

#include "rlx_plugin.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================
 * 1. Configuration and small helpers
 * ====================================================================== */

/* The ABI minor this build claims (tests/build.rs sets it). */
#ifndef RLX_C_PLUGIN_MINOR
#define RLX_C_PLUGIN_MINOR RLX_ABI_VERSION_MINOR
#endif
#if RLX_C_PLUGIN_MINOR < 0 || RLX_C_PLUGIN_MINOR > RLX_ABI_VERSION_MINOR
#error "RLX_C_PLUGIN_MINOR must be 0 ..= RLX_ABI_VERSION_MINOR"
#endif

/* -DRLX_C_PLUGIN_FAULTS builds "c-faulty": the same plugin, which breaks
 * the ABI's rules on purpose where the test asks (see section 7). */
#ifdef RLX_C_PLUGIN_FAULTS
#define PLUGIN_NAME "c-faulty"
#else
#define PLUGIN_NAME "c-demo"
#endif
#define PLUGIN_VERSION "0.1.0"
#define LOG_TARGET "c_demo"
/* "1.N.0": the ABI version this build claims, as text. */
#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)
#define PLUGIN_ABI_STR "1." STRINGIFY(RLX_C_PLUGIN_MINOR) ".0"

/* The most dims a tensor may have here; more is UNSUPPORTED. */
#define MAX_DIMS 8
/* Nesting limit of the generic value syntax (attribute blocks). */
#define MAX_VALUE_DEPTH 64

/* kDLCPU: the only device whose memory crosses the ABI. */
#define DL_CPU 1

/* An RlxStr initializer for a string literal (static tables). */
#define STR_INIT(s) { (s), sizeof(s) - 1 }

static RlxStr str_of(const char* s) {
    RlxStr r = {s, s ? strlen(s) : 0};
    return r;
}

static bool str_eq(RlxStr a, const char* b) {
    size_t n = strlen(b);
    return a.len == n && (n == 0 || memcmp(a.ptr, b, n) == 0);
}

/* A NUL-terminated copy of n bytes (NULL when out of memory). */
static char* dup_n(const char* p, size_t n) {
    char* s = malloc(n + 1);
    if (s) {
        if (n) memcpy(s, p, n);
        s[n] = '\0';
    }
    return s;
}

/* Is the RlxStr usable: {NULL, 0} is the empty string, {NULL, n>0} is not. */
static bool str_ok(RlxStr s) { return s.ptr != NULL || s.len == 0; }

/* ======================================================================
 * 2. Statuses: one heap block {code, length, message copy}
 * ====================================================================== */

struct RlxStatus {
    uint32_t code;
    size_t len;
    const char* msg; /* points just past the struct, in the same block */
};

/* What status_new returns when even the status cannot be allocated; never
 * freed. */
static RlxStatus g_oom_status = {
    RLX_STATUS_INTERNAL, 37, "c-demo: out of memory making a status"};

static RlxStatus* status_make(uint32_t code, const char* msg, size_t len) {
    RlxStatus* s = malloc(sizeof(RlxStatus) + len + 1);
    if (!s) return &g_oom_status;
    char* text = (char*)(s + 1);
    if (len) memcpy(text, msg, len);
    text[len] = '\0';
    s->code = code;
    s->len = len;
    s->msg = text;
    return s;
}

static RlxStatus* c_status_new(uint32_t code, RlxStr message) {
    if (!str_ok(message)) message.len = 0;
    return status_make(code, message.ptr, message.len);
}

static uint32_t c_status_code(const RlxStatus* s) {
    /* NULL is success: its code is 0 (rlx_plugin.h §2). */
    return s ? s->code : 0u;
}

static RlxStr c_status_message(const RlxStatus* s) {
    RlxStr r = {NULL, 0};
    if (s) {
        r.ptr = s->msg;
        r.len = s->len;
    }
    return r;
}

static void c_status_free(RlxStatus* s) {
    if (s && s != &g_oom_status) free(s);
}

/* A status with a printf-formatted message. */
static RlxStatus* errorf(uint32_t code, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
static RlxStatus* errorf(uint32_t code, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return status_make(code, fmt, strlen(fmt));
    char* buf = malloc((size_t)n + 1);
    if (!buf) return &g_oom_status;
    va_start(ap, fmt);
    vsnprintf(buf, (size_t)n + 1, fmt, ap);
    va_end(ap);
    RlxStatus* s = status_make(code, buf, (size_t)n);
    free(buf);
    return s;
}

/* ======================================================================
 * 3. Logging: records go to the host's log callback, if it has one
 * ====================================================================== */

/* Copied from the host table at the handshake, as far as its struct_size
 * reaches; never changed afterwards (so reading them needs no lock). */
static void* g_log_ctx;
static void (*g_log)(void* ctx, const RlxLogRecord* record);
static uint32_t (*g_log_max_level)(void* ctx);

static void plog(uint32_t level, uint32_t line, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void plog(uint32_t level, uint32_t line, const char* fmt, ...) {
    if (!g_log) return;
    /* Absent log_max_level means "everything" (RLX_LOG_TRACE). */
    uint32_t max = g_log_max_level ? g_log_max_level(g_log_ctx) : RLX_LOG_TRACE;
    if (level > max) return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    RlxLogRecord r;
    memset(&r, 0, sizeof r);
    r.struct_size = RLX_LOG_RECORD_STRUCT_SIZE;
    r.level = level;
    r.target = str_of(LOG_TARGET);
    r.message.ptr = buf;
    r.message.len = (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1;
    r.module_path = str_of(LOG_TARGET);
    r.file = str_of(__FILE__);
    r.line = line;
    r.reserved0 = 0;
    g_log(g_log_ctx, &r);
}

#define LOG_INFO(...) plog(RLX_LOG_INFO, __LINE__, __VA_ARGS__)
#define LOG_DEBUG(...) plog(RLX_LOG_DEBUG, __LINE__, __VA_ARGS__)
#define LOG_TRACE(...) plog(RLX_LOG_TRACE, __LINE__, __VA_ARGS__)

#if RLX_C_PLUGIN_MINOR >= 10
/* (1.10) The host's settings, copied at the handshake when its table
 * reaches `setting`; NULL: the process environment answers instead. */
static int64_t (*g_setting)(void* ctx, RlxStr key, uint8_t* buf, size_t cap);

/* The value of the setting `key`, NUL-terminated in buf (cut to cap - 1
 * bytes); false when it is unset. */
static bool read_setting(const char* key, char* buf, size_t cap) {
    if (g_setting) {
        int64_t n = g_setting(g_log_ctx, str_of(key), (uint8_t*)buf, cap - 1);
        if (n < 0) return false;
        buf[(uint64_t)n < cap - 1 ? (size_t)n : cap - 1] = 0;
        return true;
    }
    const char* v = getenv(key);
    if (!v) return false;
    snprintf(buf, cap, "%s", v);
    return true;
}
#endif

/* ======================================================================
 * 4. Tensors
 * ====================================================================== */

static const RlxDataType F32 = {RLX_DL_FLOAT, 32, 1};

static bool is_f32(RlxDataType d) {
    return d.code == RLX_DL_FLOAT && d.bits == 32 && d.lanes == 1;
}

/* A dtype's name as the ABI lists them ("f32", "i64"), for messages. */
static const char* dtype_name(RlxDataType d, char* buf, size_t n) {
    static const struct {
        uint8_t code, bits;
        const char* name;
    } names[] = {
        {RLX_DL_FLOAT, 32, "f32"}, {RLX_DL_FLOAT, 16, "f16"},
        {RLX_DL_BFLOAT, 16, "bf16"}, {RLX_DL_FLOAT, 64, "f64"},
        {RLX_DL_INT, 8, "i8"},      {RLX_DL_INT, 16, "i16"},
        {RLX_DL_INT, 32, "i32"},    {RLX_DL_INT, 64, "i64"},
        {RLX_DL_UINT, 8, "u8"},     {RLX_DL_UINT, 32, "u32"},
        {RLX_DL_BOOL, 8, "bool"},   {RLX_DL_COMPLEX, 64, "c64"},
    };
    if (d.lanes == 1)
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (names[i].code == d.code && names[i].bits == d.bits)
                return names[i].name;
    snprintf(buf, n, "dtype(code %u, bits %u, lanes %u)", d.code, d.bits,
             d.lanes);
    return buf;
}

/* "f32[2, 3]" into buf. */
static const char* fmt_shape(char* buf, size_t n, const char* dtype,
                             int ndim, const int64_t* shape) {
    size_t at = 0;
    int w = snprintf(buf, n, "%s[", dtype);
    at = w > 0 ? (size_t)w : 0;
    for (int i = 0; i < ndim && at < n; i++) {
        w = snprintf(buf + at, n - at, i ? ", %lld" : "%lld",
                     (long long)shape[i]);
        if (w > 0) at += (size_t)w;
    }
    if (at < n) snprintf(buf + at, n - at, "]");
    return buf;
}

/* The element count of a shape, or false when a size is negative or the
 * count overflows what fits in memory. */
static bool numel_of(int ndim, const int64_t* shape, size_t* out) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return false;
        size_t d = (size_t)shape[i];
        if (d && n > (SIZE_MAX / sizeof(float)) / d) return false;
        n *= d;
    }
    *out = n;
    return true;
}

/* Release a tensor handed over as OWNED (no-op for borrowed ones). Only
 * called on descriptors whose struct_size was checked. */
static void release_if_owned(const RlxTensor* t) {
    if (t && t->ownership == RLX_OWNERSHIP_OWNED && t->deleter)
        t->deleter(t->manager_ctx);
}

/* Does the descriptor's struct_size reach its deleter (so an OWNED tensor
 * can be released even when it is otherwise refused)? */
static bool tensor_size_reaches_deleter(const RlxTensor* t) {
    return t && t->struct_size >= RLX_STRUCT_SIZE(RlxTensor, deleter);
}

/* A checked f32 tensor, as compact row-major data: aliasing the caller's
 * buffer when it already is compact and aligned, else a copy (owned). */
typedef struct {
    int ndim;
    const int64_t* shape;
    size_t numel;
    const float* data;
    float* owned; /* free()d by view_free */
} F32View;

static void view_free(F32View* v) {
    free(v->owned);
    v->owned = NULL;
    v->data = NULL;
}

static bool strides_compact(int ndim, const int64_t* shape,
                            const int64_t* strides) {
    if (!strides) return true;
    int64_t want = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        /* A size-1 dim's stride never addresses anything. */
        if (shape[i] != 1 && strides[i] != want) return false;
        want *= shape[i];
    }
    return true;
}

/* Check the descriptor itself: the frozen size, host memory, a sane shape.
 * `what` names the tensor in messages ("input \"x\""). */
static RlxStatus* check_descriptor(const RlxTensor* t, const char* what) {
    if (!t) return errorf(RLX_STATUS_INVALID_ARGUMENT, "%s is NULL", what);
    if (t->struct_size != sizeof(RlxTensor))
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "%s: RlxTensor.struct_size is %zu, but RlxTensor is "
                      "frozen at %zu bytes",
                      what, t->struct_size, sizeof(RlxTensor));
    if (t->ownership > RLX_OWNERSHIP_OWNED)
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "%s: unknown ownership %u", what, t->ownership);
    if (t->dl.device.device_type != DL_CPU)
        return errorf(RLX_STATUS_UNSUPPORTED,
                      "%s is on DLPack device type %d: only host memory "
                      "(kDLCPU) crosses this ABI",
                      what, t->dl.device.device_type);
    if (t->dl.ndim < 0 || t->dl.ndim > MAX_DIMS)
        return errorf(t->dl.ndim < 0 ? RLX_STATUS_INVALID_ARGUMENT
                                     : RLX_STATUS_UNSUPPORTED,
                      "%s has %d dims (c-demo takes 0 ..= %d)", what,
                      t->dl.ndim, MAX_DIMS);
    if (t->dl.ndim > 0 && !t->dl.shape)
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "%s has %d dims but a NULL shape", what, t->dl.ndim);
    return NULL;
}

/* View `t` as f32 data (after check_descriptor and the caller's own
 * dtype/shape checks). */
static RlxStatus* view_f32(const RlxTensor* t, const char* what, F32View* v) {
    memset(v, 0, sizeof *v);
    const RlxDlTensor* dl = &t->dl;
    v->ndim = dl->ndim;
    v->shape = dl->shape;
    if (!numel_of(dl->ndim, dl->shape, &v->numel))
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "%s has a negative or oversized shape", what);
    if (v->numel == 0) {
        static const float none[1] = {0};
        v->data = none;
        return NULL;
    }
    if (!dl->data)
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "%s has %zu elements but NULL data", what, v->numel);
    const char* base = (const char*)dl->data + dl->byte_offset;
    bool aligned = ((uintptr_t)base % _Alignof(float)) == 0;
    if (aligned && strides_compact(dl->ndim, dl->shape, dl->strides)) {
        v->data = (const float*)base;
        return NULL;
    }
    /* Strided or misaligned: gather into a compact copy, element by
     * element through memcpy (the source may be misaligned). */
    float* out = malloc(v->numel * sizeof(float));
    if (!out) return errorf(RLX_STATUS_INTERNAL, "%s: out of memory", what);
    int64_t idx[MAX_DIMS] = {0};
    for (size_t e = 0; e < v->numel; e++) {
        int64_t off = 0;
        if (dl->strides) {
            for (int k = 0; k < dl->ndim; k++) off += idx[k] * dl->strides[k];
        } else {
            off = (int64_t)e;
        }
        memcpy(&out[e], base + off * (int64_t)sizeof(float), sizeof(float));
        for (int k = dl->ndim - 1; k >= 0; k--) {
            if (++idx[k] < dl->shape[k]) break;
            idx[k] = 0;
        }
    }
    v->data = out;
    v->owned = out;
    return NULL;
}

/* An output the caller owns: one malloc'd block holding the shape and
 * the data, released by free() through the deleter. */
typedef struct {
    int64_t shape[MAX_DIMS];
    float data[];
} OutBlock;

static void out_block_free(void* ctx) { free(ctx); }

static RlxTensor empty_tensor(void) {
    RlxTensor t;
    memset(&t, 0, sizeof t);
    t.struct_size = sizeof(RlxTensor);
    t.ownership = RLX_OWNERSHIP_BORROWED;
    t.dl.device.device_type = DL_CPU;
    t.dl.dtype = F32;
    return t;
}

/* A new OWNED f32 tensor of `shape` in *slot; its data is returned for
 * filling. NULL when out of memory (the slot is then untouched). */
static float* make_output(int ndim, const int64_t* shape, RlxTensor* slot) {
    size_t n;
    if (!numel_of(ndim, shape, &n)) return NULL;
    OutBlock* b = malloc(sizeof(OutBlock) + n * sizeof(float));
    if (!b) return NULL;
    memset(b->shape, 0, sizeof b->shape);
    for (int i = 0; i < ndim; i++) b->shape[i] = shape[i];
    RlxTensor t = empty_tensor();
    t.ownership = RLX_OWNERSHIP_OWNED;
    t.dl.data = b->data;
    t.dl.ndim = ndim;
    t.dl.shape = b->shape; /* never NULL, even for a scalar */
    t.dl.strides = NULL;
    t.manager_ctx = b;
    t.deleter = out_block_free;
    *slot = t;
    return b->data;
}

/* Undo make_output on a slot (error paths). */
static void drop_output(RlxTensor* slot) {
    release_if_owned(slot);
    *slot = empty_tensor();
}

/* ======================================================================
 * 5. The .rlxmodel text: lexer and parser
 *
 * The format is rlx-ir's (src/rlxmodel/text.rs): a header (`rlxmodel 1`,
 * `opset 1`, optional `rlx V`, `requires V`, `dims {..}`, `model {..}`),
 * then `graph @name { nodes; return outputs }`. A node is
 *   %label = Op operands : dtype[dims] [name "..."] [origin {..}]
 * where Op is printed as the rlx-ir Op variant (`MatMul`, `Binary(Add)`,
 * `Input{name: "x"}`), or sugar: `input`, `param` (named like the label),
 * `const 1.0` / `const [..]`. `//` starts a comment.
 * ====================================================================== */

typedef enum {
    T_EOF,
    T_IDENT,
    T_STR,   /* "…" (escapes kept; decode with tok_string) */
    T_RAW,   /* """\n…""" (verbatim) */
    T_NUM,   /* 1, -2.5e-3, 0.2.19, -inf */
    T_NODE,  /* %label (text without the %) */
    T_SYM,   /* ?3 */
    T_BYTES, /* b64"…" (text between the quotes) */
    T_PUNCT,
    T_MAPOPEN, /* #{ */
    T_BAD      /* a lexing error; Parser.err is set */
} TokKind;

typedef struct {
    TokKind kind;
    const char* p; /* the token's text (see TokKind) */
    size_t n;
    char punct;
    int line, col;
} Tok;

typedef enum { K_INPUT, K_PARAM, K_CONST, K_BINARY, K_ACT, K_MATMUL } NodeKind;

typedef enum { B_ADD, B_SUB, B_MUL, B_DIV } BinOp;
static const char* const k_bin_names[] = {"Add", "Sub", "Mul", "Div"};

typedef enum {
    A_EXP,
    A_RELU,
    A_NEG,
    A_ABS,
    A_TANH,
    A_SIGMOID,
    A_LOG,
    A_SQRT
} ActOp;
static const char* const k_act_names[] = {"Exp",  "Relu",    "Neg", "Abs",
                                          "Tanh", "Sigmoid", "Log", "Sqrt"};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

typedef struct {
    NodeKind kind;
    int sub; /* BinOp or ActOp */
    size_t in[2];
    int n_in;
    int ndim;
    int64_t shape[MAX_DIMS];
    size_t numel;
    char* label; /* the value's label, without % */
    char* name;  /* Input/Param: the value's name; else NULL */
    float* data; /* Constant: its values */
    int line;
    /* Param binding: `bound` is what the interpreter reads; `owned` is
     * the copy the executable made (NULL when it aliases a persistent
     * buffer). */
    const float* bound;
    float* owned;
    /* (1.9) An Input node held as executable state: `state` is its value
     * (compact, numel elements, malloc'd), read by a run the caller gives
     * nothing for; `feed` is RLX_FEED_NONE or RLX_FEED_REPLACE, the
     * latter from output `feed_from` after each run that succeeds. */
    bool held;
    float* state;
    uint32_t feed;
    size_t feed_from;
} Node;

typedef struct {
    size_t node;
    char* name;
} Output;

struct RlxExecutable {
    Node* nodes;
    size_t n_nodes, cap_nodes;
    size_t* inputs; /* node indices of the Input nodes, in graph order */
    size_t n_inputs;
    size_t* params; /* node indices of the Param nodes, in graph order */
    size_t n_params;
    Output* outputs;
    size_t n_outputs;
    uint32_t mode;
    uint32_t rng_policy;
    uint64_t rng_seed;
    /* (1.9) The outputs of the last run that succeeded, one compact
     * buffer each (NULL before the first run): what read_output reads and
     * REPLACE feeds copy from. */
    float** last;
};

typedef struct {
    const char* src;
    size_t len, pos;
    int line, col;
    Tok tok;
    RlxStatus* err; /* the first error; parsing stops there */
} Parser;

static void exe_free(RlxExecutable* e);

/* Record the first error, prefixed with where it happened. */
static bool fail_at(Parser* P, uint32_t code, int line, int col,
                    const char* fmt, ...) __attribute__((format(printf, 5, 6)));
static bool fail_at(Parser* P, uint32_t code, int line, int col,
                    const char* fmt, ...) {
    if (P->err) return false;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    P->err = errorf(code, "rlxmodel line %d, column %d: %s", line, col, msg);
    return false;
}
#define FAIL(P, code, ...) fail_at((P), (code), (P)->tok.line, (P)->tok.col, __VA_ARGS__)

/* -- the lexer ---------------------------------------------------------- */

static int peekc(const Parser* P, size_t ahead) {
    size_t at = P->pos + ahead;
    return at < P->len ? (unsigned char)P->src[at] : -1;
}

static void bump(Parser* P) {
    if (P->pos >= P->len) return;
    if (P->src[P->pos] == '\n') {
        P->line++;
        P->col = 1;
    } else {
        P->col++;
    }
    P->pos++;
}

static bool is_alpha(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
static bool is_digit(int c) { return c >= '0' && c <= '9'; }
static bool is_alnum(int c) { return is_alpha(c) || is_digit(c); }
static bool is_space(int c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
           c == '\v';
}

static void skip_space(Parser* P) {
    for (;;) {
        int c = peekc(P, 0);
        if (c >= 0 && is_space(c)) {
            bump(P);
        } else if (c == '/' && peekc(P, 1) == '/') {
            while (peekc(P, 0) >= 0 && peekc(P, 0) != '\n') bump(P);
        } else {
            return;
        }
    }
}

/* Lex a "…" string starting at the opening quote; the token keeps the
 * escaped text, checked here and decoded by tok_string. */
static void lex_string(Parser* P, Tok* t) {
    bump(P);
    size_t start = P->pos;
    for (;;) {
        int c = peekc(P, 0);
        if (c < 0) {
            fail_at(P, RLX_STATUS_INVALID_ARGUMENT, t->line, t->col,
                    "unterminated string");
            t->kind = T_BAD;
            return;
        }
        if (c == '"') break;
        if (c == '\\') {
            bump(P);
            c = peekc(P, 0);
            if (c <= 0 || !strchr("\"\\ntru", c)) {
                fail_at(P, RLX_STATUS_INVALID_ARGUMENT, P->line, P->col,
                        "unknown escape in a string");
                t->kind = T_BAD;
                return;
            }
        }
        bump(P);
    }
    t->p = P->src + start;
    t->n = P->pos - start;
    bump(P); /* closing quote */
}

static Tok lex(Parser* P) {
    skip_space(P);
    Tok t;
    memset(&t, 0, sizeof t);
    t.line = P->line;
    t.col = P->col;
    int c = peekc(P, 0);
    if (c < 0) {
        t.kind = T_EOF;
        return t;
    }
    size_t start = P->pos;
    if (c == '"' && peekc(P, 1) == '"' && peekc(P, 2) == '"') {
        /* """ newline text """ : verbatim. */
        bump(P), bump(P), bump(P);
        if (peekc(P, 0) != '\n') {
            fail_at(P, RLX_STATUS_INVALID_ARGUMENT, t.line, t.col,
                    "a `\"\"\"` text starts on the next line");
            t.kind = T_BAD;
            return t;
        }
        bump(P);
        size_t body = P->pos;
        while (!(peekc(P, 0) == '"' && peekc(P, 1) == '"' && peekc(P, 2) == '"')) {
            if (peekc(P, 0) < 0) {
                fail_at(P, RLX_STATUS_INVALID_ARGUMENT, t.line, t.col,
                        "unterminated `\"\"\"` text");
                t.kind = T_BAD;
                return t;
            }
            bump(P);
        }
        t.kind = T_RAW;
        t.p = P->src + body;
        t.n = P->pos - body;
        bump(P), bump(P), bump(P);
        return t;
    }
    if (c == '"') {
        t.kind = T_STR;
        lex_string(P, &t);
        return t;
    }
    if (c == '%' || c == '?') {
        bump(P);
        size_t s = P->pos;
        for (int d; (d = peekc(P, 0)) >= 0 &&
                    (c == '%' ? (is_alnum(d) || d == '_' || d == '.')
                              : is_digit(d));)
            bump(P);
        t.kind = c == '%' ? T_NODE : T_SYM;
        t.p = P->src + s;
        t.n = P->pos - s;
        return t;
    }
    if (c == '#' && peekc(P, 1) == '{') {
        bump(P), bump(P);
        t.kind = T_MAPOPEN;
        return t;
    }
    if (c == '-' || is_digit(c)) {
        /* A number: letters, digits and dots, with e-3 / e+3 exponents
         * (`0.2.19`, `-inf` and `1e-5` all lex here). */
        bump(P);
        for (int d; (d = peekc(P, 0)) >= 0;) {
            int prev = (unsigned char)P->src[P->pos - 1];
            bool exp = (d == '-' || d == '+') && (prev == 'e' || prev == 'E');
            if (is_alnum(d) || d == '.' || exp)
                bump(P);
            else
                break;
        }
        t.kind = T_NUM;
        t.p = P->src + start;
        t.n = P->pos - start;
        return t;
    }
    if (is_alpha(c) || c == '_') {
        while (peekc(P, 0) >= 0 && (is_alnum(peekc(P, 0)) || peekc(P, 0) == '_'))
            bump(P);
        t.kind = T_IDENT;
        t.p = P->src + start;
        t.n = P->pos - start;
        if (t.n == 3 && memcmp(t.p, "b64", 3) == 0 && peekc(P, 0) == '"') {
            t.kind = T_BYTES;
            lex_string(P, &t);
            if (t.kind == T_BAD) return t;
            t.kind = T_BYTES;
        }
        return t;
    }
    bump(P);
    t.kind = T_PUNCT;
    t.punct = (char)c;
    return t;
}

/* Move to the next token. False once an error is recorded. */
static bool advance(Parser* P) {
    if (P->err) return false;
    P->tok = lex(P);
    return P->tok.kind != T_BAD;
}

static bool tok_is(const Tok* t, const char* word) {
    size_t n = strlen(word);
    return t->kind == T_IDENT && t->n == n && memcmp(t->p, word, n) == 0;
}

static bool is_ident(const Parser* P, const char* word) {
    return tok_is(&P->tok, word);
}

static bool is_punct(const Parser* P, char c) {
    return P->tok.kind == T_PUNCT && P->tok.punct == c;
}

/* How a token reads in a message. */
static const char* describe(const Tok* t, char* buf, size_t n) {
    int w = t->n > 40 ? 40 : (int)t->n;
    switch (t->kind) {
    case T_EOF: return "the end of the text";
    case T_IDENT: snprintf(buf, n, "`%.*s`", w, t->p); break;
    case T_STR: snprintf(buf, n, "\"%.*s\"", w, t->p); break;
    case T_RAW: return "a \"\"\" text";
    case T_NUM: snprintf(buf, n, "%.*s", w, t->p); break;
    case T_NODE: snprintf(buf, n, "%%%.*s", w, t->p); break;
    case T_SYM: snprintf(buf, n, "?%.*s", w, t->p); break;
    case T_BYTES: return "bytes";
    case T_PUNCT:
        if ((unsigned char)t->punct < 0x20 || (unsigned char)t->punct >= 0x7f)
            snprintf(buf, n, "byte 0x%02x", (unsigned char)t->punct);
        else
            snprintf(buf, n, "`%c`", t->punct);
        break;
    case T_MAPOPEN: return "`#{`";
    case T_BAD: return "a bad token";
    }
    return buf;
}

static bool eat_punct(Parser* P, char c) {
    if (!is_punct(P, c)) return false;
    advance(P);
    return true;
}

static bool expect_punct(Parser* P, char c) {
    if (is_punct(P, c)) return advance(P);
    char b[64];
    return FAIL(P, RLX_STATUS_INVALID_ARGUMENT, "expected `%c`, found %s", c,
                describe(&P->tok, b, sizeof b));
}

static bool expect_ident(Parser* P, const char* word) {
    if (is_ident(P, word)) return advance(P);
    char b[64];
    return FAIL(P, RLX_STATUS_INVALID_ARGUMENT, "expected `%s`, found %s", word,
                describe(&P->tok, b, sizeof b));
}

/* Append the UTF-8 encoding of code point c. */
static size_t put_utf8(char* out, uint32_t c) {
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xc0 | (c >> 6));
        out[1] = (char)(0x80 | (c & 0x3f));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xe0 | (c >> 12));
        out[1] = (char)(0x80 | ((c >> 6) & 0x3f));
        out[2] = (char)(0x80 | (c & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (c >> 18));
    out[1] = (char)(0x80 | ((c >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3f));
    out[3] = (char)(0x80 | (c & 0x3f));
    return 4;
}

/* The text of a T_STR / T_RAW / T_IDENT token, escapes decoded; a new
 * NUL-terminated string (NULL on error, recorded in P). */
static char* tok_string(Parser* P, const Tok* t) {
    if (t->kind != T_STR) {
        char* s = dup_n(t->p, t->n);
        if (!s) fail_at(P, RLX_STATUS_INTERNAL, t->line, t->col, "out of memory");
        return s;
    }
    /* Decoding never grows the text (\u{..} is at least 4 bytes for at most
     * 4 bytes of UTF-8). */
    char* out = malloc(t->n + 1);
    if (!out) {
        fail_at(P, RLX_STATUS_INTERNAL, t->line, t->col, "out of memory");
        return NULL;
    }
    size_t o = 0;
    for (size_t i = 0; i < t->n; i++) {
        char c = t->p[i];
        if (c != '\\') {
            out[o++] = c;
            continue;
        }
        c = t->p[++i];
        switch (c) {
        case 'n': out[o++] = '\n'; break;
        case 't': out[o++] = '\t'; break;
        case 'r': out[o++] = '\r'; break;
        case 'u': {
            /* \u{hex} */
            uint32_t cp = 0;
            size_t j = i + 1, digits = 0;
            if (j >= t->n || t->p[j] != '{') goto bad;
            for (j++; j < t->n && t->p[j] != '}'; j++, digits++) {
                char h = t->p[j];
                int v = is_digit(h) ? h - '0'
                        : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                        : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
                if (v < 0 || digits >= 6) goto bad;
                cp = cp * 16 + (uint32_t)v;
            }
            if (j >= t->n || digits == 0 || cp > 0x10ffff ||
                (cp >= 0xd800 && cp <= 0xdfff))
                goto bad;
            o += put_utf8(out + o, cp);
            i = j;
            break;
        }
        default: out[o++] = c; break; /* \" and \\ */
        }
    }
    out[o] = '\0';
    return out;
bad:
    free(out);
    fail_at(P, RLX_STATUS_INVALID_ARGUMENT, t->line, t->col,
            "bad \\u{…} escape in a string");
    return NULL;
}

/* -- generic values (attribute blocks we only need to step over) -------- */

static bool skip_value(Parser* P, int depth);

/* `+n` or a `-n` number after a symbol's name (`seq+1`, `?0-1`). */
static bool skip_sym_offset(Parser* P) {
    if (eat_punct(P, '+')) {
        if (P->tok.kind != T_NUM)
            return FAIL(P, RLX_STATUS_INVALID_ARGUMENT, "expected an offset");
        return advance(P);
    }
    if (P->tok.kind == T_NUM && P->tok.n && P->tok.p[0] == '-') return advance(P);
    return !P->err;
}

/* Items separated by commas until `close`. */
static bool skip_list(Parser* P, char close, int depth, bool fields, bool map) {
    while (!is_punct(P, close)) {
        if (P->err) return false;
        if (fields) {
            if (P->tok.kind != T_IDENT && P->tok.kind != T_STR) {
                char b[64];
                return FAIL(P, RLX_STATUS_INVALID_ARGUMENT,
                            "expected a field name, found %s",
                            describe(&P->tok, b, sizeof b));
            }
            advance(P);
            if (!expect_punct(P, ':')) return false;
        } else if (map) {
            if (!skip_value(P, depth + 1) || !expect_punct(P, ':')) return false;
        }
        if (!skip_value(P, depth + 1)) return false;
        if (!eat_punct(P, ',')) break;
    }
    return expect_punct(P, close);
}

static bool skip_value(Parser* P, int depth) {
    char b[64];
    if (depth > MAX_VALUE_DEPTH)
        return FAIL(P, RLX_STATUS_UNSUPPORTED, "values nested too deeply");
    if (is_ident(P, "graph"))
        return FAIL(P, RLX_STATUS_UNSUPPORTED,
                    "a nested graph here: c-demo runs flat graphs only");
    Tok t = P->tok;
    switch (t.kind) {
    case T_NUM:
    case T_STR:
    case T_RAW:
    case T_BYTES: return advance(P);
    case T_SYM: return advance(P) && skip_sym_offset(P);
    case T_MAPOPEN: return advance(P) && skip_list(P, '}', depth, false, true);
    case T_IDENT:
        if (!advance(P)) return false;
        if (is_punct(P, '(')) return advance(P) && skip_list(P, ')', depth, false, false);
        if (is_punct(P, '{')) return advance(P) && skip_list(P, '}', depth, true, false);
        if (eat_punct(P, '*')) {
            if (P->tok.kind != T_NUM)
                return FAIL(P, RLX_STATUS_INVALID_ARGUMENT, "expected a scale");
            return advance(P) && skip_sym_offset(P);
        }
        return skip_sym_offset(P);
    case T_PUNCT:
        if (t.punct == '[') return advance(P) && skip_list(P, ']', depth, false, false);
        if (t.punct == '{') return advance(P) && skip_list(P, '}', depth, true, false);
        if (t.punct == '(') return advance(P) && expect_punct(P, ')');
        break;
    default: break;
    }
    return FAIL(P, RLX_STATUS_INVALID_ARGUMENT, "expected a value, found %s",
                describe(&t, b, sizeof b));
}

/* -- numbers ------------------------------------------------------------- */

/* A T_NUM token as an unsigned integer (sizes, versions). */
static bool tok_u64(const Tok* t, uint64_t* out) {
    if (t->kind != T_NUM || t->n == 0 || t->n > 18) return false;
    uint64_t v = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (!is_digit((unsigned char)t->p[i])) return false;
        v = v * 10 + (uint64_t)(t->p[i] - '0');
    }
    *out = v;
    return true;
}

/* One `const` element as f32: a number, inf/nan (`nan(0x7fc00001)` keeps
 * its bits), or true/false. Consumes the tokens. */
static bool parse_const_elem(Parser* P, float* out) {
    Tok t = P->tok;
    char buf[80];
    if (tok_is(&t, "true") || tok_is(&t, "false")) {
        *out = tok_is(&t, "true") ? 1.0f : 0.0f;
        return advance(P);
    }
    if (tok_is(&t, "nan") || tok_is(&t, "inf")) {
        if (!advance(P)) return false;
        if (tok_is(&t, "nan") && eat_punct(P, '(')) {
            Tok bits = P->tok;
            if (bits.kind != T_NUM || bits.n < 3 || bits.n > 18 ||
                bits.p[0] != '0' || (bits.p[1] != 'x' && bits.p[1] != 'X'))
                return FAIL(P, RLX_STATUS_INVALID_ARGUMENT,
                            "expected NaN bits like nan(0x7fc00001)");
            memcpy(buf, bits.p, bits.n);
            buf[bits.n] = '\0';
            char* end;
            unsigned long long u = strtoull(buf, &end, 16);
            if (*end || u > 0xffffffffull)
                return FAIL(P, RLX_STATUS_UNSUPPORTED,
                            "NaN bits %s do not fit an f32", buf);
            uint32_t u32 = (uint32_t)u;
            memcpy(out, &u32, sizeof *out);
            return advance(P) && expect_punct(P, ')');
        }
        *out = tok_is(&t, "nan") ? NAN : INFINITY;
        return true;
    }
    if (t.kind != T_NUM || t.n >= sizeof buf) {
        char b[64];
        return FAIL(P, RLX_STATUS_INVALID_ARGUMENT,
                    "expected a number in a const, found %s",
                    describe(&t, b, sizeof b));
    }
    memcpy(buf, t.p, t.n);
    buf[t.n] = '\0';
    char* end;
    *out = strtof(buf, &end);
    if (*end)
        return FAIL(P, RLX_STATUS_INVALID_ARGUMENT, "`%s` is not a number", buf);
    return advance(P);
}

/* -- base64 (Constant{data: b64"…"}) ------------------------------------ */

static int b64_digit(int c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (is_digit(c)) return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Decode base64 text (whitespace ignored, `=` padding) into a new block. */
static bool b64_decode(const char* s, size_t n, unsigned char** out,
                       size_t* out_len) {
    unsigned char* buf = malloc(n / 4 * 3 + 3);
    if (!buf) return false;
    size_t o = 0, digits = 0;
    uint32_t acc = 0;
    int pad = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)s[i];
        if (is_space(c)) continue;
        int d;
        if (c == '=') {
            pad++;
            d = 0;
        } else {
            d = b64_digit(c);
            if (d < 0 || pad) goto bad;
        }
        acc = (acc << 6) | (uint32_t)d;
        if (++digits % 4 == 0) {
            unsigned char three[3] = {(unsigned char)(acc >> 16),
                                      (unsigned char)(acc >> 8),
                                      (unsigned char)acc};
            if (pad > 2) goto bad;
            memcpy(buf + o, three, (size_t)(3 - pad));
            o += (size_t)(3 - pad);
            acc = 0;
        }
    }
    if (digits % 4) goto bad;
    *out = buf;
    *out_len = o;
    return true;
bad:
    free(buf);
    *out = NULL;
    return false;
}

/* -- shapes -------------------------------------------------------------- */

/* `dtype[d0, d1, …]` into the node. Only static f32 shapes run here: a
 * symbolic dim or another dtype is UNSUPPORTED, naming the node. */
static bool parse_shape(Parser* P, Node* nd) {
    char b[64];
    if (P->tok.kind != T_IDENT)
        return FAIL(P, RLX_STATUS_INVALID_ARGUMENT, "expected a dtype, found %s",
                    describe(&P->tok, b, sizeof b));
    Tok dtype = P->tok;
    if (!advance(P) || !expect_punct(P, '[')) return false;
    nd->ndim = 0;
    while (!is_punct(P, ']')) {
        uint64_t d;
        if (!tok_u64(&P->tok, &d)) {
            if (P->tok.kind == T_NUM)
                return FAIL(P, RLX_STATUS_INVALID_ARGUMENT,
                            "%s is not a size", describe(&P->tok, b, sizeof b));
            return FAIL(P, RLX_STATUS_UNSUPPORTED,
                        "value %%%s has a dim known only at run time (%s): "
                        "c-demo runs static shapes only",
                        nd->label, describe(&P->tok, b, sizeof b));
        }
        if (nd->ndim == MAX_DIMS)
            return FAIL(P, RLX_STATUS_UNSUPPORTED,
                        "value %%%s has more than %d dims", nd->label, MAX_DIMS);
        if (d > (uint64_t)INT64_MAX / 2)
            return FAIL(P, RLX_STATUS_INVALID_ARGUMENT, "dim %s is too large",
                        describe(&P->tok, b, sizeof b));
        nd->shape[nd->ndim++] = (int64_t)d;
        if (!advance(P)) return false;
        if (!eat_punct(P, ',')) break;
    }
    if (!expect_punct(P, ']')) return false;
    if (!numel_of(nd->ndim, nd->shape, &nd->numel))
        return fail_at(P, RLX_STATUS_INVALID_ARGUMENT, dtype.line, dtype.col,
                       "value %%%s has too many elements", nd->label);
    if (!tok_is(&dtype, "f32")) {
        int w = dtype.n > 20 ? 20 : (int)dtype.n;
        return fail_at(P, RLX_STATUS_UNSUPPORTED, dtype.line, dtype.col,
                       "value %%%s is %.*s: c-demo runs f32 only", nd->label,
                       w, dtype.p);
    }
    return true;
}

/* -- ops ----------------------------------------------------------------- */

static const char* node_op_name(const Node* nd, char* buf, size_t n) {
    switch (nd->kind) {
    case K_INPUT: return "Input";
    case K_PARAM: return "Param";
    case K_CONST: return "Constant";
    case K_MATMUL: return "MatMul";
    case K_BINARY: snprintf(buf, n, "Binary(%s)", k_bin_names[nd->sub]); return buf;
    case K_ACT: snprintf(buf, n, "Activation(%s)", k_act_names[nd->sub]); return buf;
    }
    return "?";
}

/* `Op(Variant)`: which of `names` the variant is. */
static bool parse_variant(Parser* P, const Node* nd, const char* op,
                          const char* const* names, size_t n_names, int* out,
                          const char* runs) {
    char b[64];
    if (!expect_punct(P, '(')) return false;
    Tok v = P->tok;
    if (v.kind != T_IDENT)
        return FAIL(P, RLX_STATUS_INVALID_ARGUMENT,
                    "expected %s's variant, found %s", op,
                    describe(&v, b, sizeof b));
    for (size_t i = 0; i < n_names; i++) {
        if (tok_is(&v, names[i])) {
            *out = (int)i;
            return advance(P) && expect_punct(P, ')');
        }
    }
    int w = v.n > 32 ? 32 : (int)v.n;
    return fail_at(P, RLX_STATUS_UNSUPPORTED, v.line, v.col,
                   "node %%%s: op %s(%.*s) is not supported by c-demo "
                   "(it runs %s %s)",
                   nd->label, op, w, v.p, op, runs);
}

/* `{name: "x"}` (Input, Param) into nd->name. */
static bool parse_name_block(Parser* P, Node* nd, const char* op) {
    char b[64];
    if (!expect_punct(P, '{')) return false;
    while (!is_punct(P, '}')) {
        if (!is_ident(P, "name"))
            return FAIL(P, RLX_STATUS_UNSUPPORTED,
                        "node %%%s: %s field %s is not known to c-demo",
                        nd->label, op, describe(&P->tok, b, sizeof b));
        if (!advance(P) || !expect_punct(P, ':')) return false;
        if (P->tok.kind != T_STR && P->tok.kind != T_RAW)
            return FAIL(P, RLX_STATUS_INVALID_ARGUMENT,
                        "node %%%s: %s's name is a string, found %s", nd->label,
                        op, describe(&P->tok, b, sizeof b));
        free(nd->name);
        nd->name = tok_string(P, &P->tok);
        if (!nd->name || !advance(P)) return false;
        if (!eat_punct(P, ',')) break;
    }
    if (!expect_punct(P, '}')) return false;
    if (!nd->name)
        return FAIL(P, RLX_STATUS_INVALID_ARGUMENT, "node %%%s: %s has no name",
                    nd->label, op);
    return true;
}

/* `Constant{data: b64"…"}`: the raw bytes, checked against the shape
 * later. */
static bool parse_constant_block(Parser* P, Node* nd, unsigned char** bytes,
                                 size_t* n_bytes) {
    char b[64];
    if (!expect_punct(P, '{')) return false;
    while (!is_punct(P, '}')) {
        if (!is_ident(P, "data"))
            return FAIL(P, RLX_STATUS_UNSUPPORTED,
                        "node %%%s: Constant field %s is not known to c-demo",
                        nd->label, describe(&P->tok, b, sizeof b));
        if (!advance(P) || !expect_punct(P, ':')) return false;
        if (P->tok.kind != T_BYTES)
            return FAIL(P, RLX_STATUS_INVALID_ARGUMENT,
                        "node %%%s: Constant data is b64\"…\", found %s",
                        nd->label, describe(&P->tok, b, sizeof b));
        free(*bytes);
        if (!b64_decode(P->tok.p, P->tok.n, bytes, n_bytes))
            return FAIL(P, RLX_STATUS_INVALID_ARGUMENT,
                        "node %%%s: bad base64 in Constant data", nd->label);
        if (!advance(P)) return false;
        if (!eat_punct(P, ',')) break;
    }
    if (!expect_punct(P, '}')) return false;
    if (!*bytes)
        return FAIL(P, RLX_STATUS_INVALID_ARGUMENT,
                    "node %%%s: Constant has no data", nd->label);
    return true;
}

/* -- the graph ----------------------------------------------------------- */

static bool label_is_number(const char* s) {
    for (; *s; s++)
        if (!is_digit((unsigned char)*s)) return false;
    return true;
}

/* The node a `%ref` names among the first `defined` nodes. */
static bool resolve_ref(Parser* P, RlxExecutable* e, size_t defined,
                        size_t* out) {
    Tok t = P->tok;
    char label[128];
    if (t.kind != T_NODE || t.n == 0 || t.n >= sizeof label)
        return FAIL(P, RLX_STATUS_INVALID_ARGUMENT, "expected a %%value");
    memcpy(label, t.p, t.n);
    label[t.n] = '\0';
    if (label_is_number(label)) {
        char* end;
        unsigned long long v = strtoull(label, &end, 10);
        if (v < defined) {
            *out = (size_t)v;
            return advance(P);
        }
    } else {
        for (size_t i = 0; i < defined; i++) {
            if (strcmp(e->nodes[i].label, label) == 0) {
                *out = i;
                return advance(P);
            }
        }
    }
    return FAIL(P, RLX_STATUS_INVALID_ARGUMENT,
                "%%%s is not a value defined above", label);
}

/* numpy broadcasting of a and b; false when they do not broadcast. */
static bool broadcast(const Node* a, const Node* b, int* ndim,
                      int64_t* shape) {
    int n = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int k = 0; k < n; k++) {
        int ia = a->ndim - n + k, ib = b->ndim - n + k;
        int64_t da = ia >= 0 ? a->shape[ia] : 1;
        int64_t db = ib >= 0 ? b->shape[ib] : 1;
        if (da != db && da != 1 && db != 1) return false;
        shape[k] = da == 1 ? db : da;
    }
    *ndim = n;
    return true;
}

static bool same_shape(int na, const int64_t* a, int nb, const int64_t* b) {
    if (na != nb) return false;
    for (int i = 0; i < na; i++)
        if (a[i] != b[i]) return false;
    return true;
}

/* MatMul's result shape: [..., M, K] x [..., K, N] -> [..., M, N], the
 * batch dims broadcast. */
static bool matmul_shape(const Node* a, const Node* b, int* ndim,
                         int64_t* shape) {
    if (a->ndim < 2 || b->ndim < 2) return false;
    if (a->shape[a->ndim - 1] != b->shape[b->ndim - 2]) return false;
    Node ba = *a, bb = *b;
    ba.ndim -= 2;
    bb.ndim -= 2;
    int n;
    if (!broadcast(&ba, &bb, &n, shape)) return false;
    shape[n] = a->shape[a->ndim - 2];
    shape[n + 1] = b->shape[b->ndim - 1];
    *ndim = n + 2;
    return true;
}

/* Check a node's operands against its op: counts, shapes. */
static bool check_node(Parser* P, RlxExecutable* e, Node* nd, int line) {
    char buf[48], s1[96], s2[96], s3[96];
    const char* op = node_op_name(nd, buf, sizeof buf);
    int want = nd->kind == K_BINARY || nd->kind == K_MATMUL ? 2
               : nd->kind == K_ACT                          ? 1
                                                            : 0;
    if (nd->n_in != want)
        return fail_at(P, RLX_STATUS_INVALID_ARGUMENT, line, 1,
                       "node %%%s: %s takes %d operands, got %d", nd->label, op,
                       want, nd->n_in);
    const Node* a = want > 0 ? &e->nodes[nd->in[0]] : NULL;
    const Node* b = want > 1 ? &e->nodes[nd->in[1]] : NULL;
    int ndim = 0;
    int64_t shape[MAX_DIMS + 2];
    bool ok = true;
    switch (nd->kind) {
    case K_BINARY: ok = broadcast(a, b, &ndim, shape); break;
    case K_ACT:
        ndim = a->ndim;
        memcpy(shape, a->shape, sizeof(int64_t) * (size_t)a->ndim);
        break;
    case K_MATMUL:
        if (a->ndim < 2 || b->ndim < 2)
            return fail_at(P, RLX_STATUS_UNSUPPORTED, line, 1,
                           "node %%%s: MatMul of %s and %s: c-demo multiplies "
                           "operands of 2 or more dims only",
                           nd->label, fmt_shape(s1, sizeof s1, "f32", a->ndim, a->shape),
                           fmt_shape(s2, sizeof s2, "f32", b->ndim, b->shape));
        ok = matmul_shape(a, b, &ndim, shape);
        break;
    default: return true;
    }
    if (!ok)
        return fail_at(P, RLX_STATUS_INVALID_ARGUMENT, line, 1,
                       "node %%%s: %s of %s and %s: the shapes do not match",
                       nd->label, op,
                       fmt_shape(s1, sizeof s1, "f32", a->ndim, a->shape),
                       fmt_shape(s2, sizeof s2, "f32", b->ndim, b->shape));
    if (ndim > MAX_DIMS || !same_shape(ndim, shape, nd->ndim, nd->shape))
        return fail_at(P, RLX_STATUS_INVALID_ARGUMENT, line, 1,
                       "node %%%s: %s gives %s, but the graph says %s",
                       nd->label, op, fmt_shape(s3, sizeof s3, "f32", ndim, shape),
                       fmt_shape(s1, sizeof s1, "f32", nd->ndim, nd->shape));
    return true;
}

static Node* new_node(Parser* P, RlxExecutable* e) {
    if (e->n_nodes == e->cap_nodes) {
        size_t cap = e->cap_nodes ? e->cap_nodes * 2 : 16;
        Node* grown = realloc(e->nodes, cap * sizeof(Node));
        if (!grown) {
            FAIL(P, RLX_STATUS_INTERNAL, "out of memory");
            return NULL;
        }
        e->nodes = grown;
        e->cap_nodes = cap;
    }
    Node* nd = &e->nodes[e->n_nodes++];
    memset(nd, 0, sizeof *nd);
    return nd;
}

/* The op of a node: sugar (`input`, `param`, `const …`) or an Op variant.
 * An op c-demo does not run is refused here, before its attributes (which
 * may hold anything, nested graphs included) are read. */
static bool parse_op(Parser* P, Node* nd, bool named, float** consts,
                     size_t* n_consts, unsigned char** bytes, size_t* n_bytes) {
    char b[64];
    Tok t = P->tok;
    if (t.kind != T_IDENT)
        return FAIL(P, RLX_STATUS_INVALID_ARGUMENT, "expected an op, found %s",
                    describe(&t, b, sizeof b));
    if (tok_is(&t, "input") || tok_is(&t, "param") || tok_is(&t, "var")) {
        if (!named)
            return FAIL(P, RLX_STATUS_INVALID_ARGUMENT,
                        "`%.*s` needs a named value: `%%x = %.*s : …`",
                        (int)t.n, t.p, (int)t.n, t.p);
        if (tok_is(&t, "var"))
            return FAIL(P, RLX_STATUS_UNSUPPORTED,
                        "node %%%s: variables (`var`) are not supported by "
                        "c-demo",
                        nd->label);
        nd->kind = tok_is(&t, "param") ? K_PARAM : K_INPUT;
        nd->name = dup_n(nd->label, strlen(nd->label));
        if (!nd->name) return FAIL(P, RLX_STATUS_INTERNAL, "out of memory");
        return advance(P);
    }
    if (tok_is(&t, "const")) {
        /* `const 1.5` or `const [1.0, 2.0]`; checked against the shape
         * once it is read. */
        nd->kind = K_CONST;
        if (!advance(P)) return false;
        bool list = eat_punct(P, '[');
        size_t cap = 0;
        while (!list || !is_punct(P, ']')) {
            if (*n_consts == cap) {
                cap = cap ? cap * 2 : 8;
                float* g = realloc(*consts, cap * sizeof(float));
                if (!g) return FAIL(P, RLX_STATUS_INTERNAL, "out of memory");
                *consts = g;
            }
            if (!parse_const_elem(P, &(*consts)[*n_consts])) return false;
            (*n_consts)++;
            if (!list || !eat_punct(P, ',')) break;
        }
        return !list || expect_punct(P, ']');
    }
    if (!advance(P)) return false;
    if (tok_is(&t, "Input") || tok_is(&t, "Param")) {
        nd->kind = tok_is(&t, "Param") ? K_PARAM : K_INPUT;
        return parse_name_block(P, nd, tok_is(&t, "Param") ? "Param" : "Input");
    }
    if (tok_is(&t, "Constant")) {
        nd->kind = K_CONST;
        return parse_constant_block(P, nd, bytes, n_bytes);
    }
    if (tok_is(&t, "Binary")) {
        nd->kind = K_BINARY;
        return parse_variant(P, nd, "Binary", k_bin_names, COUNT(k_bin_names),
                             &nd->sub, "Add, Sub, Mul, Div");
    }
    if (tok_is(&t, "Activation")) {
        nd->kind = K_ACT;
        return parse_variant(P, nd, "Activation", k_act_names,
                             COUNT(k_act_names), &nd->sub,
                             "Exp, Relu, Neg, Abs, Tanh, Sigmoid, Log, Sqrt");
    }
    if (tok_is(&t, "MatMul")) {
        nd->kind = K_MATMUL;
        if (is_punct(P, '(') || is_punct(P, '{'))
            return FAIL(P, RLX_STATUS_INVALID_ARGUMENT,
                        "node %%%s: MatMul takes no attributes", nd->label);
        return true;
    }
    int w = t.n > 40 ? 40 : (int)t.n;
    return fail_at(P, RLX_STATUS_UNSUPPORTED, t.line, t.col,
                   "node %%%s: op %.*s is not supported by c-demo (it runs "
                   "Input, Param, Constant, Binary, Activation, MatMul)",
                   nd->label, w, t.p);
}

/* Turn `const` values or Constant bytes into the node's f32 data. */
static bool finish_constant(Parser* P, Node* nd, int line, float* consts,
                            size_t n_consts, unsigned char* bytes,
                            size_t n_bytes) {
    size_t n = nd->numel;
    if (bytes) {
        if (n_bytes != n * sizeof(float))
            return fail_at(P, RLX_STATUS_INVALID_ARGUMENT, line, 1,
                           "node %%%s: Constant holds %zu bytes, its shape "
                           "needs %zu",
                           nd->label, n_bytes, n * sizeof(float));
        nd->data = malloc(n ? n * sizeof(float) : 1);
        if (!nd->data) return fail_at(P, RLX_STATUS_INTERNAL, line, 1, "out of memory");
        /* Little-endian f32, as rlx writes it. */
        for (size_t i = 0; i < n; i++) {
            const unsigned char* c = bytes + 4 * i;
            uint32_t u = (uint32_t)c[0] | (uint32_t)c[1] << 8 |
                         (uint32_t)c[2] << 16 | (uint32_t)c[3] << 24;
            memcpy(&nd->data[i], &u, sizeof u);
        }
        return true;
    }
    if (n_consts != n)
        return fail_at(P, RLX_STATUS_INVALID_ARGUMENT, line, 1,
                       "node %%%s: a const of %zu values for a shape of %zu "
                       "elements",
                       nd->label, n_consts, n);
    nd->data = malloc(n ? n * sizeof(float) : 1);
    if (!nd->data) return fail_at(P, RLX_STATUS_INTERNAL, line, 1, "out of memory");
    if (n) memcpy(nd->data, consts, n * sizeof(float));
    return true;
}

/* One `%label = op operands : shape [name …] [origin …]` line. */
static bool parse_node(Parser* P, RlxExecutable* e) {
    Tok lt = P->tok;
    size_t position = e->n_nodes;
    if (lt.kind != T_NODE || lt.n == 0) {
        char b[64];
        return FAIL(P, RLX_STATUS_INVALID_ARGUMENT,
                    "expected `%%n = …`, `%%name = …` or `return`, found %s",
                    describe(&lt, b, sizeof b));
    }
    Node* nd = new_node(P, e);
    if (!nd) return false;
    nd->line = lt.line;
    nd->label = dup_n(lt.p, lt.n);
    if (!nd->label) return FAIL(P, RLX_STATUS_INTERNAL, "out of memory");
    bool named = !label_is_number(nd->label);
    if (named) {
        for (size_t i = 0; i < position; i++)
            if (strcmp(e->nodes[i].label, nd->label) == 0)
                return FAIL(P, RLX_STATUS_INVALID_ARGUMENT,
                            "%%%s is defined twice", nd->label);
    } else {
        char want[32];
        snprintf(want, sizeof want, "%zu", position);
        if (strcmp(want, nd->label) != 0)
            return FAIL(P, RLX_STATUS_INVALID_ARGUMENT,
                        "%%%s is value %zu here: number values in order, or "
                        "name them",
                        nd->label, position);
    }
    if (!advance(P) || !expect_punct(P, '=')) return false;

    float* consts = NULL;
    size_t n_consts = 0, n_bytes = 0;
    unsigned char* bytes = NULL;
    bool ok = parse_op(P, nd, named, &consts, &n_consts, &bytes, &n_bytes);
    /* Operands. */
    while (ok && P->tok.kind == T_NODE) {
        if (nd->n_in == 2) {
            char op[48];
            ok = FAIL(P, RLX_STATUS_INVALID_ARGUMENT,
                      "node %%%s: too many operands for %s", nd->label,
                      node_op_name(nd, op, sizeof op));
            break;
        }
        ok = resolve_ref(P, e, position, &nd->in[nd->n_in]);
        if (ok) nd->n_in++;
        if (!eat_punct(P, ',')) break;
    }
    ok = ok && expect_punct(P, ':') && parse_shape(P, nd);
    if (ok && nd->kind == K_CONST)
        ok = finish_constant(P, nd, lt.line, consts, n_consts, bytes, n_bytes);
    free(consts);
    free(bytes);
    if (!ok) return false;
    /* `name "…"` (a node name that is not its label) and `origin {…}`
     * (where it came from): nothing c-demo needs. */
    while (is_ident(P, "name") || is_ident(P, "origin")) {
        if (!advance(P) || !skip_value(P, 0)) return false;
    }
    if (is_ident(P, "var"))
        return FAIL(P, RLX_STATUS_UNSUPPORTED,
                    "node %%%s: variables (`var`) are not supported by c-demo",
                    nd->label);
    return check_node(P, e, nd, lt.line);
}

/* `return %a, %b as name, …` and the closing `}`. */
static bool parse_return(Parser* P, RlxExecutable* e) {
    if (!advance(P)) return false;
    size_t cap = 0;
    while (P->tok.kind == T_NODE) {
        if (e->n_outputs == cap) {
            cap = cap ? cap * 2 : 4;
            Output* g = realloc(e->outputs, cap * sizeof(Output));
            if (!g) return FAIL(P, RLX_STATUS_INTERNAL, "out of memory");
            e->outputs = g;
        }
        Output* o = &e->outputs[e->n_outputs];
        o->name = NULL;
        if (!resolve_ref(P, e, e->n_nodes, &o->node)) return false;
        e->n_outputs++;
        if (is_punct(P, '='))
            return FAIL(P, RLX_STATUS_UNSUPPORTED,
                        "`%%k = %%k_next` outputs (variables) are not "
                        "supported by c-demo");
        if (is_ident(P, "as")) {
            if (!advance(P)) return false;
            if (P->tok.kind != T_IDENT && P->tok.kind != T_STR) {
                char b[64];
                return FAIL(P, RLX_STATUS_INVALID_ARGUMENT,
                            "expected an output name after `as`, found %s",
                            describe(&P->tok, b, sizeof b));
            }
            o->name = tok_string(P, &P->tok);
            if (!o->name || !advance(P)) return false;
        }
        if (!eat_punct(P, ',')) break;
    }
    /* rlx's default name for an unnamed output. */
    for (size_t i = 0; i < e->n_outputs; i++) {
        if (!e->outputs[i].name) {
            char def[32];
            snprintf(def, sizeof def, "output%zu", i);
            e->outputs[i].name = dup_n(def, strlen(def));
            if (!e->outputs[i].name) return FAIL(P, RLX_STATUS_INTERNAL, "out of memory");
        }
    }
    return expect_punct(P, '}');
}

/* The node indices of every node of `kind`, in order; names unique. */
static bool collect(Parser* P, RlxExecutable* e, NodeKind kind,
                    size_t** out, size_t* n) {
    *n = 0;
    *out = malloc((e->n_nodes ? e->n_nodes : 1) * sizeof(size_t));
    if (!*out) return FAIL(P, RLX_STATUS_INTERNAL, "out of memory");
    for (size_t i = 0; i < e->n_nodes; i++) {
        if (e->nodes[i].kind != kind) continue;
        for (size_t j = 0; j < *n; j++)
            if (strcmp(e->nodes[(*out)[j]].name, e->nodes[i].name) == 0)
                return fail_at(P, RLX_STATUS_INVALID_ARGUMENT,
                               e->nodes[i].line, 1, "two %ss are named \"%s\"",
                               kind == K_INPUT ? "input" : "param",
                               e->nodes[i].name);
        (*out)[(*n)++] = i;
    }
    return true;
}

static bool parse_graph(Parser* P, RlxExecutable* e) {
    if (!expect_ident(P, "graph") || !expect_punct(P, '@')) return false;
    if (P->tok.kind != T_IDENT && P->tok.kind != T_STR) {
        char b[64];
        return FAIL(P, RLX_STATUS_INVALID_ARGUMENT,
                    "expected a graph name, found %s",
                    describe(&P->tok, b, sizeof b));
    }
    if (!advance(P) || !expect_punct(P, '{')) return false;
    while (!is_ident(P, "return")) {
        if (P->err) return false;
        if (!parse_node(P, e)) return false;
    }
    if (!parse_return(P, e)) return false;
    return collect(P, e, K_INPUT, &e->inputs, &e->n_inputs) &&
           collect(P, e, K_PARAM, &e->params, &e->n_params);
}

/* The header: `rlxmodel 1`, `opset 1`, then optional `rlx`, `requires`,
 * `model`, `dims` blocks (read past: c-demo needs none of them). */
static bool parse_header(Parser* P) {
    static const char* const words[] = {"rlxmodel", "opset"};
    for (size_t i = 0; i < COUNT(words); i++) {
        if (!expect_ident(P, words[i])) return false;
        uint64_t v;
        if (!tok_u64(&P->tok, &v)) {
            char b[64];
            return FAIL(P, RLX_STATUS_INVALID_ARGUMENT,
                        "`%s` takes a version number, found %s", words[i],
                        describe(&P->tok, b, sizeof b));
        }
        if (v != 1 && i == 0)
            return FAIL(P, RLX_STATUS_UNSUPPORTED,
                        "rlxmodel %llu: c-demo reads .rlxmodel format 1 only",
                        (unsigned long long)v);
        if (v != 1)
            return FAIL(P, RLX_STATUS_UNSUPPORTED,
                        "opset %llu: c-demo reads opset 1 only (re-export "
                        "the model for opset 1, or use a plugin that reads "
                        "opset %llu)",
                        (unsigned long long)v, (unsigned long long)v);
        if (!advance(P)) return false;
    }
    while (is_ident(P, "rlx") || is_ident(P, "requires") ||
           is_ident(P, "model") || is_ident(P, "dims")) {
        if (!advance(P) || !skip_value(P, 0)) return false;
    }
    return !P->err;
}

/* Parse .rlxmodel text into a new executable, or return the error. */
static RlxStatus* parse_model(RlxStr text, RlxExecutable** out) {
    *out = NULL;
    RlxExecutable* e = calloc(1, sizeof *e);
    if (!e) return errorf(RLX_STATUS_INTERNAL, "out of memory");
    Parser P;
    memset(&P, 0, sizeof P);
    P.src = text.ptr ? text.ptr : "";
    P.len = text.len;
    P.line = 1;
    P.col = 1;
    bool ok = advance(&P) && parse_header(&P);
    if (ok && P.tok.kind == T_EOF)
        ok = FAIL(&P, RLX_STATUS_INVALID_ARGUMENT, "the text holds no graph");
    ok = ok && parse_graph(&P, e);
    if (ok && P.tok.kind != T_EOF)
        ok = FAIL(&P, RLX_STATUS_INVALID_ARGUMENT,
                  "a second graph: c-demo compiles one graph per text");
    if (!ok) {
        exe_free(e);
        return P.err ? P.err : errorf(RLX_STATUS_INTERNAL, "parse failed");
    }
    *out = e;
    return NULL;
}

static void exe_free(RlxExecutable* e) {
    if (!e) return;
    for (size_t i = 0; i < e->n_nodes; i++) {
        free(e->nodes[i].label);
        free(e->nodes[i].name);
        free(e->nodes[i].data);
        free(e->nodes[i].owned);
        free(e->nodes[i].state);
    }
    if (e->last)
        for (size_t i = 0; i < e->n_outputs; i++) free(e->last[i]);
    free(e->last);
    for (size_t i = 0; i < e->n_outputs; i++) free(e->outputs[i].name);
    free(e->nodes);
    free(e->inputs);
    free(e->params);
    free(e->outputs);
    free(e);
}

/* ======================================================================
 * 6. The interpreter
 * ====================================================================== */

/* Element strides of `n` (right-aligned into an `out_ndim` result), 0 on
 * broadcast dims. */
static void broadcast_strides(const Node* n, int out_ndim, size_t* st) {
    size_t s = 1;
    for (int k = out_ndim - 1, j = n->ndim - 1; k >= 0; k--, j--) {
        if (j >= 0) {
            st[k] = n->shape[j] == 1 ? 0 : s;
            s *= (size_t)n->shape[j];
        } else {
            st[k] = 0;
        }
    }
}

static float bin_apply(int op, float x, float y) {
    switch (op) {
    case B_ADD: return x + y;
    case B_SUB: return x - y;
    case B_MUL: return x * y;
    default: return x / y;
    }
}

static void run_binary(const Node* nd, const Node* na, const float* a,
                       const Node* nb, const float* b, float* out) {
    size_t n = nd->numel;
    if (na->numel == n && nb->numel == n) {
        for (size_t i = 0; i < n; i++) out[i] = bin_apply(nd->sub, a[i], b[i]);
        return;
    }
    if (nb->numel == 1 && na->numel == n) {
        for (size_t i = 0; i < n; i++) out[i] = bin_apply(nd->sub, a[i], b[0]);
        return;
    }
    /* General numpy broadcasting: walk the result's index. */
    size_t sa[MAX_DIMS], sb[MAX_DIMS];
    int64_t idx[MAX_DIMS] = {0};
    broadcast_strides(na, nd->ndim, sa);
    broadcast_strides(nb, nd->ndim, sb);
    size_t oa = 0, ob = 0;
    for (size_t i = 0; i < n; i++) {
        out[i] = bin_apply(nd->sub, a[oa], b[ob]);
        for (int k = nd->ndim - 1; k >= 0; k--) {
            oa += sa[k];
            ob += sb[k];
            if (++idx[k] < nd->shape[k]) break;
            oa -= sa[k] * (size_t)nd->shape[k];
            ob -= sb[k] * (size_t)nd->shape[k];
            idx[k] = 0;
        }
    }
}

static float act_apply(int op, float x) {
    switch (op) {
    case A_EXP: return expf(x);
    case A_RELU: return x > 0.0f ? x : 0.0f;
    case A_NEG: return -x;
    case A_ABS: return fabsf(x);
    case A_TANH: return tanhf(x);
    case A_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case A_LOG: return logf(x);
    default: return sqrtf(x);
    }
}

static void run_matmul(const Node* nd, const Node* na, const float* a,
                       const Node* nb, const float* b, float* out) {
    size_t M = (size_t)na->shape[na->ndim - 2], K = (size_t)na->shape[na->ndim - 1];
    size_t N = (size_t)nb->shape[nb->ndim - 1];
    /* The batch dims as nodes of their own, for broadcasting. */
    Node batch = *nd, ba = *na, bb = *nb;
    batch.ndim -= 2;
    ba.ndim -= 2;
    bb.ndim -= 2;
    size_t n_batch = 1;
    for (int k = 0; k < batch.ndim; k++) n_batch *= (size_t)batch.shape[k];
    size_t sa[MAX_DIMS], sb[MAX_DIMS];
    int64_t idx[MAX_DIMS] = {0};
    broadcast_strides(&ba, batch.ndim, sa);
    broadcast_strides(&bb, batch.ndim, sb);
    for (size_t t = 0; t < n_batch; t++) {
        size_t ma = 0, mb = 0; /* which matrix of a and of b */
        for (int k = 0; k < batch.ndim; k++) {
            ma += (size_t)idx[k] * sa[k];
            mb += (size_t)idx[k] * sb[k];
        }
        const float* A = a + ma * M * K;
        const float* B = b + mb * K * N;
        float* C = out + t * M * N;
        /* i-p-j order: the inner loop walks rows of B and C. */
        for (size_t i = 0; i < M; i++) {
            float* c = C + i * N;
            for (size_t j = 0; j < N; j++) c[j] = 0.0f;
            for (size_t p = 0; p < K; p++) {
                float x = A[i * K + p];
                const float* r = B + p * N;
                for (size_t j = 0; j < N; j++) c[j] += x * r[j];
            }
        }
        for (int k = batch.ndim - 1; k >= 0; k--) {
            if (++idx[k] < batch.shape[k]) break;
            idx[k] = 0;
        }
    }
}

/* Evaluate every node. vals[i] is node i's data: borrowed for inputs,
 * params and constants, malloc'd (owned[i]) for computed nodes. */
static RlxStatus* interpret(RlxExecutable* e, const float** vals,
                            float** owned) {
    for (size_t i = 0; i < e->n_nodes; i++) {
        Node* nd = &e->nodes[i];
        if (nd->kind == K_INPUT) continue; /* filled by the caller */
        if (nd->kind == K_PARAM) {
            vals[i] = nd->bound;
            continue;
        }
        if (nd->kind == K_CONST) {
            vals[i] = nd->data;
            continue;
        }
        float* out = malloc(nd->numel ? nd->numel * sizeof(float) : 1);
        if (!out)
            return errorf(RLX_STATUS_INTERNAL, "node %%%s: out of memory",
                          nd->label);
        owned[i] = out;
        vals[i] = out;
        const Node* na = &e->nodes[nd->in[0]];
        const float* a = vals[nd->in[0]];
        switch (nd->kind) {
        case K_BINARY:
            run_binary(nd, na, a, &e->nodes[nd->in[1]], vals[nd->in[1]], out);
            break;
        case K_ACT:
            for (size_t j = 0; j < nd->numel; j++) out[j] = act_apply(nd->sub, a[j]);
            break;
        case K_MATMUL:
            run_matmul(nd, na, a, &e->nodes[nd->in[1]], vals[nd->in[1]], out);
            break;
        default: break;
        }
    }
    return NULL;
}

/* ======================================================================
 * 7. The executable functions of the root table
 * ====================================================================== */

#ifdef RLX_C_PLUGIN_FAULTS
/* Raw-ABI faults (tests/tests/c_faults.rs). At load, RLX_C_FAULT names a
 * fault of the tables: "ops_huge_count", "ops_null_entry",
 * "lowering_bad_string". After load, a graph asks for one by naming an
 * input (or the text holding) "fault_<what>": compile_no_out (OK, no
 * executable written), signature_bad_ndim, run_no_out (OK, no output
 * slot written), run_null_data (an output without data), run_unknown_code
 * (a status of code 99), device_no_write (OK, the out-struct untouched). */
static bool fault_env(const char* what) {
    const char* v = getenv("RLX_C_FAULT");
    return v && strcmp(v, what) == 0;
}

static bool text_has(RlxStr t, const char* needle) {
    size_t n = strlen(needle);
    for (size_t i = 0; t.ptr && i + n <= t.len; i++)
        if (memcmp(t.ptr + i, needle, n) == 0) return true;
    return false;
}

static bool exe_fault(const RlxExecutable* e, const char* what) {
    for (size_t i = 0; i < e->n_inputs; i++)
        if (strcmp(e->nodes[e->inputs[i]].name, what) == 0) return true;
    return false;
}
#endif

static RlxStatus* c_compile(RlxStr graph, const RlxCompileOptions* options,
                            RlxExecutable** out) {
#ifdef RLX_C_PLUGIN_FAULTS
    if (text_has(graph, "fault_compile_no_out")) return NULL;
#endif
    if (!out)
        return errorf(RLX_STATUS_INVALID_ARGUMENT, "compile: `out` is NULL");
    *out = NULL;
    if (!str_ok(graph))
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "compile: the graph text is NULL with length %zu",
                      graph.len);
    /* Defaults, then what the caller's struct_size covers. */
    uint32_t mode = RLX_MODE_LAZY, rng_policy = RLX_RNG_PHILOX;
    uint64_t rng_seed = RLX_DEFAULT_RNG_SEED;
    if (options) {
        if (options->struct_size >= RLX_STRUCT_SIZE(RlxCompileOptions, mode))
            mode = options->mode;
#if RLX_C_PLUGIN_MINOR >= 2
        /* The 1.3 rule: rng_policy and rng_seed are one group, present only
         * when struct_size reaches 24. A 1.0/1.1 host wrote 16, which covers
         * rng_policy's bytes as tail padding (garbage). */
        if (options->struct_size >= RLX_COMPILE_OPTIONS_SIZE_1_2) {
            rng_policy = options->rng_policy;
            rng_seed = options->rng_seed;
        }
#endif
#if RLX_C_PLUGIN_MINOR >= 4
        /* 1.4: the device to compile for; c-demo has only cpu:0. */
        if (options->struct_size >= RLX_COMPILE_OPTIONS_SIZE_1_4 &&
            options->device_kind != RLX_DEVICE_DEFAULT &&
            !(options->device_kind == RLX_DEVICE_CPU && options->device_ordinal == 0))
            return errorf(RLX_STATUS_UNSUPPORTED,
                          "c-demo has no device of kind %u ordinal %u; it has cpu:0",
                          options->device_kind, options->device_ordinal);
#endif
    }
    if (mode > RLX_MODE_COMPILED)
        return errorf(RLX_STATUS_UNSUPPORTED,
                      "compile mode %u is unknown to c-demo (it knows 0 lazy, "
                      "1 eager, 2 compiled)",
                      mode);
    static const char* const mode_names[] = {"lazy", "eager", "compiled"};
    RlxExecutable* e;
    RlxStatus* s = parse_model(graph, &e);
    if (s) return s;
    e->mode = mode;
    e->rng_policy = rng_policy;
    e->rng_seed = rng_seed;
    LOG_DEBUG("compiled a graph of %zu nodes (%zu inputs, %zu params, %zu "
              "outputs) in %s mode; rng policy %u, seed %llu (the graph draws "
              "no random numbers)",
              e->n_nodes, e->n_inputs, e->n_params, e->n_outputs,
              mode_names[mode], rng_policy, (unsigned long long)rng_seed);
    *out = e;
    return NULL;
}

static void c_executable_destroy(RlxExecutable* e) { exe_free(e); }

static void visit_value(const RlxValueVisitor* v, uint32_t role,
                        const char* name, const Node* nd) {
    RlxValueInfo info;
    memset(&info, 0, sizeof info);
    info.struct_size = RLX_VALUE_INFO_STRUCT_SIZE;
    info.role = role;
    info.name = str_of(name);
    info.dtype = F32;
    info.ndim = nd->ndim;
    info.shape = nd->shape;
    v->visit(v->ctx, &info);
}

static RlxStatus* c_executable_signature(const RlxExecutable* e,
                                         const RlxValueVisitor* visitor) {
    if (!e)
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "executable_signature: the executable is NULL");
    if (!visitor ||
        visitor->struct_size < RLX_STRUCT_SIZE(RlxValueVisitor, visit) ||
        !visitor->visit)
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "executable_signature: the visitor (or its visit "
                      "function) is NULL");
#ifdef RLX_C_PLUGIN_FAULTS
    if (exe_fault(e, "fault_signature_bad_ndim")) {
        RlxValueInfo info;
        memset(&info, 0, sizeof info);
        info.struct_size = RLX_VALUE_INFO_STRUCT_SIZE;
        info.role = RLX_ROLE_INPUT;
        info.name = str_of("fault_signature_bad_ndim");
        info.dtype = F32;
        info.ndim = 100;
        info.shape = NULL;
        visitor->visit(visitor->ctx, &info);
        return NULL;
    }
#endif
    for (size_t i = 0; i < e->n_inputs; i++) {
        const Node* nd = &e->nodes[e->inputs[i]];
        visit_value(visitor, RLX_ROLE_INPUT, nd->name, nd);
    }
    for (size_t i = 0; i < e->n_params; i++) {
        const Node* nd = &e->nodes[e->params[i]];
        visit_value(visitor, RLX_ROLE_PARAM, nd->name, nd);
    }
    for (size_t i = 0; i < e->n_outputs; i++)
        visit_value(visitor, RLX_ROLE_OUTPUT, e->outputs[i].name,
                    &e->nodes[e->outputs[i].node]);
    return NULL;
}

/* The Input or Param node called `name` (NULL if none). */
static Node* find_named(const RlxExecutable* e, const size_t* list, size_t n,
                        RlxStr name) {
    for (size_t i = 0; i < n; i++) {
        Node* nd = &e->nodes[list[i]];
        if (str_eq(name, nd->name)) return nd;
    }
    return NULL;
}

/* `"a", "b"` for messages. */
static void names_list(const RlxExecutable* e, const size_t* list, size_t n,
                       char* buf, size_t cap) {
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && at < cap; i++) {
        int w = snprintf(buf + at, cap - at, i ? ", \"%s\"" : "\"%s\"",
                         e->nodes[list[i]].name);
        if (w > 0) at += (size_t)w;
    }
    if (n == 0) snprintf(buf, cap, "none");
}

/* A tensor against the node it feeds: f32 and exactly its shape. */
static RlxStatus* check_against(const RlxTensor* t, const Node* nd,
                                const char* what) {
    RlxStatus* s = check_descriptor(t, what);
    if (s) return s;
    bool shape_ok = t->dl.ndim == nd->ndim;
    for (int i = 0; shape_ok && i < nd->ndim; i++)
        shape_ok = t->dl.shape[i] == nd->shape[i];
    if (!is_f32(t->dl.dtype) || !shape_ok) {
        char want[160], got[160], dn[64];
        return errorf(RLX_STATUS_INVALID_ARGUMENT, "%s is %s, got %s", what,
                      fmt_shape(want, sizeof want, "f32", nd->ndim, nd->shape),
                      fmt_shape(got, sizeof got,
                                dtype_name(t->dl.dtype, dn, sizeof dn),
                                t->dl.ndim, t->dl.shape));
    }
    return NULL;
}

static RlxStatus* c_executable_bind_param(RlxExecutable* e, RlxStr name,
                                          const RlxTensor* tensor) {
    if (!tensor)
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "executable_bind_param: the tensor is NULL");
    /* An OWNED tensor is released exactly once whatever happens below;
     * one whose struct_size does not even reach its deleter cannot be. */
    bool owned = tensor_size_reaches_deleter(tensor) &&
                 tensor->ownership == RLX_OWNERSHIP_OWNED;
    RlxStatus* s = NULL;
    char what[200];
    Node* nd = NULL;
    F32View v;
    memset(&v, 0, sizeof v);
    if (!e) {
        s = errorf(RLX_STATUS_INVALID_ARGUMENT,
                   "executable_bind_param: the executable is NULL");
        goto done;
    }
    if (!str_ok(name)) {
        s = errorf(RLX_STATUS_INVALID_ARGUMENT,
                   "executable_bind_param: the name is NULL");
        goto done;
    }
    nd = find_named(e, e->params, e->n_params, name);
    if (!nd) {
        char known[512];
        names_list(e, e->params, e->n_params, known, sizeof known);
        s = errorf(RLX_STATUS_NOT_FOUND,
                   "the graph has no param named \"%.*s\" (its params: %s)",
                   (int)(name.len > 100 ? 100 : name.len), name.ptr, known);
        goto done;
    }
    snprintf(what, sizeof what, "param \"%s\"", nd->name);
    if ((s = check_against(tensor, nd, what))) goto done;
    if ((s = view_f32(tensor, what, &v))) goto done;
    /* A persistent buffer the view aliases can stay aliased; anything else
     * is copied (the caller's memory is gone after the call, or is ours to
     * release now). */
    const float* bound;
    float* copy = NULL;
    if (tensor->ownership == RLX_OWNERSHIP_BORROWED_PERSISTENT && !v.owned &&
        nd->numel > 0) {
        bound = v.data;
    } else if (v.owned) {
        copy = v.owned;
        v.owned = NULL; /* moved into the binding */
        bound = copy;
    } else {
        copy = malloc(nd->numel ? nd->numel * sizeof(float) : 1);
        if (!copy) {
            s = errorf(RLX_STATUS_INTERNAL, "%s: out of memory", what);
            goto done;
        }
        if (nd->numel) memcpy(copy, v.data, nd->numel * sizeof(float));
        bound = copy;
    }
    free(nd->owned);
    nd->owned = copy;
    nd->bound = bound;
    LOG_TRACE("bound %s (%zu elements, %s)", what, nd->numel,
              copy ? "copied" : "aliased");
done:
    view_free(&v);
    if (owned) release_if_owned(tensor);
    return s;
}

#if RLX_C_PLUGIN_MINOR >= 9
/* 1.9: the inputs a run was given nothing for, each read from its state
 * (vals[node] is set for those given). One neither given nor held is
 * missing: refused naming it. */
static RlxStatus* read_held_inputs(const RlxExecutable* e, const float** vals,
                                   size_t n_in, const char* known) {
    size_t n_held = 0;
    for (size_t i = 0; i < e->n_inputs; i++) n_held += e->nodes[e->inputs[i]].held;
    for (size_t i = 0; i < e->n_inputs; i++) {
        size_t at = e->inputs[i];
        const Node* nd = &e->nodes[at];
        if (vals[at]) continue; /* given: it overrides a state */
        if (nd->held) {
            vals[at] = nd->state;
            continue;
        }
        if (n_held == 0) /* the message of a plugin without state */
            return errorf(RLX_STATUS_INVALID_ARGUMENT,
                          "the graph takes %zu inputs (%s), %zu given",
                          e->n_inputs, known, n_in);
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "input \"%s\" is missing: it was not given and is not "
                      "held as state (the graph takes %zu inputs (%s); %zu "
                      "given, %zu held)",
                      nd->name, e->n_inputs, known, n_in, n_held);
    }
    return NULL;
}

/* 1.9: a compact copy of every output of a run, to be kept as the last
 * run's (NULL when out of memory: nothing is then kept). */
static float** copy_outputs(const RlxExecutable* e, const float** vals) {
    float** outs = calloc(e->n_outputs ? e->n_outputs : 1, sizeof *outs);
    for (size_t i = 0; outs && i < e->n_outputs; i++) {
        const Node* nd = &e->nodes[e->outputs[i].node];
        outs[i] = malloc(nd->numel ? nd->numel * sizeof(float) : 1);
        if (!outs[i]) {
            for (size_t j = 0; j < i; j++) free(outs[j]);
            free(outs);
            return NULL;
        }
        if (nd->numel)
            memcpy(outs[i], vals[e->outputs[i].node], nd->numel * sizeof(float));
    }
    return outs;
}

/* 1.9: after a run that succeeded, each state fed REPLACE becomes its
 * output (from the copies, so that states fed from each other's inputs
 * see this run's values), and `outs` becomes the last run's outputs. */
static void follow_feeds(RlxExecutable* e, float** outs) {
    for (size_t i = 0; i < e->n_inputs; i++) {
        Node* nd = &e->nodes[e->inputs[i]];
        if (nd->held && nd->feed == RLX_FEED_REPLACE && nd->numel)
            memcpy(nd->state, outs[nd->feed_from], nd->numel * sizeof(float));
    }
    if (e->last)
        for (size_t i = 0; i < e->n_outputs; i++) free(e->last[i]);
    free(e->last);
    e->last = outs;
}
#endif

/* The body of executable_run. Inputs are borrowed for the call whatever
 * their ownership says (rlx_plugin.h §3): they are never released here.
 * (1.9) An input held as state may be left out; after the run the states
 * follow their feeds and the outputs are kept as the last run's. */
static RlxStatus* run_checked(RlxExecutable* e, const RlxNamedTensor* in,
                              size_t n_in, RlxTensor* outputs,
                              size_t n_outputs) {
    if (n_outputs != e->n_outputs)
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "executable_run: the graph has %zu outputs, the caller "
                      "gave %zu slots",
                      e->n_outputs, n_outputs);
    if (n_outputs && !outputs)
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "executable_run: the output slots are NULL");
    if (n_in && !in)
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "executable_run: %zu inputs but a NULL array", n_in);
    char known[512];
    names_list(e, e->inputs, e->n_inputs, known, sizeof known);
#if RLX_C_PLUGIN_MINOR >= 9
    /* Those held as state may be left out: fewer, never more. */
    if (n_in > e->n_inputs)
#else
    if (n_in != e->n_inputs)
#endif
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "the graph takes %zu inputs (%s), %zu given",
                      e->n_inputs, known, n_in);
    for (size_t i = 0; i < e->n_params; i++) {
        const Node* p = &e->nodes[e->params[i]];
        if (!p->bound && p->numel > 0)
            return errorf(RLX_STATUS_INVALID_ARGUMENT,
                          "param \"%s\" is not bound (bind it with "
                          "executable_bind_param before running)",
                          p->name);
    }
    const float** vals = calloc(e->n_nodes ? e->n_nodes : 1, sizeof *vals);
    float** owned = calloc(e->n_nodes ? e->n_nodes : 1, sizeof *owned);
    F32View* views = calloc(n_in ? n_in : 1, sizeof *views);
    RlxStatus* s = NULL;
    if (!vals || !owned || !views) {
        s = errorf(RLX_STATUS_INTERNAL, "executable_run: out of memory");
        goto done;
    }
    /* Match the inputs by name: each given once, each known. */
    for (size_t i = 0; i < n_in; i++) {
        if (in[i].struct_size != sizeof(RlxNamedTensor)) {
            s = errorf(RLX_STATUS_INVALID_ARGUMENT,
                       "input %zu: RlxNamedTensor.struct_size is %zu, but it "
                       "is frozen at %zu bytes",
                       i, in[i].struct_size, sizeof(RlxNamedTensor));
            goto done;
        }
        RlxStr name = in[i].name;
        Node* nd = str_ok(name) ? find_named(e, e->inputs, e->n_inputs, name) : NULL;
        if (!nd) {
            s = errorf(RLX_STATUS_INVALID_ARGUMENT,
                       "the graph has no input named \"%.*s\" (its inputs: %s)",
                       (int)(name.len > 100 || !name.ptr ? 0 : name.len),
                       name.ptr ? name.ptr : "", known);
            goto done;
        }
        size_t at = (size_t)(nd - e->nodes);
        if (vals[at]) {
            s = errorf(RLX_STATUS_INVALID_ARGUMENT,
                       "input \"%s\" is given twice", nd->name);
            goto done;
        }
        char what[200];
        snprintf(what, sizeof what, "input \"%s\"", nd->name);
        if ((s = check_against(&in[i].tensor, nd, what))) goto done;
        if ((s = view_f32(&in[i].tensor, what, &views[i]))) goto done;
        vals[at] = views[i].data;
    }
#if RLX_C_PLUGIN_MINOR >= 9
    if ((s = read_held_inputs(e, vals, n_in, known))) goto done;
#endif
    if ((s = interpret(e, vals, owned))) goto done;
#if RLX_C_PLUGIN_MINOR >= 9
    /* The copies kept as the last run's outputs, made before anything
     * changes: out of memory, the run fails and applies no feed. */
    float** last = copy_outputs(e, vals);
    if (!last) {
        s = errorf(RLX_STATUS_INTERNAL, "executable_run: out of memory");
        goto done;
    }
#endif
    /* Every output block first, so that running out of memory leaves no
     * slot written. */
    RlxTensor* made = calloc(n_outputs ? n_outputs : 1, sizeof *made);
    if (!made) {
#if RLX_C_PLUGIN_MINOR >= 9
        for (size_t j = 0; j < n_outputs; j++) free(last[j]);
        free(last);
#endif
        s = errorf(RLX_STATUS_INTERNAL, "executable_run: out of memory");
        goto done;
    }
    for (size_t i = 0; i < n_outputs; i++) {
        const Node* nd = &e->nodes[e->outputs[i].node];
        float* data = make_output(nd->ndim, nd->shape, &made[i]);
        if (!data) {
            for (size_t j = 0; j < i; j++) drop_output(&made[j]);
            free(made);
#if RLX_C_PLUGIN_MINOR >= 9
            for (size_t j = 0; j < n_outputs; j++) free(last[j]);
            free(last);
#endif
            s = errorf(RLX_STATUS_INTERNAL, "output \"%s\": out of memory",
                       e->outputs[i].name);
            goto done;
        }
        if (nd->numel) memcpy(data, vals[e->outputs[i].node], nd->numel * sizeof(float));
    }
    for (size_t i = 0; i < n_outputs; i++) outputs[i] = made[i];
    free(made);
#if RLX_C_PLUGIN_MINOR >= 9
    follow_feeds(e, last);
#endif
done:
    if (views)
        for (size_t i = 0; i < n_in; i++) view_free(&views[i]);
    if (owned)
        for (size_t i = 0; i < e->n_nodes; i++) free(owned[i]);
    free(views);
    free(owned);
    free((void*)vals);
    return s;
}

static RlxStatus* c_executable_run(RlxExecutable* e, const RlxNamedTensor* in,
                                   size_t n_in, RlxTensor* outputs,
                                   size_t n_outputs) {
#ifdef RLX_C_PLUGIN_FAULTS
    if (e && exe_fault(e, "fault_run_no_out")) return NULL;
    if (e && exe_fault(e, "fault_run_unknown_code"))
        return errorf(99, "a status code no ABI version defines");
    if (e && exe_fault(e, "fault_run_null_data")) {
        for (size_t i = 0; i < n_outputs && i < e->n_outputs; i++) {
            const Node* nd = &e->nodes[e->outputs[i].node];
            outputs[i] = empty_tensor();
            outputs[i].ownership = RLX_OWNERSHIP_OWNED;
            outputs[i].dl.ndim = nd->ndim;
            outputs[i].dl.shape = (int64_t*)nd->shape;
            outputs[i].dl.dtype = F32;
        }
        return NULL;
    }
#endif
    RlxStatus* s =
        e ? run_checked(e, in, n_in, outputs, n_outputs)
          : errorf(RLX_STATUS_INVALID_ARGUMENT,
                   "executable_run: the executable is NULL");
    return s;
}

#if RLX_C_PLUGIN_MINOR >= 8
/* 1.8: executable_run with outputs written into the caller's memory. The
 * lent slots are checked before anything runs; the run makes its outputs
 * as executable_run does, then each is copied into its lent slot (and
 * released) or moved into its NULL-data slot. (1.9) A NULL-data slot of
 * ownership RLX_OWNERSHIP_SKIP asks for nothing: its output is computed
 * (a state fed from it sees it) and released, and the slot is left as it
 * was. The 1.8 build, which does not know SKIP, fills such a slot with an
 * OWNED tensor, as a 1.8 plugin does. */
static RlxStatus* c_executable_run_into(RlxExecutable* e,
                                        const RlxNamedTensor* in, size_t n_in,
                                        RlxTensor* outputs, size_t n_outputs) {
    if (!e)
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "executable_run_into: the executable is NULL");
    if (n_outputs != e->n_outputs)
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "executable_run_into: the graph has %zu outputs, the "
                      "caller gave %zu slots",
                      e->n_outputs, n_outputs);
    if (n_outputs && !outputs)
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "executable_run_into: the output slots are NULL");
    for (size_t i = 0; i < n_outputs; i++) {
        const RlxTensor* t = &outputs[i];
        if (t->struct_size == sizeof(RlxTensor) && !t->dl.data) continue;
        char what[200];
        snprintf(what, sizeof what, "output slot %zu (\"%s\")", i,
                 e->outputs[i].name);
        RlxStatus* s = check_against(t, &e->nodes[e->outputs[i].node], what);
        if (s) return s;
        if (t->ownership != RLX_OWNERSHIP_BORROWED)
            return errorf(RLX_STATUS_INVALID_ARGUMENT,
                          "%s lends memory with ownership %u; a lent output "
                          "buffer is BORROWED",
                          what, t->ownership);
        if (!strides_compact(t->dl.ndim, t->dl.shape, t->dl.strides))
            return errorf(RLX_STATUS_INVALID_ARGUMENT,
                          "%s is strided; a lent output buffer is compact "
                          "row-major",
                          what);
    }
    RlxTensor* made = calloc(n_outputs ? n_outputs : 1, sizeof *made);
    if (!made)
        return errorf(RLX_STATUS_INTERNAL, "executable_run_into: out of memory");
    RlxStatus* s = run_checked(e, in, n_in, made, n_outputs);
    if (s) {
        free(made);
        return s;
    }
    for (size_t i = 0; i < n_outputs; i++) {
        RlxTensor* t = &outputs[i];
        if (t->dl.data) {
            size_t n = e->nodes[e->outputs[i].node].numel * sizeof(float);
            if (n) memcpy((char*)t->dl.data + t->dl.byte_offset, made[i].dl.data, n);
            drop_output(&made[i]);
#if RLX_C_PLUGIN_MINOR >= 9
        } else if (t->ownership == RLX_OWNERSHIP_SKIP) {
            drop_output(&made[i]);
#endif
        } else {
            *t = made[i];
        }
    }
    free(made);
    return NULL;
}
#endif

/* ======================================================================
 * 8. Executable state (ABI 1.9)
 *
 * A state is an Input node held by the executable (Node.held, .state):
 * bound from a host tensor (copied), read by every run the caller gives
 * nothing for, and, when fed REPLACE, overwritten after each run that
 * succeeds by the copy of its output that the run kept (run_checked). A
 * run's outputs are kept as the last run's (RlxExecutable.last), which
 * read_output reads. c-demo offers no row feeds: its table's feed_rows
 * is NULL, and set_feed refuses RLX_FEED_ROWS (UNSUPPORTED).
 * ====================================================================== */
#if RLX_C_PLUGIN_MINOR >= 9

/* `"a", "b"` of the held states, in graph order, or `none`. */
static void held_list(const RlxExecutable* e, char* buf, size_t cap) {
    size_t at = 0, n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < e->n_inputs && at < cap; i++) {
        const Node* nd = &e->nodes[e->inputs[i]];
        if (!nd->held) continue;
        int w = snprintf(buf + at, cap - at, n++ ? ", \"%s\"" : "\"%s\"", nd->name);
        if (w > 0) at += (size_t)w;
    }
    if (n == 0) snprintf(buf, cap, "none");
}

/* `"a", "b"` of the outputs, for messages. */
static void outputs_list(const RlxExecutable* e, char* buf, size_t cap) {
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < e->n_outputs && at < cap; i++) {
        int w = snprintf(buf + at, cap - at, i ? ", \"%s\"" : "\"%s\"",
                         e->outputs[i].name);
        if (w > 0) at += (size_t)w;
    }
    if (e->n_outputs == 0) snprintf(buf, cap, "none");
}

/* printf arguments for a name from the caller ("%.*s"), at most 100
 * bytes; {NULL, 0} prints as "". */
#define NAME_ARG(s) (int)((s).len > 100 ? 100 : (s).len), ((s).ptr ? (s).ptr : "")

/* The executable and the name every state entry takes: neither NULL. */
static RlxStatus* check_exe_name(const RlxExecutable* e, RlxStr name,
                                 const char* entry, const char* what) {
    if (!e)
        return errorf(RLX_STATUS_INVALID_ARGUMENT, "state %s: the executable is NULL",
                      entry);
    if (!str_ok(name))
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "state %s: the %s is NULL with length %zu", entry, what,
                      name.len);
    return NULL;
}

/* The held state `name`, or NOT_FOUND naming those there are. */
static RlxStatus* find_state(const RlxExecutable* e, RlxStr name, Node** out) {
    Node* nd = find_named(e, e->inputs, e->n_inputs, name);
    if (nd && nd->held) {
        *out = nd;
        return NULL;
    }
    char held[512];
    held_list(e, held, sizeof held);
    return errorf(RLX_STATUS_NOT_FOUND, "no state is called \"%.*s\" (states: %s)",
                  NAME_ARG(name), held);
}

/* The output called `name` (its index), or NOT_FOUND naming the outputs. */
static RlxStatus* find_output(const RlxExecutable* e, RlxStr name, size_t* out) {
    for (size_t i = 0; i < e->n_outputs; i++)
        if (str_eq(name, e->outputs[i].name)) {
            *out = i;
            return NULL;
        }
    char known[512];
    outputs_list(e, known, sizeof known);
    return errorf(RLX_STATUS_NOT_FOUND,
                  "the graph has no output named \"%.*s\" (its outputs: %s)",
                  NAME_ARG(name), known);
}

/* Copy elements first.. of `src` (`total` f32 values; `of` names it) into
 * the buffer the caller lends, `into`: BORROWED, of the frozen size, with
 * data, in host memory, f32, compact row-major; its element count says how
 * many. Every rule broken, and a range past `total`, is INVALID_ARGUMENT
 * and writes nothing. */
static RlxStatus* read_into(const float* src, size_t total, uint64_t first,
                            RlxTensor* into, const char* of) {
    if (!into)
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "the buffer lent to read %s (`into`) is NULL", of);
    if (into->struct_size != sizeof(RlxTensor))
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "the buffer lent to read %s: RlxTensor.struct_size is %zu, "
                      "but RlxTensor is frozen at %zu bytes",
                      of, into->struct_size, sizeof(RlxTensor));
    if (into->ownership != RLX_OWNERSHIP_BORROWED)
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "the buffer lent to read %s has ownership %u; it must be "
                      "BORROWED (the caller keeps it)",
                      of, into->ownership);
    if (!into->dl.data)
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "the buffer lent to read %s has NULL data", of);
    if (into->dl.device.device_type != DL_CPU)
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "the buffer lent to read %s is on DLPack device type %d; "
                      "it must be host memory (kDLCPU)",
                      of, into->dl.device.device_type);
    if (!is_f32(into->dl.dtype)) {
        char dn[64];
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "%s is f32; the buffer lent to read it is %s", of,
                      dtype_name(into->dl.dtype, dn, sizeof dn));
    }
    if (into->dl.ndim < 0 || into->dl.ndim > MAX_DIMS ||
        (into->dl.ndim > 0 && !into->dl.shape))
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "the buffer lent to read %s has %d dims%s (c-demo takes "
                      "0 ..= %d, with a shape)",
                      of, into->dl.ndim,
                      into->dl.ndim > 0 && !into->dl.shape ? " and a NULL shape" : "",
                      MAX_DIMS);
    size_t n;
    if (!numel_of(into->dl.ndim, into->dl.shape, &n))
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "the buffer lent to read %s has a negative or oversized "
                      "shape",
                      of);
    if (!strides_compact(into->dl.ndim, into->dl.shape, into->dl.strides))
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "the buffer lent to read %s is strided; it must be compact "
                      "row-major",
                      of);
    if (first > total || n > total - first) {
        unsigned long long end = (unsigned long long)first + n;
        if (end < first) end = ~0ull; /* saturate */
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "elements %llu..%llu of %s are out of range: it has %zu",
                      (unsigned long long)first, end, of, total);
    }
    if (n)
        memcpy((char*)into->dl.data + into->dl.byte_offset, src + first,
               n * sizeof(float));
    return NULL;
}

static RlxStatus* c_state_bind(RlxExecutable* e, RlxStr name,
                                const RlxTensor* value) {
    RlxStatus* s = check_exe_name(e, name, "bind", "name");
    if (s) return s;
    if (!value)
        return errorf(RLX_STATUS_INVALID_ARGUMENT, "state bind: the value is NULL");
    Node* nd = find_named(e, e->inputs, e->n_inputs, name);
    if (!nd) {
        char known[512];
        names_list(e, e->inputs, e->n_inputs, known, sizeof known);
        return errorf(RLX_STATUS_NOT_FOUND,
                      "the graph has no input named \"%.*s\" to hold as state "
                      "(its inputs: %s)",
                      NAME_ARG(name), known);
    }
    /* Borrowed for the call whatever its ownership: copied, never
     * released. */
    char what[200];
    snprintf(what, sizeof what, "state \"%s\"", nd->name);
    if ((s = check_against(value, nd, what))) return s;
    F32View v;
    if ((s = view_f32(value, what, &v))) return s;
    float* copy = malloc(nd->numel ? nd->numel * sizeof(float) : 1);
    if (!copy) {
        view_free(&v);
        return errorf(RLX_STATUS_INTERNAL, "%s: out of memory", what);
    }
    if (nd->numel) memcpy(copy, v.data, nd->numel * sizeof(float));
    view_free(&v);
    /* Bound again: the value is replaced and the feed kept. */
    if (!nd->held) {
        nd->feed = RLX_FEED_NONE;
        nd->feed_from = 0;
    }
    free(nd->state);
    nd->state = copy;
    nd->held = true;
    LOG_TRACE("holding %s (%zu elements)", what, nd->numel);
    return NULL;
}

static RlxStatus* c_state_unbind(RlxExecutable* e, RlxStr name) {
    Node* nd = NULL;
    RlxStatus* s = check_exe_name(e, name, "unbind", "name");
    if (!s) s = find_state(e, name, &nd);
    if (s) return s;
    free(nd->state);
    nd->state = NULL;
    nd->held = false;
    nd->feed = RLX_FEED_NONE;
    nd->feed_from = 0;
    return NULL;
}

static RlxStatus* c_state_read(const RlxExecutable* e, RlxStr name,
                               uint64_t first_elem, RlxTensor* into) {
    Node* nd = NULL;
    RlxStatus* s = check_exe_name(e, name, "read", "name");
    if (!s) s = find_state(e, name, &nd);
    if (s) return s;
    char of[160];
    snprintf(of, sizeof of, "state \"%s\"", nd->name);
    return read_into(nd->state, nd->numel, first_elem, into, of);
}

static RlxStatus* c_state_list(const RlxExecutable* e,
                               const RlxValueVisitor* visitor) {
    if (!e)
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "state list: the executable is NULL");
    if (!visitor || visitor->struct_size < RLX_STRUCT_SIZE(RlxValueVisitor, visit) ||
        !visitor->visit)
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "state list: the visitor (or its visit function) is NULL");
    /* In name order (byte order, as the names are UTF-8): an insertion
     * sort of the held inputs' nodes. */
    size_t* order = malloc((e->n_inputs ? e->n_inputs : 1) * sizeof *order);
    if (!order) return errorf(RLX_STATUS_INTERNAL, "state list: out of memory");
    size_t n = 0;
    for (size_t i = 0; i < e->n_inputs; i++) {
        size_t at = e->inputs[i];
        if (!e->nodes[at].held) continue;
        size_t j = n++;
        while (j > 0 && strcmp(e->nodes[order[j - 1]].name, e->nodes[at].name) > 0) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = at;
    }
    for (size_t i = 0; i < n; i++) {
        const Node* nd = &e->nodes[order[i]];
        visit_value(visitor, RLX_ROLE_STATE, nd->name, nd);
    }
    free(order);
    return NULL;
}

static RlxStatus* c_state_set_feed(RlxExecutable* e, RlxStr name, uint32_t kind,
                                   RlxStr output) {
    Node* nd = NULL;
    RlxStatus* s = check_exe_name(e, name, "set_feed", "name");
    if (s) return s;
    if (kind > RLX_FEED_ROWS)
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "state set_feed: unknown feed kind %u (0 none, 1 replace, "
                      "2 rows)",
                      kind);
    if ((s = find_state(e, name, &nd))) return s;
    if (kind == RLX_FEED_NONE) { /* the output is ignored */
        nd->feed = RLX_FEED_NONE;
        nd->feed_from = 0;
        return NULL;
    }
    if (kind == RLX_FEED_ROWS)
        return errorf(RLX_STATUS_UNSUPPORTED,
                      "state \"%s\": c-demo offers no row feeds (its state "
                      "table's feed_rows is NULL); feed it REPLACE, or pass the "
                      "input with each run",
                      nd->name);
    if (!str_ok(output))
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "state set_feed: the output name is NULL with length %zu",
                      output.len);
    size_t o;
    if ((s = find_output(e, output, &o))) return s;
    /* REPLACE: the output must be the state's dtype (f32, as every c-demo
     * value) and shape. */
    const Node* out = &e->nodes[e->outputs[o].node];
    if (!same_shape(nd->ndim, nd->shape, out->ndim, out->shape)) {
        char want[160], got[160];
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "state \"%s\" is %s but output \"%s\" is %s: a replace feed "
                      "needs an output of the state's dtype and shape",
                      nd->name,
                      fmt_shape(want, sizeof want, "f32", nd->ndim, nd->shape),
                      e->outputs[o].name,
                      fmt_shape(got, sizeof got, "f32", out->ndim, out->shape));
    }
    nd->feed = RLX_FEED_REPLACE;
    nd->feed_from = o;
    return NULL;
}

static RlxStatus* c_state_read_output(const RlxExecutable* e, RlxStr output,
                                      uint64_t first_elem, RlxTensor* into) {
    size_t o;
    RlxStatus* s = check_exe_name(e, output, "read_output", "output name");
    if (!s) s = find_output(e, output, &o);
    if (s) return s;
    if (!e->last)
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "output \"%s\": no run has completed yet, so there is no "
                      "output to read",
                      e->outputs[o].name);
    char of[160];
    snprintf(of, sizeof of, "output \"%s\"", e->outputs[o].name);
    return read_into(e->last[o], e->nodes[e->outputs[o].node].numel,
                     first_elem, into, of);
}

/* The state table: everything but row feeds. */
static const RlxStateApi g_state_api = {
#if RLX_C_PLUGIN_MINOR >= 13
    .struct_size = RLX_STATE_API_STRUCT_SIZE,
    .bind_from = NULL,
#else
    .struct_size = RLX_STATE_API_SIZE_1_9,
#endif
    .bind = c_state_bind,
    .unbind = c_state_unbind,
    .read = c_state_read,
    .list = c_state_list,
    .set_feed = c_state_set_feed,
    .feed_rows = NULL,
    .read_output = c_state_read_output,
};

#endif /* RLX_C_PLUGIN_MINOR >= 9 */

/* ======================================================================
 * 9. Eager single-op execution (the lowering entries' `execute`)
 * ====================================================================== */

/* ctx is the entry's op kind ("Binary"). node is a graph whose only
 * non-input node is that op; inputs are bound to the op's operands in
 * order (each Input or Param value once). */
static RlxStatus* c_execute_op(const void* ctx, RlxStr node,
                               const RlxTensor* inputs, size_t n_inputs,
                               RlxTensor* outputs, size_t out_capacity,
                               size_t* n_outputs) {
    const char* kind = ctx;
    RlxExecutable* e = NULL;
    RlxNamedTensor* named = NULL;
    RlxStatus* s = NULL;
    if (n_outputs) *n_outputs = 0;
    if (!n_outputs || (out_capacity && !outputs) || (n_inputs && !inputs)) {
        s = errorf(RLX_STATUS_INVALID_ARGUMENT,
                   "execute %s: n_outputs, outputs or inputs is NULL", kind);
        goto done;
    }
    if ((s = c_compile(node, NULL, &e))) goto done;
    /* The op: exactly one node that is not a graph value. */
    const Node* op = NULL;
    size_t ops = 0;
    for (size_t i = 0; i < e->n_nodes; i++) {
        NodeKind k = e->nodes[i].kind;
        if (k == K_BINARY || k == K_ACT || k == K_MATMUL) {
            op = &e->nodes[i];
            ops++;
        }
    }
    static const char* const kind_names[] = {"Input", "Param", "Constant",
                                             "Binary", "Activation", "MatMul"};
    if (ops != 1 || strcmp(kind_names[op->kind], kind) != 0) {
        s = errorf(RLX_STATUS_INVALID_ARGUMENT,
                   "execute %s: the node graph must hold exactly one %s node "
                   "besides its inputs (it holds %zu op nodes)",
                   kind, kind, ops);
        goto done;
    }
    /* Bind the operands in order. */
    size_t want = 0, bind[2] = {0, 0};
    for (int j = 0; j < op->n_in; j++) {
        size_t v = op->in[j];
        NodeKind k = e->nodes[v].kind;
        if ((k == K_INPUT || k == K_PARAM) && !(want == 1 && bind[0] == v))
            bind[want++] = v;
    }
    if (want != n_inputs) {
        s = errorf(RLX_STATUS_INVALID_ARGUMENT,
                   "execute %s: the node takes %zu inputs, got %zu", kind, want,
                   n_inputs);
        goto done;
    }
    named = calloc(want ? want : 1, sizeof *named);
    if (!named) {
        s = errorf(RLX_STATUS_INTERNAL, "execute %s: out of memory", kind);
        goto done;
    }
    size_t n_named = 0;
    for (size_t j = 0; j < want; j++) {
        Node* v = &e->nodes[bind[j]];
        if (v->kind == K_PARAM) {
            /* A borrowed view of the caller's tensor: bind copies. */
            if (inputs[j].struct_size != sizeof(RlxTensor)) {
                s = check_descriptor(&inputs[j], v->name);
                goto done;
            }
            RlxTensor t = inputs[j];
            t.ownership = RLX_OWNERSHIP_BORROWED;
            if ((s = c_executable_bind_param(e, str_of(v->name), &t))) goto done;
        } else {
            named[n_named].struct_size = sizeof(RlxNamedTensor);
            named[n_named].name = str_of(v->name);
            named[n_named].tensor = inputs[j];
            named[n_named].tensor.ownership = RLX_OWNERSHIP_BORROWED;
            n_named++;
        }
    }
    if (e->n_outputs > out_capacity) {
        s = errorf(RLX_STATUS_INVALID_ARGUMENT,
                   "execute %s: %zu outputs, room for %zu", kind, e->n_outputs,
                   out_capacity);
        goto done;
    }
    if ((s = run_checked(e, named, n_named, outputs, e->n_outputs))) goto done;
    *n_outputs = e->n_outputs;
done:
    /* Inputs are borrowed for the call: never released here. */
    free(named);
    exe_free(e);
    return s;
}

/* ======================================================================
 * 10. The custom-op registry (ABI 1.1+)
 * ====================================================================== */
#if RLX_C_PLUGIN_MINOR >= 1

/* A plugin-native kernel (no context). */
typedef RlxStatus* (*NativeKernel)(const RlxTensor* in, size_t n_in,
                                   RlxTensor* out, size_t n_out);

typedef struct CustomOp {
    struct CustomOp* next; /* the list is kept in name order */
    char* name;
    size_t name_len;
    char* desc;
    size_t desc_len;
    uint32_t n_inputs, n_outputs, origin;
    NativeKernel native;       /* plugin ops */
    RlxCustomKernelFn kernel;  /* host ops */
    void* kernel_ctx;          /* owned: dropped with kernel_ctx_drop */
    void (*kernel_ctx_drop)(void* ctx);
    /* Calls in flight (execute, visits) hold a reference; an op
     * unregistered meanwhile is destroyed by the last one. */
    unsigned refs;
    bool removed;
} CustomOp;

static pthread_mutex_t g_ops_lock = PTHREAD_MUTEX_INITIALIZER;
static CustomOp* g_ops;

static int name_cmp(const char* a, size_t an, const char* b, size_t bn) {
    /* Byte order, shorter first on a tie: the order of Rust's str. */
    int c = memcmp(a, b, an < bn ? an : bn);
    return c ? c : (an < bn ? -1 : an > bn);
}

/* Free an op no one refers to; drops the host's context (outside the
 * lock: the drop is host code). */
static void op_destroy(CustomOp* op) {
    if (op->kernel_ctx_drop) op->kernel_ctx_drop(op->kernel_ctx);
    free(op->name);
    free(op->desc);
    free(op);
}

/* The op called `name`, with a reference taken (NULL if none). */
static CustomOp* op_acquire(RlxStr name) {
    pthread_mutex_lock(&g_ops_lock);
    CustomOp* op = g_ops;
    while (op && name_cmp(op->name, op->name_len, name.ptr, name.len) != 0)
        op = op->next;
    if (op) op->refs++;
    pthread_mutex_unlock(&g_ops_lock);
    return op;
}

static void op_release(CustomOp* op) {
    pthread_mutex_lock(&g_ops_lock);
    bool last = --op->refs == 0 && op->removed;
    pthread_mutex_unlock(&g_ops_lock);
    if (last) op_destroy(op);
}

/* Insert under the lock; false when the name is taken. */
static bool op_insert_locked(CustomOp* op) {
    CustomOp** at = &g_ops;
    while (*at) {
        int c = name_cmp((*at)->name, (*at)->name_len, op->name, op->name_len);
        if (c == 0) return false;
        if (c > 0) break;
        at = &(*at)->next;
    }
    op->next = *at;
    *at = op;
    return true;
}

static CustomOp* op_new(RlxStr name, RlxStr desc, uint32_t n_in,
                        uint32_t n_out, uint32_t origin) {
    CustomOp* op = calloc(1, sizeof *op);
    if (!op) return NULL;
    op->name = dup_n(name.ptr ? name.ptr : "", name.len);
    op->desc = dup_n(desc.ptr ? desc.ptr : "", desc.len);
    if (!op->name || !op->desc) {
        free(op->name);
        free(op->desc);
        free(op);
        return NULL;
    }
    op->name_len = name.len;
    op->desc_len = desc.len;
    op->n_inputs = n_in;
    op->n_outputs = n_out;
    op->origin = origin;
    return op;
}

/* c_demo.scale2: y = 2x, any shape (strides honoured). */
static RlxStatus* scale2_kernel(const RlxTensor* in, size_t n_in,
                                RlxTensor* out, size_t n_out) {
    (void)n_in;
    (void)n_out;
    const char* what = "c_demo.scale2 input 0";
    RlxStatus* s = check_descriptor(&in[0], what);
    if (s) return s;
    if (!is_f32(in[0].dl.dtype)) {
        char dn[64];
        return errorf(RLX_STATUS_UNSUPPORTED, "%s is %s: c_demo.scale2 takes f32",
                      what, dtype_name(in[0].dl.dtype, dn, sizeof dn));
    }
    F32View v;
    if ((s = view_f32(&in[0], what, &v))) return s;
    float* y = make_output(v.ndim, v.shape, &out[0]);
    if (!y) {
        view_free(&v);
        return errorf(RLX_STATUS_INTERNAL, "c_demo.scale2: out of memory");
    }
    for (size_t i = 0; i < v.numel; i++) y[i] = 2.0f * v.data[i];
    view_free(&v);
    return NULL;
}

/* Registered once, by init. */
static RlxStatus* register_native_ops(void) {
    CustomOp* op = op_new(str_of("c_demo.scale2"), str_of("y = 2x (f32, any shape)"),
                          1, 1, RLX_ORIGIN_PLUGIN);
    if (!op) return errorf(RLX_STATUS_INTERNAL, "out of memory registering c_demo.scale2");
    op->native = scale2_kernel;
    pthread_mutex_lock(&g_ops_lock);
    bool ok = op_insert_locked(op);
    pthread_mutex_unlock(&g_ops_lock);
    if (!ok) {
        op_destroy(op);
        return errorf(RLX_STATUS_ALREADY_EXISTS, "c_demo.scale2 is already registered");
    }
    return NULL;
}

/* The bytes of the registry's structs this build knows and writes: a
 * plugin before 1.5 knew RlxCustomOpDesc through kernel_ctx_drop and wrote
 * RlxCustomOpInfo through reserved0. */
#if RLX_C_PLUGIN_MINOR >= 5
#define DESC_KNOWN RLX_CUSTOM_OP_DESC_STRUCT_SIZE
#define INFO_WRITTEN RLX_CUSTOM_OP_INFO_STRUCT_SIZE
#else
#define DESC_KNOWN RLX_CUSTOM_OP_DESC_SIZE_1_1
#define INFO_WRITTEN RLX_CUSTOM_OP_INFO_SIZE_1_3
#endif

static RlxStatus* c_register_op(const RlxCustomOpDesc* desc) {
    if (!desc)
        return errorf(RLX_STATUS_INVALID_ARGUMENT, "register_op: desc is NULL");
    /* Read what the writer's struct_size covers and this build knows; the
     * rest stays absent (zero). */
    RlxCustomOpDesc d;
    memset(&d, 0, sizeof d);
    size_t n = desc->struct_size < DESC_KNOWN ? desc->struct_size : DESC_KNOWN;
    memcpy(&d, desc, n);
    RlxStatus* s = NULL;
    CustomOp* op = NULL;
    int name_len = (int)(str_ok(d.name) && d.name.len < 100 ? d.name.len : 0);
    const char* name_ptr = d.name.ptr ? d.name.ptr : "";
#if RLX_C_PLUGIN_MINOR >= 5
    /* 1.5 (a composite wins, then kernel_into, then kernel): c-demo runs
     * 1.1-form kernels only, and refuses what it cannot honour. */
    const char* needs = NULL;
    if (d.composite.len > 0)
        needs = "a composite body";
    else if (d.kernel_into)
        needs = "an in-place kernel (kernel_into)";
    else if (d.shape_rule != RLX_SHAPE_RULE_NONE && d.shape_rule <= RLX_SHAPE_RULE_BODY)
        needs = "a shape rule";
    if (d.shape_rule > RLX_SHAPE_RULE_BODY)
        s = errorf(RLX_STATUS_INVALID_ARGUMENT,
                   "register_op: custom op \"%.*s\" has the unknown shape rule %u",
                   name_len, name_ptr, d.shape_rule);
    else if (needs)
        s = errorf(RLX_STATUS_UNSUPPORTED,
                   "register_op: custom op \"%.*s\" needs %s; c-demo takes only kernels "
                   "of the 1.1 form (kernel, no shape rule)",
                   name_len, name_ptr, needs);
    else
#endif
    if (n < RLX_STRUCT_SIZE(RlxCustomOpDesc, kernel) || !d.kernel)
        s = errorf(RLX_STATUS_INVALID_ARGUMENT,
                   "register_op: custom op \"%.*s\" has no kernel (it is "
                   "required)",
                   name_len, name_ptr);
    else if (!str_ok(d.name) || d.name.len == 0)
        s = errorf(RLX_STATUS_INVALID_ARGUMENT, "register_op: the name is empty");
    else if (!str_ok(d.description))
        s = errorf(RLX_STATUS_INVALID_ARGUMENT,
                   "register_op: the description is NULL with a length");
    else if (!(op = op_new(d.name, d.description, d.n_inputs, d.n_outputs,
                           RLX_ORIGIN_HOST)))
        s = errorf(RLX_STATUS_INTERNAL, "register_op: out of memory");
    if (op) {
        op->kernel = d.kernel;
        pthread_mutex_lock(&g_ops_lock);
        bool ok = op_insert_locked(op);
        pthread_mutex_unlock(&g_ops_lock);
        if (ok) {
            /* The context is ours from here on. */
            op->kernel_ctx = d.kernel_ctx;
            op->kernel_ctx_drop = d.kernel_ctx_drop;
            LOG_DEBUG("registered host custom op %s (%u in, %u out)", op->name,
                      op->n_inputs, op->n_outputs);
            return NULL;
        }
        s = errorf(RLX_STATUS_ALREADY_EXISTS,
                   "a custom op named \"%s\" is already registered", op->name);
        op_destroy(op);
    }
    /* Registration failed: the context is dropped at once. */
    if (d.kernel_ctx_drop) d.kernel_ctx_drop(d.kernel_ctx);
    return s;
}

static RlxStatus* c_unregister_op(RlxStr name) {
    if (!str_ok(name))
        return errorf(RLX_STATUS_INVALID_ARGUMENT, "unregister: the name is NULL");
    pthread_mutex_lock(&g_ops_lock);
    CustomOp** at = &g_ops;
    while (*at && name_cmp((*at)->name, (*at)->name_len, name.ptr, name.len) != 0)
        at = &(*at)->next;
    CustomOp* op = *at;
    bool destroy = false;
    if (op) {
        *at = op->next;
        op->removed = true;
        destroy = op->refs == 0;
    }
    pthread_mutex_unlock(&g_ops_lock);
    if (!op)
        return errorf(RLX_STATUS_NOT_FOUND, "no custom op named \"%.*s\"",
                      (int)(name.len > 100 ? 100 : name.len),
                      name.ptr ? name.ptr : "");
    if (destroy) op_destroy(op);
    return NULL;
}

static bool visitor_ok(const RlxCustomOpVisitor* v) {
    return v && v->struct_size >= RLX_STRUCT_SIZE(RlxCustomOpVisitor, visit) &&
           v->visit;
}

static void visit_op(const RlxCustomOpVisitor* v, const CustomOp* op) {
    RlxCustomOpInfo info;
    memset(&info, 0, sizeof info);
    info.struct_size = INFO_WRITTEN;
    info.name.ptr = op->name;
    info.name.len = op->name_len;
    info.description.ptr = op->desc;
    info.description.len = op->desc_len;
    info.n_inputs = op->n_inputs;
    info.n_outputs = op->n_outputs;
    info.origin = op->origin;
    info.reserved0 = 0;
#if RLX_C_PLUGIN_MINOR >= 5
    /* Every c-demo op is a kernel (its own or a host's) with no rule. */
    info.kind = RLX_CUSTOM_KIND_KERNEL;
    info.shape_rule = RLX_SHAPE_RULE_NONE;
    info.shape_input = 0;
    info.reserved1 = 0;
#endif
    v->visit(v->ctx, &info);
}

static RlxStatus* c_lookup_op(RlxStr name, const RlxCustomOpVisitor* visitor) {
    if (!visitor_ok(visitor) || !str_ok(name))
        return errorf(RLX_STATUS_INVALID_ARGUMENT,
                      "lookup: the visitor or the name is NULL");
    CustomOp* op = op_acquire(name);
    if (!op)
        return errorf(RLX_STATUS_NOT_FOUND, "no custom op named \"%.*s\"",
                      (int)(name.len > 100 ? 100 : name.len),
                      name.ptr ? name.ptr : "");
    /* Visited without the lock held: the visitor is host code. */
    visit_op(visitor, op);
    op_release(op);
    return NULL;
}

static RlxStatus* c_list_ops(const RlxCustomOpVisitor* visitor) {
    if (!visitor_ok(visitor))
        return errorf(RLX_STATUS_INVALID_ARGUMENT, "list: the visitor is NULL");
    /* A snapshot, each op referenced, then the visits without the lock. */
    pthread_mutex_lock(&g_ops_lock);
    size_t n = 0;
    for (CustomOp* op = g_ops; op; op = op->next) n++;
    CustomOp** snap = malloc((n ? n : 1) * sizeof *snap);
    if (snap) {
        n = 0;
        for (CustomOp* op = g_ops; op; op = op->next) {
            op->refs++;
            snap[n++] = op;
        }
    }
    pthread_mutex_unlock(&g_ops_lock);
    if (!snap) return errorf(RLX_STATUS_INTERNAL, "list: out of memory");
    for (size_t i = 0; i < n; i++) visit_op(visitor, snap[i]);
    for (size_t i = 0; i < n; i++) op_release(snap[i]);
    free(snap);
    return NULL;
}

static RlxStatus* c_execute_custom(RlxStr name, const RlxTensor* inputs,
                                   size_t n_inputs, RlxTensor* outputs,
                                   size_t n_outputs) {
    RlxStatus* s = NULL;
    CustomOp* op = NULL;
    if (!str_ok(name)) {
        s = errorf(RLX_STATUS_INVALID_ARGUMENT, "execute: the name is NULL");
        goto done;
    }
    if (!(op = op_acquire(name))) {
        s = errorf(RLX_STATUS_NOT_FOUND, "no custom op named \"%.*s\"",
                   (int)(name.len > 100 ? 100 : name.len), name.ptr ? name.ptr : "");
        goto done;
    }
    if (n_inputs != op->n_inputs) {
        s = errorf(RLX_STATUS_INVALID_ARGUMENT,
                   "custom op %s takes %u inputs, got %zu", op->name,
                   op->n_inputs, n_inputs);
        goto done;
    }
    if (n_outputs != op->n_outputs) {
        s = errorf(RLX_STATUS_INVALID_ARGUMENT,
                   "custom op %s has %u outputs, the caller gave %zu slots",
                   op->name, op->n_outputs, n_outputs);
        goto done;
    }
    if ((n_inputs && !inputs) || (n_outputs && !outputs)) {
        s = errorf(RLX_STATUS_INVALID_ARGUMENT,
                   "custom op %s: the inputs or the output slots are NULL",
                   op->name);
        goto done;
    }
    for (size_t i = 0; i < n_inputs; i++) {
        if (inputs[i].struct_size != sizeof(RlxTensor)) {
            char what[160];
            snprintf(what, sizeof what, "custom op %s input %zu", op->name, i);
            s = check_descriptor(&inputs[i], what);
            goto done;
        }
    }
    /* Empty slots first: the caller sees no stale descriptor. */
    for (size_t i = 0; i < n_outputs; i++) outputs[i] = empty_tensor();
    if (op->native)
        s = op->native(inputs, n_inputs, outputs, n_outputs);
    else
        s = op->kernel(op->kernel_ctx, inputs, n_inputs, outputs, n_outputs);
    /* A kernel that fails releases what it wrote (rlx_plugin.h §8): the
     * slots are ignored then. Inputs are borrowed: never released here. */
done:
    if (op) op_release(op);
    return s;
}

/* The 1.1 table in every build: c-demo implements none of the optional
 * functions 1.5 appended (infer_shape, execute_attrs). */
static const RlxCustomOpApi g_custom_api = {
    RLX_CUSTOM_OP_API_SIZE_1_1, c_register_op, c_unregister_op,
    c_lookup_op, c_list_ops, c_execute_custom,
    /* Beyond struct_size: never read. */
    NULL, NULL,
};

#endif /* RLX_C_PLUGIN_MINOR >= 1 */

/* ======================================================================
 * 11. Descriptor, registration tables, init
 * ====================================================================== */

static const RlxStr k_devices[] = {STR_INIT("cpu")};
static const RlxKeyValue k_build_info[] = {
    {STR_INIT("language"), STR_INIT("C11")},
    {STR_INIT("backend"), STR_INIT("c-demo f32 interpreter")},
    {STR_INIT("abi.claimed"), STR_INIT(PLUGIN_ABI_STR)},
};
static const uint32_t k_opsets[] = {1};

#if RLX_C_PLUGIN_MINOR >= 4
static const RlxDeviceInfo k_cpu_device = {RLX_DEVICE_INFO_STRUCT_SIZE, RLX_DEVICE_CPU, 0,
                                           STR_INIT("cpu"), 0};
static const RlxDeviceInfo* const k_device_infos[] = {&k_cpu_device};
#endif

static const RlxPluginDescriptor k_descriptor = {
#if RLX_C_PLUGIN_MINOR >= 4
    RLX_PLUGIN_DESCRIPTOR_STRUCT_SIZE,
#else
    /* Before 1.4 the descriptor ended at n_opsets. */
    RLX_STRUCT_SIZE(RlxPluginDescriptor, n_opsets),
#endif
    STR_INIT(PLUGIN_NAME),
    STR_INIT(PLUGIN_VERSION),
    STR_INIT("f32 interpreter over .rlxmodel text (Binary, Activation, "
             "MatMul), in plain C11 against rlx_plugin.h alone"),
    k_devices,
    COUNT(k_devices),
    k_build_info,
    COUNT(k_build_info),
    k_opsets,
    COUNT(k_opsets),
#if RLX_C_PLUGIN_MINOR >= 4
    k_device_infos,
    COUNT(k_device_infos),
#else
    NULL,
    0,
#endif
};

static const RlxDataType k_f32[] = {{RLX_DL_FLOAT, 32, 1}};

/* The ops c-demo runs: one lowering row each, and the supported-op list
 * made from the same rows so the two never drift. Eager rows run alone
 * through c_execute_op, with the op kind as its context. */
#define C_DEMO_OPS(X)                                                      \
    X("Input", "graph input, matched by name", false)                      \
    X("Param", "bound weight: copied, or aliased when persistent", false)  \
    X("Constant", "inline f32 data", false)                                \
    X("Binary", "Add, Sub, Mul, Div; numpy broadcasting", true)            \
    X("Activation", "Exp, Relu, Neg, Abs, Tanh, Sigmoid, Log, Sqrt", true) \
    X("MatMul", "[M,K]x[K,N]; batched, batch dims broadcast", true)

#define LOWERING_ROW(kind, note, eager)                                   \
    {RLX_LOWERING_ENTRY_STRUCT_SIZE, STR_INIT(kind), k_f32, COUNT(k_f32), \
     RLX_STRATEGY_NATIVE, STR_INIT(note), (eager) ? c_execute_op : NULL,  \
     (eager) ? (const void*)(kind) : NULL},
#define SUPPORT_ROW(kind, note, eager) \
    {RLX_OP_SUPPORT_STRUCT_SIZE, STR_INIT(kind), k_f32, COUNT(k_f32)},
static const RlxLoweringEntry k_lowering[] = {C_DEMO_OPS(LOWERING_ROW)};
static const RlxOpSupport k_support[] = {C_DEMO_OPS(SUPPORT_ROW)};

/* The manifest (ABI.md §19): what the entry claims and the same op rows,
 * readable from the file by a host that has not loaded it. */
#define MANIFEST_OP(kind, note, eager) "op=" kind "\0"
RLX_PLUGIN_MANIFEST(RLX_ABI_VERSION_MAJOR, RLX_C_PLUGIN_MINOR, 0,
                    "name=" PLUGIN_NAME "\0" "version=" PLUGIN_VERSION "\0"
                    "device=cpu\0" C_DEMO_OPS(MANIFEST_OP));
#define N_OPS COUNT(k_lowering)
_Static_assert(COUNT(k_lowering) == 6, "update the pointer arrays below");

static const RlxLoweringEntry* const k_lowering_ptrs[N_OPS] = {
    &k_lowering[0], &k_lowering[1], &k_lowering[2],
    &k_lowering[3], &k_lowering[4], &k_lowering[5],
};
static const RlxOpSupport* const k_support_ptrs[N_OPS] = {
    &k_support[0], &k_support[1], &k_support[2],
    &k_support[3], &k_support[4], &k_support[5],
};

static pthread_mutex_t g_init_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_initialized;

static RlxStatus* c_init(void) {
    RlxStatus* s = NULL;
    pthread_mutex_lock(&g_init_lock);
    if (!g_initialized) {
#if RLX_C_PLUGIN_MINOR >= 1
        s = register_native_ops();
#endif
        if (!s) {
            g_initialized = true;
            LOG_INFO("c-demo %s (C11, ABI 1.%d.0) registered %zu lowerings "
                     "and %d custom op(s)",
                     PLUGIN_VERSION, RLX_C_PLUGIN_MINOR, (size_t)N_OPS,
                     RLX_C_PLUGIN_MINOR >= 1 ? 1 : 0);
#if RLX_C_PLUGIN_MINOR >= 10
            char greeting[128];
            if (read_setting("RLX_C_DEMO_GREETING", greeting, sizeof greeting))
                LOG_INFO("c-demo setting RLX_C_DEMO_GREETING = %s", greeting);
#endif
        }
    }
    pthread_mutex_unlock(&g_init_lock);
    return s;
}

static RlxStatus* c_supported_ops(RlxOpList* out) {
    if (!out) return errorf(RLX_STATUS_INVALID_ARGUMENT, "supported_ops: out is NULL");
    out->struct_size = RLX_OP_LIST_STRUCT_SIZE;
    out->ops = k_support_ptrs;
    out->n_ops = N_OPS;
#ifdef RLX_C_PLUGIN_FAULTS
    static const RlxOpSupport* k_with_null[2];
    k_with_null[0] = k_support_ptrs[0];
    k_with_null[1] = NULL;
    if (fault_env("ops_huge_count")) out->n_ops = (size_t)1 << 40;
    if (fault_env("ops_null_entry")) {
        out->ops = k_with_null;
        out->n_ops = 2;
    }
#endif
    return NULL;
}

static RlxStatus* c_lowering_table(RlxLoweringTable* out) {
    if (!out) return errorf(RLX_STATUS_INVALID_ARGUMENT, "lowering_table: out is NULL");
    out->struct_size = RLX_LOWERING_TABLE_STRUCT_SIZE;
    out->entries = k_lowering_ptrs;
    out->n_entries = N_OPS;
#ifdef RLX_C_PLUGIN_FAULTS
    static RlxLoweringEntry k_bad;
    static const RlxLoweringEntry* k_bad_ptrs[1];
    if (fault_env("lowering_bad_string")) {
        k_bad = *k_lowering_ptrs[0];
        k_bad.op_kind.ptr = NULL;
        k_bad.op_kind.len = 5;
        k_bad_ptrs[0] = &k_bad;
        out->entries = k_bad_ptrs;
        out->n_entries = 1;
    }
#endif
    return NULL;
}

/* ======================================================================
 * 12. The entry point and the handshake
 * ====================================================================== */

#if RLX_C_PLUGIN_MINOR >= 4
/* 1.4: every c-demo executable runs on cpu:0. An out-struct: no byte
 * beyond the caller's struct_size is written. */
static RlxStatus* c_executable_device(const RlxExecutable* exe, RlxDeviceInfo* out) {
    if (!exe || !out)
        return errorf(RLX_STATUS_INVALID_ARGUMENT, "executable_device: a NULL %s",
                      exe ? "out" : "executable");
#ifdef RLX_C_PLUGIN_FAULTS
    if (exe_fault(exe, "fault_device_no_write")) return NULL;
#endif
    RlxDeviceInfo d = k_cpu_device;
    size_t n = out->struct_size ? out->struct_size : sizeof d;
    if (n > sizeof d) n = sizeof d;
    memcpy(out, &d, n);
    out->struct_size = n;
    return NULL;
}
#endif

/* The root table, written the way a plugin of the claimed minor did: 1.0
 * had no custom_ops, so its struct_size stops before that field. */
static const RlxPluginApi g_api = {
#if RLX_C_PLUGIN_MINOR >= 9
#if RLX_C_PLUGIN_MINOR >= 12
    /* 1.12: the table reaches graph_forms, left NULL: this plugin reads
     * .rlxmodel text only, and a host then sends text. */
    .struct_size = RLX_PLUGIN_API_SIZE_1_12,
    .host_memory = NULL,
    .graph_forms = NULL,
#elif RLX_C_PLUGIN_MINOR >= 11
    /* 1.11: the table reaches host_memory, left NULL: an interpreter on
     * the CPU has no use for mapped host memory, and a host then uses its
     * memory unmapped. */
    .struct_size = RLX_PLUGIN_API_SIZE_1_11,
    .host_memory = NULL,
#else
    .struct_size = RLX_PLUGIN_API_SIZE_1_9,
#endif
    /* 1.9: executable state (without row feeds, section 8). Clones and
     * shared params, submitted runs and the four new root functions are
     * absent (NULL): a host takes its host paths for them. */
    .custom_ops = &g_custom_api,
    .executable_device = c_executable_device,
    .executable_run_into = c_executable_run_into,
    .state = &g_state_api,
    .sharing = NULL,
    .submits = NULL,
    .executable_bind_param_range = NULL,
    .executable_set_rng = NULL,
    .executable_set_active_extent = NULL,
    .memory_usage = NULL,
#elif RLX_C_PLUGIN_MINOR >= 8
    .struct_size = RLX_PLUGIN_API_SIZE_1_8,
    .custom_ops = &g_custom_api,
    .executable_device = c_executable_device,
    .executable_run_into = c_executable_run_into,
#elif RLX_C_PLUGIN_MINOR >= 4
    .struct_size = RLX_PLUGIN_API_SIZE_1_4,
    .custom_ops = &g_custom_api,
    .executable_device = c_executable_device,
#elif RLX_C_PLUGIN_MINOR >= 1
    .struct_size = RLX_PLUGIN_API_SIZE_1_1,
    .custom_ops = &g_custom_api,
#else
    .struct_size = offsetof(RlxPluginApi, custom_ops),
    .custom_ops = NULL,
#endif
    .abi_version = {RLX_ABI_VERSION_MAJOR, RLX_C_PLUGIN_MINOR, 0},
    .refusal_code = 0,
    .refusal_message = {NULL, 0},
    .rust_layout_tag = {NULL, 0},
    .rust_layout = NULL,
    .descriptor = &k_descriptor,
    .status_new = c_status_new,
    .status_code = c_status_code,
    .status_message = c_status_message,
    .status_free = c_status_free,
    .init = c_init,
    .supported_ops = c_supported_ops,
    .lowering_table = c_lowering_table,
    .compile = c_compile,
    .executable_destroy = c_executable_destroy,
    .executable_signature = c_executable_signature,
    .executable_bind_param = c_executable_bind_param,
    .executable_run = c_executable_run,
};

/* A refusal: the frozen header only, nothing after it may be read. */
static char g_refusal_text[512];
static RlxPluginApi g_refusal;

static const RlxPluginApi* refuse(uint32_t code, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
static const RlxPluginApi* refuse(uint32_t code, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(g_refusal_text, sizeof g_refusal_text, fmt, ap);
    va_end(ap);
    size_t len = n < 0 ? 0
                 : (size_t)n < sizeof g_refusal_text ? (size_t)n
                                                     : sizeof g_refusal_text - 1;
    memset(&g_refusal, 0, sizeof g_refusal);
    g_refusal.struct_size = RLX_PLUGIN_API_HEADER_SIZE;
    g_refusal.abi_version = g_api.abi_version;
    g_refusal.refusal_code = code;
    g_refusal.refusal_message.ptr = g_refusal_text;
    g_refusal.refusal_message.len = len;
    return &g_refusal;
}

static const RlxPluginApi* handshake(const RlxHostApi* host) {
    if (!host)
        return refuse(RLX_STATUS_INVALID_ARGUMENT,
                      PLUGIN_NAME " " PLUGIN_VERSION " (RLX plugin ABI "
                      PLUGIN_ABI_STR ") was given no host table (RlxHostApi is "
                      "NULL); the host must pass one");
    /* struct_size is the one field every host table has; nothing else is
     * read before it says the frozen header is there. */
    size_t frozen = offsetof(RlxHostApi, log_ctx);
    if (host->struct_size < frozen)
        return refuse(RLX_STATUS_INVALID_ARGUMENT,
                      "the host table's struct_size is %zu bytes, smaller than "
                      "its frozen header (%zu bytes): " PLUGIN_NAME " "
                      PLUGIN_VERSION " (ABI " PLUGIN_ABI_STR
                      ") cannot read the host's ABI version",
                      host->struct_size, frozen);
    RlxAbiVersion hv = host->abi_version;
    if (hv.major != RLX_ABI_VERSION_MAJOR) {
        RlxStr hn = host->host_name;
        int w = hn.ptr ? (int)(hn.len > 64 ? 64 : hn.len) : 0;
        return refuse(
            RLX_STATUS_VERSION_MISMATCH,
            PLUGIN_NAME " " PLUGIN_VERSION " speaks RLX plugin ABI "
            PLUGIN_ABI_STR " but the host%s%.*s%s speaks ABI %u.%u.%u, another "
            "major: %s",
            w ? " (" : "", w, hn.ptr ? hn.ptr : "", w ? ")" : "", hv.major,
            hv.minor, hv.patch,
            hv.major > RLX_ABI_VERSION_MAJOR
                ? "upgrade the plugin (install a c-demo built for the host's "
                  "ABI major)"
                : "upgrade the host to ABI major 1");
    }
    /* Accepted. Take the log sink, as far as the host's table reaches. */
    if (host->struct_size >= RLX_STRUCT_SIZE(RlxHostApi, log)) {
        g_log_ctx = host->log_ctx;
        g_log = host->log;
    }
    if (host->struct_size >= RLX_STRUCT_SIZE(RlxHostApi, log_max_level))
        g_log_max_level = host->log_max_level;
#if RLX_C_PLUGIN_MINOR >= 10
    if (host->struct_size >= RLX_STRUCT_SIZE(RlxHostApi, setting)) {
        g_log_ctx = host->log_ctx;
        g_setting = host->setting;
    }
#endif
    LOG_DEBUG("handshake: host ABI %u.%u.%u, plugin ABI " PLUGIN_ABI_STR,
              hv.major, hv.minor, hv.patch);
    return &g_api;
}

static pthread_mutex_t g_entry_lock = PTHREAD_MUTEX_INITIALIZER;
static const RlxPluginApi* g_table;

RLX_PLUGIN_EXPORT const RlxPluginApi* rlx_plugin_entry(const RlxHostApi* host) {
    /* The first call decides; every later call returns the same table. */
    pthread_mutex_lock(&g_entry_lock);
    if (!g_table) g_table = handshake(host);
    const RlxPluginApi* t = g_table;
    pthread_mutex_unlock(&g_entry_lock);
    return t;
}
