/* In-flight work, streams and events (torchtpu/stream.h), and
 * tpu_runtime_synchronize.
 *
 * Every execution's first output is kept (retained) in a ring with the device,
 * the stream current on the submitting thread and a sequence number. Entries
 * leave the front once finished; when the ring holds too much work the
 * submitter waits for the oldest. So an entry missing from the ring is finished
 * (or was waited for), and "the work of stream S up to sequence Q" is exactly
 * the ring's entries of S with seq <= Q.
 *
 * An execution that reads the newest entry's output takes that entry's place
 * (covers_newest_locked): a chain of dependent ops holds one entry and pays one
 * readiness query per TPU_INFLIGHT_CHAIN ops instead of one per op. */
#include "torchtpu/stream.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "check.h"
#include "device.h"
#include "donation.h"
#include "pjrt/pjrt.h"
#include "tracing.h"

/* How many executions the ring may stand for before the submitter waits for
 * the oldest: it bounds how far the host runs ahead of the device without
 * making each submission scan a long list. */
#define TPU_INFLIGHT_CAP 64
/* How many chained executions one entry stands for at most: a long chain still
 * retires (and reports errors) in steps, not only at the next sync. */
#define TPU_INFLIGHT_CHAIN 16

typedef struct inflight {
  tpu_buffer_t* buf; /* retained */
  int device;
  int64_t stream;
  uint64_t seq;  /* of the first execution it stands for */
  int covers;    /* executions it stands for (1..TPU_INFLIGHT_CHAIN) */
} inflight_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static inflight_t g_ring[TPU_INFLIGHT_CAP];
static int g_head, g_len;
static int g_covered; /* executions the entries stand for */
static uint64_t g_seq; /* of the last submission */
/* The latest g_seq a stream wait, query or event captured: an entry it selects
 * is never extended by later work, so such a wait covers exactly its work. */
static uint64_t g_fence;
/* The first asynchronous error seen while dropping finished entries, kept for
 * the next synchronize so no failure goes unreported. */
static tpu_status_t* g_error;

static atomic_llong g_next_stream = 1;
static _Thread_local int64_t tls_stream[TPU_MAX_DEVICES];

static inflight_t* ring_at(int i) { return &g_ring[(g_head + i) % TPU_INFLIGHT_CAP]; }

static void note_error_locked(tpu_status_t* status) {
  if (!status) return;
  if (g_error) {
    tpu_status_free(status);
  } else {
    g_error = status;
  }
}

/* Removes the oldest entry; returns its (retained) buffer. */
static tpu_buffer_t* pop_oldest_locked(void) {
  inflight_t* head = ring_at(0);
  tpu_buffer_t* buf = head->buf;
  g_covered -= head->covers;
  g_head = (g_head + 1) % TPU_INFLIGHT_CAP;
  g_len--;
  return buf;
}

/* Drops finished entries from the front: work completes roughly in order, so
 * the scan stops at the first busy one and stays O(1) amortised. */
static void retire_locked(void) {
  while (g_len > 0) {
    bool ready = false;
    tpu_metric_add(TPU_METRIC_INFLIGHT_QUERIES, 1);
    note_error_locked(tpu_buffer_check(ring_at(0)->buf, false, &ready));
    if (!ready) break;
    tpu_buffer_release(pop_oldest_locked());
  }
}

void tpu_runtime_retire_inflight(void) {
  pthread_mutex_lock(&g_mu);
  retire_locked();
  pthread_mutex_unlock(&g_mu);
}

int tpu_runtime_inflight_holds(const tpu_buffer_t* buf) {
  int n = 0;
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < g_len; i++) n += ring_at(i)->buf == buf;
  pthread_mutex_unlock(&g_mu);
  return n;
}

/* Whether the newest entry's work is an input of the execution being tracked
 * on the same device and stream. That execution then stands for it: it cannot
 * finish before its input is written, and PJRT fails the outputs of an
 * execution whose input failed, so waiting for and checking the later one
 * covers both. The entry keeps its first sequence number, and one that a
 * stream wait or event already captured (g_fence) is not extended, so a wait
 * still covers exactly the work submitted before it.
 * A chain of dependent ops (most eager code) thus holds one entry and pays one
 * readiness query (inflight_queries) per TPU_INFLIGHT_CHAIN ops. */
static bool covers_newest_locked(int device, int64_t stream, int ninputs, tpu_buffer_t* const* inputs) {
  if (g_len == 0) return false;
  const inflight_t* newest = ring_at(g_len - 1);
  if (newest->device != device || newest->stream != stream || newest->covers >= TPU_INFLIGHT_CHAIN ||
      newest->seq <= g_fence)
    return false;
  for (int i = 0; i < ninputs; i++)
    if (inputs[i] == newest->buf) return true;
  return false;
}

void tpu_runtime_track_inflight(tpu_buffer_t* buf, int ninputs, tpu_buffer_t* const* inputs) {
  if (!buf) return;
  const int device = tpu_buffer_device(buf);
  const int64_t stream = device >= 0 && device < TPU_MAX_DEVICES ? tls_stream[device] : 0;
  tpu_buffer_t* oldest = NULL;
  tpu_buffer_t* replaced = NULL;
  pthread_mutex_lock(&g_mu);
  ++g_seq;
  const bool extend = covers_newest_locked(device, stream, ninputs, inputs);
  if (!extend) retire_locked();
  /* Room for one more execution (g_len <= g_covered, so the ring has a free
   * slot after this; an extended entry covers < TPU_INFLIGHT_CHAIN, so with
   * g_covered at the cap it is not the oldest). */
  if (g_covered >= TPU_INFLIGHT_CAP) oldest = pop_oldest_locked();
  if (extend) {
    inflight_t* newest = ring_at(g_len - 1);
    replaced = newest->buf;
    newest->buf = tpu_buffer_retain(buf);
    newest->covers++;
  } else {
    *ring_at(g_len) = (inflight_t){tpu_buffer_retain(buf), device, stream, g_seq, 1};
    g_len++;
  }
  g_covered++;
  pthread_mutex_unlock(&g_mu);
  tpu_buffer_release(replaced);
  if (oldest) {
    /* Full: wait outside the lock so other threads keep submitting. */
    bool ready = false;
    tpu_status_t* status = tpu_buffer_check(oldest, true, &ready);
    tpu_buffer_release(oldest);
    if (status) {
      pthread_mutex_lock(&g_mu);
      note_error_locked(status);
      pthread_mutex_unlock(&g_mu);
    }
  }
}

/* What a wait covers: every device and stream, or one stream up to a sequence. */
typedef struct selector {
  bool all;
  int device;
  int64_t stream;
  uint64_t upto;
} selector_t;

static bool selected(const selector_t* sel, const inflight_t* e) {
  return sel->all || (e->device == sel->device && e->stream == sel->stream && e->seq <= sel->upto);
}

/* Retained copies of the selected entries (all of them when waiting for
 * everything, which also empties the ring); the caller releases them. */
static int collect_locked(const selector_t* sel, tpu_buffer_t** out) {
  int n = 0;
  for (int i = 0; i < g_len; i++) {
    if (selected(sel, ring_at(i))) out[n++] = tpu_buffer_retain(ring_at(i)->buf);
  }
  if (sel->all) {
    for (int i = 0; i < g_len; i++) tpu_buffer_release(ring_at(i)->buf);
    g_head = g_len = g_covered = 0;
  }
  return n;
}

/* Waits for the selected work; returns the first error (the kept
 * asynchronous error first when waiting for everything). */
static tpu_status_t* wait_selected(const selector_t* sel) {
  tpu_trace_range_t range = tpu_trace_begin(TPU_TRACE_SYNCHRONIZE, NULL);
  tpu_metric_add(TPU_METRIC_SYNCS, 1);
  /* Fused eager mode's recording is work issued so far: it runs first. */
  tpu_status_t* first = tpu_buffer_flush_pending(sel->all ? -1 : sel->device);
  tpu_buffer_t* pending[TPU_INFLIGHT_CAP];
  pthread_mutex_lock(&g_mu);
  const int n = collect_locked(sel, pending);
  if (sel->all && !first) {
    first = g_error;
    g_error = NULL;
  }
  pthread_mutex_unlock(&g_mu);
  for (int i = 0; i < n; i++) {
    bool ready = false;
    tpu_status_t* status = tpu_buffer_check(pending[i], true, &ready);
    if (status && !first) {
      first = status;
    } else {
      tpu_status_free(status);
    }
    tpu_buffer_release(pending[i]);
  }
  /* Donated handles of what finished can go now (after a full synchronize: all
   * of them, so a shutdown's destroys none later). */
  tpu_donation_drain();
  /* Then device-side check failures (check.h); an async failure goes first and
   * leaves them for the next sync. */
  if (!first) first = tpu_check_sync(sel->all ? -1 : sel->device);
  tpu_trace_end(range);
  return first;
}

tpu_status_t* tpu_runtime_synchronize(void) {
  const selector_t all = {.all = true};
  return wait_selected(&all);
}

/* Whether the selected work has finished, without waiting. */
static tpu_status_t* query_selected(const selector_t* sel, bool* out_done) {
  tpu_status_t* flushed = tpu_buffer_flush_pending(sel->all ? -1 : sel->device);
  if (flushed) {
    *out_done = true;
    return flushed;
  }
  tpu_buffer_t* pending[TPU_INFLIGHT_CAP];
  pthread_mutex_lock(&g_mu);
  retire_locked();
  const int n = collect_locked(sel, pending);
  pthread_mutex_unlock(&g_mu);
  tpu_status_t* first = NULL;
  bool done = true;
  for (int i = 0; i < n; i++) {
    bool ready = false;
    if (!first) first = tpu_buffer_check(pending[i], false, &ready);
    done = done && ready;
    tpu_buffer_release(pending[i]);
  }
  *out_done = done || first != NULL;
  return first;
}

/* ---- streams ---- */

static tpu_status_t* check_stream(int device, int64_t stream) {
  TPU_RETURN_IF_ERROR(tpu_runtime_check_device(device));
  if (stream < 0 || stream >= atomic_load(&g_next_stream)) {
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "tpu:%d has no stream %lld", device, (long long)stream);
  }
  return NULL;
}

static selector_t stream_so_far(int device, int64_t stream) {
  pthread_mutex_lock(&g_mu);
  const uint64_t upto = g_seq;
  g_fence = upto;
  pthread_mutex_unlock(&g_mu);
  return (selector_t){false, device, stream, upto};
}

tpu_status_t* tpu_stream_create(int device, int64_t* out_stream) {
  if (!out_stream) return TPU_STATUS(TPU_INVALID_ARGUMENT, "out_stream is NULL");
  *out_stream = 0;
  TPU_RETURN_IF_ERROR(check_stream(device, TPU_STREAM_DEFAULT));
  *out_stream = atomic_fetch_add(&g_next_stream, 1);
  return NULL;
}

int64_t tpu_stream_current(int device) {
  return device >= 0 && device < TPU_MAX_DEVICES ? tls_stream[device] : TPU_STREAM_DEFAULT;
}

tpu_status_t* tpu_stream_set_current(int device, int64_t stream) {
  TPU_RETURN_IF_ERROR(check_stream(device, stream));
  /* Fused eager's recording runs as one program on one stream: what was recorded
   * under the old stream is launched on it before the switch. */
  if (tls_stream[device] != stream) TPU_RETURN_IF_ERROR(tpu_buffer_flush_pending(device));
  tls_stream[device] = stream;
  return NULL;
}

tpu_status_t* tpu_stream_query(int device, int64_t stream, bool* out_done) {
  if (!out_done) return TPU_STATUS(TPU_INVALID_ARGUMENT, "out_done is NULL");
  *out_done = false;
  TPU_RETURN_IF_ERROR(check_stream(device, stream));
  /* Recorded fused work is work not yet done: launched here, it is queried as running. */
  TPU_RETURN_IF_ERROR(tpu_buffer_flush_pending(device));
  const selector_t sel = stream_so_far(device, stream);
  return query_selected(&sel, out_done);
}

tpu_status_t* tpu_stream_synchronize(int device, int64_t stream) {
  TPU_RETURN_IF_ERROR(check_stream(device, stream));
  TPU_RETURN_IF_ERROR(tpu_buffer_flush_pending(device));
  const selector_t sel = stream_so_far(device, stream);
  return wait_selected(&sel);
}

/* ---- events ---- */

struct tpu_event {
  bool timing;
  bool recorded;
  selector_t work;
  /* Timing: completion callbacks still to come, and the latest completion time. */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int callbacks;
  int64_t done_ns;
};

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void on_work_done(void* user) {
  tpu_event_t* ev = user;
  const int64_t t = now_ns();
  pthread_mutex_lock(&ev->mu);
  if (t > ev->done_ns) ev->done_ns = t;
  if (--ev->callbacks == 0) pthread_cond_broadcast(&ev->cv);
  pthread_mutex_unlock(&ev->mu);
}

static void wait_callbacks(tpu_event_t* ev) {
  pthread_mutex_lock(&ev->mu);
  while (ev->callbacks > 0) pthread_cond_wait(&ev->cv, &ev->mu);
  pthread_mutex_unlock(&ev->mu);
}

tpu_status_t* tpu_event_create(bool enable_timing, tpu_event_t** out_event) {
  if (!out_event) return TPU_STATUS(TPU_INVALID_ARGUMENT, "out_event is NULL");
  *out_event = NULL;
  tpu_event_t* ev = calloc(1, sizeof *ev);
  if (!ev) return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of host memory for an event");
  ev->timing = enable_timing;
  pthread_mutex_init(&ev->mu, NULL);
  pthread_cond_init(&ev->cv, NULL);
  *out_event = ev;
  return NULL;
}

void tpu_event_destroy(tpu_event_t* event) {
  if (!event) return;
  wait_callbacks(event);
  pthread_mutex_destroy(&event->mu);
  pthread_cond_destroy(&event->cv);
  free(event);
}

/* Registers a completion callback on every unfinished entry of the event's
 * work; with none unfinished the record time is the completion time. */
static tpu_status_t* arm_timing(tpu_event_t* ev) {
  tpu_buffer_t* pending[TPU_INFLIGHT_CAP];
  pthread_mutex_lock(&g_mu);
  const int n = collect_locked(&ev->work, pending);
  pthread_mutex_unlock(&g_mu);
  pthread_mutex_lock(&ev->mu);
  ev->done_ns = now_ns();
  ev->callbacks = n;
  pthread_mutex_unlock(&ev->mu);
  tpu_status_t* first = NULL;
  for (int i = 0; i < n; i++) {
    tpu_status_t* status = tpu_buffer_on_ready(pending[i], on_work_done, ev);
    if (status) {
      on_work_done(ev); /* the callback will not come */
      if (!first) first = status; else tpu_status_free(status);
    }
    tpu_buffer_release(pending[i]);
  }
  return first;
}

tpu_status_t* tpu_event_record(tpu_event_t* event, int device, int64_t stream) {
  if (!event) return TPU_STATUS(TPU_INVALID_ARGUMENT, "event is NULL");
  TPU_RETURN_IF_ERROR(check_stream(device, stream));
  wait_callbacks(event); /* a previous record's callbacks still point here */
  /* The event marks work issued so far, fused eager mode's recording included. */
  TPU_RETURN_IF_ERROR(tpu_buffer_flush_pending(device));
  event->work = stream_so_far(device, stream);
  event->recorded = true;
  return event->timing ? arm_timing(event) : NULL;
}

tpu_status_t* tpu_event_query(tpu_event_t* event, bool* out_done) {
  if (!out_done) return TPU_STATUS(TPU_INVALID_ARGUMENT, "out_done is NULL");
  *out_done = false;
  if (!event) return TPU_STATUS(TPU_INVALID_ARGUMENT, "event is NULL");
  if (!event->recorded) {
    *out_done = true;
    return NULL;
  }
  TPU_RETURN_IF_ERROR(query_selected(&event->work, out_done));
  if (*out_done && event->timing) {
    pthread_mutex_lock(&event->mu);
    *out_done = event->callbacks == 0;
    pthread_mutex_unlock(&event->mu);
  }
  return NULL;
}

tpu_status_t* tpu_event_synchronize(tpu_event_t* event) {
  if (!event) return TPU_STATUS(TPU_INVALID_ARGUMENT, "event is NULL");
  if (!event->recorded) return NULL;
  tpu_status_t* status = wait_selected(&event->work);
  if (event->timing) wait_callbacks(event);
  return status;
}

static tpu_status_t* completion_time(tpu_event_t* ev, const char* which, int64_t* out_ns) {
  if (!ev->timing) {
    return TPU_STATUS(TPU_FAILED_PRECONDITION,
                      "elapsed_time: the %s event was created without enable_timing=True", which);
  }
  if (!ev->recorded) {
    return TPU_STATUS(TPU_FAILED_PRECONDITION, "elapsed_time: the %s event was never recorded",
                      which);
  }
  bool done = false;
  TPU_RETURN_IF_ERROR(tpu_event_query(ev, &done));
  if (!done) {
    return TPU_STATUS(TPU_FAILED_PRECONDITION,
                      "elapsed_time: the %s event has not completed yet (synchronize it first)",
                      which);
  }
  pthread_mutex_lock(&ev->mu);
  *out_ns = ev->done_ns;
  pthread_mutex_unlock(&ev->mu);
  return NULL;
}

tpu_status_t* tpu_event_elapsed_ms(tpu_event_t* start, tpu_event_t* end, double* out_ms) {
  if (!out_ms) return TPU_STATUS(TPU_INVALID_ARGUMENT, "out_ms is NULL");
  *out_ms = 0;
  if (!start || !end) return TPU_STATUS(TPU_INVALID_ARGUMENT, "event is NULL");
  int64_t t0 = 0, t1 = 0;
  TPU_RETURN_IF_ERROR(completion_time(start, "start", &t0));
  TPU_RETURN_IF_ERROR(completion_time(end, "end", &t1));
  *out_ms = (double)(t1 - t0) / 1e6;
  return NULL;
}
