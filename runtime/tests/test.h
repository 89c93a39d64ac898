/* A tiny C test framework shared by every runtime/tests/test_*.c file.
 *
 *   TEST(buffer_round_trip) {
 *     tpu_buffer_t* buf = NULL;
 *     ASSERT_OK(tpu_buffer_from_host(0, data, &aval, &buf));
 *     EXPECT_EQ_INT(tpu_buffer_device(buf), 0);
 *     tpu_buffer_release(buf);
 *   }
 *
 * TEST registers the function from a constructor (gcc and clang), so tests in
 * any translation unit are found without a list. EXPECT_* record a failure and
 * go on; ASSERT_* record it and return from the test. test_main.c runs them all
 * (in file order, then definition order) and ends with "N passed, N failed". */
#ifndef TORCHTPU_TESTS_TEST_H_
#define TORCHTPU_TESTS_TEST_H_

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "torchtpu/status.h"

typedef void (*tpu_test_fn_t)(void);
void tpu_test_register(const char* name, const char* file, tpu_test_fn_t fn);
/* Records one failed check of the running test and prints it. */
void tpu_test_fail(const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Checks a status: OK returns true; an error is printed, freed and fails. */
bool tpu_test_check_ok(tpu_status_t* status, const char* expr, const char* file, int line);
/* Checks that `status` has `code`; frees it. */
bool tpu_test_check_code(tpu_status_t* status, tpu_status_code_t code, const char* expr,
                         const char* file, int line);

#define TEST(name)                                                   \
  static void tpu_test_##name(void);                                 \
  __attribute__((constructor)) static void tpu_test_reg_##name(void) { \
    tpu_test_register(#name, __FILE__, tpu_test_##name);             \
  }                                                                  \
  static void tpu_test_##name(void)

#define EXPECT(cond)                                                       \
  do {                                                                     \
    if (!(cond)) tpu_test_fail(__FILE__, __LINE__, "expected %s", #cond);  \
  } while (0)
#define ASSERT(cond)                                                       \
  do {                                                                     \
    if (!(cond)) {                                                         \
      tpu_test_fail(__FILE__, __LINE__, "assertion %s", #cond);            \
      return;                                                              \
    }                                                                      \
  } while (0)

#define EXPECT_EQ_INT(a, b)                                                                 \
  do {                                                                                      \
    long long tpu_a_ = (long long)(a), tpu_b_ = (long long)(b);                             \
    if (tpu_a_ != tpu_b_)                                                                   \
      tpu_test_fail(__FILE__, __LINE__, "%s == %s: %lld vs %lld", #a, #b, tpu_a_, tpu_b_);  \
  } while (0)
#define ASSERT_EQ_INT(a, b)                                                                 \
  do {                                                                                      \
    long long tpu_a_ = (long long)(a), tpu_b_ = (long long)(b);                             \
    if (tpu_a_ != tpu_b_) {                                                                 \
      tpu_test_fail(__FILE__, __LINE__, "%s == %s: %lld vs %lld", #a, #b, tpu_a_, tpu_b_);  \
      return;                                                                               \
    }                                                                                       \
  } while (0)
#define EXPECT_NEAR(a, b, tol)                                                          \
  do {                                                                                  \
    double tpu_a_ = (double)(a), tpu_b_ = (double)(b);                                  \
    if (!(fabs(tpu_a_ - tpu_b_) <= (tol)))                                              \
      tpu_test_fail(__FILE__, __LINE__, "%s ~= %s: %g vs %g", #a, #b, tpu_a_, tpu_b_);  \
  } while (0)
#define EXPECT_STREQ(a, b)                                                                \
  do {                                                                                    \
    const char *tpu_a_ = (a), *tpu_b_ = (b);                                              \
    if (!tpu_a_ || !tpu_b_ || strcmp(tpu_a_, tpu_b_) != 0)                                \
      tpu_test_fail(__FILE__, __LINE__, "%s == %s: \"%s\" vs \"%s\"", #a, #b,             \
                    tpu_a_ ? tpu_a_ : "(null)", tpu_b_ ? tpu_b_ : "(null)");              \
  } while (0)

/* The status is consumed in all four. */
#define EXPECT_OK(expr) ((void)tpu_test_check_ok((expr), #expr, __FILE__, __LINE__))
#define ASSERT_OK(expr)                                               \
  do {                                                                \
    if (!tpu_test_check_ok((expr), #expr, __FILE__, __LINE__)) return; \
  } while (0)
#define EXPECT_CODE(expr, code) \
  ((void)tpu_test_check_code((expr), (code), #expr, __FILE__, __LINE__))
#define ASSERT_CODE(expr, code)                                                 \
  do {                                                                          \
    if (!tpu_test_check_code((expr), (code), #expr, __FILE__, __LINE__)) return; \
  } while (0)

#endif
