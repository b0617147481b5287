/* bitcheck plugin ABI: the one stable surface through which a shared library registers impls of
 * bitcheck's existing ops (plain C, no bitcheck or CUDA headers). A plugin exports
 *
 *   int bitcheck_plugin_register(const bitcheck_registrar* registrar);
 *
 * which first calls registrar->declare(registrar->host, BITCHECK_PLUGIN_ABI_VERSION, "<name>"),
 * then registrar->add_impl(registrar->host, &impl) once per impl, and returns 0. Impls appear in
 * bitcheck as plugin:<name>/<impl>. bitcheck calls `run` once per invocation (physical batch) of
 * every layout; it writes the version it was built with into every report's meta. */
#ifndef BITCHECK_PLUGIN_H
#define BITCHECK_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any change to the structs or functions below; a plugin built against another version
 * is refused at load time (exit 2, naming the plugin file and the field abi_version). */
#define BITCHECK_PLUGIN_ABI_VERSION 1

#define BITCHECK_PLUGIN_OK 0
#define BITCHECK_PLUGIN_ERROR 1

/* One op dimension other than the batch, e.g. {"K", 4096}. */
typedef struct bitcheck_dim {
  const char* name;
  int64_t value;
} bitcheck_dim;

/* Tensor roles, as bitcheck's op definitions declare them. */
#define BITCHECK_ROW_INPUT 0        /* one row per slot; pad slots hold NaN */
#define BITCHECK_PARAMETER 1        /* shared by all rows (weights, gains) */
#define BITCHECK_ROW_OUTPUT 2       /* one row per slot; pad slots are never read */
#define BITCHECK_REDUCTION_OUTPUT 3 /* fp32 accumulator over tokens, carried across invocations */

/* One tensor of the call. Row-major; the first dimension is `rows` (slots for row tensors). Inputs
 * must not be written. `data` is a host pointer for a cpu impl and a device pointer for a cuda
 * impl. */
typedef struct bitcheck_tensor {
  const char* name; /* "x", "w", "y", "dx", "dw", ... (see `bitcheck list --json`) */
  void* data;
  const char* dtype; /* "fp32", "bf16", "fp16" or "i32" */
  int32_t role;      /* BITCHECK_ROW_INPUT ... BITCHECK_REDUCTION_OUTPUT */
  int32_t ndim;
  const int64_t* shape; /* ndim extents, shape[0] == rows */
  int64_t rows;
  int64_t row_stride; /* elements from one row to the next */
} bitcheck_tensor;

/* Attention: a run of consecutive slots holding consecutive tokens of one sequence. Tokens
 * 0 .. start_position-1 came in earlier invocations of the layout (the impl's KV cache). */
typedef struct bitcheck_segment {
  int64_t sequence;
  int64_t first_slot;
  int64_t length;
  int64_t start_position;
} bitcheck_segment;

/* One call: an invocation of a layout. */
typedef struct bitcheck_call {
  const char* op;    /* "matmul", ... */
  const char* dtype; /* the case dtype */
  const char* pass;  /* "forward" or "backward" */
  const bitcheck_dim* dims;
  int32_t dim_count;
  int32_t tensor_count;
  const bitcheck_tensor* tensors;
  const int64_t* slot_rows; /* slot -> logical row; -1 marks a pad slot (host memory, always) */
  int64_t slots;
  const bitcheck_segment* segments; /* host memory; empty for ops of independent tokens */
  int64_t segment_count;
  int64_t invocation_index; /* 0 .. invocation_count-1 within one layout execution */
  int64_t invocation_count;
  int32_t reductions_wanted; /* 0: reduction outputs of this layout are never read */
  int32_t reserved;
  void* workspace; /* workspace_bytes of scratch (host or device, as `data`), or NULL */
  size_t workspace_bytes;
  void* stream; /* cudaStream_t for a cuda impl (bitcheck waits for the device after run), NULL
                  for cpu */
  char* error;  /* on failure, a NUL-terminated message (truncated to error_capacity) */
  size_t error_capacity;
} bitcheck_call;

/* Returns BITCHECK_PLUGIN_OK, or another value after writing call->error. */
typedef int (*bitcheck_run_fn)(const bitcheck_call* call, void* user_data);

typedef struct bitcheck_impl_desc {
  const char* op;            /* an existing op: "matmul", "rmsnorm", ... */
  const char* name;          /* unique within the plugin; shown as plugin:<plugin>/<name> */
  const char* backend;       /* "cpu" or "cuda" */
  const char* description;   /* what fixes its order, or for a control the failure it models */
  int32_t claims_invariance; /* 1: invariant; 0: a control, expected to drift */
  const char* dtypes;        /* comma-separated, e.g. "fp32,bf16" */
  const char* passes;        /* comma-separated: "forward", "forward,backward" */
  size_t workspace_bytes;    /* scratch passed to every run */
  bitcheck_run_fn run;
  void* user_data;
} bitcheck_impl_desc;

/* What bitcheck hands to bitcheck_plugin_register. Only `abi_version`, `host` and `declare` are
 * frozen across versions: a plugin can always read the version and declare its own. */
typedef struct bitcheck_registrar {
  uint32_t abi_version; /* BITCHECK_PLUGIN_ABI_VERSION of the bitcheck binary */
  void* host;
  /* Returns 0, or non-zero when the version differs (then register nothing and return). */
  int (*declare)(void* host, uint32_t abi_version, const char* plugin_name);
  int (*add_impl)(void* host, const bitcheck_impl_desc* impl);
} bitcheck_registrar;

typedef int (*bitcheck_plugin_register_fn)(const bitcheck_registrar* registrar);
#define BITCHECK_PLUGIN_ENTRY "bitcheck_plugin_register"

#ifdef __cplusplus
}
#endif

#endif /* BITCHECK_PLUGIN_H */
