/*
 * emu_test_fault.c - injected faults (JNCCL_HOST_FAULT*), ncclCommAbort of hung
 * operations, and a rank slowed by JNCCL_HOST_DELAY_RANK.
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

