/*
 * emu_test_coll.c - collectives checked element by element (bit-exact) against the
 * reference, over data types, operators, sizes, in-place and chunking; repeated cycles
 * leak neither threads nor segments.
 */
#include "emu_test.h"

/* =========================================================== collectives */

const char *CNAME[] = {"allreduce", "reducescatter", "allgather", "broadcast", "reduce", "alltoall", "gather",
                       "scatter"};
static int rooted(int kind) { return kind == C_BROADCAST || kind == C_REDUCE || kind == C_GATHER || kind == C_SCATTER; }
static int reducing(int kind) { return kind == C_ALLREDUCE || kind == C_REDUCESCATTER || kind == C_REDUCE; }

/* Expected element i of rank r's output. */
static uint64_t expected(int kind, int dt, int op, int n, int r, int root, size_t count, size_t i, uint64_t seed) {
  uint64_t v[16];
  switch (kind) {
    case C_ALLREDUCE: { /* ring chunk k (ceil(count / n) elements, rounded up to 16 bytes) starts at k + 1 */
      size_t granule = dsize(dt) >= 16 ? 1 : 16 / dsize(dt), chunk = (count + (size_t)n - 1) / (size_t)n;
      chunk = (chunk + granule - 1) / granule * granule;
      for (int j = 0; j < n; j++) v[j] = gen(seed, j, i, dt);
      return ref_red(dt, op, n, (int)((i / chunk + 1) % (size_t)n), v);
    }
    case C_REDUCE:
      for (int j = 0; j < n; j++) v[j] = gen(seed, j, i, dt);
      return ref_red(dt, op, n, (root + 1) % n, v);
    case C_REDUCESCATTER:
      for (int j = 0; j < n; j++) v[j] = gen(seed, j, (size_t)r * count + i, dt);
      return ref_red(dt, op, n, (r + 1) % n, v);
    case C_ALLGATHER:
    case C_GATHER: return gen(seed, (int)(i / count), i % count, dt);
    case C_SCATTER: return gen(seed, root, (size_t)r * count + i, dt);
    case C_BROADCAST: return gen(seed, root, i, dt);
    default: return gen(seed, (int)(i / count), (size_t)r * count + i % count, dt); /* alltoall */
  }
}

/* Runs one collective on this rank and checks its output element by element. */
void coll_case(rank_ctx *x, int kind, int dt, int op, int inplace, size_t count, int root) {
  const int n = x->w->n, r = x->rank;
  const size_t es = dsize(dt);
  uint64_t seed = mix(((uint64_t)kind << 40) ^ ((uint64_t)dt << 32) ^ ((uint64_t)op << 24) ^ ((uint64_t)inplace << 20) ^
                      count ^ ((uint64_t)n << 48) ^ ((uint64_t)root << 56));
  size_t sn = count, rn = count;
  if (kind == C_REDUCESCATTER) sn = (size_t)n * count;
  if (kind == C_ALLGATHER || kind == C_GATHER) rn = (size_t)n * count;
  if (kind == C_SCATTER) sn = (size_t)n * count;
  if (kind == C_ALLTOALL) sn = rn = (size_t)n * count;
  char *hs = malloc(sn * es + 1), *hr = malloc(rn * es + 1);
  for (size_t i = 0; i < sn; i++) put_elem(hs, i, dt, gen(seed, r, i, dt));
  char *ds, *dr, *buf = NULL;
  if (!inplace) {
    CK(cudaMalloc((void **)&ds, sn * es));
    CK(cudaMalloc((void **)&dr, rn * es));
    CK(cudaMemsetAsync(dr, 0xA5, rn * es, x->stream));
    CK(cudaMemcpyAsync(ds, hs, sn * es, cudaMemcpyHostToDevice, x->stream));
  } else {
    size_t total = sn > rn ? sn : rn;
    CK(cudaMalloc((void **)&buf, total * es));
    ds = dr = buf;
    if (kind == C_REDUCESCATTER) dr = buf + (size_t)r * count * es; /* NCCL's in-place conventions */
    if (kind == C_ALLGATHER) ds = buf + (size_t)r * count * es;
    if (kind == C_GATHER) ds = buf + (size_t)root * count * es; /* in place at the root */
    if (kind == C_SCATTER) dr = buf + (size_t)root * count * es;
    CK(cudaMemsetAsync(buf, 0x5A, total * es, x->stream));
    CK(cudaMemcpyAsync(ds, hs, sn * es, cudaMemcpyHostToDevice, x->stream));
  }
  ncclResult_t rc = ncclSuccess;
  switch (kind) {
    case C_ALLREDUCE: rc = ncclAllReduce(ds, dr, count, dt, op, x->comm, x->stream); break;
    case C_REDUCESCATTER: rc = ncclReduceScatter(ds, dr, count, dt, op, x->comm, x->stream); break;
    case C_ALLGATHER: rc = ncclAllGather(ds, dr, count, dt, x->comm, x->stream); break;
    case C_BROADCAST: rc = ncclBroadcast(ds, dr, count, dt, root, x->comm, x->stream); break;
    case C_REDUCE: rc = ncclReduce(ds, dr, count, dt, op, root, x->comm, x->stream); break;
    case C_GATHER: rc = ncclGather(ds, dr, count, dt, root, x->comm, x->stream); break;
    case C_SCATTER: rc = ncclScatter(ds, dr, count, dt, root, x->comm, x->stream); break;
    default: rc = ncclAlltoAll(ds, dr, count, dt, x->comm, x->stream); break;
  }
  EXPECT(rc == ncclSuccess, "%s enqueue -> %d: %s", CNAME[kind], rc, ncclGetLastError(x->comm));
  CK(cudaMemcpyAsync(hr, dr, rn * es, cudaMemcpyDeviceToHost, x->stream));
  CK(cudaStreamSynchronize(x->stream));
  ncclResult_t ae;
  NK(ncclCommGetAsyncError(x->comm, &ae));
  EXPECT(ae == ncclSuccess, "%s async error %d", CNAME[kind], ae);
  if (!((kind == C_REDUCE || kind == C_GATHER) && r != root)) {
    for (size_t i = 0; i < rn; i++) {
      uint64_t want = expected(kind, dt, op, n, r, root, count, i, seed), got = get_elem(hr, i, dt);
      if (want != got) {
        FAILF("%s %s %s n=%d rank=%d root=%d count=%zu %s: element %zu is %#llx, expected %#llx", CNAME[kind],
              DTNAME[dt], reducing(kind) ? OPNAME[op] : "-", n, r, root, count, inplace ? "in-place" : "out-of-place",
              i, (unsigned long long)got, (unsigned long long)want);
        break;
      }
    }
  }
  if (buf) CK(cudaFree(buf));
  else {
    CK(cudaFree(ds));
    CK(cudaFree(dr));
  }
  free(hs);
  free(hr);
}

/* Every collective, dtype, op, in and out of place (trimmed in quick mode for big worlds). */
static void body_sweep(rank_ctx *x) {
  const int n = x->w->n;
  const int trim = g_quick && n >= 4;
  size_t counts[] = {1 + (size_t)n % 3, 37};
  for (int ci = 0; ci < 2; ci++) {
    size_t count = counts[ci];
    for (int kind = 0; kind < C_NKINDS; kind++) {
      for (int d = 0; d < 12; d++) {
        int dt = DTYPES[d];
        if (trim && ci == 0 && d % 3 != 0) continue;
        for (int op = 0; op < (reducing(kind) ? 5 : 1); op++) {
          if (trim && (op + d) % 2) continue;
          for (int inplace = 0; inplace < 2; inplace++) {
            int root = rooted(kind) ? (int)((count + (size_t)d + (size_t)op) % (size_t)n) : 0;
            coll_case(x, kind, dt, op, inplace, count, root);
          }
        }
      }
    }
  }
}

void test_sweep(void) {
  int worlds[] = {1, 2, 3, 4, 8};
  for (int i = 0; i < 5; i++) {
    double t0 = now_s();
    run_world(worlds[i], body_sweep, NULL, 0);
    printf("  sweep: world %d ok (%.2f s)\n", worlds[i], now_s() - t0);
  }
}

/* Buffers larger than the staging chunk, odd counts (small chunk via JNCCL_HOST_CHUNK_BYTES). */
static void body_chunks(rank_ctx *x) {
  size_t big = *(size_t *)x->w->arg;
  coll_case(x, C_ALLREDUCE, ncclFloat32, ncclSum, 0, big, 0);
  coll_case(x, C_ALLREDUCE, ncclBfloat16, ncclAvg, 1, big + 2, 0);
  coll_case(x, C_REDUCESCATTER, ncclFloat16, ncclSum, 1, big / 2 + 1, 0);
  coll_case(x, C_REDUCESCATTER, ncclInt32, ncclMax, 0, big / 3, 0);
  coll_case(x, C_ALLGATHER, ncclFloat64, 0, 1, big / 4 + 3, 0);
  coll_case(x, C_ALLGATHER, ncclUint8, 0, 0, big + 7, 0);
  coll_case(x, C_BROADCAST, ncclInt64, 0, 0, big / 2 + 5, x->w->n - 1);
  coll_case(x, C_REDUCE, ncclFloat8e4m3, ncclSum, 0, big / 8 + 1, 1 % x->w->n);
  coll_case(x, C_ALLTOALL, ncclFloat32, 0, 1, big / 3 + 1, 0);
  coll_case(x, C_GATHER, ncclBfloat16, 0, 1, big / 2 + 3, x->w->n - 1);
  coll_case(x, C_SCATTER, ncclFloat64, 0, 0, big / 5 + 1, x->w->n / 2);
}

/* Large all-reduces with more than two ranks take the split path (each rank reduces a share). */
static void body_big_allreduce(rank_ctx *x) {
  size_t count = *(size_t *)x->w->arg;
  coll_case(x, C_ALLREDUCE, ncclFloat32, ncclSum, 0, count, 0);
  coll_case(x, C_ALLREDUCE, ncclBfloat16, ncclAvg, 1, count + 1, 0);
  coll_case(x, C_ALLREDUCE, ncclInt64, ncclProd, 0, count / 2, 0);
  coll_case(x, C_ALLREDUCE, ncclFloat8e5m2, ncclMax, 1, count * 2 + 3, 0);
  coll_case(x, C_ALLREDUCE, ncclFloat16, ncclMin, 0, count, 0);
}

void test_chunking(void) {
  size_t small = 5001; /* with 4 KiB chunks: many rounds */
  setenv("JNCCL_HOST_CHUNK_BYTES", "4096", 1);
  run_world(3, body_chunks, &small, 0);
  unsetenv("JNCCL_HOST_CHUNK_BYTES");
  size_t big = g_quick ? 300001 : 700001; /* default 1 MiB chunk: > 1 chunk of fp32 */
  run_world(2, body_chunks, &big, 0);
  size_t ar = 300007;
  run_world(g_quick ? 3 : 4, body_big_allreduce, &ar, 0);
  printf("  chunking ok\n");
}

/* Bit patterns at the edges: saturation, overflow, NaN, rounding. */
static void body_special(rank_ctx *x) {
  struct {
    int dt;
    uint64_t a, b, want; /* rank 0 contributes a, rank 1 b; sum */
  } cases[] = {
      {ncclFloat8e4m3, 0x7e, 0x7e, 0x7e},     /* 448 + 448 saturates to 448 */
      {ncclFloat8e4m3, 0xfe, 0xfe, 0xfe},     /* -448 - 448 saturates to -448 */
      {ncclFloat8e4m3, 0x7f, 0x38, 0x7f},     /* NaN stays NaN */
      {ncclFloat8e4m3, 0x01, 0x00, 0x01},     /* smallest subnormal survives */
      {ncclFloat8e5m2, 0x7b, 0x7b, 0x7b},     /* 57344 + 57344 saturates */
      {ncclFloat8e5m2, 0x7c, 0x00, 0x7b},     /* inf saturates to max finite */
      {ncclFloat8e5m2, 0x7e, 0x3c, 0x7f},     /* NaN -> canonical NaN 0x7f */
      {ncclFloat16, 0x7bff, 0x7bff, 0x7c00},  /* 65504 + 65504 overflows to inf */
      {ncclFloat16, 0x3c00, 0x1000, 0x3c00},  /* 1 + 2^-11 ties to even: 1 */
      {ncclFloat16, 0x7e00, 0x3c00, 0x7fff},  /* NaN -> canonical 0x7fff */
      {ncclBfloat16, 0x3f80, 0x3b80, 0x3f80}, /* 1 + 2^-8 ties to even: 1 */
      {ncclBfloat16, 0x3f81, 0x3b80, 0x3f82}, /* tie rounds up to even */
      {ncclBfloat16, 0x7fc1, 0x3f80, 0x7fff}, /* NaN -> canonical 0x7fff */
      {ncclInt8, 0x7f, 0x01, 0x80},           /* wraps */
  };
  int nc = (int)(sizeof cases / sizeof cases[0]);
  void *d;
  CK(cudaMalloc(&d, 8));
  for (int i = 0; i < nc; i++) {
    uint64_t mine = x->rank == 0 ? cases[i].a : cases[i].b, got = 0;
    CK(cudaMemcpy(d, &mine, dsize(cases[i].dt), cudaMemcpyHostToDevice));
    NK(ncclAllReduce(d, d, 1, cases[i].dt, ncclSum, x->comm, x->stream));
    CK(cudaStreamSynchronize(x->stream));
    CK(cudaMemcpy(&got, d, dsize(cases[i].dt), cudaMemcpyDeviceToHost));
    EXPECT(got == cases[i].want, "special case %d (%s): %#llx + %#llx = %#llx, expected %#llx", i,
           DTNAME[cases[i].dt], (unsigned long long)cases[i].a, (unsigned long long)cases[i].b,
           (unsigned long long)got, (unsigned long long)cases[i].want);
  }
  CK(cudaFree(d));
}

void test_special_values(void) {
  run_world(2, body_special, NULL, 0);
  printf("  special values ok\n");
}

/* ================================================ cycles: no leaks */

static void body_cycle(rank_ctx *x) { coll_case(x, C_ALLREDUCE, ncclFloat32, ncclSum, 0, 64, 0); }

void test_cycles(void) {
  int threads0 = count_threads(), left = 0;
  int cycles = g_quick ? 10 : 40;
  for (int i = 0; i < cycles; i++) {
    run_world(2 + i % 3, body_cycle, NULL, 0);
    left += shm_exists(&g_last_id);
  }
  int threads1 = count_threads();
  EXPECT(threads1 == threads0, "threads: %d before %d create/destroy cycles, %d after", threads0, cycles, threads1);
  EXPECT(left == 0, "%d of %d segments left in /dev/shm", left, cycles);
  printf("  %d create/destroy cycles ok (threads %d -> %d, no segment left)\n", cycles, threads0, threads1);
}

