/*
 * emu_test_p2p.c - send/recv between all pairs, and a send and its receive that disagree
 * on count or type.
 */
#include "emu_test.h"

/* ============================================================ send / recv */

/* Inside one group every rank sends to and receives from every rank (itself too), sends
 * first; messages larger than the rings, so progress must interleave. */
static void body_all_pairs(rank_ctx *x) {
  const int n = x->w->n, r = x->rank;
  const size_t count = *(size_t *)x->w->arg;
  float *ds, *dr, *hs = malloc((size_t)n * count * 4), *hr = malloc((size_t)n * count * 4);
  CK(cudaMalloc((void **)&ds, (size_t)n * count * 4));
  CK(cudaMalloc((void **)&dr, (size_t)n * count * 4));
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < count; i++) hs[(size_t)p * count + i] = (float)(r * 1000000 + p * 10000) + (float)(i % 9999);
  CK(cudaMemcpy(ds, hs, (size_t)n * count * 4, cudaMemcpyHostToDevice));
  NK(ncclGroupStart());
  for (int p = 0; p < n; p++) NK(ncclSend(ds + (size_t)p * count, count, ncclFloat32, p, x->comm, x->stream));
  for (int p = 0; p < n; p++) NK(ncclRecv(dr + (size_t)p * count, count, ncclFloat32, p, x->comm, x->stream));
  NK(ncclGroupEnd());
  CK(cudaStreamSynchronize(x->stream));
  CK(cudaMemcpy(hr, dr, (size_t)n * count * 4, cudaMemcpyDeviceToHost));
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < count; i++) {
      float want = (float)(p * 1000000 + r * 10000) + (float)(i % 9999);
      if (hr[(size_t)p * count + i] != want) {
        FAILF("all-pairs n=%d rank %d: from %d element %zu = %g, expected %g", n, r, p, i, hr[(size_t)p * count + i],
              want);
        p = n;
        break;
      }
    }
  /* Again with the receives on a second stream: NCCL joins the streams of one group. */
  cudaStream_t s2;
  CK(cudaStreamCreateWithFlags(&s2, 0));
  CK(cudaMemsetAsync(dr, 0, (size_t)n * count * 4, s2));
  NK(ncclGroupStart());
  for (int p = 0; p < n; p++) NK(ncclSend(ds + (size_t)p * count, count, ncclFloat32, p, x->comm, x->stream));
  for (int p = 0; p < n; p++) NK(ncclRecv(dr + (size_t)p * count, count, ncclFloat32, p, x->comm, s2));
  NK(ncclGroupEnd());
  CK(cudaMemcpyAsync(hr, dr, (size_t)n * count * 4, cudaMemcpyDeviceToHost, s2)); /* after the group */
  CK(cudaStreamSynchronize(s2));
  for (int p = 0; p < n; p++) {
    float want = (float)(p * 1000000 + r * 10000) + (float)((count - 1) % 9999);
    EXPECT(hr[(size_t)p * count + count - 1] == want, "two-stream group n=%d rank %d from %d: %g, expected %g", n, r,
           p, hr[(size_t)p * count + count - 1], want);
  }
  CK(cudaStreamDestroy(s2));
  /* Ungrouped, small (eager) messages around a ring: everyone sends first, then receives. */
  int right = (r + 1) % n, left = (r + n - 1) % n;
  NK(ncclSend(ds, 100, ncclFloat32, right, x->comm, x->stream));
  NK(ncclRecv(dr, 100, ncclFloat32, left, x->comm, x->stream));
  CK(cudaStreamSynchronize(x->stream));
  CK(cudaMemcpy(hr, dr, 400, cudaMemcpyDeviceToHost));
  EXPECT(hr[7] == (float)(left * 1000000) + 7.0f, "ring send/recv rank %d got %g", r, hr[7]);
  ncclResult_t ae;
  NK(ncclCommGetAsyncError(x->comm, &ae));
  EXPECT(ae == ncclSuccess, "all-pairs async error %d", ae);
  CK(cudaFree(ds));
  CK(cudaFree(dr));
  free(hs);
  free(hr);
}

void test_send_recv(void) {
  size_t count = 40000; /* 160 KB per message: larger than a 64 KiB ring */
  run_world(4, body_all_pairs, &count, 0);
  count = g_quick ? 5000 : 20000;
  run_world(8, body_all_pairs, &count, 0);
  setenv("JNCCL_HOST_CHUNK_BYTES", "4096", 1); /* 4 KiB rings */
  count = 3001;
  run_world(3, body_all_pairs, &count, 0);
  unsetenv("JNCCL_HOST_CHUNK_BYTES");
  printf("  send/recv ok\n");
}

/* A send and its receive that disagree: rank 0 sends, rank 1 receives (rank 2, if any, is
 * uninvolved). Both ranks fail with the same text. */
typedef struct {
  size_t scount, rcount;
  int sdt, rdt;
  const char *want;
} p2p_mismatch;

static void body_mismatch(rank_ctx *x) {
  const p2p_mismatch *m = x->w->arg;
  void *d;
  size_t bytes = (m->scount > m->rcount ? m->scount : m->rcount) * 8;
  CK(cudaMalloc(&d, bytes));
  CK(cudaMemsetAsync(d, 0x5a, bytes, x->stream));
  if (x->rank == 0) NK(ncclSend(d, m->scount, (ncclDataType_t)m->sdt, 1, x->comm, x->stream));
  else if (x->rank == 1) NK(ncclRecv(d, m->rcount, (ncclDataType_t)m->rdt, 0, x->comm, x->stream));
  CK(cudaStreamSynchronize(x->stream)); /* nothing hangs */
  barrier(x);                           /* the receiver has seen the mismatch */
  ncclResult_t ae;
  NK(ncclCommGetAsyncError(x->comm, &ae));
  if (x->rank < 2) {
    EXPECT(ae == ncclInvalidUsage, "mismatch: rank %d async error %d, expected ncclInvalidUsage", x->rank, ae);
    const char *t = ncclGetLastError(x->comm);
    EXPECT(strcmp(t, m->want) == 0, "mismatch: rank %d text\n    got:  %s\n    want: %s", x->rank, t, m->want);
    if (x->rank == 1 && strcmp(t, m->want) == 0) printf("    %s\n", t);
    /* later operations fail at the call with the comm's error; so does ncclCommDestroy (as in
     * NCCL): a failed communicator must be aborted */
    EXPECT_NCCL(ncclAllReduce(d, d, 1, ncclFloat32, ncclSum, x->comm, x->stream), ncclInvalidUsage);
    EXPECT_NCCL(ncclCommDestroy(x->comm), ncclInvalidUsage);
  } else {
    EXPECT(ae == ncclSuccess, "mismatch: uninvolved rank 2 async error %d (%s)", ae, ncclGetLastError(x->comm));
  }
  barrier(x); /* rank 2 looked before the others aborted */
  NK(ncclCommAbort(x->comm));
  x->comm = NULL;
  CK(cudaFree(d));
}

void test_mismatch(void) {
#define SENT "ncclSend of rank 0 to rank 1: "
  static const p2p_mismatch cases[] = {
      {100, 50, ncclFloat32, ncclFloat32, SENT "100 x float32, but rank 1 receives 50 x float32 from rank 0"},
      {100, 99, ncclFloat32, ncclFloat32, SENT "100 x float32, but rank 1 receives 99 x float32 from rank 0"},
      /* same bytes, another type */
      {100, 50, ncclFloat32, ncclFloat64, SENT "100 x float32, but rank 1 receives 50 x float64 from rank 0"},
      {100, 100, ncclFloat32, ncclInt32, SENT "100 x float32, but rank 1 receives 100 x int32 from rank 0"},
      /* larger than the ring: the sender is still sending when the receiver refuses it */
      {200000, 200001, ncclUint8, ncclUint8, SENT "200000 x uint8, but rank 1 receives 200001 x uint8 from rank 0"},
      {0, 1, ncclBfloat16, ncclBfloat16, SENT "0 x bfloat16, but rank 1 receives 1 x bfloat16 from rank 0"},
  };
#undef SENT
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    run_world(i == 1 ? 3 : 2, body_mismatch, (void *)&cases[i], 0);
    NO_SHM_LEFT("send/recv mismatch");
  }
  printf("  send/recv mismatch ok\n");
}
