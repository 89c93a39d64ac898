/* Streams and events: PyTorch's ordering and timing model over PJRT.
 *
 * A stream is an ordering domain on one device, named by an id (0 is the
 * device's default stream). Every execution is tagged with the stream current
 * on the submitting thread for its device. PJRT already orders executions by
 * their data (an op never reads a buffer before its producer finished), so a
 * stream adds what PyTorch code asks of one beyond that: "has the work I put
 * on this stream finished", "wait for it", and events that mark a point in a
 * stream and can time the device work between two points.
 *
 * An event records the work submitted to its stream so far. It completes when
 * that work has finished; a timing event also takes the time at which the last
 * of that work finished (PJRT completion callbacks; the record time itself when
 * the stream had nothing in flight). Making a stream wait for an event (PyTorch's
 * `wait_event`/`wait_stream`) waits on the host, because the PJRT C API has no
 * way to make one execution wait for another that it does not read.
 *
 * Ownership: tpu_event_create returns an owned event; tpu_event_destroy frees
 * it (NULL accepted; waits for its pending completion callbacks). All functions
 * are thread-safe; "current stream" is per thread and per device, as in CUDA. */
#ifndef TORCHTPU_STREAM_H_
#define TORCHTPU_STREAM_H_

#include <stdbool.h>
#include <stdint.h>

#include "torchtpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TPU_STREAM_DEFAULT ((int64_t)0)

/* A new stream id on `device` (ids are never reused). */
tpu_status_t* tpu_stream_create(int device, int64_t* out_stream);
/* The calling thread's current stream on `device` (TPU_STREAM_DEFAULT unless set). */
int64_t tpu_stream_current(int device);
/* Makes `stream` current on `device` for the calling thread. */
tpu_status_t* tpu_stream_set_current(int device, int64_t stream);
/* Whether all work submitted to the stream so far has finished (no wait). An
 * asynchronous failure of that work is returned, as tpu_runtime_synchronize would. */
tpu_status_t* tpu_stream_query(int device, int64_t stream, bool* out_done);
/* Waits for all work submitted to the stream so far. */
tpu_status_t* tpu_stream_synchronize(int device, int64_t stream);

typedef struct tpu_event tpu_event_t;

tpu_status_t* tpu_event_create(bool enable_timing, tpu_event_t** out_event);
void tpu_event_destroy(tpu_event_t* event);
/* Marks the work submitted to `stream` on `device` so far. Recording again moves the mark. */
tpu_status_t* tpu_event_record(tpu_event_t* event, int device, int64_t stream);
/* True when never recorded or when the recorded work has finished. */
tpu_status_t* tpu_event_query(tpu_event_t* event, bool* out_done);
/* Waits for the recorded work (and, for a timing event, its completion time). */
tpu_status_t* tpu_event_synchronize(tpu_event_t* event);
/* Milliseconds between two completed timing events (negative when `end`
 * completed first). FAILED_PRECONDITION when either was created without
 * timing, was never recorded or has not completed. */
tpu_status_t* tpu_event_elapsed_ms(tpu_event_t* start, tpu_event_t* end, double* out_ms);

#ifdef __cplusplus
}
#endif
#endif
