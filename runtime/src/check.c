/* Device-side checks: the per-device error word, the message table, the lowering
 * helper and the executor/sync hooks (design in check.h). */
#include "check.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One slot per device the client may have (client.c caps devices at 256 too). */
#define TPU_CHECK_MAX_DEVICES 256
/* Distinct messages (op, text) ever lowered. Texts may carry sizes, so a
 * program with ever-changing shapes could make many; past the cap, further
 * checks share one generic entry instead of growing without bound. */
#define TPU_CHECK_MAX_MESSAGES 4096
#define TPU_CHECK_TEXT_MAX 256

/* ------------------------------------------------------------ message table */

typedef struct tpu_check_msg {
  tpu_status_code_t code;
  char* op;   /* aten base name, "" for the overflow entry */
  char* text; /* may contain "{}" for the recorded value */
} tpu_check_msg_t;

static pthread_mutex_t g_msg_mu = PTHREAD_MUTEX_INITIALIZER;
static tpu_check_msg_t* g_msgs; /* id = index + 1; never freed, ids outlive cache entries */
static int g_nmsgs, g_msgs_cap;

/* The id of the overflow entry: table full or out of host memory. */
#define TPU_CHECK_GENERIC_ID (TPU_CHECK_MAX_MESSAGES + 1)

static char* tpu_check_strdup(const char* s) {
  size_t n = strlen(s) + 1;
  char* d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

/* Returns the id of (code, op, text), adding it when new. Runs on cache misses
 * only, so a linear scan is cheap next to the compile that follows. */
static int32_t tpu_check_intern(tpu_status_code_t code, const char* op, const char* text) {
  int32_t id = TPU_CHECK_GENERIC_ID;
  pthread_mutex_lock(&g_msg_mu);
  for (int i = 0; i < g_nmsgs; ++i) {
    const tpu_check_msg_t* m = &g_msgs[i];
    if (m->code == code && strcmp(m->op, op) == 0 && strcmp(m->text, text) == 0) {
      id = i + 1;
      goto done;
    }
  }
  if (g_nmsgs >= TPU_CHECK_MAX_MESSAGES) goto done;
  if (g_nmsgs == g_msgs_cap) {
    int cap = g_msgs_cap ? 2 * g_msgs_cap : 64;
    tpu_check_msg_t* p = realloc(g_msgs, sizeof(*p) * (size_t)cap);
    if (!p) goto done;
    g_msgs = p;
    g_msgs_cap = cap;
  }
  char* o = tpu_check_strdup(op);
  char* t = tpu_check_strdup(text);
  if (!o || !t) {
    free(o);
    free(t);
    goto done;
  }
  g_msgs[g_nmsgs] = (tpu_check_msg_t){code, o, t};
  id = ++g_nmsgs;
done:
  pthread_mutex_unlock(&g_msg_mu);
  return id;
}

/* Copies entry `id` out of the table (the table may grow meanwhile). */
static void tpu_check_lookup(int64_t id, tpu_status_code_t* code, char* op, size_t op_cap, char* text,
                             size_t text_cap) {
  *code = TPU_OUT_OF_RANGE;
  snprintf(op, op_cap, "%s", "");
  snprintf(text, text_cap, "%s", "a device-side check failed (index out of range)");
  pthread_mutex_lock(&g_msg_mu);
  if (id >= 1 && id <= g_nmsgs) {
    *code = g_msgs[id - 1].code;
    snprintf(op, op_cap, "%s", g_msgs[id - 1].op);
    snprintf(text, text_cap, "%s", g_msgs[id - 1].text);
  }
  pthread_mutex_unlock(&g_msg_mu);
}

/* The status for word {id, value}: each "{}" becomes the value. `at_op`: the op
 * whose own check failed in debug mode (the binding already names it). */
static tpu_status_t* tpu_check_status(int64_t id, int64_t value, const char* at_op) {
  tpu_status_code_t code;
  char op[128], text[TPU_CHECK_TEXT_MAX], msg[TPU_CHECK_TEXT_MAX + 64];
  tpu_check_lookup(id, &code, op, sizeof op, text, sizeof text);
  size_t len = 0;
  msg[0] = '\0';
  for (const char* p = text; len < sizeof msg;) {
    const char* hole = strstr(p, "{}");
    len += (size_t)snprintf(msg + len, sizeof msg - len, "%.*s", hole ? (int)(hole - p) : (int)strlen(p), p);
    if (!hole || len >= sizeof msg) break;
    len += (size_t)snprintf(msg + len, sizeof msg - len, "%" PRId64, value);
    p = hole + 2;
  }
  if (at_op && op[0] && strcmp(at_op, op) == 0) return TPU_STATUS(code, "%s", msg);
  return TPU_STATUS(code,
                    "aten::%s: %s (raised at the next synchronisation; run in debug mode to see it at the op)",
                    op[0] ? op : "?", msg);
}

/* ---------------------------------------------------------------- lowering */

static tpu_aval_t tpu_check_word_aval(void) {
  int64_t two = 2;
  return tpu_aval_make(TPU_I64, 1, &two);
}

void tpu_op_check(tpu_builder_t* b, tpu_op_t* op, tpu_val_t bad, tpu_val_t value, tpu_status_code_t code,
                  const char* fmt, ...) {
  if (!tpu_b_ok(b)) return;
  const tpu_aval_t* ba = tpu_b_aval(b, bad);
  if (ba->rank != 0 || ba->dtype != TPU_BOOL ||
      (value != TPU_NOVAL && (tpu_b_rank(b, value) != 0 || !tpu_dtype_is_int(tpu_b_dtype(b, value))))) {
    TPU_B_FAIL(b, TPU_INTERNAL, "%s: tpu_op_check wants a 0-d bool and a 0-d integer value", op->name);
    return;
  }
  char text[TPU_CHECK_TEXT_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  int32_t id = tpu_check_intern(code, op->name, text);
  /* The id is a runtime operand so the program text stays process-independent. */
  tpu_param_src_t src = {TPU_PARAM_CHECK_CODE, id, -1, TPU_I64, 0};
  tpu_aval_t sa = tpu_aval_make(TPU_I64, 0, NULL);
  tpu_val_t idv = tpu_op_add_param(b, op, src, &sa);
  tpu_val_t v = value == TPU_NOVAL ? tpu_b_const_i(b, TPU_I64, 0) : tpu_b_convert(b, value, TPU_I64);
  int64_t one = 1;
  tpu_val_t parts[2] = {tpu_b_reshape(b, idv, 1, &one), tpu_b_reshape(b, v, 1, &one)};
  tpu_val_t entry = tpu_b_concat(b, 2, parts, 0);
  /* Checks of the ops inside a program combine into the program's one word. */
  while (op->parent) op = op->parent;
  if (!op->checked) {
    op->check_acc = entry;
    op->check_bad = bad;
  } else { /* an earlier check (of this op, or an earlier op of the program) goes first */
    op->check_acc = tpu_b_select(b, op->check_bad, op->check_acc, entry);
    op->check_bad = tpu_b_binary(b, "stablehlo.or", op->check_bad, bad);
  }
  op->checked = true;
}

tpu_status_t* tpu_check_lower(tpu_builder_t* b, tpu_op_t* op, tpu_val_t* out_word) {
  *out_word = TPU_NOVAL;
  if (!op->checked || !tpu_b_ok(b)) return NULL;
  tpu_param_src_t src = {TPU_PARAM_CHECK_WORD, -1, -1, TPU_I64, 0};
  tpu_aval_t wa = tpu_check_word_aval();
  tpu_val_t word = tpu_op_add_param(b, op, src, &wa);
  /* Keep the incoming word when it holds an error already or nothing failed:
   * with no pending error it is all zeros, the "no error" word. */
  int64_t zero = 0, one = 1;
  tpu_val_t id = tpu_b_reshape(b, tpu_b_slice(b, word, &zero, &one, NULL), 0, NULL);
  tpu_val_t pending = tpu_b_compare(b, "NE", id, tpu_b_const_i(b, TPU_I64, 0));
  tpu_val_t keep = tpu_b_binary(b, "stablehlo.or", pending, tpu_b_unary(b, "stablehlo.not", op->check_bad));
  *out_word = tpu_b_select(b, keep, word, op->check_acc);
  return tpu_b_ok(b) ? NULL : tpu_b_take_error(b);
}

/* ------------------------------------------------------------ device words */

typedef struct tpu_check_dev {
  pthread_mutex_t mu;  /* held from taking the word to swapping in its successor */
  tpu_buffer_t* word;  /* the newest word; NULL: no error (the zero word stands in) */
  tpu_buffer_t* zero;  /* a zero word, uploaded once */
  atomic_bool dirty;   /* a checked op ran since the last read of the word */
} tpu_check_dev_t;

static tpu_check_dev_t g_devs[TPU_CHECK_MAX_DEVICES];
static pthread_once_t g_devs_once = PTHREAD_ONCE_INIT;

static void tpu_check_devs_init(void) {
  for (int i = 0; i < TPU_CHECK_MAX_DEVICES; ++i) {
    pthread_mutex_init(&g_devs[i].mu, NULL);
    atomic_init(&g_devs[i].dirty, false);
  }
}

static tpu_check_dev_t* tpu_check_dev(int device) {
  if (device < 0 || device >= TPU_CHECK_MAX_DEVICES) return NULL;
  pthread_once(&g_devs_once, tpu_check_devs_init);
  return &g_devs[device];
}

/* The operand for the device's current word (owned); call with d->mu held. */
static tpu_status_t* tpu_check_current_locked(tpu_check_dev_t* d, int device, tpu_buffer_t** out) {
  *out = NULL;
  if (!d->word && !d->zero) {
    int64_t zeros[2] = {0, 0};
    tpu_aval_t wa = tpu_check_word_aval();
    TPU_RETURN_IF_ERROR(tpu_buffer_from_host(device, zeros, &wa, &d->zero));
  }
  *out = tpu_buffer_retain(d->word ? d->word : d->zero);
  return NULL;
}

/* Fills the check operands of `params`: message ids (cached scalar buffers) now,
 * the word's index in *out_word for the caller to fill under the lock. */
static tpu_status_t* tpu_check_operands(const tpu_compiled_t* c, int device, tpu_buffer_t** params, int* out_word) {
  *out_word = -1;
  for (int p = 0; p < c->nparams; ++p) {
    if (c->params[p].kind == TPU_PARAM_CHECK_WORD) *out_word = p;
    if (c->params[p].kind != TPU_PARAM_CHECK_CODE) continue;
    int64_t id = c->params[p].arg;
    TPU_RETURN_IF_ERROR(tpu_scalar_buffer(device, TPU_I64, &id, &params[p]));
  }
  if (*out_word < 0) return TPU_STATUS(TPU_INTERNAL, "checked op without its error-word operand");
  return NULL;
}

/* Reads one device's word if dirty; `at_op` as in tpu_check_status. */
static tpu_status_t* tpu_check_read(int device, const char* at_op) {
  tpu_check_dev_t* d = tpu_check_dev(device);
  if (!d || !atomic_load_explicit(&d->dirty, memory_order_acquire)) return NULL;
  pthread_mutex_lock(&d->mu);
  tpu_buffer_t* w = tpu_buffer_retain(d->word);
  pthread_mutex_unlock(&d->mu);
  int64_t v[2] = {0, 0};
  tpu_status_t* st = w ? tpu_buffer_to_host(w, v, sizeof v) : NULL;
  if (w) tpu_metric_add(TPU_METRIC_CHECK_READS, 1);
  pthread_mutex_lock(&d->mu);
  if (st || v[0] != 0) {
    /* Reported now. Words made since carry this same error (first wins), so
     * they all go: the device starts clean. */
    tpu_buffer_release(d->word);
    d->word = NULL;
    atomic_store_explicit(&d->dirty, false, memory_order_release);
  } else if (d->word == w) {
    atomic_store_explicit(&d->dirty, false, memory_order_release);
  }
  pthread_mutex_unlock(&d->mu);
  tpu_buffer_release(w);
  if (st) return st; /* the checked op itself failed: its own error */
  return v[0] ? tpu_check_status(v[0], v[1], at_op) : NULL;
}

tpu_status_t* tpu_check_execute(const tpu_compiled_t* c, int device, tpu_buffer_t** params, const bool* donate,
                                const char* name, tpu_buffer_t** out_buffers) {
  tpu_check_dev_t* d = tpu_check_dev(device);
  if (!d) return TPU_STATUS(TPU_INVALID_ARGUMENT, "tpu:%d is not a device", device);
  int pw;
  TPU_RETURN_IF_ERROR(tpu_check_operands(c, device, params, &pw));
  int n = c->nouts + 1;
  tpu_buffer_t* small[8];
  tpu_buffer_t** outs = n <= 8 ? small : calloc((size_t)n, sizeof(*outs));
  if (!outs) return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  pthread_mutex_lock(&d->mu);
  tpu_status_t* st = tpu_check_current_locked(d, device, &params[pw]);
  if (!st) st = tpu_executable_execute_donating(c->exe, device, c->nparams, params, donate, n, c->out_avals, name, outs);
  if (!st) {
    tpu_buffer_release(d->word);
    d->word = outs[c->nouts];
    atomic_store_explicit(&d->dirty, true, memory_order_release);
  }
  pthread_mutex_unlock(&d->mu);
  if (!st) memcpy(out_buffers, outs, sizeof(*outs) * (size_t)c->nouts);
  if (outs != small) free(outs);
  tpu_metric_add(TPU_METRIC_CHECKED_OPS, 1);
  if (!st && tpu_runtime_eager_mode() == TPU_EAGER_DEBUG) {
    st = tpu_check_read(device, name);
    for (int i = 0; st && i < c->nouts; ++i) {
      tpu_buffer_release(out_buffers[i]);
      out_buffers[i] = NULL;
    }
  }
  return st;
}

/* ---------------------------------------------------------------- sync points */

tpu_status_t* tpu_check_sync(int device) {
  if (device >= 0) return tpu_check_read(device, NULL);
  int n = tpu_runtime_device_count();
  if (n > TPU_CHECK_MAX_DEVICES) n = TPU_CHECK_MAX_DEVICES;
  /* The first error only; other devices keep theirs for the next sync. */
  for (int i = 0; i < n; ++i) TPU_RETURN_IF_ERROR(tpu_check_read(i, NULL));
  return NULL;
}

void tpu_check_release_all(void) {
  for (int i = 0; i < TPU_CHECK_MAX_DEVICES; ++i) {
    tpu_check_dev_t* d = tpu_check_dev(i);
    pthread_mutex_lock(&d->mu);
    tpu_buffer_release(d->word);
    tpu_buffer_release(d->zero);
    d->word = d->zero = NULL;
    atomic_store_explicit(&d->dirty, false, memory_order_release);
    pthread_mutex_unlock(&d->mu);
  }
}
