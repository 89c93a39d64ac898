/* Internal: a recorded graph, shared by graph.c (building) and graph_lower.c
 * (lowering and running). */
#ifndef TORCHTPU_SRC_GRAPH_INTERNAL_H_
#define TORCHTPU_SRC_GRAPH_INTERNAL_H_

#include <stdbool.h>
#include <stdint.h>

#include "exec.h"
#include "torchtpu/graph.h"

typedef struct tpu_graph_node {
  char* name;
  char* overload;
  tpu_lower_fn_t fn;
  tpu_arg_t* args; /* owned deep copies: lists and strings below belong to the node */
  int nargs;
  int32_t first; /* id of the first result */
  int nresults;
} tpu_graph_node_t;

struct tpu_graph {
  uint64_t id; /* process-unique: with the input layouts, the cache key */
  tpu_arg_kind_t* input_kinds;
  int ninputs, inputs_cap;
  tpu_graph_node_t* nodes;
  int nnodes, nodes_cap;
  int32_t nvalues;
  int32_t* outputs;
  int* alias_input; /* per output: the tensor input it is written into, or -1 */
  /* Per output: the program result that holds it. Outputs naming the same value
   * share one result (computed once, one buffer); nresults distinct ones. */
  int* result_of;
  bool* repeats; /* per output: an earlier output names the same value */
  int noutputs, nresults;
  bool sealed;
  /* Programs lowered from this graph so far (one per set of input layouts);
   * written under the caller's serialisation of runs, like the builder. */
  int32_t nprograms;
};

#endif
