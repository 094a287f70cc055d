/*
 * emu_test.h - shared declarations of the test program of the host emulation
 * (libjnccl_host.so): the harness (failure counting, checked calls), worlds of
 * rank threads, the reference data, and the tests that main() runs. Files:
 *   emu_test.c            main, harness, worlds of rank threads
 *   emu_test_reference.c  deterministic inputs and the independent reference arithmetic
 *   emu_test_runtime.c    CUDA runtime: devices, memory, streams, events
 *   emu_test_coll.c       collectives checked element by element, chunking, cycles
 *   emu_test_p2p.c        send / recv, count or type mismatch
 *   emu_test_mismatch.c   collectives whose ranks called different things
 *   emu_test_init.c       init variants, split, NCCL argument errors, two processes
 *   emu_test_fault.c      injected faults, abort, delays
 *   emu_test_config.c     validation of the environment variables
 *   emu_test_graph.c      stream capture and CUDA graphs
 *   emu_test_elastic.c    ncclCommShrink, ncclCommRevoke, ncclCommGetUniqueId + ncclCommGrow
 */
#ifndef JNCCL_EMU_TEST_H
#define JNCCL_EMU_TEST_H

#include "jnccl_abi.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ================================================================ harness */

extern int g_quick;              /* EMU_TEST_QUICK=1: trimmed parameter sweep */
extern atomic_int g_failures;
extern int g_ndev;                /* cudaGetDeviceCount */

#define FAILF(...)                                          \
  do {                                                      \
    fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);    \
    fprintf(stderr, __VA_ARGS__);                           \
    fputc('\n', stderr);                                    \
    atomic_fetch_add(&g_failures, 1);                       \
  } while (0)
#define EXPECT(c, ...)          \
  do {                          \
    if (!(c)) FAILF(__VA_ARGS__); \
  } while (0)
/* A failing setup call makes the rest meaningless (and could hang): stop at once. */
#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      FAILF("%s -> %d (%s)", #x, (int)e_, cudaGetErrorString(e_));                   \
      fatal();                                                                       \
    }                                                                                \
  } while (0)
#define NK(x)                                                                                       \
  do {                                                                                              \
    ncclResult_t r_ = (x);                                                                          \
    if (r_ != ncclSuccess) {                                                                        \
      FAILF("%s -> %d (%s): %s", #x, (int)r_, ncclGetErrorString(r_), ncclGetLastError(NULL));      \
      fatal();                                                                                      \
    }                                                                                               \
  } while (0)
#define EXPECT_CUDA(x, want)                                                                          \
  do {                                                                                                \
    cudaError_t e_ = (x);                                                                             \
    EXPECT(e_ == (want), "%s -> %d (%s), expected %d", #x, (int)e_, cudaGetErrorString(e_), (int)(want)); \
  } while (0)
#define EXPECT_NCCL(x, want)                                                                            \
  do {                                                                                                  \
    ncclResult_t r_ = (x);                                                                              \
    EXPECT(r_ == (want), "%s -> %d (%s), expected %d; last error: %s", #x, (int)r_, ncclGetErrorString(r_), \
           (int)(want), ncclGetLastError(NULL));                                                        \
  } while (0)


/* ==================================================== worlds of threads */

typedef struct world world;
typedef struct {
  world *w;
  int rank;
  ncclComm_t comm;
  cudaStream_t stream;
} rank_ctx;

struct world {
  int n, manual;
  ncclUniqueId id;
  void (*body)(rank_ctx *);
  void *arg;
  pthread_barrier_t bar;
};

extern ncclUniqueId g_last_id; /* id of the latest world */
#define NO_SHM_LEFT(what) EXPECT(!shm_exists(&g_last_id), "%s: shared memory segment left in /dev/shm", what)

/* ============================================================ reference data */

enum { C_ALLREDUCE, C_REDUCESCATTER, C_ALLGATHER, C_BROADCAST, C_REDUCE, C_ALLTOALL, C_GATHER, C_SCATTER, C_NKINDS };
extern const int DTYPES[12];
extern const char *DTNAME[12];
extern const char *OPNAME[5];
extern const char *CNAME[C_NKINDS];

/* ------------------------------------------------ harness (emu_test.c) */

void fatal(void); /* flushes and exits with status 1 */
double now_s(void);
void sleep_ms(long ms);
uint64_t mix(uint64_t x);
int count_threads(void);
int shm_exists(const ncclUniqueId *id);
void run_world(int n, void (*body)(rank_ctx *), void *arg, int manual);
void barrier(rank_ctx *x);

/* ------------------------------------------------ reference data and arithmetic (emu_test_reference.c) */

size_t dsize(int dt);
uint64_t gen(uint64_t seed, int r, size_t i, int dt);
uint64_t ref_red(int dt, int op, int n, int first, const uint64_t *v);
void put_elem(void *buf, size_t i, int dt, uint64_t v);
uint64_t get_elem(const void *buf, size_t i, int dt);

/* ------------------------------------------------ collectives (emu_test_coll.c) */

void coll_case(rank_ctx *x, int kind, int dt, int op, int inplace, size_t count, int root);
void test_sweep(void);
void test_chunking(void);
void test_special_values(void);
void test_cycles(void);

/* ------------------------------------------------ CUDA runtime (emu_test_runtime.c) */

void test_runtime_basics(void);
void test_streams_events(void);

/* ------------------------------------------------ send / recv (emu_test_p2p.c) */

void test_send_recv(void);
void test_mismatch(void);

/* ------------------------------------------------ mismatched collectives (emu_test_mismatch.c) */

void test_coll_mismatch(void);
void test_zero_count_is_no_collective(void);
void test_two_processes_mismatch(void);

/* ------------------------------------------------ init variants, split, argument errors, fork (emu_test_init.c) */

ncclConfig_t config_init(void); /* what NCCL_CONFIG_INITIALIZER gives */
void test_init_and_split(void);
void test_nccl_args(void);
void test_two_processes(void);
void test_two_processes_one_device(void);

/* ------------------------------------------------ faults, abort, delays (emu_test_fault.c) */

void test_faults(void);
void test_hang_abort(void);
void test_delay_rank(void);

/* ------------------------------------------------ environment variables (emu_test_config.c) */

int config_probe(void); /* child mode: emu_test --config-probe */
void test_config_load(void);
void test_config_creation(void);

/* ------------------------------------------------ stream capture, graphs (emu_test_graph.c) */

void test_graphs(void);

/* ------------------------------------------------ shrink, revoke, grow (emu_test_elastic.c) */

void test_elastic(void);

#endif /* JNCCL_EMU_TEST_H */
