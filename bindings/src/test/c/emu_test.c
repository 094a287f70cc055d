/*
 * emu_test.c - test program for the host emulation (libjnccl_host.so).
 *
 * Drives the library through the exported CUDA/NCCL ABI only. Collectives are
 * checked element by element (bit-exact) against a reference computed here
 * from the same deterministic pseudo-random inputs, with conversions written
 * independently of the library (_Float16 for fp16, nearest-candidate search for
 * bf16 and fp8). Ranks are threads (one device each), except in the fork test.
 *
 * EMU_TEST_QUICK=1 (used by the sanitizer targets) trims the parameter sweep.
 * Exit status 0 = all passed.
 */
#include "emu_test.h"

int g_quick;
atomic_int g_failures;
int g_ndev;

/* ================================================================ harness */

void fatal(void) {
  fflush(stdout);
  fflush(stderr);
  _exit(1);
}

double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static int count_dir(const char *path, const char *prefix) {
  DIR *d = opendir(path);
  if (d == NULL) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (e->d_name[0] != '.' && strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
  closedir(d);
  return n;
}
int count_threads(void) { return count_dir("/proc/self/task", ""); }

/* Whether the shared-memory segment named by a unique id still exists. The id holds the
 * tag "JNCCLHv1" and then the segment name (see README.md). Other processes may use the
 * emulation at the same time, so tests look for their own segments only. */
int shm_exists(const ncclUniqueId *id) {
  char path[128];
  snprintf(path, sizeof path, "/dev/shm%.64s", id->internal + 8);
  return access(path, F_OK) == 0;
}

/* ==================================================== worlds of threads */

static void *rank_main(void *p) {
  rank_ctx *x = p;
  world *w = x->w;
  CK(cudaSetDevice(x->rank % g_ndev));
  if (!w->manual) {
    NK(ncclCommInitRank(&x->comm, w->n, w->id, x->rank));
    CK(cudaStreamCreateWithFlags(&x->stream, JN_cudaStreamNonBlocking));
  }
  w->body(x);
  if (!w->manual) {
    CK(cudaStreamSynchronize(x->stream));
    CK(cudaStreamDestroy(x->stream));
    if (x->comm != NULL) NK(ncclCommDestroy(x->comm)); /* a body that aborted it set it to NULL */
  }
  return NULL;
}

ncclUniqueId g_last_id;

/* Runs body on n rank threads. manual: the body creates its own communicator. */
void run_world(int n, void (*body)(rank_ctx *), void *arg, int manual) {
  world w = {.n = n, .manual = manual, .body = body, .arg = arg};
  NK(ncclGetUniqueId(&w.id));
  g_last_id = w.id;
  pthread_barrier_init(&w.bar, NULL, (unsigned)n);
  pthread_t t[16];
  rank_ctx x[16];
  for (int r = 0; r < n; r++) {
    x[r] = (rank_ctx){&w, r, NULL, NULL};
    pthread_create(&t[r], NULL, rank_main, &x[r]);
  }
  for (int r = 0; r < n; r++) pthread_join(t[r], NULL);
  pthread_barrier_destroy(&w.bar);
}

void barrier(rank_ctx *x) { pthread_barrier_wait(&x->w->bar); }

/* ================================================================= main */

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--config-probe") == 0) return config_probe();
  g_quick = getenv("EMU_TEST_QUICK") != NULL && strcmp(getenv("EMU_TEST_QUICK"), "0") != 0;
  unsetenv("JNCCL_HOST_DEVICES");
  alarm(g_quick ? 300 : 600); /* a hang fails the run instead of blocking CI */
  setvbuf(stdout, NULL, _IOLBF, 0);
  double t0 = now_s();
  printf("emu_test%s\n", g_quick ? " (quick)" : "");
  /* first, while this process has no other thread: fork() is then safe under TSan too */
#define RUN(test)                                     \
  do {                                                \
    double t_ = now_s();                              \
    test();                                           \
    printf("    (%s: %.2f s)\n", #test, now_s() - t_); \
  } while (0)
  RUN(test_config_load);
  RUN(test_two_processes);
  RUN(test_two_processes_one_device);
  RUN(test_two_processes_mismatch);
  if (cudaGetDeviceCount(&g_ndev) != cudaSuccess) fatal();
  RUN(test_config_creation);
  RUN(test_runtime_basics);
  RUN(test_streams_events);
  RUN(test_graphs);
  RUN(test_nccl_args);
  RUN(test_special_values);
  RUN(test_sweep);
  RUN(test_chunking);
  RUN(test_send_recv);
  RUN(test_mismatch);
  RUN(test_coll_mismatch);
  RUN(test_zero_count_is_no_collective);
  RUN(test_init_and_split);
  RUN(test_elastic);
  RUN(test_faults);
  RUN(test_delay_rank);
  RUN(test_cycles);
  RUN(test_hang_abort); /* last: it leaves a thread blocked for good */
  int f = atomic_load(&g_failures);
  printf("emu_test: %s (%d failures, %.1f s)\n", f ? "FAILED" : "all passed", f, now_s() - t0);
  return f ? 1 : 0;
}
