/*
 * emu_test_mismatch.c - collectives whose ranks called different things: another function,
 * count, data type, reduction operator, pre-multiplied sum scalar or root. Every rank must
 * fail the collective (nothing hangs, nothing completes silently) with ncclInvalidUsage and
 * the same verdict naming the odd ranks and what each group called; across threads and across
 * processes. Send/recv pairs that disagree on count or type: emu_test_p2p.c.
 */
#include "emu_test.h"

enum { PREMUL = 100 }; /* op of a call: a pre-multiplied sum with the call's scalar */

/* What one rank calls. */
typedef struct {
  int kind, dt, op, root;
  size_t count;
  float scalar; /* PREMUL only, float32 only */
} call;

typedef struct {
  const char *what;
  int n;
  call base;        /* what the other ranks call */
  int odd[8], nodd; /* ranks that call `odd` instead */
  call odd_call;
  int third_rank;   /* >= 0: this rank calls `third` (three groups) */
  call third;
  int in_group;     /* a matched all-reduce and the case's collective in one ncclGroupStart/End */
  const char *want; /* the verdict, exactly */
} mm_case;

static const call *call_of(const mm_case *m, int rank) {
  if (m->third_rank == rank) return &m->third;
  for (int i = 0; i < m->nodd; i++)
    if (m->odd[i] == rank) return &m->odd_call;
  return &m->base;
}

static ncclResult_t issue(rank_ctx *x, const call *c, void *send, void *recv) {
  ncclRedOp_t op = (ncclRedOp_t)c->op;
  if (c->op == PREMUL) {
    float s = c->scalar;
    NK(ncclRedOpCreatePreMulSum(&op, &s, ncclFloat32, ncclScalarHostImmediate, x->comm));
  }
  ncclDataType_t dt = (ncclDataType_t)c->dt;
  switch (c->kind) {
    case C_ALLREDUCE: return ncclAllReduce(send, recv, c->count, dt, op, x->comm, x->stream);
    case C_REDUCESCATTER: return ncclReduceScatter(send, recv, c->count, dt, op, x->comm, x->stream);
    case C_ALLGATHER: return ncclAllGather(send, recv, c->count, dt, x->comm, x->stream);
    case C_BROADCAST: return ncclBroadcast(send, recv, c->count, dt, c->root, x->comm, x->stream);
    case C_REDUCE: return ncclReduce(send, recv, c->count, dt, op, c->root, x->comm, x->stream);
    case C_ALLTOALL: return ncclAlltoAll(send, recv, c->count, dt, x->comm, x->stream);
    case C_GATHER: return ncclGather(send, recv, c->count, dt, c->root, x->comm, x->stream);
    default: return ncclScatter(send, recv, c->count, dt, c->root, x->comm, x->stream);
  }
}

/* A matched int32 all-reduce of rank + 1 + i on every rank, checked: the collectives before a
 * mismatch still work (and give it a number). */
static void matched_allreduce(rank_ctx *x, int32_t *d, size_t count, int grouped) {
  int32_t *h = malloc(count * 4);
  for (size_t i = 0; i < count; i++) h[i] = x->rank + 1 + (int32_t)i;
  CK(cudaMemcpy(d, h, count * 4, cudaMemcpyHostToDevice));
  NK(ncclAllReduce(d, d, count, ncclInt32, ncclSum, x->comm, x->stream));
  if (grouped) {
    free(h);
    return; /* checked by the caller once the group ran */
  }
  CK(cudaStreamSynchronize(x->stream));
  CK(cudaMemcpy(h, d, count * 4, cudaMemcpyDeviceToHost));
  const int n = x->w->n;
  for (size_t i = 0; i < count; i++)
    if (h[i] != n * (n + 1) / 2 + n * (int32_t)i) {
      FAILF("matched all-reduce before the mismatch, rank %d element %zu: %d", x->rank, i, h[i]);
      break;
    }
  free(h);
}

static void body_coll_mismatch(rank_ctx *x) {
  const mm_case *m = x->w->arg;
  const call *mine = call_of(m, x->rank);
  size_t bytes = 64;
  const call *all[3] = {&m->base, &m->odd_call, &m->third};
  for (int i = 0; i < 3; i++)
    if (all[i]->count * 8 * (size_t)m->n > bytes) bytes = all[i]->count * 8 * (size_t)m->n;
  void *send, *recv;
  int32_t *first;
  CK(cudaMalloc(&send, bytes));
  CK(cudaMalloc(&recv, bytes));
  CK(cudaMalloc((void **)&first, 100 * 4));
  CK(cudaMemsetAsync(send, 0x3c, bytes, x->stream));
  if (m->in_group) NK(ncclGroupStart());
  matched_allreduce(x, first, 100, m->in_group); /* collective #1 */
  NK(issue(x, mine, send, recv));                /* #2: the mismatch */
  if (m->in_group) NK(ncclGroupEnd());
  /* queued behind it: skipped, and the stream still drains (or refused at the call, when the
   * mismatch has already failed the communicator) */
  ncclResult_t later = ncclAllReduce(first, first, 100, ncclInt32, ncclSum, x->comm, x->stream);
  EXPECT(later == ncclSuccess || later == ncclInvalidUsage, "%s: rank %d, all-reduce after the mismatch -> %d", m->what,
         x->rank, later);
  CK(cudaStreamSynchronize(x->stream)); /* nothing hangs */
  ncclResult_t ae;
  NK(ncclCommGetAsyncError(x->comm, &ae));
  EXPECT(ae == ncclInvalidUsage, "%s: rank %d async error %d, expected ncclInvalidUsage (%s)", m->what, x->rank, ae,
         ncclGetLastError(x->comm));
  const char *t = ncclGetLastError(x->comm);
  EXPECT(strcmp(t, m->want) == 0, "%s: rank %d verdict\n    got:  %s\n    want: %s", m->what, x->rank, t, m->want);
  if (x->rank == 0 && strcmp(t, m->want) == 0) printf("    %s: %s\n", m->what, t);
  /* a later call is refused with the communicator's error; it must be aborted */
  EXPECT_NCCL(ncclAllReduce(first, first, 1, ncclInt32, ncclSum, x->comm, x->stream), ncclInvalidUsage);
  EXPECT_NCCL(ncclCommDestroy(x->comm), ncclInvalidUsage);
  NK(ncclCommAbort(x->comm));
  x->comm = NULL;
  CK(cudaFree(send));
  CK(cudaFree(recv));
  CK(cudaFree(first));
}

#define CALL(k, d, o, r, c) ((call){.kind = (k), .dt = (d), .op = (o), .root = (r), .count = (c)})
#define PREMUL_CALL(c, s) ((call){.kind = C_ALLREDUCE, .dt = ncclFloat32, .op = PREMUL, .count = (c), .scalar = (s)})
/* One odd rank calls odd_, the others base_. */
#define ONE_ODD(name, world, rank_, base_, odd_, verdict_)                                                      \
  {.what = (name), .n = (world), .base = base_, .odd = {rank_}, .nodd = 1, .odd_call = odd_, .third_rank = -1, \
   .want = "collective #2 differs: " verdict_}

void test_coll_mismatch(void) {
  static mm_case cases[] = {
      ONE_ODD("count", 3, 2, CALL(C_ALLREDUCE, ncclFloat32, ncclSum, 0, 4096),
              CALL(C_ALLREDUCE, ncclFloat32, ncclSum, 0, 4095),
              "rank 2 ncclAllReduce 4095 x float32 sum, ranks 0,1 ncclAllReduce 4096 x float32 sum"),
      ONE_ODD("op", 3, 1, CALL(C_ALLREDUCE, ncclFloat32, ncclSum, 0, 4096),
              CALL(C_ALLREDUCE, ncclFloat32, ncclMax, 0, 4096),
              "rank 1 ncclAllReduce 4096 x float32 max, ranks 0,2 ncclAllReduce 4096 x float32 sum"),
      ONE_ODD("dtype", 3, 0, CALL(C_ALLREDUCE, ncclFloat32, ncclSum, 0, 4096),
              CALL(C_ALLREDUCE, ncclInt32, ncclSum, 0, 4096),
              "rank 0 ncclAllReduce 4096 x int32 sum, ranks 1,2 ncclAllReduce 4096 x float32 sum"),
      ONE_ODD("broadcast root", 3, 2, CALL(C_BROADCAST, ncclFloat32, 0, 0, 1000),
              CALL(C_BROADCAST, ncclFloat32, 0, 1, 1000),
              "rank 2 ncclBroadcast 1000 x float32 root 1, ranks 0,1 ncclBroadcast 1000 x float32 root 0"),
      ONE_ODD("reduce root", 3, 0, CALL(C_REDUCE, ncclFloat64, ncclMin, 2, 77),
              CALL(C_REDUCE, ncclFloat64, ncclMin, 1, 77),
              "rank 0 ncclReduce 77 x float64 min root 1, ranks 1,2 ncclReduce 77 x float64 min root 2"),
      ONE_ODD("gather root", 3, 1, CALL(C_GATHER, ncclInt8, 0, 0, 500), CALL(C_GATHER, ncclInt8, 0, 2, 500),
              "rank 1 ncclGather 500 x int8 root 2, ranks 0,2 ncclGather 500 x int8 root 0"),
      ONE_ODD("scatter count", 3, 2, CALL(C_SCATTER, ncclUint64, 0, 1, 300), CALL(C_SCATTER, ncclUint64, 0, 1, 301),
              "rank 2 ncclScatter 301 x uint64 root 1, ranks 0,1 ncclScatter 300 x uint64 root 1"),
      ONE_ODD("function", 3, 1, CALL(C_ALLREDUCE, ncclFloat32, ncclSum, 0, 1024),
              CALL(C_REDUCESCATTER, ncclFloat32, ncclSum, 0, 1024),
              "rank 1 ncclReduceScatter 1024 x float32 sum, ranks 0,2 ncclAllReduce 1024 x float32 sum"),
      ONE_ODD("all-gather dtype", 3, 0, CALL(C_ALLGATHER, ncclBfloat16, 0, 0, 256),
              CALL(C_ALLGATHER, ncclFloat16, 0, 0, 256),
              "rank 0 ncclAllGather 256 x float16, ranks 1,2 ncclAllGather 256 x bfloat16"),
      ONE_ODD("all-to-all count", 3, 2, CALL(C_ALLTOALL, ncclInt32, 0, 0, 64), CALL(C_ALLTOALL, ncclInt32, 0, 0, 65),
              "rank 2 ncclAlltoAll 65 x int32, ranks 0,1 ncclAlltoAll 64 x int32"),
      ONE_ODD("reduce-scatter avg", 3, 1, CALL(C_REDUCESCATTER, ncclFloat32, ncclAvg, 0, 100),
              CALL(C_REDUCESCATTER, ncclFloat32, ncclSum, 0, 100),
              "rank 1 ncclReduceScatter 100 x float32 sum, ranks 0,2 ncclReduceScatter 100 x float32 avg"),
      ONE_ODD("pre-multiplied sum scalar", 3, 0, PREMUL_CALL(512, 0.5f), PREMUL_CALL(512, 0.1f),
              "rank 0 ncclAllReduce 512 x float32 premulsum(0.1), "
              "ranks 1,2 ncclAllReduce 512 x float32 premulsum(0.5)"),
      ONE_ODD("pre-multiplied sum vs sum", 3, 2, PREMUL_CALL(512, 0.5f),
              CALL(C_ALLREDUCE, ncclFloat32, ncclSum, 0, 512),
              "rank 2 ncclAllReduce 512 x float32 sum, ranks 0,1 ncclAllReduce 512 x float32 premulsum(0.5)"),
      {.what = "three groups", .n = 3, .base = CALL(C_ALLREDUCE, ncclFloat32, ncclSum, 0, 4096), .odd = {1}, .nodd = 1,
       .odd_call = CALL(C_ALLREDUCE, ncclFloat32, ncclSum, 0, 4000), .third_rank = 2,
       .third = CALL(C_ALLREDUCE, ncclFloat32, ncclProd, 0, 4096),
       .want = "collective #2 differs: rank 0 ncclAllReduce 4096 x float32 sum, "
               "rank 1 ncclAllReduce 4000 x float32 sum, rank 2 ncclAllReduce 4096 x float32 prod"},
      {.what = "in a group", .n = 3, .base = CALL(C_ALLREDUCE, ncclFloat32, ncclSum, 0, 4096), .odd = {2}, .nodd = 1,
       .odd_call = CALL(C_ALLREDUCE, ncclFloat32, ncclSum, 0, 4095), .third_rank = -1, .in_group = 1,
       .want = "collective #2 differs: rank 2 ncclAllReduce 4095 x float32 sum, "
               "ranks 0,1 ncclAllReduce 4096 x float32 sum"},
      /* several chunks, and the split all-reduce (pieces from 64 KiB at more than 2 ranks) */
      ONE_ODD("large count", 4, 3, CALL(C_ALLREDUCE, ncclFloat32, ncclSum, 0, 600000),
              CALL(C_ALLREDUCE, ncclFloat32, ncclSum, 0, 600001),
              "rank 3 ncclAllReduce 600001 x float32 sum, ranks 0-2 ncclAllReduce 600000 x float32 sum"),
      {.what = "ranges", .n = 8, .base = CALL(C_BROADCAST, ncclUint8, 0, 0, 40), .odd = {1, 2, 3, 6}, .nodd = 4,
       .odd_call = CALL(C_BROADCAST, ncclUint8, 0, 3, 40), .third_rank = -1,
       .want = "collective #2 differs: ranks 0,4,5,7 ncclBroadcast 40 x uint8 root 0, "
               "ranks 1-3,6 ncclBroadcast 40 x uint8 root 3"},
      /* two ranks: the odd one out is whoever differs; both are named */
      ONE_ODD("two ranks", 2, 1, CALL(C_ALLREDUCE, ncclInt64, ncclMax, 0, 10),
              CALL(C_ALLREDUCE, ncclUint64, ncclMax, 0, 10),
              "rank 0 ncclAllReduce 10 x int64 max, rank 1 ncclAllReduce 10 x uint64 max"),
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (cases[i].n > g_ndev) continue;
    run_world(cases[i].n, body_coll_mismatch, &cases[i], 0);
    NO_SHM_LEFT(cases[i].what);
  }
  printf("  collective mismatches ok\n");
}

/* A collective of 0 elements is none (NCCL drops it at the call): rank 2's extra empty all-reduce
 * pairs with nothing, the next collective of every rank matches, and the numbering of the
 * collectives that follow is the same on every rank. */
static void body_zero_count(rank_ctx *x) {
  if (x->rank == 2) NK(ncclAllReduce(NULL, NULL, 0, ncclFloat32, ncclMax, x->comm, x->stream));
  coll_case(x, C_ALLREDUCE, ncclFloat32, ncclSum, 0, 3000, 0); /* #1 everywhere, checked */
  if (x->rank == 0) NK(ncclBroadcast(NULL, NULL, 0, ncclInt8, 1, x->comm, x->stream));
  void *d;
  CK(cudaMalloc(&d, 400));
  NK(ncclAllReduce(d, d, x->rank == 1 ? 99 : 100, ncclFloat32, ncclSum, x->comm, x->stream)); /* #2 */
  CK(cudaStreamSynchronize(x->stream));
  ncclResult_t ae;
  NK(ncclCommGetAsyncError(x->comm, &ae));
  const char *want = "collective #2 differs: rank 1 ncclAllReduce 99 x float32 sum, ranks 0,2 ncclAllReduce 100 x "
                     "float32 sum";
  EXPECT(ae == ncclInvalidUsage && strcmp(ncclGetLastError(x->comm), want) == 0,
         "zero count: rank %d async error %d, verdict %s", x->rank, ae, ncclGetLastError(x->comm));
  NK(ncclCommAbort(x->comm));
  x->comm = NULL;
  CK(cudaFree(d));
}

void test_zero_count_is_no_collective(void) {
  run_world(3, body_zero_count, NULL, 0);
  NO_SHM_LEFT("zero count");
  printf("  a collective of 0 elements pairs with nothing ok\n");
}

/* ============================================== two processes (fork) */

/* Rank 0 all-reduces 300000 doubles, rank 1 (another process) 300001: both fail with the verdict. */
static int fork_mismatch_rank(ncclUniqueId id, int rank) {
  int bad = 0;
  CK(cudaSetDevice(rank));
  ncclComm_t c;
  NK(ncclCommInitRank(&c, 2, id, rank));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, JN_cudaStreamNonBlocking));
  const size_t count = 300000;
  double *d;
  CK(cudaMalloc((void **)&d, (count + 1) * 8));
  CK(cudaMemsetAsync(d, 0x41, (count + 1) * 8, s));
  NK(ncclAllReduce(d, d, count + (size_t)rank, ncclFloat64, ncclSum, c, s));
  CK(cudaStreamSynchronize(s));
  ncclResult_t ae;
  NK(ncclCommGetAsyncError(c, &ae));
  const char *want = "collective #1 differs: rank 0 ncclAllReduce 300000 x float64 sum, rank 1 ncclAllReduce 300001 x "
                     "float64 sum";
  const char *t = ncclGetLastError(c);
  if (ae != ncclInvalidUsage || strcmp(t, want) != 0) {
    fprintf(stderr, "two processes, rank %d: async error %d, verdict: %s\n", rank, ae, t);
    bad = 1;
  }
  CK(cudaStreamDestroy(s));
  NK(ncclCommAbort(c));
  CK(cudaFree(d));
  return bad;
}

void test_two_processes_mismatch(void) {
  ncclUniqueId id;
  NK(ncclGetUniqueId(&id));
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) _exit(fork_mismatch_rank(id, 1) ? 3 : 0);
  int bad = fork_mismatch_rank(id, 0), status = 0;
  waitpid(pid, &status, 0);
  EXPECT(!bad, "two processes mismatch: the parent's verdict is wrong");
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "two processes mismatch: child status %#x", status);
  EXPECT(!shm_exists(&id), "two processes mismatch: /dev/shm entry left behind");
  printf("  two processes, mismatched all-reduce ok\n");
}
