/* Reading the runtime's environment variables, one rule for all of them
 * (docs/environment.md): unset or empty means the default; a value that is not
 * what the variable takes is ignored with one line on stderr naming it, and the
 * default is used; an integer outside the variable's range is clamped to it.
 * The callers read each variable once and keep the result. */
#ifndef TORCHTPU_ENV_H_
#define TORCHTPU_ENV_H_

#include <stdbool.h>
#include <stdint.h>

/* $name as a decimal integer in [min, max] (min <= fallback <= max). */
int64_t tpu_env_int(const char* name, int64_t min, int64_t max, int64_t fallback);

/* Whether $name is 0, false, off or no (any case): a switch turned off. */
bool tpu_env_off(const char* name);

#endif /* TORCHTPU_ENV_H_ */
