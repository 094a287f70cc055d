/*
 * emu_test_fault.c - injected faults (JNCCL_HOST_FAULT*), ncclCommAbort of hung
 * operations, an ncclCommAbort that hangs itself, and a rank slowed by JNCCL_HOST_DELAY_RANK.
 */
#include "emu_test.h"

/* ======================================================= faults and abort */

typedef struct {
  ncclComm_t comm;
  int delay_ms;
} abort_arg;

static void *abort_main(void *p) {
  abort_arg *a = p;
  sleep_ms(a->delay_ms);
  NK(ncclCommAbort(a->comm));
  return NULL;
}

/* Rank 1 hangs in its 2nd operation; another thread aborts it. */
static void body_hang(rank_ctx *x) {
  float *d;
  CK(cudaMalloc((void **)&d, 4096 * 4));
  CK(cudaMemsetAsync(d, 0, 4096 * 4, x->stream));
  NK(ncclAllReduce(d, d, 4096, ncclFloat32, ncclSum, x->comm, x->stream)); /* op 1: fine */
  NK(ncclAllReduce(d, d, 4096, ncclFloat32, ncclSum, x->comm, x->stream)); /* op 2: rank 1 hangs */
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, JN_cudaEventDisableTiming));
  CK(cudaEventRecord(ev, x->stream));
  if (x->rank == 1) {
    sleep_ms(50);
    EXPECT_CUDA(cudaStreamQuery(x->stream), cudaErrorNotReady);
    EXPECT_CUDA(cudaEventQuery(ev), cudaErrorNotReady);
    pthread_t t;
    abort_arg a = {x->comm, 20};
    pthread_create(&t, NULL, abort_main, &a);
    pthread_join(t, NULL);
    /* the stream continues with its next item: the event completes, the stream is idle */
    CK(cudaEventSynchronize(ev));
    CK(cudaStreamSynchronize(x->stream));
    EXPECT_CUDA(cudaStreamQuery(x->stream), cudaSuccess);
  } else {
    CK(cudaStreamSynchronize(x->stream)); /* released when rank 1 aborts */
    ncclResult_t ae;
    NK(ncclCommGetAsyncError(x->comm, &ae));
    EXPECT(ae == ncclRemoteError, "hang: peer rank %d async error %d, expected ncclRemoteError", x->rank, ae);
    EXPECT(strstr(ncclGetLastError(x->comm), "rank 1 aborted") != NULL, "hang text: %s", ncclGetLastError(NULL));
    EXPECT_NCCL(ncclCommDestroy(x->comm), ncclRemoteError);
    NK(ncclCommAbort(x->comm));
  }
  CK(cudaEventDestroy(ev));
  CK(cudaStreamDestroy(x->stream));
  CK(cudaFree(d));
}

static void body_hang_setup(rank_ctx *x) {
  CK(cudaSetDevice(x->rank));
  NK(ncclCommInitRank(&x->comm, x->w->n, x->w->id, x->rank));
  CK(cudaStreamCreateWithFlags(&x->stream, 0));
  body_hang(x);
}

static void body_fail(rank_ctx *x) {
  float *d;
  CK(cudaMalloc((void **)&d, 64));
  NK(ncclAllReduce(d, d, 16, ncclFloat32, ncclMax, x->comm, x->stream));
  CK(cudaStreamSynchronize(x->stream));
  ncclResult_t ae;
  NK(ncclCommGetAsyncError(x->comm, &ae));
  const char *t = ncclGetLastError(x->comm);
  if (x->rank == 0) {
    EXPECT(ae == ncclSystemError, "fail: rank 0 async error %d", ae);
    EXPECT(strcmp(t, "injected failure at operation 1 of rank 0") == 0, "fail text: %s", t);
  } else {
    EXPECT(ae == ncclRemoteError, "fail: rank %d async error %d", x->rank, ae);
    EXPECT(strstr(t, "rank 0 failed: injected failure") != NULL, "fail text: %s", t);
  }
  /* later operations are refused at the call with the error; queued ones are skipped */
  EXPECT_NCCL(ncclAllReduce(d, d, 16, ncclFloat32, ncclSum, x->comm, x->stream), ae);
  CK(cudaFree(d));
}

static void body_fail_setup(rank_ctx *x) {
  CK(cudaSetDevice(x->rank));
  NK(ncclCommInitRank(&x->comm, x->w->n, x->w->id, x->rank));
  CK(cudaStreamCreateWithFlags(&x->stream, 0));
  body_fail(x);
  barrier(x);
  CK(cudaStreamDestroy(x->stream));
  NK(ncclCommAbort(x->comm));
}

void test_faults(void) {
  setenv("JNCCL_HOST_FAULT", "hang", 1);
  setenv("JNCCL_HOST_FAULT_RANK", "1", 1);
  setenv("JNCCL_HOST_FAULT_AT", "2", 1);
  run_world(3, body_hang_setup, NULL, 1);
  NO_SHM_LEFT("hang + abort");
  setenv("JNCCL_HOST_FAULT", "fail", 1);
  setenv("JNCCL_HOST_FAULT_RANK", "0", 1);
  setenv("JNCCL_HOST_FAULT_AT", "1", 1);
  run_world(3, body_fail_setup, NULL, 1);
  NO_SHM_LEFT("injected failure");
  unsetenv("JNCCL_HOST_FAULT");
  unsetenv("JNCCL_HOST_FAULT_RANK");
  unsetenv("JNCCL_HOST_FAULT_AT");
  printf("  fault injection and abort ok\n");
}

/* ============================================== an abort that hangs */

typedef struct {
  ncclComm_t comm;
  atomic_int returned;
} hung_abort;

static void *hung_abort_main(void *p) {
  hung_abort *a = p;
  ncclCommAbort(a->comm);
  atomic_store(&a->returned, 1); /* must never happen */
  return NULL;
}

/* JNCCL_HOST_FAULT=hang-abort on rank 1: its collectives work; its ncclCommAbort ends its
 * operations and tells the peers, but never returns (the thread is detached and leaked, as a
 * caller that bounds its abort leaves it). The peers' own aborts return. */
static void body_hang_abort(rank_ctx *x) {
  coll_case(x, C_ALLREDUCE, ncclFloat32, ncclSum, 0, 5000, 0); /* works on the faulty rank too */
  coll_case(x, C_BROADCAST, ncclInt32, ncclSum, 0, 333, 1);
  void *d;
  CK(cudaMalloc(&d, 200000));
  CK(cudaMemsetAsync(d, 0x17, 200000, x->stream));
  if (x->rank == 1) {
    /* larger than the ring and never received: waits until the abort */
    NK(ncclSend(d, 200000, ncclUint8, 0, x->comm, x->stream));
  } else {
    NK(ncclAllReduce(d, d, 1000, ncclFloat32, ncclSum, x->comm, x->stream)); /* rank 1 never joins */
  }
  barrier(x);
  if (x->rank == 1) {
    static hung_abort a;
    a.comm = x->comm;
    atomic_init(&a.returned, 0);
    pthread_t t;
    pthread_create(&t, NULL, hung_abort_main, &a);
    pthread_detach(t);
    sleep_ms(200);
    EXPECT(!atomic_load(&a.returned), "hang-abort: ncclCommAbort of rank 1 returned");
    CK(cudaStreamSynchronize(x->stream)); /* the abort ended the send */
    EXPECT(!atomic_load(&a.returned), "hang-abort: ncclCommAbort of rank 1 returned");
  } else {
    CK(cudaStreamSynchronize(x->stream)); /* released by rank 1's abort */
    ncclResult_t ae;
    NK(ncclCommGetAsyncError(x->comm, &ae));
    EXPECT(ae == ncclRemoteError, "hang-abort: rank %d async error %d, expected ncclRemoteError", x->rank, ae);
    EXPECT(strstr(ncclGetLastError(x->comm), "rank 1 aborted") != NULL, "hang-abort: rank %d text: %s", x->rank,
           ncclGetLastError(x->comm));
    NK(ncclCommAbort(x->comm)); /* no fault here: returns */
  }
  x->comm = NULL;
  barrier(x);
  CK(cudaFree(d));
}

void test_hang_abort(void) {
  setenv("JNCCL_HOST_FAULT", "hang-abort", 1);
  setenv("JNCCL_HOST_FAULT_RANK", "1", 1);
  run_world(3, body_hang_abort, NULL, 0);
  unsetenv("JNCCL_HOST_FAULT");
  unsetenv("JNCCL_HOST_FAULT_RANK");
  NO_SHM_LEFT("hang-abort");
  printf("  hang-abort ok (ncclCommAbort of rank 1 still blocked, its thread left behind)\n");
}

/* Rank 1 is slowed down (JNCCL_HOST_DELAY_RANK): results stay right, time shows it. */
static void body_delay_rank(rank_ctx *x) {
  double t0 = now_s();
  coll_case(x, C_ALLREDUCE, ncclInt32, ncclSum, 0, 100, 0);
  coll_case(x, C_ALLREDUCE, ncclInt32, ncclSum, 0, 100, 0);
  EXPECT(now_s() - t0 >= 0.09, "delayed rank: two all-reduces took only %.3f s", now_s() - t0);
}

void test_delay_rank(void) {
  setenv("JNCCL_HOST_DELAY_RANK", "1", 1);
  setenv("JNCCL_HOST_DELAY_US", "50000", 1);
  run_world(2, body_delay_rank, NULL, 0);
  unsetenv("JNCCL_HOST_DELAY_RANK");
  unsetenv("JNCCL_HOST_DELAY_US");
  printf("  rank delay ok\n");
}

