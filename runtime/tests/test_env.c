/* The one rule for the runtime's environment variables (env.h). */
#include <stdint.h>
#include <stdlib.h>

#include "env.h"
#include "test.h"

#define VAR "TPU_TEST_ENV_INT" /* not a TORCHTPU_ name: docs/environment.md lists those */

static int64_t read_as(const char* value) {
  if (value) setenv(VAR, value, 1);
  else unsetenv(VAR);
  int64_t v = tpu_env_int(VAR, 1, 1000, 7);
  unsetenv(VAR);
  return v;
}

TEST(env_int_defaults_clamps_and_ignores_junk) {
  EXPECT_EQ_INT(read_as(NULL), 7);
  EXPECT_EQ_INT(read_as(""), 7);
  EXPECT_EQ_INT(read_as("42"), 42);
  EXPECT_EQ_INT(read_as("1000"), 1000);
  EXPECT_EQ_INT(read_as("0"), 1);      /* below the range: clamped */
  EXPECT_EQ_INT(read_as("-5"), 1);
  EXPECT_EQ_INT(read_as("5000"), 1000); /* above it */
  EXPECT_EQ_INT(read_as("99999999999999999999999"), 1000); /* saturated, then clamped */
  EXPECT_EQ_INT(read_as("12abc"), 7);  /* not an integer: the default */
  EXPECT_EQ_INT(read_as("abc"), 7);
  EXPECT_EQ_INT(read_as("1.5"), 7);
}

TEST(env_off_knows_the_words_for_off) {
  const char* off[] = {"0", "false", "OFF", "No"};
  for (size_t i = 0; i < sizeof off / sizeof *off; i++) {
    setenv(VAR, off[i], 1);
    EXPECT(tpu_env_off(VAR));
  }
  const char* on[] = {"1", "yes", "", "offline"};
  for (size_t i = 0; i < sizeof on / sizeof *on; i++) {
    setenv(VAR, on[i], 1);
    EXPECT(!tpu_env_off(VAR));
  }
  unsetenv(VAR);
  EXPECT(!tpu_env_off(VAR));
}
