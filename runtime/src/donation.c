/* Donated PJRT handles, destroyed once the execution that took them finished.
 *
 * PJRT's CPU client keeps a donation hold on a donated buffer until the
 * execution that took it starts, and PJRT_Buffer_Destroy waits for that hold.
 * Destroying the handle when its storage moved on (an in-place write: a KV
 * cache, an optimizer update, a compiled graph's write-back) therefore made the
 * host wait for the device at every such write: a compiled decode loop ran one
 * token at a time, its Python and dispatch never overlapping the device.
 * So a released donated handle is buried here instead, and destroyed once the
 * event of its execution (one per donating launch, shared by the buffers it
 * took) is ready: checked without waiting on every burial and at every
 * synchronize, and the oldest waited for when too many are buried. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "device.h"
#include "donation.h"

/* Burials before the oldest is waited for: a host this far ahead of the device
 * has enough work queued, and the handles stay few. */
#define TPU_BURIED_MAX 1024
/* Entries handled per lock hold. */
#define TPU_BURY_BATCH 64

struct tpu_donation {
  atomic_int refs;
  atomic_bool done;
  PJRT_Event* event; /* ready when the execution's outputs are (owned) */
};

typedef struct grave {
  PJRT_Buffer* pjrt;
  tpu_donation_t* donation;
} grave_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static grave_t g_graves[TPU_BURIED_MAX]; /* a ring: g_head, g_len */
static int g_head, g_len;

tpu_donation_t* tpu_donation_create(PJRT_Buffer* fed) {
  const PJRT_Api* api = tpu_client_api();
  if (!api || !fed) return NULL;
  TPU_PJRT_ARGS(PJRT_Buffer_ReadyEvent_Args, ev, event);
  ev.buffer = fed;
  tpu_status_t* status = TPU_PJRT_CALL(api, Buffer_ReadyEvent, &ev);
  if (status) { /* no event: its handles are destroyed at once, as before */
    tpu_status_free(status);
    return NULL;
  }
  tpu_donation_t* d = malloc(sizeof *d);
  if (!d) {
    tpu_pjrt_event_destroy(api, ev.event);
    return NULL;
  }
  atomic_init(&d->refs, 1);
  atomic_init(&d->done, false);
  d->event = ev.event;
  return d;
}

tpu_donation_t* tpu_donation_retain(tpu_donation_t* d) {
  if (d) atomic_fetch_add_explicit(&d->refs, 1, memory_order_relaxed);
  return d;
}

void tpu_donation_release(tpu_donation_t* d) {
  if (!d || atomic_fetch_sub_explicit(&d->refs, 1, memory_order_acq_rel) != 1) return;
  const PJRT_Api* api = tpu_client_api(); /* after a shutdown the plugin freed it */
  if (api) tpu_pjrt_event_destroy(api, d->event);
  free(d);
}

/* Whether the execution finished (a failed one did too: whoever waits for its
 * outputs reports the failure). Without a client nothing runs any more. */
static bool finished(tpu_donation_t* d, bool wait) {
  if (atomic_load_explicit(&d->done, memory_order_acquire)) return true;
  const PJRT_Api* api = tpu_client_api();
  bool done = true;
  if (api && wait) {
    TPU_PJRT_ARGS(PJRT_Event_Await_Args, aw, event);
    aw.event = d->event;
    tpu_status_free(TPU_PJRT_CALL(api, Event_Await, &aw));
  } else if (api) {
    TPU_PJRT_ARGS(PJRT_Event_IsReady_Args, q, is_ready);
    q.event = d->event;
    tpu_status_t* status = TPU_PJRT_CALL(api, Event_IsReady, &q);
    done = status != NULL || q.is_ready;
    tpu_status_free(status);
  }
  if (done) atomic_store_explicit(&d->done, true, memory_order_release);
  return done;
}

static void destroy(grave_t g) {
  tpu_pjrt_buffer_destroy(tpu_client_api(), g.pjrt);
  tpu_donation_release(g.donation);
}

/* Takes up to TPU_BURY_BATCH of the oldest entries whose execution finished
 * into `out`; destroyed by the caller outside the lock, since destroying may
 * release other buffers. Executions finish roughly in order: the first that
 * has not ends the scan. */
static int take_locked(grave_t* out) {
  int n = 0;
  while (g_len > 0 && n < TPU_BURY_BATCH) {
    grave_t* g = &g_graves[g_head];
    if (!finished(g->donation, false)) break;
    out[n++] = *g;
    g_head = (g_head + 1) % TPU_BURIED_MAX;
    g_len--;
  }
  return n;
}

void tpu_donation_drain(void) {
  grave_t batch[TPU_BURY_BATCH];
  for (;;) {
    pthread_mutex_lock(&g_mu);
    const int n = take_locked(batch);
    pthread_mutex_unlock(&g_mu);
    for (int i = 0; i < n; i++) destroy(batch[i]);
    if (n < TPU_BURY_BATCH) return;
  }
}

void tpu_donation_bury(PJRT_Buffer* pjrt, tpu_donation_t* donation) {
  grave_t g = {pjrt, donation};
  if (!donation || finished(donation, false)) {
    destroy(g);
    tpu_donation_drain();
    return;
  }
  tpu_metric_add(TPU_METRIC_DEFERRED_DESTROYS, 1);
  grave_t oldest = {NULL, NULL};
  bool full = false;
  pthread_mutex_lock(&g_mu);
  if (g_len == TPU_BURIED_MAX) { /* make room: the oldest is waited for below */
    oldest = g_graves[g_head];
    g_head = (g_head + 1) % TPU_BURIED_MAX;
    g_len--;
    full = true;
  }
  g_graves[(g_head + g_len) % TPU_BURIED_MAX] = g;
  g_len++;
  pthread_mutex_unlock(&g_mu);
  if (full) {
    finished(oldest.donation, true);
    destroy(oldest);
  }
  tpu_donation_drain();
}
