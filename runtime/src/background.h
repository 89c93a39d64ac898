/* Internal: background threads that run queued jobs, started in order (compiles
 * started ahead of their first run: tpu_graph_prepare). They know nothing of
 * what the jobs do, so any runtime file may queue work without a call cycle.
 *
 * Threads start with the jobs. Process exit, and tpu_runtime_shutdown, drain
 * them (tpu_background_drain): queued jobs are dropped and running ones are
 * waited for, so no job touches the PJRT client while it is destroyed. */
#ifndef TORCHTPU_SRC_BACKGROUND_H_
#define TORCHTPU_SRC_BACKGROUND_H_

#include <stdbool.h>

#include "torchtpu/status.h"

/* `run(arg)` on the background thread, then `drop(arg)`; a dropped job (the
 * queue drained first) gets `drop(arg)` only. `drop` may be NULL. On error
 * (TORCHTPU_BACKGROUND_COMPILE=0, no thread) nothing is queued and the caller
 * keeps `arg`. */
tpu_status_t* tpu_background_submit(void (*run)(void* arg), void (*drop)(void* arg), void* arg);
/* Whether background work is allowed: TORCHTPU_BACKGROUND_COMPILE is not off. */
bool tpu_background_enabled(void);
/* Drops queued jobs and waits for the running ones; the threads end. A later
 * submit starts them again. */
void tpu_background_drain(void);
/* Waits until every job queued so far has finished (tests). */
void tpu_background_wait(void);

#endif /* TORCHTPU_SRC_BACKGROUND_H_ */
