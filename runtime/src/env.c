/* Environment variables: see env.h. */
#include "env.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

int64_t tpu_env_int(const char* name, int64_t min, int64_t max, int64_t fallback) {
  const char* v = getenv(name);
  if (!v || !*v) return fallback;
  char* end = NULL;
  errno = 0;
  long long parsed = strtoll(v, &end, 10);
  /* A number too large for long long is still a number: strtoll saturates it. */
  if (end == v || *end != '\0' || (errno && errno != ERANGE)) {
    fprintf(stderr, "torchtpu: ignoring %s=\"%s\": not an integer (using %lld)\n", name, v,
            (long long)fallback);
    return fallback;
  }
  if (parsed < min || parsed > max) {
    int64_t clamped = parsed < min ? min : max;
    fprintf(stderr, "torchtpu: %s=%s is outside %lld ... %lld (using %lld)\n", name, v,
            (long long)min, (long long)max, (long long)clamped);
    return clamped;
  }
  return parsed;
}

bool tpu_env_off(const char* name) {
  const char* v = getenv(name);
  return v && (strcasecmp(v, "0") == 0 || strcasecmp(v, "false") == 0 || strcasecmp(v, "off") == 0 ||
               strcasecmp(v, "no") == 0);
}
