/* Fused eager mode (docs/eager-modes.md): executions are recorded per device
 * instead of launched, and the recording runs as ONE program when something
 * needs its data (a download, a sync, an execution outside the recording) or
 * when it reaches its size limit.
 *
 * Every recorded execution is an op's own compiled program (exec.c already
 * looked it up in the cache), so recording costs no lowering: its results are
 * placeholders (buffer.c) with the avals the cache knows. At a flush the fused
 * program is found in the same in-memory cache under a key made of the
 * sequence of executables and how their operands are wired; only on a miss is
 * its text written: each distinct executable's StableHLO as a private function,
 * called in order from @main, which XLA inlines and fuses across op boundaries.
 * Results no live placeholder wants are not returned, so XLA drops the work
 * that only fed them, and a dead tensor's value is never kept. A recording
 * whose program would likely never be used again runs as its executions' own
 * programs instead (fuse_worth_compiling).
 *
 * A loop that never syncs is cut at its size limit; size cuts look for the
 * period of the executable sequence, over the recordings cut since the last
 * sync (a loop body can be longer than one recording), and once it is known
 * later cuts fall at the same places in every period, so every later chunk is
 * a program already built (a cache hit). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "device.h"
#include "env.h"
#include "key.h"
#include "strbuf.h"
#include "tracing.h"

#define FUSE_DEFAULT_LIMIT 2000
/* XLA's compile time grows faster than linearly with a program's size: a cut
 * also falls where the recorded ops' StableHLO text reaches this many bytes
 * (one layer norm's program is ~60 KB, an add's ~0.6 KB). */
#define FUSE_DEFAULT_TEXT_LIMIT (1 << 18)
/* How much of the recent past the period search keeps: at most this many
 * executions (at least half of them once reached), or the last recording if it
 * alone is longer. */
#define FUSE_HIST_OPS (1 << 14)
/* The shape-churn breaker (fuse_worth_compiling): a recorded structure (its ops
 * and their wiring, not their shapes) gets fused programs for this many sets of
 * shapes; a recording of it with new shapes then runs as its ops' own programs
 * the first time it comes, and gets its program the second time. The tallies
 * behind it hold FUSE_TALLY_CAP keys each and start over when half full. */
#define FUSE_CHURN_SHAPES 3
#define FUSE_TALLY_CAP 1024

/* Counts per 64-bit key (open addressing; key 0 marks an empty slot). */
typedef struct fuse_tally {
  uint64_t keys[FUSE_TALLY_CAP];
  int32_t counts[FUSE_TALLY_CAP];
  int n;
} fuse_tally_t;

typedef struct fuse_val {
  tpu_buffer_t* ext;     /* an input: the buffer (retained) */
  tpu_buffer_t* pending; /* a result: its placeholder while referenced (weak) */
  int32_t op, index;     /* a result: its op and result index; op -1 for an input */
  int32_t param;         /* an input: its parameter index in @main */
  int32_t next;          /* the value that took this one's place in a storage; -1: none */
  tpu_aval_t aval;
} fuse_val_t;

typedef struct fuse_op {
  tpu_executable_t* exe; /* retained */
  int32_t first_arg, nargs; /* value ids in q->args */
  int32_t first_val, nouts;
  char producer[48]; /* the op, for error messages */
} fuse_op_t;

typedef struct fuse_queue {
  pthread_mutex_t mu;
  uint64_t epoch; /* bumped by every flush: placeholders of older epochs are settled */
  uint64_t seq;   /* ops recorded so far, every recording: ops[i] is the (seq - nops + 1 + i)-th */
  fuse_op_t* ops;
  int nops, ops_cap;
  int32_t* args;
  int nargs, args_cap;
  fuse_val_t* vals;
  int nvals, vals_cap;
  int nparams;
  /* Inputs seen so far: buffer -> value id, open addressing (a power-of-two size). */
  tpu_buffer_t** seen_keys;
  int32_t* seen_vals;
  int seen_cap, seen_len;
  size_t text; /* bytes of the recorded ops' programs (what XLA inlines) */
  /* The recorded loop's period in ops, learned at a size cut since the last
   * sync; 0: none. A period no longer than a recording is cut on its multiples
   * past the size limit (chunk 0); a longer one into chunks of `chunk` ops from
   * each period's start, `phase` counting the ops since the learning cut. */
  int period, chunk, phase;
  /* The executions of the recordings cut at the size limit since the last
   * sync, oldest first (fuse_hist_entry; the period is learned and checked on
   * them). */
  uint64_t* hist;
  int32_t* hist_border; /* fuse_period's work space, hist_cap long */
  int hist_len, hist_cap;
  /* The shape-churn breaker, allocated at its first use: fused programs built
   * per recorded structure, and recordings run unfused per key hash. */
  fuse_tally_t* builds;
  fuse_tally_t* unfused;
} fuse_queue_t;

static fuse_queue_t g_queues[TPU_MAX_DEVICES];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static tpu_status_t* fuse_flush(int device);
static void fuse_dead(tpu_buffer_t* buf);
static void fuse_replaced(tpu_buffer_t* old, tpu_buffer_t* buf);

static void fuse_init(void) {
  for (int i = 0; i < TPU_MAX_DEVICES; ++i) pthread_mutex_init(&g_queues[i].mu, NULL);
  const tpu_pending_hooks_t hooks = {fuse_flush, fuse_dead, fuse_replaced};
  tpu_buffer_set_pending_hooks(&hooks);
}

/* $name (>= 1) read once into *slot (0: not read yet). */
static int64_t fuse_env_once(atomic_llong* slot, const char* name, int64_t max, int64_t fallback) {
  int64_t n = atomic_load_explicit(slot, memory_order_relaxed);
  if (n > 0) return n;
  n = tpu_env_int(name, 1, max, fallback);
  atomic_store_explicit(slot, n, memory_order_relaxed);
  return n;
}

static atomic_llong g_fuse_max_ops, g_fuse_max_text;

/* TORCHTPU_FUSED_MAX_OPS: executions per program before a cut. */
static int fuse_limit(void) {
  return (int)fuse_env_once(&g_fuse_max_ops, "TORCHTPU_FUSED_MAX_OPS", 1000000, FUSE_DEFAULT_LIMIT);
}

/* TORCHTPU_FUSED_MAX_TEXT: bytes of recorded op programs before a cut. */
static size_t fuse_text_limit(void) {
  return (size_t)fuse_env_once(&g_fuse_max_text, "TORCHTPU_FUSED_MAX_TEXT", (int64_t)1 << 40, FUSE_DEFAULT_TEXT_LIMIT);
}

/* Time to cut: past a size limit, on a multiple of the learned period, or at
 * the learned chunk boundaries of a long period, so that a loop's recordings
 * start at the same ops and repeat (programs compiled once). */
static bool fuse_full(const fuse_queue_t* q) {
  if (q->chunk) return q->phase % q->chunk == 0;
  if (q->nops < fuse_limit() && q->text < fuse_text_limit()) return false;
  return q->period == 0 || q->nops % q->period == 0;
}

/* TORCHTPU_FUSED_DONATE=0 turns donation off (read once, unless set first).
 * It was off by default while the CPU plugin made the host wait at every
 * released donated handle (a GPT-shaped step ran 25-35% slower); donation.c
 * defers those destroys, and the step runs as fast with it as without. */
static atomic_int g_fuse_donate; /* 0: not read yet, 1: off, 2: on */

static bool fuse_donates(void) {
  int v = atomic_load_explicit(&g_fuse_donate, memory_order_relaxed);
  if (v) return v == 2;
  v = tpu_env_int("TORCHTPU_FUSED_DONATE", 0, 1, 1) ? 2 : 1;
  atomic_store_explicit(&g_fuse_donate, v, memory_order_relaxed);
  return v == 2;
}

void tpu_fuse_set_donation(bool on) { atomic_store_explicit(&g_fuse_donate, on ? 2 : 1, memory_order_relaxed); }

static bool fuse_grow(void** arr, int* cap, int need, size_t size) {
  if (need <= *cap) return true;
  int c = *cap ? *cap : 64;
  while (c < need) c *= 2;
  void* p = realloc(*arr, size * (size_t)c);
  if (!p) return false;
  *arr = p;
  *cap = c;
  return true;
}

/* ------------------------------------------------------------ recording */

static size_t fuse_slot(const fuse_queue_t* q, const tpu_buffer_t* buf) {
  uint64_t h = (uint64_t)(uintptr_t)buf * 0x9e3779b97f4a7c15ull;
  size_t i = (size_t)(h >> 32) & (size_t)(q->seen_cap - 1);
  while (q->seen_keys[i] && q->seen_keys[i] != buf) i = (i + 1) & (size_t)(q->seen_cap - 1);
  return i;
}

/* Keeps the input table under half full. */
static bool fuse_seen_reserve(fuse_queue_t* q) {
  if (2 * (q->seen_len + 1) <= q->seen_cap) return true;
  int cap = q->seen_cap ? 2 * q->seen_cap : 256;
  tpu_buffer_t** old_keys = q->seen_keys;
  int32_t* old_vals = q->seen_vals;
  int old_cap = q->seen_cap;
  q->seen_keys = calloc((size_t)cap, sizeof(*q->seen_keys));
  q->seen_vals = malloc(sizeof(*q->seen_vals) * (size_t)cap);
  if (!q->seen_keys || !q->seen_vals) {
    free(q->seen_keys);
    free(q->seen_vals);
    q->seen_keys = old_keys, q->seen_vals = old_vals;
    return false;
  }
  q->seen_cap = cap;
  for (int i = 0; i < old_cap; ++i) {
    if (!old_keys[i]) continue;
    size_t s = fuse_slot(q, old_keys[i]);
    q->seen_keys[s] = old_keys[i];
    q->seen_vals[s] = old_vals[i];
  }
  free(old_keys);
  free(old_vals);
  return true;
}

/* The value id of `buf` if the recording has it: a result of this epoch or an
 * input already seen. */
static bool fuse_known_value(const fuse_queue_t* q, const tpu_buffer_t* buf, int32_t* out_value) {
  if (tpu_buffer_pending_value(buf, q->epoch, out_value)) return true;
  if (!q->seen_len || tpu_buffer_interned(buf)) return false;
  size_t slot = fuse_slot(q, buf);
  if (!q->seen_keys[slot]) return false;
  *out_value = q->seen_vals[slot];
  return true;
}

/* The value id of argument `buf`: a result recorded in this epoch, an input
 * already seen, or a new input. An interned buffer is a new input at every use:
 * scalar operands come from a cache of uploaded values (scalars.c), where equal
 * values are one buffer, so sharing them would make the program's wiring, and
 * its cache key, depend on which scalars happen to be equal (`x + 1` beside
 * add's alpha of 1): a learning rate that meets another scalar's value would
 * compile anew. */
static tpu_status_t* fuse_arg_value(fuse_queue_t* q, tpu_buffer_t* buf, int32_t* out_value) {
  if (tpu_buffer_pending_value(buf, q->epoch, out_value)) return NULL;
  /* Real, or settled earlier: fails here if its program failed. */
  TPU_RETURN_IF_ERROR(tpu_buffer_error(buf));
  if (!fuse_seen_reserve(q) || !fuse_grow((void**)&q->vals, &q->vals_cap, q->nvals + 1, sizeof(*q->vals)))
    return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "fused eager: out of host memory");
  const bool shared = !tpu_buffer_interned(buf);
  size_t slot = shared ? fuse_slot(q, buf) : 0;
  if (shared && q->seen_keys[slot]) return *out_value = q->seen_vals[slot], NULL;
  fuse_val_t* v = &q->vals[q->nvals];
  *v = (fuse_val_t){tpu_buffer_retain(buf), NULL, -1, 0, q->nparams++, -1, *tpu_buffer_aval(buf)};
  if (shared) {
    q->seen_keys[slot] = buf;
    q->seen_vals[slot] = q->nvals;
    q->seen_len++;
  }
  *out_value = q->nvals++;
  return NULL;
}

static tpu_status_t* fuse_flush_locked(fuse_queue_t* q, int device, bool at_limit);

static tpu_status_t* fuse_record(tpu_executable_t* exe, int device, int nargs, tpu_buffer_t* const* args, int nouts,
                                 const tpu_aval_t* out_avals, const char* producer, tpu_buffer_t** out_buffers) {
  fuse_queue_t* q = &g_queues[device];
  pthread_mutex_lock(&q->mu);
  tpu_status_t* st = NULL;
  if (!fuse_grow((void**)&q->ops, &q->ops_cap, q->nops + 1, sizeof(*q->ops)) ||
      !fuse_grow((void**)&q->args, &q->args_cap, q->nargs + nargs, sizeof(*q->args)))
    st = TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "fused eager: out of host memory");
  int first_arg = q->nargs;
  for (int i = 0; i < nargs && !st; ++i) {
    st = fuse_arg_value(q, args[i], &q->args[first_arg + i]);
    if (st) st = tpu_status_annotate(st, "%s: operand %d", producer, i);
  }
  /* After the inputs, which add values of their own. */
  if (!st && !fuse_grow((void**)&q->vals, &q->vals_cap, q->nvals + nouts, sizeof(*q->vals)))
    st = TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "fused eager: out of host memory");
  if (st) {
    pthread_mutex_unlock(&q->mu);
    return st; /* inputs already added stay unused: harmless */
  }
  fuse_op_t* op = &q->ops[q->nops];
  *op = (fuse_op_t){tpu_executable_retain(exe), first_arg, nargs, q->nvals, 0, ""};
  ++q->seq;
  size_t plen = strnlen(producer, sizeof op->producer - 1);
  memcpy(op->producer, producer, plen);
  op->producer[plen] = '\0';
  q->nargs += nargs;
  size_t text_len = 0;
  tpu_executable_text(exe, &text_len);
  q->text += text_len;
  for (int j = 0; j < nouts && !st; ++j) {
    fuse_val_t* v = &q->vals[q->nvals];
    *v = (fuse_val_t){NULL, NULL, q->nops, j, -1, -1, out_avals[j]};
    st = tpu_buffer_create_pending(device, &out_avals[j], producer, q->nvals, q->epoch, q->seq, &out_buffers[j]);
    v->pending = out_buffers[j];
    q->nvals++;
    op->nouts++;
  }
  q->nops++;
  if (q->chunk) q->phase = (q->phase + 1) % q->period;
  tpu_metric_add(TPU_METRIC_FUSED_OPS, 1);
  /* A cut's failure is reported by the op that made it too (its placeholders
   * are settled as failed, so releasing them does not come back here). */
  if (!st && fuse_full(q)) st = fuse_flush_locked(q, device, true);
  if (st) {
    for (int j = 0; j < op->nouts; ++j) {
      if (!out_buffers[j]) continue;
      if (tpu_buffer_is_pending(out_buffers[j])) {
        q->vals[op->first_val + j].pending = NULL;
        tpu_buffer_fail(out_buffers[j], st);
      }
      tpu_buffer_release(out_buffers[j]);
      out_buffers[j] = NULL;
    }
  }
  pthread_mutex_unlock(&q->mu);
  return st;
}

tpu_status_t* tpu_executable_execute(tpu_executable_t* exe, int device, int nargs, tpu_buffer_t* const* args,
                                     int nouts, const tpu_aval_t* out_avals, const char* producer,
                                     tpu_buffer_t** out_buffers) {
  return tpu_executable_execute_donating(exe, device, nargs, args, NULL, nouts, out_avals, producer, out_buffers);
}

tpu_status_t* tpu_executable_execute_donating(tpu_executable_t* exe, int device, int nargs,
                                              tpu_buffer_t* const* args, const bool* donate, int nouts,
                                              const tpu_aval_t* out_avals, const char* producer,
                                              tpu_buffer_t** out_buffers) {
  if (tpu_runtime_eager_mode() != TPU_EAGER_FUSED || !exe || tpu_executable_standalone(exe))
    return tpu_executable_launch_donating(exe, device, nargs, args, donate, nouts, out_avals, producer,
                                          out_buffers);
  TPU_RETURN_IF_ERROR(tpu_runtime_check_device(device));
  if (nargs < 0 || nouts < 0 || (nargs > 0 && !args) || (nouts > 0 && (!out_avals || !out_buffers)))
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "%s: bad argument or result list", producer ? producer : "execute");
  for (int i = 0; i < nargs; ++i) {
    if (!args[i]) return TPU_STATUS(TPU_INVALID_ARGUMENT, "argument %d is NULL", i);
    if (tpu_buffer_device(args[i]) != device)
      return TPU_STATUS(TPU_INVALID_ARGUMENT, "argument %d is on device %d, executing on %d", i,
                        tpu_buffer_device(args[i]), device);
  }
  for (int j = 0; j < nouts; ++j) out_buffers[j] = NULL;
  pthread_once(&g_once, fuse_init);
  return fuse_record(exe, device, nargs, args, nouts, out_avals, producer ? producer : "", out_buffers);
}

/* A placeholder died: its program need not return it. */
static void fuse_dead(tpu_buffer_t* buf) {
  fuse_queue_t* q = &g_queues[tpu_buffer_device(buf)];
  pthread_mutex_lock(&q->mu);
  int32_t v;
  if (tpu_buffer_pending_value(buf, q->epoch, &v) && q->vals[v].pending == buf) q->vals[v].pending = NULL;
  pthread_mutex_unlock(&q->mu);
}

/* A placeholder took `old`'s place in a storage: the recording's value of `old`,
 * if it has one, is followed by buf's (what its donation goes to). */
static void fuse_replaced(tpu_buffer_t* old, tpu_buffer_t* buf) {
  fuse_queue_t* q = &g_queues[tpu_buffer_device(buf)];
  pthread_mutex_lock(&q->mu);
  int32_t vo, vn;
  if (tpu_buffer_pending_value(buf, q->epoch, &vn) && fuse_known_value(q, old, &vo) && vo != vn) q->vals[vo].next = vn;
  pthread_mutex_unlock(&q->mu);
}

/* ------------------------------------------------------------ the program */

/* The cache key: the executables in order, each operand's value id, the
 * values returned and the parameters' donations (alias; NULL: none). Value ids follow from that
 * sequence, so equal keys are equal programs; executable ids are never reused. */
static void fuse_key(const fuse_queue_t* q, const int32_t* outs, int nouts, const int32_t* alias, tpu_key_t* k) {
  static const uint8_t kTag[8] = {0xff, 'f', 'u', 's', 'e', 'd', 0, 1};
  tpu_key_put(k, kTag, sizeof kTag);
  tpu_key_i64(k, q->nops);
  for (int i = 0; i < q->nops; ++i) {
    const fuse_op_t* op = &q->ops[i];
    tpu_key_i64(k, (int64_t)tpu_executable_id(op->exe));
    tpu_key_put(k, &q->args[op->first_arg], sizeof(int32_t) * (size_t)op->nargs);
  }
  tpu_key_i64(k, nouts);
  tpu_key_put(k, outs, sizeof(int32_t) * (size_t)nouts);
  if (alias) tpu_key_put(k, alias, sizeof(int32_t) * (size_t)q->nparams);
}

static void fuse_ref(tpu_strbuf_t* m, const fuse_queue_t* q, int32_t v) {
  const fuse_val_t* x = &q->vals[v];
  if (x->op < 0) {
    tpu_strbuf_printf(m, "%%arg%d", x->param);
    return;
  }
  const fuse_op_t* op = &q->ops[x->op];
  if (op->nouts == 1) tpu_strbuf_printf(m, "%%v%d", op->first_val);
  else tpu_strbuf_printf(m, "%%v%d#%d", op->first_val, x->index);
}

static void fuse_types(tpu_strbuf_t* m, const fuse_queue_t* q, int n, const int32_t* vs) {
  char t[256];
  tpu_strbuf_append(m, "(");
  for (int i = 0; i < n; ++i)
    tpu_strbuf_printf(m, "%s%s", i ? ", " : "", tpu_fmt_type(t, sizeof t, &q->vals[vs[i]].aval));
  tpu_strbuf_append(m, ")");
}

/* An op program's function name: a hash of its text, so the fused text (the
 * disk cache's key) does not depend on the order executables were made in. */
static uint64_t fuse_fn_name(const tpu_executable_t* exe) {
  size_t len = 0;
  const char* text = tpu_executable_text(exe, &len);
  return tpu_hash_bytes((const uint8_t*)text, len);
}

/* Each distinct op program once, as private function @f<hash>; names[i] is op i's. */
static tpu_status_t* fuse_functions(tpu_strbuf_t* m, const fuse_queue_t* q, uint64_t* names) {
  static const char kMain[] = "func.func public @main(";
  for (int i = 0; i < q->nops; ++i) {
    if (q->ops[i].nouts == 0) continue;
    names[i] = fuse_fn_name(q->ops[i].exe);
    bool dup = false;
    for (int k = 0; k < i && !dup; ++k) dup = q->ops[k].nouts && names[k] == names[i];
    if (dup) continue;
    size_t len = 0;
    const char* text = tpu_executable_text(q->ops[i].exe, &len);
    const char* body = strstr(text, kMain);
    const char* end = text + len;
    while (end > text && end[-1] != '}') --end; /* the module's closing brace */
    if (!body || end <= body + sizeof kMain)
      return TPU_STATUS(TPU_INTERNAL, "fused eager: %s's program has no @main", q->ops[i].producer);
    body += sizeof kMain - 1;
    tpu_strbuf_printf(m, "  func.func private @f%016llx(", (unsigned long long)names[i]);
    tpu_strbuf_appendn(m, body, (size_t)(end - 1 - body));
    tpu_strbuf_append(m, "\n");
  }
  return NULL;
}

static tpu_status_t* fuse_text(const fuse_queue_t* q, const int32_t* outs, int nouts, const int32_t* alias,
                               char** out_text) {
  *out_text = NULL;
  tpu_strbuf_t m;
  tpu_strbuf_init(&m);
  tpu_strbuf_append(&m, "module @torchtpu {\n");
  uint64_t* names = calloc((size_t)(q->nops ? q->nops : 1), sizeof(*names));
  tpu_status_t* st = names ? fuse_functions(&m, q, names)
                           : TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "fused eager: out of host memory");
  char t[256];
  tpu_strbuf_append(&m, "  func.func public @main(");
  for (int v = 0, p = 0; v < q->nvals; ++v) {
    const fuse_val_t* x = &q->vals[v];
    if (x->op >= 0) continue;
    tpu_strbuf_printf(&m, "%s%%arg%d: %s", p++ ? ", " : "", x->param, tpu_fmt_type(t, sizeof t, &x->aval));
    if (alias && alias[x->param] >= 0) tpu_strbuf_printf(&m, " {%s = %d : i32}", TPU_B_ALIAS_ATTR, alias[x->param]);
  }
  tpu_strbuf_append(&m, ") -> ");
  fuse_types(&m, q, nouts, outs);
  tpu_strbuf_append(&m, " {\n");
  for (int i = 0; i < q->nops; ++i) {
    const fuse_op_t* op = &q->ops[i];
    if (op->nouts == 0) continue; /* ops are pure: nothing to keep */
    if (op->nouts == 1) tpu_strbuf_printf(&m, "    %%v%d = ", op->first_val);
    else tpu_strbuf_printf(&m, "    %%v%d:%d = ", op->first_val, op->nouts);
    tpu_strbuf_append(&m, "\"func.call\"(");
    for (int a = 0; a < op->nargs; ++a) {
      if (a) tpu_strbuf_append(&m, ", ");
      fuse_ref(&m, q, q->args[op->first_arg + a]);
    }
    tpu_strbuf_printf(&m, ") {callee = @f%016llx} : ", (unsigned long long)(names ? names[i] : 0));
    fuse_types(&m, q, op->nargs, &q->args[op->first_arg]);
    tpu_strbuf_append(&m, " -> (");
    for (int j = 0; j < op->nouts; ++j)
      tpu_strbuf_printf(&m, "%s%s", j ? ", " : "", tpu_fmt_type(t, sizeof t, &q->vals[op->first_val + j].aval));
    tpu_strbuf_append(&m, ")\n");
  }
  tpu_strbuf_append(&m, "    \"func.return\"(");
  for (int k = 0; k < nouts; ++k) {
    if (k) tpu_strbuf_append(&m, ", ");
    fuse_ref(&m, q, outs[k]);
  }
  tpu_strbuf_append(&m, ") : ");
  fuse_types(&m, q, nouts, outs);
  tpu_strbuf_append(&m, " -> ()\n  }\n}\n");
  if (!st && m.oom) st = TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "fused eager: out of host memory");
  free(names);
  if (st) tpu_strbuf_free(&m);
  else *out_text = tpu_strbuf_take(&m);
  return st;
}

/* A fused program that did not compile: op programs are compiled only when they
 * run alone (tpu_executable_create_lazy), so compile them now and name the first
 * op whose own program fails; if none does, the fused program's error stands. */
static tpu_status_t* fuse_blame(const fuse_queue_t* q, tpu_status_t* st) {
  for (int i = 0; i < q->nops; ++i) {
    tpu_status_t* own = tpu_executable_load(q->ops[i].exe);
    if (own) {
      tpu_status_free(st);
      return tpu_status_annotate(own, "%s", q->ops[i].producer);
    }
  }
  return st;
}

/* Adds `add` to the count of `key` and returns the new count; when the table
 * would be more than half full it starts over. */
static int32_t fuse_tally_add(fuse_tally_t* t, uint64_t key, int32_t add) {
  uint64_t h = key ? key : 1;
  size_t i = (size_t)(h >> 7) & (FUSE_TALLY_CAP - 1);
  while (t->keys[i] && t->keys[i] != h) i = (i + 1) & (FUSE_TALLY_CAP - 1);
  if (!t->keys[i]) {
    if (add == 0) return 0;
    if (2 * (t->n + 1) > FUSE_TALLY_CAP) {
      memset(t, 0, sizeof *t);
      i = (size_t)(h >> 7) & (FUSE_TALLY_CAP - 1);
    }
    t->keys[i] = h;
    t->n++;
  }
  return t->counts[i] += add;
}

/* A hash of the recording's structure: its ops and how they are wired, without
 * their shapes (the same loop body at another length hashes the same). */
static uint64_t fuse_structure(const fuse_queue_t* q) {
  tpu_key_t k;
  tpu_key_init(&k);
  for (int i = 0; i < q->nops; ++i) {
    const fuse_op_t* op = &q->ops[i];
    tpu_key_put(&k, op->producer, strnlen(op->producer, sizeof op->producer));
    tpu_key_i64(&k, ((int64_t)op->nargs << 32) | (uint32_t)op->nouts);
    tpu_key_put(&k, &q->args[op->first_arg], sizeof(int32_t) * (size_t)op->nargs);
  }
  uint64_t h = k.oom ? 0 : tpu_hash_bytes(k.data, k.len);
  tpu_key_free(&k);
  return h;
}

/* Whether a recording whose fused program is not in the cache should get one
 * (false: run it as its ops' own programs). A program pays for its compile only
 * when its recording comes again. A loop that changes shapes every iteration
 * (HF generate's default cache grows by concatenation) records the same
 * structure with new shapes each time: a new program per iteration, each a
 * compile of the whole loop body, never used again. So once a structure got
 * FUSE_CHURN_SHAPES programs, a recording of it with new shapes runs unfused,
 * as strict mode would (its ops' programs are small and mostly shared by the
 * next iterations); it gets its program the second time it comes. */
static bool fuse_worth_compiling(fuse_queue_t* q, uint64_t hash) {
  if (!q->builds) q->builds = calloc(1, sizeof *q->builds);
  if (!q->unfused) q->unfused = calloc(1, sizeof *q->unfused);
  if (!q->builds || !q->unfused) return true; /* without memory: always fused, as before */
  if (fuse_tally_add(q->unfused, hash, 0) > 0) return true; /* it came back */
  uint64_t structure = fuse_structure(q);
  if (fuse_tally_add(q->builds, structure, 0) < FUSE_CHURN_SHAPES) {
    fuse_tally_add(q->builds, structure, 1);
    return true;
  }
  fuse_tally_add(q->unfused, hash, 1);
  return false;
}

/* The compiled fused program for this recording: from the cache, or written,
 * compiled (through the disk tier) and inserted. Returns a referenced entry;
 * NULL with no error when the recording should run unfused (fuse_worth_compiling). */
static tpu_status_t* fuse_program(fuse_queue_t* q, const int32_t* outs, int nouts, const int32_t* alias,
                                  tpu_cache_entry_t** out_entry) {
  *out_entry = NULL;
  tpu_key_t k;
  tpu_key_init(&k);
  fuse_key(q, outs, nouts, alias, &k);
  tpu_status_t* st = k.oom ? TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "fused eager: out of host memory") : NULL;
  uint64_t hash = st ? 0 : tpu_hash_bytes(k.data, k.len);
  if (!st) *out_entry = tpu_cache_lookup(k.data, k.len, hash);
  if (!st && *out_entry) {
    tpu_metric_add(TPU_METRIC_CACHE_HITS, 1);
    tpu_trace_mark(TPU_TRACE_CACHE_HIT, "fused");
  } else if (!st && !fuse_worth_compiling(q, hash)) {
    tpu_metric_add(TPU_METRIC_FUSED_UNFUSED, 1);
  } else if (!st) {
    tpu_metric_add(TPU_METRIC_CACHE_MISSES, 1);
    tpu_trace_range_t range = tpu_trace_begin(TPU_TRACE_CACHE_MISS, "fused");
    tpu_compiled_t c;
    memset(&c, 0, sizeof c);
    char* text = NULL;
    st = fuse_text(q, outs, nouts, alias, &text);
    c.nouts = nouts;
    c.out_avals = st ? NULL : calloc((size_t)(nouts ? nouts : 1), sizeof(tpu_aval_t));
    if (!st && !c.out_avals) st = TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "fused eager: out of host memory");
    for (int i = 0; !st && i < nouts; ++i) c.out_avals[i] = q->vals[outs[i]].aval;
    if (!st && (st = tpu_executable_compile(text, strlen(text), nouts, &c.exe)) != NULL) st = fuse_blame(q, st);
    if (!st) {
      tpu_metric_add(TPU_METRIC_FUSED_PROGRAMS, 1);
      st = tpu_cache_insert(k.data, k.len, hash, &c, out_entry);
    } else {
      tpu_compiled_destroy(&c);
    }
    free(text);
    tpu_trace_end(range);
  }
  tpu_key_free(&k);
  return st;
}

/* Runs the recording as its executions' own programs, in order, as strict mode
 * would (each compiled now if it never ran alone): a recording of one execution
 * needs no program of its own, and one whose fused program looks like a one-off
 * is not worth one (fuse_worth_compiling). A result is dropped after its last
 * reader; a referenced one settles its placeholder at once, so a later failure
 * leaves it settled. */
static tpu_status_t* fuse_run_ops(fuse_queue_t* q, int device) {
  tpu_buffer_t** real = calloc((size_t)(q->nvals ? q->nvals : 1), sizeof(*real)); /* a result's buffer, owned */
  int32_t* last = malloc(sizeof(*last) * (size_t)(q->nvals ? q->nvals : 1));       /* its last reader */
  tpu_buffer_t** bufs = NULL;
  tpu_aval_t* avals = NULL;
  int cap = 0;
  tpu_status_t* st = real && last ? NULL : TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "fused eager: out of host memory");
  for (int v = 0; !st && v < q->nvals; ++v) last[v] = -1;
  for (int i = 0; !st && i < q->nops; ++i)
    for (int a = 0; a < q->ops[i].nargs; ++a) last[q->args[q->ops[i].first_arg + a]] = i;
  for (int i = 0; !st && i < q->nops; ++i) {
    const fuse_op_t* op = &q->ops[i];
    int n = op->nargs > op->nouts ? op->nargs : op->nouts;
    if (n > cap) {
      cap = n;
      free(bufs);
      free(avals);
      bufs = malloc(sizeof(*bufs) * (size_t)cap);
      avals = malloc(sizeof(*avals) * (size_t)cap);
      if (!bufs || !avals) {
        st = TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "fused eager: out of host memory");
        break;
      }
    }
    for (int a = 0; a < op->nargs; ++a) {
      const fuse_val_t* x = &q->vals[q->args[op->first_arg + a]];
      bufs[a] = x->op < 0 ? x->ext : real[q->args[op->first_arg + a]];
    }
    for (int j = 0; j < op->nouts; ++j) avals[j] = q->vals[op->first_val + j].aval;
    st = tpu_executable_launch(op->exe, device, op->nargs, bufs, op->nouts, avals, op->producer,
                               &real[op->first_val]);
    for (int j = 0; !st && j < op->nouts; ++j) {
      int32_t v = op->first_val + j;
      if (q->vals[v].pending) tpu_buffer_resolve(q->vals[v].pending, real[v]);
      q->vals[v].pending = NULL;
      if (last[v] < 0) tpu_buffer_release(real[v]), real[v] = NULL; /* nobody reads it */
    }
    for (int a = 0; !st && a < op->nargs; ++a) {
      int32_t v = q->args[op->first_arg + a];
      if (q->vals[v].op >= 0 && last[v] == i) tpu_buffer_release(real[v]), real[v] = NULL;
    }
  }
  for (int v = 0; real && v < q->nvals; ++v) tpu_buffer_release(real[v]);
  free(real);
  free(last);
  free(bufs);
  free(avals);
  return st;
}

/* The real buffer behind input `buf` when nothing but the recording holds it:
 * `buf` itself, or a settled placeholder's target that only the placeholder
 * holds. The in-flight list's references do not count: it drops them once the
 * producer finishes, and a donating run waits for its producer anyway. Counting
 * them (as strict mode does, exec.c) keeps the choice, and so the program,
 * independent of timing. */
static tpu_buffer_t* fuse_donatable(tpu_buffer_t* buf) {
  tpu_buffer_t* real = tpu_buffer_settled(buf);
  if (!real || (real != buf && tpu_buffer_refcount(buf) != 1)) return NULL;
  return tpu_buffer_donatable(real, 1 + tpu_runtime_inflight_holds(real)) ? real : NULL;
}

/* Which parameters give their buffer to a returned value (alias[p]: its
 * position in `outs`, -1: none; params[p] becomes the real buffer given); returns
 * how many do. A parameter can when the recording holds the only reference to its
 * buffer: every storage that had it was overwritten or died while recording (an
 * optimizer step's parameters and state), so nothing reads it after this program.
 * It goes to the value that took its place in its storage (following values that
 * were overwritten in turn), when that value is returned and of its type: that
 * value is computed from it last, so XLA writes it in place without copying
 * around the alias. The choice is part of the program's text and key; a loop
 * frees the same buffers at the same places every iteration, so its iterations
 * share one program. */
static int fuse_donations(const fuse_queue_t* q, const int32_t* outs, int nouts, int32_t* alias,
                          tpu_buffer_t** params) {
  for (int p = 0; p < q->nparams; ++p) alias[p] = -1;
  int32_t* pos = malloc(sizeof(int32_t) * (size_t)(q->nvals ? q->nvals : 1)); /* value -> position in outs */
  if (!pos) return 0; /* without memory for the table nothing is donated */
  for (int v = 0; v < q->nvals; ++v) pos[v] = -1;
  for (int k = 0; k < nouts; ++k) pos[outs[k]] = k;
  int n = 0;
  for (int v = 0; v < q->nvals; ++v) {
    const fuse_val_t* x = &q->vals[v];
    if (x->op >= 0 || x->next < 0) continue;
    int32_t w = x->next;
    /* Bounded: copies between storages can make the chain loop. */
    for (int steps = 0; w >= 0 && pos[w] < 0 && steps < q->nvals; ++steps) w = q->vals[w].next;
    if (w < 0 || pos[w] < 0 || !tpu_aval_equal(&q->vals[w].aval, &x->aval)) continue;
    tpu_buffer_t* real = fuse_donatable(x->ext);
    if (!real) continue;
    alias[x->param] = pos[w];
    params[x->param] = real;
    pos[w] = -1; /* taken */
    ++n;
  }
  free(pos);
  return n;
}

/* Runs the recording's program and settles the placeholders in `outs`. */
static tpu_status_t* fuse_run(fuse_queue_t* q, int device, const int32_t* outs, int nouts) {
  if (q->nops == 1) return fuse_run_ops(q, device);
  tpu_cache_entry_t* entry = NULL;
  size_t np = (size_t)(q->nparams ? q->nparams : 1);
  tpu_buffer_t** params = calloc(np, sizeof(*params));
  tpu_buffer_t** results = calloc((size_t)(nouts ? nouts : 1), sizeof(*results));
  int32_t* alias = fuse_donates() ? malloc(sizeof(*alias) * np) : NULL;
  bool* donate = NULL;
  tpu_status_t* st = params && results && (alias || !fuse_donates())
                         ? NULL
                         : TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "fused eager: out of host memory");
  for (int v = 0; !st && v < q->nvals; ++v)
    if (q->vals[v].op < 0) params[q->vals[v].param] = q->vals[v].ext;
  if (!st && alias && fuse_donations(q, outs, nouts, alias, params) > 0) {
    donate = malloc(sizeof(*donate) * np);
    if (!donate) st = TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "fused eager: out of host memory");
    for (int p = 0; donate && p < q->nparams; ++p) donate[p] = alias[p] >= 0;
  }
  if (!st) st = fuse_program(q, outs, nouts, donate ? alias : NULL, &entry);
  if (!st && !entry) {
    st = fuse_run_ops(q, device);
  } else if (!st) {
    const tpu_compiled_t* c = tpu_cache_entry_compiled(entry);
    char producer[64];
    snprintf(producer, sizeof producer, "fused program of %d ops", q->nops);
    st = tpu_executable_launch_donating(c->exe, device, q->nparams, params, donate, nouts, c->out_avals, producer,
                                        results);
  }
  for (int k = 0; !st && entry && k < nouts; ++k) {
    tpu_buffer_resolve(q->vals[outs[k]].pending, results[k]);
    tpu_buffer_release(results[k]);
  }
  tpu_cache_entry_release(entry);
  free(params);
  free(alias);
  free(donate);
  free(results);
  return st;
}

/* The period of the longest stretch at the end of the history that repeats at
 * least twice, that stretch being at least `min_len` executions (half the last
 * recording: a loop's first pass reads what came before the loop, not what its
 * previous pass made, so the first recording differs from the later ones in its
 * first ops); 0: none. The longest stretch is the most evidence: a layer that
 * repeats inside a longer loop body is not taken for the body, and what came
 * before the loop (a prefill before a decode loop) is left out.
 *
 * One pass: a sequence and its reverse have the same periods, and the prefix
 * function of the reversed history (Knuth-Morris-Pratt) gives each of its
 * prefixes' longest border, whose length m - border is the smallest period;
 * those prefixes are the stretches at the end, reversed. */
static int fuse_period(fuse_queue_t* q, int min_len) {
  const int n = q->hist_len;
  const uint64_t* rev_end = q->hist + n - 1; /* rev_end[-i]: element i of the reverse */
  int32_t* border = q->hist_border;
  border[0] = 0;
  for (int i = 1; i < n; ++i) {
    int32_t k = border[i - 1];
    while (k > 0 && rev_end[-i] != rev_end[-k]) k = border[k - 1];
    border[i] = k + (rev_end[-i] == rev_end[-k]);
  }
  for (int m = n; m >= min_len && m >= 2; --m) {
    int p = m - border[m - 1];
    if (p <= m / 2) return p;
  }
  return 0;
}

/* Operands made at most this many ops earlier are told apart by that distance;
 * all others (and uploads, strict results) are "far". */
#define FUSE_HIST_NEAR 64

/* What the period search compares per execution: its executable and, per
 * operand, how many ops earlier in the op stream it was made (the same in every
 * iteration of a loop, wherever the cuts fall). Executables alone show a body
 * that repeats one op (500 times `x = x * 0.5 + 1` per call, each call on the
 * same input) with the op's period: cuts on it drift across the calls, where
 * the body reads its input again, and every chunk is a new program. */
static uint64_t fuse_hist_entry(const fuse_queue_t* q, int i) {
  const fuse_op_t* op = &q->ops[i];
  const uint64_t first = q->seq - (uint64_t)q->nops + 1; /* ops[0]'s place in the stream */
  uint64_t h = tpu_executable_id(op->exe);
  for (int a = 0; a < op->nargs; ++a) {
    const fuse_val_t* x = &q->vals[q->args[op->first_arg + a]];
    uint64_t made = x->op >= 0 ? first + (uint64_t)x->op : tpu_buffer_fuse_seq(x->ext);
    uint64_t back = made ? first + (uint64_t)i - made : FUSE_HIST_NEAR + 1;
    uint64_t pair[2] = {h, back <= FUSE_HIST_NEAR ? back : FUSE_HIST_NEAR + 1};
    h = tpu_hash_bytes((const uint8_t*)pair, sizeof pair);
  }
  return h;
}

/* Adds the recording being cut to the history. Past FUSE_HIST_OPS executions
 * the oldest go, down to half of that, so the move is paid once per half the
 * history, not at every cut. False without memory (the period is then not
 * learned: more programs, nothing wrong). */
static bool fuse_hist_add(fuse_queue_t* q) {
  int keep = q->hist_len + q->nops <= FUSE_HIST_OPS ? q->hist_len
             : q->nops >= FUSE_HIST_OPS / 2         ? 0
                                                    : FUSE_HIST_OPS / 2 - q->nops;
  if (keep > 0 && keep < q->hist_len)
    memmove(q->hist, q->hist + (q->hist_len - keep), sizeof(*q->hist) * (size_t)keep);
  q->hist_len = keep;
  /* The work space first: it grows to the capacity the history then takes, so
   * it is never shorter, whichever of the two fails. */
  int need = q->hist_len + q->nops, cap = q->hist_cap;
  if (!fuse_grow((void**)&q->hist_border, &cap, need, sizeof(*q->hist_border)) ||
      !fuse_grow((void**)&q->hist, &q->hist_cap, need, sizeof(*q->hist)))
    return false;
  for (int i = 0; i < q->nops; ++i) q->hist[q->hist_len++] = fuse_hist_entry(q, i);
  return true;
}

/* Whether the recording just added to the history repeats the executions one
 * period before it. */
static bool fuse_follows_period(const fuse_queue_t* q) {
  for (int i = q->hist_len - q->nops; i < q->hist_len; ++i)
    if (i >= q->period && q->hist[i] != q->hist[i - q->period]) return false;
  return true;
}

/* At a size cut: learns the loop's period, or checks the one learned. A period
 * the recording just cut did not follow is dropped and learned again from the
 * longer history: a stretch too short to show the loop body can repeat a layer
 * inside it, and cuts on the layer's period start at a new place in the body
 * each time. A period up to twice the recording's length is cut once per
 * period (one program per loop body); a longer one into chunks of the
 * recording's length from each period's start. */
static void fuse_learn_period(fuse_queue_t* q) {
  if (!fuse_hist_add(q)) {
    q->period = q->chunk = q->phase = 0;
    return;
  }
  if (q->period && fuse_follows_period(q)) return;
  if ((q->period = fuse_period(q, q->nops / 2)) == 0) {
    q->chunk = q->phase = 0;
    return;
  }
  q->chunk = q->period <= q->nops ? 0 : q->period <= 2 * q->nops ? q->period : q->nops;
  q->phase = 0;
}

static void fuse_forget_period(fuse_queue_t* q) {
  q->period = q->chunk = q->phase = 0;
  q->hist_len = 0;
}

static void fuse_reset(fuse_queue_t* q) {
  for (int v = 0; v < q->nvals; ++v) tpu_buffer_release(q->vals[v].ext);
  for (int i = 0; i < q->nops; ++i) tpu_executable_destroy(q->ops[i].exe);
  if (q->seen_len) memset(q->seen_keys, 0, sizeof(*q->seen_keys) * (size_t)q->seen_cap);
  q->nops = q->nargs = q->nvals = q->nparams = q->seen_len = 0;
  q->text = 0;
  q->epoch++;
}

static tpu_status_t* fuse_flush_locked(fuse_queue_t* q, int device, bool at_limit) {
  if (q->nops == 0) return NULL;
  if (at_limit) fuse_learn_period(q);
  int32_t* outs = malloc(sizeof(int32_t) * (size_t)(q->nvals ? q->nvals : 1));
  tpu_status_t* st = outs ? NULL : TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "fused eager: out of host memory");
  int n = 0;
  for (int v = 0; outs && v < q->nvals; ++v)
    if (q->vals[v].op >= 0 && q->vals[v].pending) outs[n++] = v;
  /* Nothing referenced: every result died, and the ops are pure. */
  if (!st && n > 0) {
    st = fuse_run(q, device, outs, n);
    tpu_metric_add(TPU_METRIC_FUSED_FLUSHES, 1);
  }
  for (int v = 0; st && v < q->nvals; ++v)
    if (q->vals[v].op >= 0 && q->vals[v].pending) tpu_buffer_fail(q->vals[v].pending, st);
  free(outs);
  fuse_reset(q);
  /* A sync point: the recordings up to the next one learn their own period (a
   * script may train, then generate without syncs). */
  if (!at_limit) fuse_forget_period(q);
  return st;
}

/* The pending hook (buffer.c): runs `device`'s recording, or every device's. */
static tpu_status_t* fuse_flush(int device) {
  pthread_once(&g_once, fuse_init);
  int lo = device < 0 ? 0 : device, hi = device < 0 ? tpu_runtime_device_count() : device + 1;
  if (hi > TPU_MAX_DEVICES) hi = TPU_MAX_DEVICES;
  tpu_status_t* first = NULL;
  for (int d = lo; d < hi; ++d) {
    fuse_queue_t* q = &g_queues[d];
    pthread_mutex_lock(&q->mu);
    tpu_status_t* st = fuse_flush_locked(q, d, false);
    pthread_mutex_unlock(&q->mu);
    if (!first) first = st;
    else tpu_status_free(st);
  }
  return first;
}
