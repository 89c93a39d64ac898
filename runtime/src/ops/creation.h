/* Creation family. Factory ops reach the runtime as their `*.out` variants with
 * the out tensor stripped; those flagged TPU_LOWER_OUT_DTYPE (table.c) get the
 * out tensor's dtype as one trailing TPU_ARG_DTYPE argument. */
#ifndef TORCHTPU_SRC_OPS_CREATION_H_
#define TORCHTPU_SRC_OPS_CREATION_H_

#include "common.h"


#endif
