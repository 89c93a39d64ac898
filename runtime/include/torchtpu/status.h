/* Status objects: every fallible function returns tpu_status_t* (NULL = OK).
 *
 * Ownership, for the whole public API (IREE-style, stated once):
 *  - a non-NULL status is owned by the caller, who frees it (tpu_status_free) or
 *    returns it upward;
 *  - functions named *_create / *_retain return an owned reference;
 *  - accessors borrow; *_release / *_free accept NULL;
 *  - outputs are the last parameters, named out_*, and are cleared on entry. */
#ifndef TORCHTPU_STATUS_H_
#define TORCHTPU_STATUS_H_

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 0 to 16: the numbering of abseil / PJRT error codes, so PJRT errors map 1:1.
 * Codes after TPU_UNAUTHENTICATED are torchtpu's own (a plugin's error never
 * has one); append only. */
typedef enum tpu_status_code {
  TPU_OK = 0,
  TPU_CANCELLED = 1,
  TPU_UNKNOWN = 2,
  TPU_INVALID_ARGUMENT = 3,
  TPU_DEADLINE_EXCEEDED = 4,
  TPU_NOT_FOUND = 5,
  TPU_ALREADY_EXISTS = 6,
  TPU_PERMISSION_DENIED = 7,
  TPU_RESOURCE_EXHAUSTED = 8,
  TPU_FAILED_PRECONDITION = 9,
  TPU_ABORTED = 10,
  TPU_OUT_OF_RANGE = 11,
  TPU_UNIMPLEMENTED = 12,
  TPU_INTERNAL = 13,
  TPU_UNAVAILABLE = 14,
  TPU_DATA_LOSS = 15,
  TPU_UNAUTHENTICATED = 16,
  /* A linear algebra routine failed on its input's values (singular, not
   * positive definite, no convergence): PyTorch's torch.linalg.LinAlgError. */
  TPU_LINALG_ERROR = 17,
} tpu_status_code_t;

typedef struct tpu_status tpu_status_t;

#if defined(__GNUC__) || defined(__clang__)
#define TPU_PRINTF_ATTR(f, a) __attribute__((format(printf, f, a)))
#else
#define TPU_PRINTF_ATTR(f, a)
#endif

/* Never returns NULL: allocation failure yields a static out-of-memory status. */
tpu_status_t* tpu_status_make(tpu_status_code_t code, const char* file, int line,
                              const char* fmt, ...) TPU_PRINTF_ATTR(4, 5);
tpu_status_t* tpu_status_makev(tpu_status_code_t code, const char* file, int line,
                               const char* fmt, va_list ap);
/* Prefixes the message with "<prefix>: "; takes and returns ownership. */
tpu_status_t* tpu_status_annotate(tpu_status_t* status, const char* fmt, ...)
    TPU_PRINTF_ATTR(2, 3);
tpu_status_code_t tpu_status_code(const tpu_status_t* status);
const char* tpu_status_message(const tpu_status_t* status);
const char* tpu_status_file(const tpu_status_t* status);
int tpu_status_line(const tpu_status_t* status);
const char* tpu_status_code_name(tpu_status_code_t code);
void tpu_status_free(tpu_status_t* status);

#define TPU_STATUS(code, ...) tpu_status_make((code), __FILE__, __LINE__, __VA_ARGS__)
#define TPU_RETURN_IF_ERROR(expr)        \
  do {                                   \
    tpu_status_t* tpu_status_ = (expr);  \
    if (tpu_status_) return tpu_status_; \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif
