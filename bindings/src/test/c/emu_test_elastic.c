/*
 * emu_test_elastic.c - communicators that change membership: ncclCommShrink (of a healthy
 * parent, of a parent whose collective was pending on a rank that aborted, twice in a row, of a
 * non-blocking parent), ncclCommRevoke then shrink, ncclCommGetUniqueId + ncclCommGrow, and every
 * argument these calls refuse. Collectives on the new communicators are checked element by
 * element (coll_case).
 */
#include "emu_test.h"

/* Runs checked collectives on comm as rank `rank` of a world of n (a child's numbering). */
static void colls_on(rank_ctx *x, ncclComm_t comm, int n, int rank) {
  world sub = {.n = n};
  rank_ctx y = {&sub, rank, comm, x->stream};
  coll_case(&y, C_ALLREDUCE, ncclFloat32, ncclSum, 0, 1000 + (size_t)n, 0);
  coll_case(&y, C_ALLGATHER, ncclInt32, 0, 1, 333, 0);
  coll_case(&y, C_BROADCAST, ncclFloat64, 0, 0, 77, n - 1);
  coll_case(&y, C_REDUCESCATTER, ncclBfloat16, ncclMax, 0, 129, 0);
}

/* The child's size and this rank's rank in it. */
static void expect_member(ncclComm_t child, int n, int rank, const char *what) {
  int cn = -1, cr = -1;
  NK(ncclCommCount(child, &cn));
  NK(ncclCommUserRank(child, &cr));
  EXPECT(cn == n && cr == rank, "%s: rank %d of %d, expected %d of %d", what, cr, cn, rank, n);
}

static int listed(const int *list, int count, int r) {
  for (int i = 0; i < count; i++)
    if (list[i] == r) return 1;
  return 0;
}

/* The rank a survivor gets: its old rank less the excluded ranks below it. */
static int new_rank(const int *list, int count, int r) {
  int k = r;
  for (int i = 0; i < count; i++) k -= list[i] < r;
  return k;
}

typedef struct {
  int count;
  int list[4];
} excl;

/* W=4: the excluded ranks abort while the survivors' all-reduce is pending on them. The
 * survivors' parent is then in error: a default shrink fails with it (as NCCL), an aborting shrink
 * succeeds; the child runs checked collectives, then is shrunk again by all its ranks but its
 * last, which never calls (a shrink never waits for the excluded). */
static void body_shrink_lost(rank_ctx *x) {
  const excl *ex = x->w->arg;
  if (listed(ex->list, ex->count, x->rank)) {
    barrier(x);
    sleep_ms(30); /* the survivors' all-reduce is waiting for us */
    NK(ncclCommAbort(x->comm));
    x->comm = NULL;
    return;
  }
  float *d;
  CK(cudaMalloc((void **)&d, 4096 * sizeof(float)));
  CK(cudaMemsetAsync(d, 0x3c, 4096 * sizeof(float), x->stream));
  NK(ncclAllReduce(d, d, 4096, ncclFloat32, ncclSum, x->comm, x->stream));
  barrier(x);
  CK(cudaStreamSynchronize(x->stream));
  CK(cudaFree(d));
  ncclResult_t ae;
  NK(ncclCommGetAsyncError(x->comm, &ae));
  EXPECT(ae == ncclRemoteError, "rank %d: async error %d after a peer aborted mid-collective", x->rank, ae);
  ncclComm_t child = (ncclComm_t)(uintptr_t)1;
  int *list = (int *)ex->list;
  EXPECT_NCCL(ncclCommShrink(x->comm, list, ex->count, &child, NULL, JN_NCCL_SHRINK_DEFAULT), ncclRemoteError);
  EXPECT(child == NULL, "a failed shrink left newcomm %p", (void *)child);
  NK(ncclCommShrink(x->comm, list, ex->count, &child, NULL, JN_NCCL_SHRINK_ABORT));
  NK(ncclCommAbort(x->comm)); /* the parent is aborted, never destroyed (newer NCCL hangs there) */
  x->comm = NULL;
  int n1 = x->w->n - ex->count, r1 = new_rank(ex->list, ex->count, x->rank);
  expect_member(child, n1, r1, "shrunk");
  colls_on(x, child, n1, r1);
  if (n1 > 1) { /* a second shrink, of the healthy child, without its last rank */
    int last = n1 - 1;
    if (r1 != last) {
      ncclComm_t grandchild = NULL;
      NK(ncclCommShrink(child, &last, 1, &grandchild, NULL, JN_NCCL_SHRINK_DEFAULT));
      expect_member(grandchild, n1 - 1, r1, "shrunk twice");
      colls_on(x, grandchild, n1 - 1, r1);
      NK(ncclCommDestroy(grandchild));
    }
  }
  NK(ncclCommDestroy(child));
}

/* W=4, healthy parent shrunk twice by different survivors: each shrink meets in its own segment
 * (ranks 0-2 without 3, then ranks 0-1 without 2 and 3), and both children work side by side. */
static void body_shrink_twice(rank_ctx *x) {
  ncclComm_t a = NULL, b = NULL;
  int three = 3, two_three[2] = {2, 3};
  if (x->rank < 3) NK(ncclCommShrink(x->comm, &three, 1, &a, NULL, JN_NCCL_SHRINK_DEFAULT));
  if (x->rank < 2) NK(ncclCommShrink(x->comm, two_three, 2, &b, NULL, JN_NCCL_SHRINK_DEFAULT));
  if (a != NULL) {
    expect_member(a, 3, x->rank, "first shrink");
    colls_on(x, a, 3, x->rank);
  }
  if (b != NULL) {
    expect_member(b, 2, x->rank, "second shrink");
    colls_on(x, b, 2, x->rank);
  }
  barrier(x);
  colls_on(x, x->comm, 4, x->rank); /* the parent itself is still usable (default flag) */
  if (a != NULL) NK(ncclCommDestroy(a));
  if (b != NULL) NK(ncclCommDestroy(b));
}

/* W=4: rank 3 stays away from a collective; the survivors revoke (their pending all-reduce ends
 * without an async error), new work is refused, and the survivors shrink without rank 3. */
static void body_revoke_then_shrink(rank_ctx *x) {
  if (x->rank == 3) {
    barrier(x);
    barrier(x); /* the others revoked and shrank */
    return;     /* rank_main destroys our untouched parent */
  }
  float *d;
  CK(cudaMalloc((void **)&d, 1024 * sizeof(float)));
  NK(ncclAllReduce(d, d, 1024, ncclFloat32, ncclSum, x->comm, x->stream)); /* waits for rank 3 */
  sleep_ms(20);
  EXPECT_CUDA(cudaStreamQuery(x->stream), cudaErrorNotReady);
  EXPECT_NCCL(ncclCommRevoke(x->comm, 1), ncclInvalidArgument);
  NK(ncclCommRevoke(x->comm, 0));
  CK(cudaStreamSynchronize(x->stream)); /* the pending all-reduce ended */
  ncclResult_t ae;
  NK(ncclCommGetAsyncError(x->comm, &ae));
  EXPECT(ae == ncclSuccess, "revoked communicator: async error %d", ae);
  EXPECT_NCCL(ncclAllReduce(d, d, 1024, ncclFloat32, ncclSum, x->comm, x->stream), ncclInvalidUsage);
  EXPECT(strstr(ncclGetLastError(NULL), "revoked") != NULL, "revoked: last error '%s'", ncclGetLastError(NULL));
  EXPECT_NCCL(ncclCommRevoke(x->comm, 0), ncclInvalidArgument); /* only once */
  EXPECT_NCCL(ncclCommFinalize(x->comm), ncclInvalidUsage);
  CK(cudaFree(d));
  barrier(x);
  int three = 3;
  ncclComm_t child = NULL;
  NK(ncclCommShrink(x->comm, &three, 1, &child, NULL, JN_NCCL_SHRINK_DEFAULT));
  expect_member(child, 3, x->rank, "shrink after revoke");
  colls_on(x, child, 3, x->rank);
  NK(ncclCommDestroy(child));
  barrier(x); /* rank_main destroys the revoked parent: destroy works after a revoke */
}

/* W=3 non-blocking parent: the shrink returns ncclSuccess with newcomm still NULL, the parent is
 * ncclInProgress until the child is complete (as measured on NCCL 2.28 and 2.30). */
static void body_shrink_nonblocking(rank_ctx *x) {
  if (x->rank == 2) {
    barrier(x);
    return;
  }
  ncclConfig_t cfg = config_init();
  cfg.blocking = 0;
  ncclComm_t parent = NULL, child = (ncclComm_t)(uintptr_t)1;
  int two = 2;
  /* a non-blocking child of the blocking world: its rendezvous runs in the background */
  ncclResult_t rc = ncclCommShrink(x->comm, &two, 1, &parent, &cfg, JN_NCCL_SHRINK_DEFAULT);
  EXPECT(rc == ncclInProgress || rc == ncclSuccess, "shrink into a non-blocking child -> %d", rc);
  ncclResult_t ae = ncclInProgress;
  for (double t0 = now_s(); ae == ncclInProgress && now_s() - t0 < 30; sleep_ms(1))
    NK(ncclCommGetAsyncError(parent, &ae));
  EXPECT(ae == ncclSuccess, "non-blocking child init: %d", ae);
  if (x->rank == 0) sleep_ms(30); /* rank 1's shrink must wait for rank 0's */
  EXPECT_NCCL(ncclCommShrink(parent, &two, 0, &child, NULL, JN_NCCL_SHRINK_DEFAULT), ncclSuccess);
  if (x->rank == 1) {
    NK(ncclCommGetAsyncError(parent, &ae));
    EXPECT(ae == ncclInProgress || ae == ncclSuccess, "shrinking parent: %d", ae);
  }
  ae = ncclInProgress;
  for (double t0 = now_s(); ae == ncclInProgress && now_s() - t0 < 30; sleep_ms(1))
    NK(ncclCommGetAsyncError(parent, &ae));
  EXPECT(ae == ncclSuccess && child != NULL, "non-blocking shrink: state %d, child %p", ae, (void *)child);
  if (child != NULL && child != (ncclComm_t)(uintptr_t)1) {
    expect_member(child, 2, x->rank, "shrink of a non-blocking parent");
    NK(ncclCommDestroy(child));
  }
  NK(ncclCommDestroy(parent));
  barrier(x);
}

/* W=3 with JNCCL_HOST_FAULT=hang on rank 2's first operation: every rank revokes (the hung
 * operation and the peers' waiting ones end), then all three shrink to a copy (count 0) that works. */
static void body_revoke_hung(rank_ctx *x) {
  float *d;
  CK(cudaMalloc((void **)&d, 256 * sizeof(float)));
  NK(ncclAllReduce(d, d, 256, ncclFloat32, ncclSum, x->comm, x->stream));
  sleep_ms(20);
  EXPECT_CUDA(cudaStreamQuery(x->stream), cudaErrorNotReady);
  barrier(x);
  NK(ncclCommRevoke(x->comm, 0));
  CK(cudaStreamSynchronize(x->stream));
  CK(cudaFree(d));
  if (x->rank == 0) { /* the fault variables are read at creation: the copy must not hang too */
    unsetenv("JNCCL_HOST_FAULT");
    unsetenv("JNCCL_HOST_FAULT_RANK");
    unsetenv("JNCCL_HOST_FAULT_AT");
  }
  barrier(x);
  ncclComm_t copy = NULL;
  NK(ncclCommShrink(x->comm, NULL, 0, &copy, NULL, JN_NCCL_SHRINK_DEFAULT));
  expect_member(copy, 3, x->rank, "shrink of nobody after a revoke");
  colls_on(x, copy, 3, x->rank);
  NK(ncclCommDestroy(copy));
}

typedef struct {
  ncclUniqueId id;
} grow_arg;

/* Ranks 0-2 make a communicator of 3, rank 0 hands out its grow id, and rank 3 joins: the grown
 * communicator of 4 (existing ranks keep theirs) and the old one of 3 both run checked collectives. */
static void body_grow(rank_ctx *x) {
  grow_arg *g = x->w->arg;
  ncclComm_t old = NULL, grown = NULL;
  CK(cudaStreamCreateWithFlags(&x->stream, JN_cudaStreamNonBlocking));
  if (x->rank < 3) {
    NK(ncclCommInitRank(&old, 3, x->w->id, x->rank));
    if (x->rank == 0) NK(ncclCommGetUniqueId(old, &g->id));
  }
  barrier(x);
  if (x->rank < 3) NK(ncclCommGrow(old, 4, &g->id, -1, &grown, NULL));
  else NK(ncclCommGrow(NULL, 4, &g->id, 3, &grown, NULL));
  expect_member(grown, 4, x->rank, "grown");
  colls_on(x, grown, 4, x->rank);
  if (old != NULL) {
    colls_on(x, old, 3, x->rank); /* the old communicator stays usable */
    NK(ncclCommDestroy(old));
  }
  NK(ncclCommDestroy(grown));
  CK(cudaStreamDestroy(x->stream));
}

#define EXPECT_ARG(call, fn)                                                                              \
  do {                                                                                                    \
    EXPECT_NCCL(call, ncclInvalidArgument);                                                               \
    EXPECT(strstr(ncclGetLastError(NULL), fn) != NULL, "%s: last error '%s'", #call, ncclGetLastError(NULL)); \
  } while (0)

/* W=3, every rank: each argument the four calls refuse, with a text naming the call. */
static void body_elastic_args(rank_ctx *x) {
  ncclComm_t c = x->comm, out = NULL;
  int other = (x->rank + 1) % 3, me = x->rank, far = 3, neg = -1, dup[2] = {other, other}, one = other;
  EXPECT_ARG(ncclCommShrink(NULL, &one, 1, &out, NULL, 0), "ncclCommShrink");
  EXPECT_ARG(ncclCommShrink(c, &one, 1, NULL, NULL, 0), "ncclCommShrink");
  EXPECT_ARG(ncclCommShrink(c, &one, -1, &out, NULL, 0), "excludeRanksCount");
  EXPECT_ARG(ncclCommShrink(c, dup, 4, &out, NULL, 0), "excludeRanksCount");
  EXPECT_ARG(ncclCommShrink(c, NULL, 1, &out, NULL, 0), "excludeRanksList");
  EXPECT_ARG(ncclCommShrink(c, &far, 1, &out, NULL, 0), "not a rank");
  EXPECT_ARG(ncclCommShrink(c, &neg, 1, &out, NULL, 0), "not a rank");
  EXPECT_ARG(ncclCommShrink(c, dup, 2, &out, NULL, 0), "twice");
  EXPECT_ARG(ncclCommShrink(c, &me, 1, &out, NULL, 0), "calling rank");
  EXPECT_ARG(ncclCommShrink(c, &one, 1, &out, NULL, 2), "shrinkFlags");
  EXPECT(out == NULL, "a refused shrink wrote newcomm");
  EXPECT_ARG(ncclCommRevoke(NULL, 0), "ncclCommRevoke");
  EXPECT_ARG(ncclCommRevoke(c, 3), "revokeFlags");
  ncclUniqueId id;
  EXPECT_ARG(ncclCommGetUniqueId(NULL, &id), "ncclCommGetUniqueId");
  EXPECT_ARG(ncclCommGetUniqueId(c, NULL), "uniqueId");
  NK(ncclGetUniqueId(&id));
  EXPECT_ARG(ncclCommGrow(c, 4, NULL, -1, &out, NULL), "uniqueId");
  EXPECT_ARG(ncclCommGrow(c, 4, &id, 0, &out, NULL), "rank 0");
  EXPECT_ARG(ncclCommGrow(c, 3, &id, -1, &out, NULL), "nRanks");
  EXPECT_ARG(ncclCommGrow(NULL, 4, &id, 4, &out, NULL), "Invalid rank");
  EXPECT_ARG(ncclCommGrow(NULL, 4, &id, -1, &out, NULL), "Invalid rank");
  EXPECT(out == NULL, "a refused grow wrote newcomm");
  colls_on(x, c, 3, x->rank); /* nothing was harmed */
}

void test_elastic(void) {
  excl one = {1, {3}}, two = {2, {1, 3}};
  run_world(4, body_shrink_lost, &one, 0);
  printf("  shrink: W=4 without rank 3 (aborted mid-collective), then without the child's last: ok\n");
  run_world(4, body_shrink_lost, &two, 0);
  printf("  shrink: W=4 without ranks 1 and 3 (aborted mid-collective): ok\n");
  run_world(4, body_shrink_twice, NULL, 0);
  printf("  shrink: one parent shrunk twice: ok\n");
  run_world(4, body_revoke_then_shrink, NULL, 0);
  printf("  revoke, then shrink: ok\n");
  setenv("JNCCL_HOST_FAULT", "hang", 1);
  setenv("JNCCL_HOST_FAULT_RANK", "2", 1);
  setenv("JNCCL_HOST_FAULT_AT", "1", 1);
  run_world(3, body_revoke_hung, NULL, 0);
  printf("  revoke ends an operation hung by JNCCL_HOST_FAULT=hang: ok\n");
  run_world(3, body_shrink_nonblocking, NULL, 0);
  printf("  shrink of a non-blocking parent: ok\n");
  grow_arg g;
  run_world(4, body_grow, &g, 1);
  printf("  grow 3 -> 4: ok\n");
  run_world(3, body_elastic_args, NULL, 0);
  printf("  shrink / revoke / grow argument errors: ok\n");
}
