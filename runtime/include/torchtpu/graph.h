/* Graphs: whole programs of aten ops, lowered by the same lowerings as eager
 * ops into ONE StableHLO module and run as one executable (torch.compile's
 * backend builds them from FX graphs; C callers can build them directly).
 *
 * Ownership: tpu_graph_create returns an owned graph; tpu_graph_destroy accepts
 * NULL. Argument arrays passed in are copied; nothing is borrowed past a call.
 *
 * Values are int32 ids: the inputs first (0, 1, ... in the order added), then
 * each recorded op's results in order. Ops are recorded with tpu_graph_apply
 * using tpu_op_run's argument conventions, except that tensors are graph values
 * (TPU_ARG_VALUE, TPU_ARG_VALUE_LIST) and a Scalar argument may be read from a
 * 0-d value (TPU_ARG_VALUE_SCALAR). Every other argument is static: it is part
 * of the program (a Scalar given as TPU_ARG_SCALAR becomes a constant).
 *
 * Lowering and compiling happen on the first run for a given set of input
 * layouts (dtype, sizes, strides, and scalar kinds), through the executable
 * cache; a later run with the same layouts reuses the executable. Runs are
 * asynchronous like eager ops; errors of an op inside the graph name the op.
 * tpu_graph_prepare starts that work earlier, on a background thread. */
#ifndef TORCHTPU_GRAPH_H_
#define TORCHTPU_GRAPH_H_

#include "torchtpu/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_graph tpu_graph_t;

tpu_status_t* tpu_graph_create(tpu_graph_t** out_graph);
void tpu_graph_destroy(tpu_graph_t* g);

/* Adds an input: TPU_ARG_TENSOR (a tensor at run time, any view) or
 * TPU_ARG_SCALAR (a runtime scalar operand: a number or a 0-dim cpu tensor). */
tpu_status_t* tpu_graph_add_input(tpu_graph_t* g, tpu_arg_kind_t kind, int32_t* out_value);
/* Records aten op `name` (no "aten::", no trailing in-place underscore) with
 * `nresults` results (list results expanded); *out_first is the first result's
 * id. Ops without a lowering fail here (TPU_UNIMPLEMENTED); so do ops whose
 * result shapes depend on data (nonzero, bincount), which a program cannot hold.
 * Factories lowered for their out= form (tpu_op_wants_out_dtype: arange, eye,
 * linspace ...) take that form's arguments plus the result dtype last. */
tpu_status_t* tpu_graph_apply(tpu_graph_t* g, const char* name, const char* overload, const tpu_arg_t* args,
                              int nargs, int nresults, int32_t* out_first);
/* The program's results, in order (an input may be one). Seals the graph.
 * Outputs naming the same value are computed once: a run returns each as its own
 * storage, sharing one buffer (as a clone does until either is written). */
tpu_status_t* tpu_graph_set_outputs(tpu_graph_t* g, int n, const int32_t* values);
/* After each run, output `output` is also written into tensor input `input`
 * (an in-place update: parameters, optimizer state, running statistics). The
 * write adopts the result's buffer when the input covers its storage (no copy). */
tpu_status_t* tpu_graph_alias(tpu_graph_t* g, int output, int input);

int tpu_graph_num_inputs(const tpu_graph_t* g);
int tpu_graph_num_outputs(const tpu_graph_t* g);
int tpu_graph_num_ops(const tpu_graph_t* g);

/* Runs the sealed graph on `device`: `inputs` has one argument per input, of the
 * kind it was added with. Returns tpu_graph_num_outputs(g) new results (owned;
 * max_results must have room for them). */
tpu_status_t* tpu_graph_run(const tpu_graph_t* g, int device, const tpu_arg_t* inputs, int ninputs,
                            int max_results, tpu_result_t* out_results, int* out_nresults);
/* Lowers the program a run with inputs laid out like `inputs` would build, and
 * compiles it (or loads it from the disk tier) on a background thread; returns
 * at once. The first such run then only waits for what is left of that compile.
 * A tensor input may be a storage never written (tpu_storage_create: no device
 * memory) with the view the run will pass: it stands for one that an op's result
 * will fill. Inputs laid out otherwise at run time build their own program, as
 * without this call. A no-op when TORCHTPU_BACKGROUND_COMPILE is off or the
 * program is already in the cache. The background thread compiles the
 * program's text, never the graph: the graph may be destroyed meanwhile. */
tpu_status_t* tpu_graph_prepare(const tpu_graph_t* g, int device, const tpu_arg_t* inputs, int ninputs);

#ifdef __cplusplus
}
#endif
#endif
