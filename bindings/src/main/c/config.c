/*
 * config.c - the host emulation's environment variables (README.md,
 * "Environment variables"), each parsed strictly and checked against its range.
 *
 * A malformed or out-of-range value is a configuration error, never a silent
 * default or clamp: a test that sets JNCCL_HOST_FAULT_AT=2x would otherwise run
 * without its fault and pass for the wrong reason. All variables are checked
 * once, at the library's first use (jn_config_error): the Java loader asks
 * jnccl_emu_config_error() right after loading the library and refuses to go
 * on, naming the variable, the value and the accepted range. Variables read
 * again when a stream or communicator is created (so that a test can change
 * them in process) are checked again there, and a bad value fails that
 * creation with the same text.
 */
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
  JN_VAR_DEVICES,
  JN_VAR_CHUNK_BYTES,
  JN_VAR_INIT_TIMEOUT_MS,
  JN_VAR_FAULT_RANK,
  JN_VAR_FAULT_AT,
  JN_VAR_DELAY_US,
  JN_VAR_DELAY_DEVICE,
  JN_VAR_DELAY_RANK,
  JN_VAR_COUNT
};

/* The integer variables: default, accepted range. JNCCL_HOST_DELAY_DEVICE's upper bound is the
 * number of devices less one (set from JNCCL_HOST_DEVICES when it is read). */
static const struct {
  const char *name;
  long dflt, lo, hi;
} VARS[] = {
    [JN_VAR_DEVICES] = {"JNCCL_HOST_DEVICES", 8, 0, JN_MAX_DEVICES},
    [JN_VAR_CHUNK_BYTES] = {"JNCCL_HOST_CHUNK_BYTES", 1L << 20, 4096, 256L << 20},
    [JN_VAR_INIT_TIMEOUT_MS] = {"JNCCL_HOST_INIT_TIMEOUT_MS", 120000, 1, 24L * 3600 * 1000},
    [JN_VAR_FAULT_RANK] = {"JNCCL_HOST_FAULT_RANK", 0, 0, INT_MAX},
    [JN_VAR_FAULT_AT] = {"JNCCL_HOST_FAULT_AT", 1, 1, INT_MAX},
    [JN_VAR_DELAY_US] = {"JNCCL_HOST_DELAY_US", 0, 0, 60L * 1000 * 1000},
    [JN_VAR_DELAY_DEVICE] = {"JNCCL_HOST_DELAY_DEVICE", -1, 0, JN_MAX_DEVICES - 1},
    [JN_VAR_DELAY_RANK] = {"JNCCL_HOST_DELAY_RANK", -1, 0, INT_MAX},
};
_Static_assert(sizeof VARS / sizeof VARS[0] == JN_VAR_COUNT, "one entry per variable");

/* Writes "NAME=value is not valid: expected ..." (the value shortened if very long). */
__attribute__((format(printf, 5, 6))) static void bad_value(const char *name, const char *value, char *err,
                                                            size_t errlen, const char *fmt, ...) {
  char expected[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(expected, sizeof expected, fmt, ap);
  va_end(ap);
  snprintf(err, errlen, "%s=%.64s%s is not valid: expected %s", name, value, strlen(value) > 64 ? "..." : "",
           expected);
}

/* Reads variable v into *out (its default when unset); hi < 0 keeps the table's bound. */
static int env_int(int v, long hi, long *out, char *err, size_t errlen) {
  const char *name = VARS[v].name, *s = getenv(name);
  long lo = VARS[v].lo;
  if (hi < 0) hi = VARS[v].hi;
  *out = VARS[v].dflt;
  if (s == NULL) return 1;
  /* strtol alone would accept leading blanks, stop silently at trailing junk ("12abc") and
   * return 0 for an empty string. */
  char *end = NULL;
  errno = 0;
  long value = *s == '\0' || isspace((unsigned char)*s) ? 0 : strtol(s, &end, 10);
  if (end == NULL || end == s || *end != '\0' || errno != 0 || value < lo || value > hi) {
    bad_value(name, s, err, errlen, "an integer in [%ld, %ld]", lo, hi);
    return 0;
  }
  *out = value;
  return 1;
}

/* JNCCL_HOST_FAULT: unset (no fault), "fail", "hang", "hang-enqueue" or "hang-abort". */
static int env_fault(int *mode, char *err, size_t errlen) {
  const char *f = getenv("JNCCL_HOST_FAULT");
  *mode = JN_FAULT_NONE;
  if (f == NULL) return 1;
  if (strcmp(f, "fail") == 0) *mode = JN_FAULT_FAIL;
  else if (strcmp(f, "hang") == 0) *mode = JN_FAULT_HANG;
  else if (strcmp(f, "hang-enqueue") == 0) *mode = JN_FAULT_HANG_ENQUEUE;
  else if (strcmp(f, "hang-abort") == 0) *mode = JN_FAULT_HANG_ABORT;
  else {
    bad_value("JNCCL_HOST_FAULT", f, err, errlen, "fail, hang, hang-enqueue or hang-abort");
    return 0;
  }
  return 1;
}

/* JNCCL_HOST_DELAY_DEVICE must name a device: [0, devices - 1] (with no device, [0, -1]). */
static int env_delay_device(int ndev, long *out, char *err, size_t errlen) {
  const char *s = getenv(VARS[JN_VAR_DELAY_DEVICE].name);
  if (s != NULL && ndev == 0) {
    bad_value(VARS[JN_VAR_DELAY_DEVICE].name, s, err, errlen, "no value: JNCCL_HOST_DEVICES=0 gives no device");
    *out = -1;
    return 0;
  }
  return env_int(JN_VAR_DELAY_DEVICE, ndev - 1L, out, err, errlen);
}

int jn_stream_env_read(jn_stream_env *env, char *err, size_t errlen) {
  return env_int(JN_VAR_DELAY_RANK, -1, &env->delay_rank, err, errlen) &&
         env_delay_device(jn_config_devices(), &env->delay_device, err, errlen) &&
         env_int(JN_VAR_DELAY_US, -1, &env->delay_us, err, errlen);
}

int jn_comm_env_read(jn_comm_env *env, char *err, size_t errlen) {
  long chunk = 0;
  if (!env_int(JN_VAR_CHUNK_BYTES, -1, &chunk, err, errlen)) return 0;
  env->chunk = (uint64_t)chunk & ~(uint64_t)63; /* staging slots stay 64-byte aligned */
  return env_int(JN_VAR_INIT_TIMEOUT_MS, -1, &env->init_timeout_ms, err, errlen) &&
         env_fault(&env->fault_mode, err, errlen) &&
         env_int(JN_VAR_FAULT_RANK, -1, &env->fault_rank, err, errlen) &&
         env_int(JN_VAR_FAULT_AT, -1, &env->fault_at, err, errlen) &&
         env_int(JN_VAR_DELAY_RANK, -1, &env->delay_rank, err, errlen) &&
         env_int(JN_VAR_DELAY_US, -1, &env->delay_us, err, errlen);
}

/* ------------------------------------------------ the check at first use -- */

static pthread_once_t g_config_once = PTHREAD_ONCE_INIT;
static char g_config_error[1024]; /* "" when every variable is valid */
static int g_config_devices;

/* Adds one error to g_config_error ("; " between several). */
static void config_note(int ok, const char *err) {
  if (ok) return;
  size_t used = strlen(g_config_error);
  snprintf(g_config_error + used, sizeof g_config_error - used, "%s%s", used ? "; " : "", err);
}

static void config_check(void) {
  char err[256];
  long ndev = 0, v = 0;
  int mode = 0;
  int devices_ok = env_int(JN_VAR_DEVICES, -1, &ndev, err, sizeof err);
  config_note(devices_ok, err);
  g_config_devices = devices_ok ? (int)ndev : 0;
  for (int i = 0; i < JN_VAR_COUNT; i++) {
    if (i == JN_VAR_DEVICES) continue;
    /* A device number cannot be judged without a valid device count (that error is noted). */
    if (i == JN_VAR_DELAY_DEVICE) {
      if (devices_ok) config_note(env_delay_device((int)ndev, &v, err, sizeof err), err);
      continue;
    }
    config_note(env_int(i, -1, &v, err, sizeof err), err);
  }
  config_note(env_fault(&mode, err, sizeof err), err);
}

const char *jn_config_error(void) {
  pthread_once(&g_config_once, config_check);
  return g_config_error[0] ? g_config_error : NULL;
}

int jn_config_devices(void) {
  pthread_once(&g_config_once, config_check);
  return g_config_error[0] ? 0 : g_config_devices;
}

const char *jnccl_emu_config_error(void) { return jn_config_error(); }
