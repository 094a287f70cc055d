/*
 * emu_test_init.c - communicator creation: non-blocking init, ncclCommInitAll, split,
 * duplicate devices, NCCL argument errors, and two ranks in two processes (fork).
 */
#include "emu_test.h"

/* ================================================== init variants, split */

/* What NCCL_CONFIG_INITIALIZER gives. */
ncclConfig_t config_init(void) {
  const int U = JN_NCCL_CONFIG_UNDEF_INT;
  ncclConfig_t c;
  memset(&c, 0, sizeof c);
  c.size = sizeof c;
  c.magic = JN_NCCL_CONFIG_MAGIC;
  c.version = JNCCL_NCCL_VERSION_CODE;
  c.blocking = c.cgaClusterSize = c.minCTAs = c.maxCTAs = c.splitShare = c.trafficClass = U;
  c.collnetEnable = c.CTAPolicy = c.shrinkShare = c.nvlsCTAs = c.nChannelsPerNetPeer = c.nvlinkCentricSched = U;
  return c;
}

static void body_nonblocking(rank_ctx *x) {
  world *w = x->w;
  ncclConfig_t cfg = config_init();
  cfg.blocking = 0;
  if (x->rank == 0) { /* the others join only after rank 0 looked at the in-progress state */
    EXPECT_NCCL(ncclCommInitRankConfig(&x->comm, w->n, w->id, 0, &cfg), ncclInProgress);
    ncclResult_t ae;
    NK(ncclCommGetAsyncError(x->comm, &ae));
    EXPECT(ae == ncclInProgress, "nonblocking: async state %d before the peers joined", ae);
    void *d;
    CK(cudaMalloc(&d, 4));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, 0));
    EXPECT_NCCL(ncclAllReduce(d, d, 1, ncclFloat32, ncclSum, x->comm, s), ncclInvalidArgument);
    EXPECT_NCCL(ncclCommDestroy(x->comm), ncclInvalidArgument); /* not while initialising */
    CK(cudaStreamDestroy(s));
    CK(cudaFree(d));
  }
  barrier(x);
  if (x->rank != 0) {
    ncclResult_t rc = ncclCommInitRankConfig(&x->comm, w->n, w->id, x->rank, &cfg);
    EXPECT(rc == ncclInProgress || rc == ncclSuccess, "nonblocking init -> %d", rc);
  }
  ncclResult_t ae = ncclInProgress;
  double t0 = now_s();
  while (ae == ncclInProgress && now_s() - t0 < 30) {
    NK(ncclCommGetAsyncError(x->comm, &ae));
    if (ae == ncclInProgress) sleep_ms(1);
  }
  EXPECT(ae == ncclSuccess, "nonblocking init finished with %d", ae);
  CK(cudaStreamCreateWithFlags(&x->stream, JN_cudaStreamNonBlocking));
  coll_case(x, C_ALLREDUCE, ncclFloat32, ncclSum, 0, 1000, 0);
  /* non-blocking finalize: ncclInProgress, then ncclSuccess once flushed */
  EXPECT_NCCL(ncclCommFinalize(x->comm), ncclInProgress);
  do {
    NK(ncclCommGetAsyncError(x->comm, &ae));
  } while (ae == ncclInProgress);
  EXPECT(ae == ncclSuccess, "finalize -> %d", ae);
  CK(cudaStreamDestroy(x->stream));
  NK(ncclCommDestroy(x->comm));
}

static void body_split(rank_ctx *x) {
  ncclComm_t sub, none;
  /* two halves; key = -rank reverses the order inside each */
  NK(ncclCommSplit(x->comm, x->rank % 2, -x->rank, &sub, NULL));
  int n, r, dev;
  NK(ncclCommCount(sub, &n));
  NK(ncclCommUserRank(sub, &r));
  NK(ncclCommCuDevice(sub, &dev));
  int members = (x->w->n + 1 - x->rank % 2) / 2;
  EXPECT(n == members, "split: %d ranks, expected %d", n, members);
  EXPECT(r == (members - 1 - x->rank / 2), "split: old rank %d got new rank %d", x->rank, r);
  EXPECT(dev == x->rank % g_ndev, "split: device %d", dev);
  /* an all-reduce on the sub-communicator: sum of (old rank + 1) over the members */
  float *d, h = (float)(x->rank + 1), want = 0;
  for (int q = x->rank % 2; q < x->w->n; q += 2) want += (float)(q + 1);
  CK(cudaMalloc((void **)&d, 4));
  CK(cudaMemcpy(d, &h, 4, cudaMemcpyHostToDevice));
  NK(ncclAllReduce(d, d, 1, ncclFloat32, ncclSum, sub, x->stream));
  CK(cudaStreamSynchronize(x->stream));
  CK(cudaMemcpy(&h, d, 4, cudaMemcpyDeviceToHost));
  EXPECT(h == want, "split all-reduce rank %d: %g, expected %g", x->rank, h, want);
  CK(cudaFree(d));
  /* rank 0 opts out of a second split */
  NK(ncclCommSplit(x->comm, x->rank == 0 ? JN_NCCL_SPLIT_NOCOLOR : 7, 0, &none, NULL));
  EXPECT((x->rank == 0) == (none == NULL), "NOCOLOR split: rank %d got %p", x->rank, (void *)none);
  if (none) {
    NK(ncclCommCount(none, &n));
    EXPECT(n == x->w->n - 1, "second split has %d ranks", n);
    NK(ncclCommDestroy(none));
  }
  NK(ncclCommDestroy(sub));
}

static void test_init_all(void) {
  int nd = g_ndev < 4 ? g_ndev : 4, devs[4] = {3, 2, 1, 0};
  ncclComm_t comms[4];
  NK(ncclCommInitAll(comms, nd, nd == 4 ? devs : NULL));
  cudaStream_t s[4];
  float *d[4];
  for (int i = 0; i < nd; i++) {
    int dev, r;
    NK(ncclCommCuDevice(comms[i], &dev));
    NK(ncclCommUserRank(comms[i], &r));
    EXPECT(r == i && dev == (nd == 4 ? devs[i] : i), "InitAll comm %d: rank %d device %d", i, r, dev);
    CK(cudaSetDevice(dev));
    CK(cudaStreamCreateWithFlags(&s[i], 0));
    float h[3] = {(float)i, 1.0f, (float)(i * i)};
    CK(cudaMalloc((void **)&d[i], sizeof h));
    CK(cudaMemcpy(d[i], h, sizeof h, cudaMemcpyHostToDevice));
  }
  /* one thread drives every rank: the group makes it possible */
  NK(ncclGroupStart());
  for (int i = 0; i < nd; i++) NK(ncclAllReduce(d[i], d[i], 3, ncclFloat32, ncclSum, comms[i], s[i]));
  NK(ncclGroupEnd());
  float want[3] = {0, (float)nd, 0};
  for (int i = 0; i < nd; i++) {
    want[0] += (float)i;
    want[2] += (float)(i * i);
  }
  for (int i = 0; i < nd; i++) {
    float h[3];
    CK(cudaStreamSynchronize(s[i]));
    CK(cudaMemcpy(h, d[i], sizeof h, cudaMemcpyDeviceToHost));
    EXPECT(memcmp(h, want, sizeof h) == 0, "InitAll all-reduce on comm %d: %g %g %g", i, h[0], h[1], h[2]);
    CK(cudaStreamDestroy(s[i]));
    CK(cudaFree(d[i]));
    NK(ncclCommDestroy(comms[i]));
  }
  CK(cudaSetDevice(0));
}

static void body_duplicate(rank_ctx *x) {
  CK(cudaSetDevice(0)); /* both ranks on device 0 of one process */
  ncclComm_t c = NULL;
  EXPECT_NCCL(ncclCommInitRank(&c, 2, x->w->id, x->rank), ncclInvalidUsage);
  EXPECT(c == NULL, "failed blocking init left a communicator");
  EXPECT(strstr(ncclGetLastError(NULL), "Duplicate GPU detected") != NULL, "text: %s", ncclGetLastError(NULL));
}

/* Polls a non-blocking communicator's async state until it leaves ncclInProgress (30 s cap). */
static ncclResult_t settle(ncclComm_t c) {
  ncclResult_t ae = ncclInProgress;
  double t0 = now_s();
  while (ae == ncclInProgress && now_s() - t0 < 30) {
    NK(ncclCommGetAsyncError(c, &ae));
    if (ae == ncclInProgress) sleep_ms(1);
  }
  return ae;
}

/* A non-blocking communicator for x, polled until ready. */
static void init_nonblocking(rank_ctx *x) {
  ncclConfig_t cfg = config_init();
  cfg.blocking = 0;
  ncclResult_t rc = ncclCommInitRankConfig(&x->comm, x->w->n, x->w->id, x->rank, &cfg);
  EXPECT(rc == ncclInProgress || rc == ncclSuccess, "nonblocking init -> %d", rc);
  EXPECT(settle(x->comm) == ncclSuccess, "nonblocking parent init failed");
}

/* jnccl's BLOCKING_SPLIT sequence, as NCCL 2.28 behaves: non-blocking parent; its split into a
 * blocking child is ncclInProgress with the child NULL until the parent settles; collectives
 * then run on the blocking child; the child is finalized (blocking) and the parent
 * finalized (non-blocking) before both are destroyed. */
static void body_split_nonblocking(rank_ctx *x) {
  world *w = x->w;
  init_nonblocking(x);
  ncclConfig_t child_cfg = config_init();
  child_cfg.blocking = 1;
  child_cfg.splitShare = 1;
  ncclComm_t child = (ncclComm_t)(uintptr_t)1; /* must be overwritten with NULL at once */
  if (x->rank == 0) barrier(x); /* rank 0 splits only after the others: its split must wait */
  EXPECT_NCCL(ncclCommSplit(x->comm, 0, x->rank, &child, &child_cfg), ncclInProgress);
  /* The others' splits cannot finish before rank 0 splits (after this barrier): their child is
   * still NULL. (Rank 0's may be written by the split thread at any moment: not read here.) */
  if (x->rank != 0) {
    EXPECT(child == NULL, "split of a non-blocking parent: child %p before the parent settled", (void *)child);
    barrier(x);
  }
  EXPECT(settle(x->comm) == ncclSuccess, "split: parent async state");
  EXPECT(child != NULL, "split: child still NULL after the parent settled");
  if (child == NULL) return;
  int n, r;
  NK(ncclCommCount(child, &n));
  NK(ncclCommUserRank(child, &r));
  EXPECT(n == w->n && r == x->rank, "split child: rank %d of %d", r, n);
  ncclComm_t parent = x->comm;
  x->comm = child; /* coll_case runs on x->comm: a blocking call returns ncclSuccess */
  CK(cudaStreamCreateWithFlags(&x->stream, JN_cudaStreamNonBlocking));
  coll_case(x, C_REDUCESCATTER, ncclFloat32, ncclSum, 1, 777, 0);
  coll_case(x, C_ALLGATHER, ncclBfloat16, ncclSum, 0, 333, 0);
  CK(cudaStreamSynchronize(x->stream));
  NK(ncclCommFinalize(child)); /* blocking: returns when flushed */
  NK(ncclCommDestroy(child));
  EXPECT_NCCL(ncclCommFinalize(parent), ncclInProgress);
  EXPECT(settle(parent) == ncclSuccess, "parent finalize");
  NK(ncclCommDestroy(parent));
  CK(cudaStreamDestroy(x->stream));
  x->comm = NULL;
}

/* A split that one rank never joins ends when the parent is aborted: the child stays NULL. */
static void body_split_abort(rank_ctx *x) {
  init_nonblocking(x);
  if (x->rank == 0) {
    ncclConfig_t child_cfg = config_init();
    child_cfg.blocking = 1;
    child_cfg.splitShare = 1;
    ncclComm_t child = NULL;
    EXPECT_NCCL(ncclCommSplit(x->comm, 0, 0, &child, &child_cfg), ncclInProgress);
    sleep_ms(50);
    ncclResult_t ae;
    NK(ncclCommGetAsyncError(x->comm, &ae));
    EXPECT(ae == ncclInProgress && child == NULL, "split without the peers: state %d, child %p", ae, (void *)child);
    EXPECT_NCCL(ncclCommDestroy(x->comm), ncclInvalidArgument); /* not while the split runs */
    double t0 = now_s();
    NK(ncclCommAbort(x->comm));
    EXPECT(now_s() - t0 < 5, "abort during a split took %.2f s", now_s() - t0);
    EXPECT(child == NULL, "aborted split published a child %p", (void *)child);
  }
  barrier(x);
  if (x->rank != 0) NK(ncclCommAbort(x->comm));
  x->comm = NULL;
}

void test_init_and_split(void) {
  run_world(3, body_nonblocking, NULL, 1);
  NO_SHM_LEFT("nonblocking init");
  run_world(4, body_split, NULL, 0);
  run_world(5, body_split, NULL, 0);
  run_world(2, body_split_nonblocking, NULL, 1);
  run_world(4, body_split_nonblocking, NULL, 1);
  NO_SHM_LEFT("non-blocking split");
  run_world(3, body_split_abort, NULL, 1);
  NO_SHM_LEFT("aborted split");
  test_init_all();
  run_world(2, body_duplicate, NULL, 1);
  NO_SHM_LEFT("duplicate GPU");
  printf("  nonblocking init, split, InitAll, duplicate GPU ok\n");
}

/* =================================================== NCCL argument errors */

static void body_args(rank_ctx *x) {
  if (x->rank != 0) return;
  ncclComm_t c = x->comm;
  cudaStream_t s = x->stream;
  float *d, host[4];
  CK(cudaMalloc((void **)&d, 64));
  EXPECT_NCCL(ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, NULL, s), ncclInvalidArgument);
  EXPECT(strstr(ncclGetLastError(NULL), "comm argument is NULL") != NULL, "text: %s", ncclGetLastError(NULL));
  EXPECT_NCCL(ncclAllReduce(d, d, 4, (ncclDataType_t)12, ncclSum, c, s), ncclInvalidArgument);
  EXPECT_NCCL(ncclAllReduce(d, d, 4, ncclFloat32, (ncclRedOp_t)5, c, s), ncclInvalidArgument);
  EXPECT_NCCL(ncclAllReduce(NULL, d, 4, ncclFloat32, ncclSum, c, s), ncclInvalidArgument);
  EXPECT_NCCL(ncclAllReduce(host, host, 4, ncclFloat32, ncclSum, c, s), ncclInvalidArgument);
  EXPECT_NCCL(ncclAllReduce(d, d, 17, ncclFloat32, ncclSum, c, s), ncclInvalidArgument); /* 68 > 64 bytes */
  EXPECT_NCCL(ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, c, NULL), ncclInvalidUsage);
  EXPECT(strstr(ncclGetLastError(NULL), "explicit stream") != NULL, "text: %s", ncclGetLastError(NULL));
  EXPECT_NCCL(ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, c, (cudaStream_t)(uintptr_t)0x99), ncclInvalidArgument);
  EXPECT_NCCL(ncclBroadcast(d, d, 4, ncclFloat32, 2, c, s), ncclInvalidArgument);
  EXPECT_NCCL(ncclReduce(d, d, 4, ncclFloat32, ncclSum, -1, c, s), ncclInvalidArgument);
  /* gather/scatter: root range, the root's buffers (whole world there), overlap other than in place */
  EXPECT_NCCL(ncclGather(d, d, 4, ncclFloat32, 2, c, s), ncclInvalidArgument);
  EXPECT(strstr(ncclGetLastError(c), "invalid root 2") != NULL, "text: %s", ncclGetLastError(c));
  EXPECT_NCCL(ncclScatter(d, d, 4, ncclFloat32, -1, c, s), ncclInvalidArgument);
  EXPECT_NCCL(ncclGather(d, NULL, 4, ncclFloat32, 0, c, s), ncclInvalidArgument);
  EXPECT_NCCL(ncclScatter(NULL, d, 4, ncclFloat32, 0, c, s), ncclInvalidArgument);
  EXPECT_NCCL(ncclGather(d, d, 9, ncclFloat32, 0, c, s), ncclInvalidArgument); /* 2*9*4 > 64 at the root */
  EXPECT_NCCL(ncclScatter(d, d, 9, ncclFloat32, 0, c, s), ncclInvalidArgument);
  EXPECT_NCCL(ncclGather(d + 1, d, 4, ncclFloat32, 0, c, s), ncclInvalidArgument);
  EXPECT(strstr(ncclGetLastError(c), "overlap") != NULL, "text: %s", ncclGetLastError(c));
  EXPECT_NCCL(ncclScatter(d, d + 2, 4, ncclFloat32, 0, c, s), ncclInvalidArgument);
  EXPECT(strstr(ncclGetLastError(c), "overlap") != NULL, "text: %s", ncclGetLastError(c));
  EXPECT_NCCL(ncclSend(d, 4, ncclFloat32, 2, c, s), ncclInvalidArgument);
  EXPECT_NCCL(ncclRecv(d, 4, ncclFloat32, -1, c, s), ncclInvalidArgument);
  EXPECT_NCCL(ncclReduceScatter(d, d, 9, ncclFloat32, ncclSum, c, s), ncclInvalidArgument); /* 2*9*4 > 64 */
  EXPECT_NCCL(ncclAllReduce(NULL, NULL, 0, ncclFloat32, ncclSum, c, s), ncclSuccess);    /* count 0 */
  EXPECT_NCCL(ncclGroupEnd(), ncclInvalidUsage);
  /* an error inside a group fails the group and launches nothing */
  NK(ncclGroupStart());
  NK(ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, c, s));
  EXPECT_NCCL(ncclAllReduce(d, d, 4, ncclFloat32, (ncclRedOp_t)9, c, s), ncclInvalidArgument);
  EXPECT_NCCL(ncclGroupEnd(), ncclInvalidArgument);
  int v;
  EXPECT_NCCL(ncclCommCount(c, NULL), ncclInvalidArgument);
  EXPECT_NCCL(ncclCommCount(NULL, &v), ncclInvalidArgument);
  EXPECT_NCCL(ncclGetVersion(NULL), ncclInvalidArgument);
  void *hd;
  NK(ncclCommRegister(c, d, 64, &hd));
  EXPECT(hd != NULL, "register handle");
  NK(ncclCommDeregister(c, hd));
  EXPECT_NCCL(ncclCommRegister(c, host, 16, &hd), ncclInvalidArgument);
  EXPECT_NCCL(ncclCommRegister(c, NULL, 16, &hd), ncclSuccess); /* NCCL does not check buff */
  EXPECT_NCCL(ncclCommDeregister(c, NULL), ncclSuccess);
  /* registrations are counted per range; a handle the communicator does not hold is refused */
  void *h1, *h2;
  NK(ncclCommRegister(c, d, 64, &h1));
  NK(ncclCommRegister(c, d, 64, &h2));
  EXPECT(h1 == h2, "the same range registered twice gives the same handle");
  NK(ncclCommDeregister(c, h1));
  NK(ncclCommDeregister(c, h2));
  EXPECT_NCCL(ncclCommDeregister(c, h1), ncclInvalidUsage);
  EXPECT(strstr(ncclGetLastError(NULL), "Could not find handle") != NULL, "text: %s", ncclGetLastError(NULL));
  /* pre-multiplied sum operators: arguments, destroy, the data type they were made for */
  ncclRedOp_t pm;
  float factor = 2.0f;
  EXPECT_NCCL(ncclRedOpCreatePreMulSum(NULL, &factor, ncclFloat32, ncclScalarHostImmediate, c), ncclInvalidArgument);
  EXPECT_NCCL(ncclRedOpCreatePreMulSum(&pm, NULL, ncclFloat32, ncclScalarHostImmediate, c), ncclInvalidArgument);
  EXPECT_NCCL(ncclRedOpCreatePreMulSum(&pm, &factor, (ncclDataType_t)12, ncclScalarHostImmediate, c),
              ncclInvalidArgument);
  EXPECT_NCCL(ncclRedOpCreatePreMulSum(&pm, &factor, ncclFloat32, ncclScalarHostImmediate, NULL), ncclInvalidArgument);
  NK(ncclRedOpCreatePreMulSum(&pm, &factor, ncclFloat32, ncclScalarHostImmediate, c));
  EXPECT((int)pm >= ncclNumOps, "a user operator is beyond the built-ins: %d", (int)pm);
  EXPECT_NCCL(ncclAllReduce(d, d, 4, ncclFloat64, pm, c, s), ncclInvalidArgument); /* made for float32 */
  EXPECT(strstr(ncclGetLastError(NULL), "does not match") != NULL, "text: %s", ncclGetLastError(NULL));
  EXPECT_NCCL(ncclRedOpDestroy(ncclSum, c), ncclInvalidArgument);
  EXPECT_NCCL(ncclRedOpDestroy((ncclRedOp_t)-1, c), ncclInvalidArgument);
  EXPECT_NCCL(ncclRedOpDestroy(pm, NULL), ncclInvalidArgument);
  NK(ncclRedOpDestroy(pm, c));
  EXPECT_NCCL(ncclRedOpDestroy(pm, c), ncclInvalidArgument);
  EXPECT_NCCL(ncclAllReduce(d, d, 4, ncclFloat32, pm, c, s), ncclInvalidArgument); /* destroyed */
  /* the configuration received, NCCL's defaults applied */
  int mn, mx, cga;
  char cname[32];
  NK(jnccl_emu_comm_config(c, &mn, &mx, &cga, cname, sizeof cname));
  EXPECT(mn == 1 && mx == 64 && cga == 4 && cname[0] == '\0', "defaults: %d %d %d '%s'", mn, mx, cga, cname);
  EXPECT_NCCL(jnccl_emu_comm_config(c, NULL, &mx, &cga, cname, sizeof cname), ncclInvalidArgument);
  /* init arguments */
  ncclComm_t nc;
  ncclUniqueId id, bad;
  NK(ncclGetUniqueId(&id));
  memset(&bad, 0, sizeof bad);
  EXPECT_NCCL(ncclCommInitRank(NULL, 2, id, 0), ncclInvalidArgument);
  EXPECT_NCCL(ncclCommInitRank(&nc, 0, id, 0), ncclInvalidArgument);
  EXPECT_NCCL(ncclCommInitRank(&nc, 2, id, 2), ncclInvalidArgument);
  EXPECT_NCCL(ncclCommInitRank(&nc, 2, bad, 0), ncclInvalidArgument);
  ncclConfig_t cfg = config_init();
  cfg.magic = 0x12345678;
  EXPECT_NCCL(ncclCommInitRankConfig(&nc, 1, id, 0, &cfg), ncclInvalidArgument);
  cfg = config_init();
  cfg.blocking = 5;
  EXPECT_NCCL(ncclCommInitRankConfig(&nc, 1, id, 0, &cfg), ncclInvalidArgument);
  EXPECT(strstr(ncclGetLastError(NULL), "Invalid config blocking attribute value 5") != NULL, "text: %s",
         ncclGetLastError(NULL));
  cfg = config_init();
  cfg.minCTAs = 0; /* a config zeroed instead of initialised: NCCL refuses it */
  EXPECT_NCCL(ncclCommInitRankConfig(&nc, 1, id, 0, &cfg), ncclInvalidArgument);
  cfg = config_init();
  cfg.minCTAs = 4; /* maxCTAs left undefined: NCCL 2.28 refuses that too (4 > NCCL_CONFIG_UNDEF_INT) */
  EXPECT_NCCL(ncclCommInitRankConfig(&nc, 1, id, 0, &cfg), ncclInvalidArgument);
  cfg = config_init();
  cfg.minCTAs = 8;
  cfg.maxCTAs = 4;
  EXPECT_NCCL(ncclCommInitRankConfig(&nc, 1, id, 0, &cfg), ncclInvalidArgument);
  cfg = config_init();
  cfg.minCTAs = 3;
  cfg.maxCTAs = 100; /* capped at 64, as NCCL's MAXCHANNELS */
  cfg.cgaClusterSize = 2;
  cfg.commName = "tuned";
  NK(ncclCommInitRankConfig(&nc, 1, id, 0, &cfg));
  NK(jnccl_emu_comm_config(nc, &mn, &mx, &cga, cname, sizeof cname));
  EXPECT(mn == 3 && mx == 64 && cga == 2 && strcmp(cname, "tuned") == 0, "received: %d %d %d '%s'", mn, mx, cga,
         cname);
  ncclComm_t inherited, own;
  NK(ncclCommSplit(nc, 0, 0, &inherited, NULL)); /* NULL config: the parent's */
  NK(jnccl_emu_comm_config(inherited, &mn, &mx, &cga, cname, sizeof cname));
  EXPECT(mn == 3 && mx == 64 && cga == 2 && strcmp(cname, "tuned") == 0, "inherited: %d %d %d '%s'", mn, mx, cga,
         cname);
  cfg.minCTAs = cfg.maxCTAs = 5;
  cfg.commName = "child";
  NK(ncclCommSplit(nc, 0, 0, &own, &cfg));
  NK(jnccl_emu_comm_config(own, &mn, &mx, &cga, cname, sizeof cname));
  EXPECT(mn == 5 && mx == 5 && strcmp(cname, "child") == 0, "split's own: %d %d '%s'", mn, mx, cname);
  NK(ncclCommDestroy(own));
  NK(ncclCommDestroy(inherited));
  NK(ncclCommDestroy(nc));
  cfg = config_init();
  cfg.nvlsCTAs = 0;
  EXPECT_NCCL(ncclCommInitRankConfig(&nc, 1, id, 0, &cfg), ncclInvalidArgument);
  cfg = config_init();
  cfg.version = 21300; /* no blocking field yet: 5 is ignored */
  cfg.blocking = 5;
  cfg.nvlsCTAs = 0; /* nor nvlsCTAs */
  EXPECT_NCCL(ncclCommInitRankConfig(&nc, 1, id, 0, &cfg), ncclSuccess);
  NK(ncclCommDestroy(nc));
  EXPECT_NCCL(ncclCommInitAll(&nc, 0, NULL), ncclInvalidArgument);
  int dup[2] = {1, 1};
  ncclComm_t two[2];
  EXPECT_NCCL(ncclCommInitAll(two, 2, dup), ncclInvalidUsage);
  EXPECT_NCCL(ncclCommDestroy(NULL), ncclSuccess);
  EXPECT_NCCL(ncclCommAbort(NULL), ncclSuccess);
  EXPECT_NCCL(ncclGetUniqueId(NULL), ncclInvalidArgument);
  CK(cudaStreamSynchronize(s));
  CK(cudaFree(d));
}

/* A pre-multiplied sum at 2 ranks: int32 multiplies with wrap-around, then sums; float32 is
 * x0 * s, then fmaf(x1, s, acc) (NCCL's FuncPreMulSum, as its average). */
static void body_premul(rank_ctx *x) {
  ncclComm_t c = x->comm;
  cudaStream_t s = x->stream;
  enum { N = 64 };
  int32_t hi[N], gi[N];
  float hf[N], gf[N];
  for (int i = 0; i < N; i++) {
    hi[i] = (int32_t)(0x12345 * (i + 1) * (x->rank + 3)) ^ (i << 20);
    hf[i] = (float)(i + 1) * (x->rank ? 0.37f : -1.13f) + 0.001f * (float)i;
  }
  int32_t *di;
  float *df;
  CK(cudaMalloc((void **)&di, sizeof hi));
  CK(cudaMalloc((void **)&df, sizeof hf));
  CK(cudaMemcpy(di, hi, sizeof hi, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(df, hf, sizeof hf, cudaMemcpyHostToDevice));
  int32_t si = -7;
  float sf = 0.3f;
  ncclRedOp_t oi, of;
  NK(ncclRedOpCreatePreMulSum(&oi, &si, ncclInt32, ncclScalarHostImmediate, c));
  NK(ncclRedOpCreatePreMulSum(&of, &sf, ncclFloat32, ncclScalarHostImmediate, c));
  NK(ncclAllReduce(di, di, N, ncclInt32, oi, c, s));
  NK(ncclAllReduce(df, df, N, ncclFloat32, of, c, s));
  NK(ncclRedOpDestroy(oi, c)); /* allowed once the call returned: the operation keeps the scalar */
  NK(ncclRedOpDestroy(of, c));
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy(gi, di, sizeof gi, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(gf, df, sizeof gf, cudaMemcpyDeviceToHost));
  for (int i = 0; i < N; i++) {
    int32_t a = (int32_t)(0x12345 * (i + 1) * 3) ^ (i << 20), b = (int32_t)(0x12345 * (i + 1) * 4) ^ (i << 20);
    int32_t want = (int32_t)((uint32_t)a * (uint32_t)si + (uint32_t)b * (uint32_t)si);
    EXPECT(gi[i] == want, "int32 element %d: %d, want %d", i, gi[i], want);
    float f0 = (float)(i + 1) * -1.13f + 0.001f * (float)i, f1 = (float)(i + 1) * 0.37f + 0.001f * (float)i;
    /* a chunk of an all-reduce starts at rank k + 1: with one chunk per rank, element i of the
     * first half starts at rank 1, of the second half at rank 0 */
    int first = i < N / 2 ? 1 : 0;
    float a0 = first ? f1 : f0, a1 = first ? f0 : f1;
    volatile float p = a0 * sf;
    float wf = fmaf(a1, sf, p);
    EXPECT(gf[i] == wf, "float32 element %d: %a, want %a", i, gf[i], wf);
  }
  CK(cudaFree(di));
  CK(cudaFree(df));
}

void test_nccl_args(void) {
  run_world(2, body_premul, NULL, 0);
  run_world(2, body_args, NULL, 0);
  printf("  NCCL argument errors ok\n");
}

/* ============================================== two processes (fork) */

/* Two processes of one machine on one device, as NCCL: refused ("Duplicate GPU detected") on both
 * ranks, unless NCCL_HOSTID makes them separate nodes or NCCL_MULTI_RANK_GPU_ENABLE=1 allows it. */
static int fork_rank_one_device(ncclUniqueId id, int rank, ncclResult_t want) {
  int bad = 0;
  CK(cudaSetDevice(0));
  ncclComm_t c = NULL;
  ncclResult_t rc = ncclCommInitRank(&c, 2, id, rank);
  if (rc != want) {
    fprintf(stderr, "one device, rank %d: ncclCommInitRank -> %d, want %d (%s)\n", rank, rc, want,
            ncclGetLastError(NULL));
    bad = 1;
  }
  if (want == ncclInvalidUsage && strstr(ncclGetLastError(NULL), "Duplicate GPU detected") == NULL) {
    fprintf(stderr, "one device, rank %d: text %s\n", rank, ncclGetLastError(NULL));
    bad = 1;
  }
  if (c != NULL) NK(ncclCommDestroy(c));
  return bad;
}

/* Both ranks on device 0, the child with the environment variable name=value (NULL: none). */
static void one_device(const char *name, const char *value, ncclResult_t want, const char *what) {
  ncclUniqueId id;
  NK(ncclGetUniqueId(&id));
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    if (name != NULL) setenv(name, value, 1);
    _exit(fork_rank_one_device(id, 1, want) ? 3 : 0);
  }
  int bad = fork_rank_one_device(id, 0, want), status = 0;
  waitpid(pid, &status, 0);
  EXPECT(!bad, "%s: parent rank", what);
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: child status %#x", what, status);
  EXPECT(!shm_exists(&id), "%s: /dev/shm entry left behind", what);
}

void test_two_processes_one_device(void) {
  one_device(NULL, NULL, ncclInvalidUsage, "two processes on device 0");
  one_device("NCCL_HOSTID", "jnccl-emu-test-other-node", ncclSuccess, "two processes on device 0, own NCCL_HOSTID");
  setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 1); /* both processes need it, as with NCCL */
  one_device(NULL, NULL, ncclSuccess, "two processes on device 0, NCCL_MULTI_RANK_GPU_ENABLE=1");
  unsetenv("NCCL_MULTI_RANK_GPU_ENABLE");
  printf("  two processes on one device ok\n");
}

static int fork_rank(ncclUniqueId id, int rank) {
  int bad = 0;
  CK(cudaSetDevice(rank));
  ncclComm_t c;
  NK(ncclCommInitRank(&c, 2, id, rank));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, JN_cudaStreamNonBlocking));
  const size_t count = 300000; /* more than one 1 MiB chunk */
  double *d, *h = malloc(count * 8);
  for (size_t i = 0; i < count; i++) h[i] = (double)(rank + 1) * (double)i;
  CK(cudaMalloc((void **)&d, count * 8));
  CK(cudaMemcpy(d, h, count * 8, cudaMemcpyHostToDevice));
  NK(ncclAllReduce(d, d, count, ncclFloat64, ncclSum, c, s));
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy(h, d, count * 8, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < count && !bad; i++) bad = h[i] != 3.0 * (double)i;
  ncclResult_t ae;
  NK(ncclCommGetAsyncError(c, &ae));
  bad |= ae != ncclSuccess;
  CK(cudaFree(d));
  free(h);
  CK(cudaStreamDestroy(s));
  NK(ncclCommDestroy(c));
  return bad;
}

void test_two_processes(void) {
  ncclUniqueId id;
  NK(ncclGetUniqueId(&id));
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) _exit(fork_rank(id, 1) ? 3 : 0); /* the child meets the parent only through id */
  int bad = fork_rank(id, 0), status = 0;
  waitpid(pid, &status, 0);
  EXPECT(!bad, "two processes: parent rank got wrong data");
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "two processes: child status %#x", status);
  EXPECT(!shm_exists(&id), "two processes: /dev/shm entry left behind");
  printf("  two processes ok\n");
}

