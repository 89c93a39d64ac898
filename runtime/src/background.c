/* The background threads (background.h): a FIFO of jobs under one mutex, run by
 * up to TORCHTPU_COMPILE_THREADS threads (default: the CPUs, at most 4), started
 * as jobs wait for one. More than one, because the jobs come in groups that are
 * all needed soon: AOTAutograd hands over a forward and its backward together,
 * and with one thread the backward's compile would start only once the forward's
 * ended. */
#include "background.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "env.h"

typedef struct job {
  void (*run)(void* arg);
  void (*drop)(void* arg);
  void* arg;
  struct job* next;
} job_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_work = PTHREAD_COND_INITIALIZER; /* a job was queued, or stop */
static pthread_cond_t g_idle = PTHREAD_COND_INITIALIZER; /* a job finished, or the thread ended */
static job_t* g_head;
static job_t* g_tail;
static int g_threads; /* threads started and not ended */
static int g_busy;    /* of them, running a job now */
static int g_queued;  /* jobs waiting for a thread */
static bool g_stop;   /* drain: end the threads */
static bool g_atexit;  /* the exit drain and the fork handlers are registered */

bool tpu_background_enabled(void) {
  static atomic_int enabled = -1; /* read once; racing first readers agree */
  if (atomic_load(&enabled) < 0) atomic_store(&enabled, !tpu_env_off("TORCHTPU_BACKGROUND_COMPILE"));
  return atomic_load(&enabled) == 1;
}

static void* worker(void* unused) {
  (void)unused;
  pthread_mutex_lock(&g_mu);
  for (;;) {
    while (!g_head && !g_stop) pthread_cond_wait(&g_work, &g_mu);
    if (g_stop) break;
    job_t* j = g_head;
    g_head = j->next;
    if (!g_head) g_tail = NULL;
    g_queued--;
    g_busy++;
    pthread_mutex_unlock(&g_mu);
    j->run(j->arg);
    if (j->drop) j->drop(j->arg);
    free(j);
    pthread_mutex_lock(&g_mu);
    g_busy--;
    pthread_cond_broadcast(&g_idle);
  }
  g_threads--;
  pthread_cond_broadcast(&g_idle);
  pthread_mutex_unlock(&g_mu);
  return NULL;
}

static void drain_at_exit(void) { tpu_background_drain(); }

/* fork() copies the counts but not the threads: the child starts with none
 * (and its queue dropped), so its exit drain does not wait for threads that
 * are not there. g_mu is held across the fork so the copy is consistent. */
static void fork_prepare(void) { pthread_mutex_lock(&g_mu); }
static void fork_parent(void) { pthread_mutex_unlock(&g_mu); }
static void fork_child(void) {
  g_head = g_tail = NULL; /* the parent's jobs: leaked, not run */
  g_threads = g_busy = g_queued = 0;
  g_stop = false;
  pthread_mutex_unlock(&g_mu);
}

static int max_threads(void) {
  static atomic_int n = 0; /* read once */
  if (atomic_load(&n) == 0) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int64_t fallback = cpus < 1 ? 1 : cpus > 4 ? 4 : cpus;
    atomic_store(&n, (int)tpu_env_int("TORCHTPU_COMPILE_THREADS", 1, 64, fallback));
  }
  return atomic_load(&n);
}

/* Under g_mu: one more thread when more jobs wait than threads are idle, and
 * the cap allows. */
static tpu_status_t* start_locked(void) {
  if (g_queued <= g_threads - g_busy || g_threads >= max_threads()) return NULL;
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED); /* drain waits on g_idle instead of a join */
  int rc = pthread_create(&t, &attr, worker, NULL);
  pthread_attr_destroy(&attr);
  if (rc != 0 && g_threads > 0) return NULL; /* the running ones will get to it */
  if (rc != 0) return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "background compile thread: pthread_create failed (%d)", rc);
  g_threads++;
  /* Registered after the plugin was loaded, so it runs before the plugin's own
   * exit handlers: a compile still running would use what they free. */
  if (!g_atexit) { /* a failed registration loses only that safety */
    g_atexit = true;
    (void)atexit(drain_at_exit);
    (void)pthread_atfork(fork_prepare, fork_parent, fork_child);
  }
  return NULL;
}

tpu_status_t* tpu_background_submit(void (*run)(void* arg), void (*drop)(void* arg), void* arg) {
  if (!run) return TPU_STATUS(TPU_INVALID_ARGUMENT, "background job without a function");
  if (!tpu_background_enabled()) return TPU_STATUS(TPU_FAILED_PRECONDITION, "TORCHTPU_BACKGROUND_COMPILE is off");
  job_t* j = malloc(sizeof *j);
  if (!j) return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  *j = (job_t){run, drop, arg, NULL};
  pthread_mutex_lock(&g_mu);
  tpu_status_t* st = NULL;
  if (g_stop) {
    st = TPU_STATUS(TPU_FAILED_PRECONDITION, "the background threads are draining");
  } else {
    g_queued++;
    st = start_locked();
    if (st) g_queued--;
  }
  if (!st) {
    if (g_tail) g_tail->next = j;
    else g_head = j;
    g_tail = j;
    pthread_cond_signal(&g_work);
  }
  pthread_mutex_unlock(&g_mu);
  if (st) free(j);
  return st;
}

void tpu_background_drain(void) {
  pthread_mutex_lock(&g_mu);
  job_t* dropped = g_head;
  g_head = g_tail = NULL;
  g_queued = 0;
  if (g_threads) {
    g_stop = true;
    pthread_cond_broadcast(&g_work);
    while (g_threads) pthread_cond_wait(&g_idle, &g_mu); /* after the running jobs */
    g_stop = false;
  }
  pthread_mutex_unlock(&g_mu);
  while (dropped) {
    job_t* next = dropped->next;
    if (dropped->drop) dropped->drop(dropped->arg);
    free(dropped);
    dropped = next;
  }
}

void tpu_background_wait(void) {
  pthread_mutex_lock(&g_mu);
  while (g_head || g_busy) pthread_cond_wait(&g_idle, &g_mu);
  pthread_mutex_unlock(&g_mu);
}
