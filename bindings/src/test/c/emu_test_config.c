/*
 * emu_test_config.c - the emulation's environment variables are validated: a
 * malformed or out-of-range value is refused at the library's first use
 * (jnccl_emu_config_error names the variable, the value and the range; CUDA
 * calls then fail with cudaErrorInitializationError, NCCL inits with
 * ncclInvalidUsage and the same text), and again when a stream or communicator
 * that reads it is created. Valid edge values are accepted.
 */
#include "emu_test.h"

#include <sys/types.h>

/* ============================================================ first use */

/* Child mode (emu_test --config-probe): reports what the library says about its environment. */
int config_probe(void) {
  const char *err = jnccl_emu_config_error();
  int count = -1;
  cudaError_t crc = cudaGetDeviceCount(&count);
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  ncclResult_t nrc = ncclGetUniqueId(&id);
  if (nrc == ncclSuccess) nrc = ncclCommInitRank(&comm, 1, id, 0);
  printf("error=%s\ncount=%d:%d\ninit=%d:%s\n", err != NULL ? err : "none", (int)crc, count, (int)nrc,
         nrc == ncclSuccess ? "" : ncclGetLastError(NULL));
  if (comm != NULL) ncclCommDestroy(comm);
  return 0;
}

typedef struct {
  const char *name, *value;   /* set in the child's environment */
  const char *name2, *value2; /* a second variable, or NULL */
  const char *range;          /* the accepted range in the text; NULL: the value is valid */
  int devices;                /* valid case: the device count cudaGetDeviceCount reports (0: none) */
} config_case;

/* Runs the probe in a fresh process (exec of this program) with the case's variables. */
static void probe_run(const config_case *k, char *out, size_t cap) {
  int fd[2];
  if (pipe(fd) != 0) fatal();
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fd[1], 1);
    close(fd[0]);
    setenv(k->name, k->value, 1);
    if (k->name2 != NULL) setenv(k->name2, k->value2, 1);
    execl("/proc/self/exe", "emu_test", "--config-probe", (char *)NULL);
    _exit(127);
  }
  close(fd[1]);
  size_t n = 0;
  for (ssize_t r; n + 1 < cap && (r = read(fd[0], out + n, cap - 1 - n)) > 0;) n += (size_t)r;
  out[n] = '\0';
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s=%s: probe status %#x", k->name, k->value, status);
}

/* Expected refusal text of a bad value: "NAME=value is not valid: expected <range>". */
static void refusal(char *buf, size_t cap, const char *name, const char *value, const char *range) {
  snprintf(buf, cap, "%s=%s is not valid: expected %s", name, value, range);
}

static void check_case(const config_case *k) {
  char out[4096], want[512], line[640];
  probe_run(k, out, sizeof out);
  if (k->range == NULL) {
    snprintf(want, sizeof want, "error=none\ncount=%d:%d\n", k->devices ? cudaSuccess : cudaErrorNoDevice,
             k->devices);
    EXPECT(strstr(out, want) != NULL, "%s=%s should be accepted; probe said:\n%s", k->name, k->value, out);
    if (k->devices > 0)
      EXPECT(strstr(out, "init=0:") != NULL, "%s=%s: world-1 init failed:\n%s", k->name, k->value, out);
    return;
  }
  const char *name = k->name2 != NULL ? k->name2 : k->name, *value = k->name2 != NULL ? k->value2 : k->value;
  refusal(want, sizeof want, name, value, k->range);
  snprintf(line, sizeof line, "error=%s\n", want);
  EXPECT(strstr(out, line) != NULL, "%s=%s: expected \"%s\"; probe said:\n%s", name, value, want, out);
  snprintf(line, sizeof line, "count=%d:0\n", cudaErrorInitializationError);
  EXPECT(strstr(out, line) != NULL, "%s=%s: cudaGetDeviceCount should fail with an init error:\n%s", name, value,
         out);
  snprintf(line, sizeof line, "init=%d:ncclCommInitRank : %s\n", ncclInvalidUsage, want);
  EXPECT(strstr(out, line) != NULL, "%s=%s: ncclCommInitRank should refuse with the text:\n%s", name, value, out);
}

#define BAD(n, v, r) {n, v, NULL, NULL, r, 0}
#define GOOD(n, v, d) {n, v, NULL, NULL, NULL, d}
#define INT_RANGE(lo, hi) "an integer in [" lo ", " hi "]"

void test_config_load(void) {
  static const char *const malformed[] = {"lots", "-1x", "12abc", "", " 8", "99999999999999999999", "0x10"};
  static const struct {
    const char *name, *range, *below, *above;
  } ints[] = {
      {"JNCCL_HOST_DEVICES", INT_RANGE("0", "255"), "-1", "256"},
      {"JNCCL_HOST_CHUNK_BYTES", INT_RANGE("4096", "268435456"), "4095", "268435457"},
      {"JNCCL_HOST_INIT_TIMEOUT_MS", INT_RANGE("1", "86400000"), "0", "86400001"},
      {"JNCCL_HOST_FAULT_RANK", INT_RANGE("0", "2147483647"), "-1", "2147483648"},
      {"JNCCL_HOST_FAULT_AT", INT_RANGE("1", "2147483647"), "0", "2147483648"},
      {"JNCCL_HOST_DELAY_US", INT_RANGE("0", "60000000"), "-1", "60000001"},
      {"JNCCL_HOST_DELAY_DEVICE", INT_RANGE("0", "7"), "-1", "8"},
      {"JNCCL_HOST_DELAY_RANK", INT_RANGE("0", "2147483647"), "-1", "2147483648"},
  };
  int cases = 0;
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
    for (size_t m = 0; m < sizeof malformed / sizeof malformed[0]; m++, cases++) {
      config_case k = BAD(ints[i].name, malformed[m], ints[i].range);
      check_case(&k);
    }
    config_case below = BAD(ints[i].name, ints[i].below, ints[i].range);
    config_case above = BAD(ints[i].name, ints[i].above, ints[i].range);
    check_case(&below);
    check_case(&above);
    cases += 2;
  }
  static const config_case more[] = {
      BAD("JNCCL_HOST_DEVICES", "300", INT_RANGE("0", "255")),
      BAD("JNCCL_HOST_FAULT", "boom", "fail, hang, hang-enqueue or hang-abort"),
      BAD("JNCCL_HOST_FAULT", "FAIL", "fail, hang, hang-enqueue or hang-abort"),
      BAD("JNCCL_HOST_FAULT", "", "fail, hang, hang-enqueue or hang-abort"),
      /* the device range follows JNCCL_HOST_DEVICES */
      {"JNCCL_HOST_DEVICES", "2", "JNCCL_HOST_DELAY_DEVICE", "2", INT_RANGE("0", "1"), 0},
      {"JNCCL_HOST_DEVICES", "0", "JNCCL_HOST_DELAY_DEVICE", "0", "no value: JNCCL_HOST_DEVICES=0 gives no device", 0},
      /* valid edges */
      GOOD("JNCCL_HOST_DEVICES", "0", 0),
      GOOD("JNCCL_HOST_DEVICES", "1", 1),
      GOOD("JNCCL_HOST_DEVICES", "255", 255),
      GOOD("JNCCL_HOST_CHUNK_BYTES", "4096", 8),
      GOOD("JNCCL_HOST_CHUNK_BYTES", "268435456", 8),
      GOOD("JNCCL_HOST_INIT_TIMEOUT_MS", "1", 8),
      GOOD("JNCCL_HOST_INIT_TIMEOUT_MS", "86400000", 8),
      GOOD("JNCCL_HOST_FAULT", "fail", 8),
      GOOD("JNCCL_HOST_FAULT", "hang", 8),
      GOOD("JNCCL_HOST_FAULT_RANK", "2147483647", 8),
      GOOD("JNCCL_HOST_FAULT_AT", "1", 8),
      GOOD("JNCCL_HOST_DELAY_US", "60000000", 8),
      GOOD("JNCCL_HOST_DELAY_DEVICE", "0", 8),
      GOOD("JNCCL_HOST_DELAY_DEVICE", "7", 8),
      GOOD("JNCCL_HOST_DELAY_RANK", "0", 8),
      {"JNCCL_HOST_DEVICES", "1", "JNCCL_HOST_DELAY_DEVICE", "0", NULL, 1},
  };
  for (size_t i = 0; i < sizeof more / sizeof more[0]; i++, cases++) check_case(&more[i]);
  /* Several bad variables: every one is named. */
  char out[4096];
  config_case two = {"JNCCL_HOST_FAULT", "x", "JNCCL_HOST_DELAY_US", "y", NULL, 0};
  probe_run(&two, out, sizeof out);
  EXPECT(strstr(out, "JNCCL_HOST_DELAY_US=y is not valid: expected an integer in [0, 60000000]") != NULL &&
             strstr(out, "; ") != NULL && strstr(out, "JNCCL_HOST_FAULT=x is not valid: expected fail, hang, hang-enqueue or hang-abort") != NULL,
         "two bad variables should both be named:\n%s", out);
  printf("  configuration checked at first use ok (%d cases)\n", cases + 1);
}

/* ======================================================= at creation */

/* The variables read at creation are checked there: a test may set them in process. */
void test_config_creation(void) {
  cudaStream_t s = NULL;
  char want[256];
  /* streams */
  setenv("JNCCL_HOST_DELAY_US", "12abc", 1);
  EXPECT_CUDA(cudaStreamCreateWithFlags(&s, JN_cudaStreamNonBlocking), cudaErrorInvalidValue);
  EXPECT_CUDA(cudaGetLastError(), cudaErrorInvalidValue);
  unsetenv("JNCCL_HOST_DELAY_US");
  char dev[16];
  snprintf(dev, sizeof dev, "%d", g_ndev); /* one past the last device */
  setenv("JNCCL_HOST_DELAY_DEVICE", dev, 1);
  EXPECT_CUDA(cudaStreamCreateWithFlags(&s, JN_cudaStreamNonBlocking), cudaErrorInvalidValue);
  snprintf(dev, sizeof dev, "%d", g_ndev - 1); /* the last device is fine */
  setenv("JNCCL_HOST_DELAY_DEVICE", dev, 1);
  CK(cudaStreamCreateWithFlags(&s, JN_cudaStreamNonBlocking));
  CK(cudaStreamDestroy(s));
  unsetenv("JNCCL_HOST_DELAY_DEVICE");
  EXPECT_CUDA(cudaGetLastError(), cudaErrorInvalidValue); /* the refusal above, and it is reset */

  /* communicators: the init is refused with the text, before anything is created */
  ncclUniqueId id;
  ncclComm_t c = NULL, child = NULL;
  NK(ncclGetUniqueId(&id));
  setenv("JNCCL_HOST_FAULT_AT", "0", 1);
  EXPECT_NCCL(ncclCommInitRank(&c, 1, id, 0), ncclInvalidUsage);
  refusal(want, sizeof want, "JNCCL_HOST_FAULT_AT", "0", "an integer in [1, 2147483647]");
  EXPECT(strstr(ncclGetLastError(NULL), want) != NULL, "init: \"%s\" not in \"%s\"", want, ncclGetLastError(NULL));
  EXPECT(!shm_exists(&id), "a refused init created its segment");
  unsetenv("JNCCL_HOST_FAULT_AT");
  setenv("JNCCL_HOST_CHUNK_BYTES", "4096", 1); /* the smallest chunk is valid */
  NK(ncclCommInitRank(&c, 1, id, 0));
  setenv("JNCCL_HOST_CHUNK_BYTES", "4095", 1); /* a split reads it for its child */
  EXPECT_NCCL(ncclCommSplit(c, 0, 0, &child, NULL), ncclInvalidUsage);
  refusal(want, sizeof want, "JNCCL_HOST_CHUNK_BYTES", "4095", "an integer in [4096, 268435456]");
  EXPECT(strstr(ncclGetLastError(NULL), want) != NULL, "split: \"%s\" not in \"%s\"", want, ncclGetLastError(NULL));
  unsetenv("JNCCL_HOST_CHUNK_BYTES");
  NK(ncclCommSplit(c, 0, 0, &child, NULL)); /* the parent is still usable */
  NK(ncclCommDestroy(child));
  NK(ncclCommDestroy(c));
  setenv("JNCCL_HOST_FAULT", "sometimes", 1);
  EXPECT_NCCL(ncclCommInitAll(&c, 1, NULL), ncclInvalidUsage);
  unsetenv("JNCCL_HOST_FAULT");
  printf("  configuration checked at creation ok\n");
}
