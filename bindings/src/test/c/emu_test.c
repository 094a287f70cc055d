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

static int g_quick;
static atomic_int g_failures;
static int g_ndev;

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

static void fatal(void) {
  fflush(stdout);
  fflush(stderr);
  _exit(1);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static uint64_t mix(uint64_t x) {
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
static int count_threads(void) { return count_dir("/proc/self/task", ""); }

/* Whether the shared-memory segment named by a unique id still exists. The id holds the
 * tag "JNCCLHv1" and then the segment name (see README.md). Other processes may use the
 * emulation at the same time, so tests look for their own segments only. */
static int shm_exists(const ncclUniqueId *id) {
  char path[128];
  snprintf(path, sizeof path, "/dev/shm%.64s", id->internal + 8);
  return access(path, F_OK) == 0;
}

static float as_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* ============================================ reference conversions */

static float ref_h2f(uint16_t h) {
  _Float16 v;
  memcpy(&v, &h, 2);
  return (float)v;
}
static uint16_t ref_f2h(float f) {
  _Float16 v = (_Float16)f; /* round to nearest even, overflow to inf */
  uint16_t h;
  memcpy(&h, &v, 2);
  return h;
}
static float ref_bf2f(uint16_t b) { return as_float((uint32_t)b << 16); }
/* Nearest of the two bf16 neighbours of f (ties to the even one); finite inputs. */
static uint16_t ref_f2bf(float f) {
  uint32_t u = float_bits(f);
  uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
  double dl = (double)f - (double)ref_bf2f(lo), dh = (double)ref_bf2f(hi) - (double)f;
  if (dl < 0) dl = -dl;
  if (dh < 0) dh = -dh;
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1) ? hi : lo;
}

/* fp8: values computed from the format definition, encoding by exhaustive search. */
static double pow2(int e) {
  double r = 1;
  for (; e > 0; e--) r *= 2;
  for (; e < 0; e++) r /= 2;
  return r;
}
static float ref_fp8_value(uint8_t v, int e5m2) {
  int mbits = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
  int e = (v & 0x7f) >> mbits, m = v & ((1 << mbits) - 1);
  double mag = e == 0 ? m * pow2(1 - bias - mbits) : (1.0 + m / (double)(1 << mbits)) * pow2(e - bias);
  return (float)((v & 0x80) ? -mag : mag);
}
static uint8_t ref_f2fp8(float f, int e5m2) {
  uint8_t maxcode = e5m2 ? 0x7b : 0x7e;
  double a = f < 0 ? -(double)f : (double)f;
  uint8_t sign = (f < 0 || (f == 0 && (float_bits(f) >> 31))) ? 0x80 : 0;
  if (a >= ref_fp8_value(maxcode, e5m2)) return (uint8_t)(sign | maxcode); /* __NV_SATFINITE */
  /* positive codes are ordered by value: find the last one <= a, then pick the nearer
   * of it and its successor (a tie goes to the even code, i.e. the even mantissa) */
  int lo = 0, hi = maxcode;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (ref_fp8_value((uint8_t)mid, e5m2) <= a) lo = mid;
    else hi = mid - 1;
  }
  double dl = a - ref_fp8_value((uint8_t)lo, e5m2), dh = ref_fp8_value((uint8_t)(lo + 1), e5m2) - a;
  int best = dl < dh ? lo : dh < dl ? lo + 1 : ((lo & 1) ? lo + 1 : lo);
  return (uint8_t)(sign | best);
}

/* ================================================= data and reference */

static const int DTYPES[] = {ncclInt8,    ncclUint8,   ncclInt32,    ncclUint32,     ncclInt64,     ncclUint64,
                             ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
static const char *DTNAME[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                               "fp16", "fp32",  "fp64",  "bf16",   "e4m3",  "e5m2"};
static const char *OPNAME[] = {"sum", "prod", "max", "min", "avg"};

static size_t dsize(int dt) {
  static const size_t s[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return s[dt];
}

/* Element i of rank r's input for a case, as raw bits. */
static uint64_t gen(uint64_t seed, int r, size_t i, int dt) {
  uint64_t h = mix(seed ^ mix((uint64_t)(r + 1) * 0x51ed27 + (uint64_t)i * 0x2545f4914f6cdd1dull));
  double u = (double)(h >> 11) / 9007199254740992.0 * 4.0 - 2.0; /* [-2, 2) */
  switch (dt) {
    case ncclInt8:
    case ncclUint8: return h & 0xff;
    case ncclInt32:
    case ncclUint32: return h & 0xffffffffu;
    case ncclInt64:
    case ncclUint64: return h;
    case ncclFloat32: return float_bits((float)u);
    case ncclFloat64: {
      uint64_t b;
      memcpy(&b, &u, 8);
      return b;
    }
    case ncclFloat16: return ref_f2h((float)u);
    case ncclBfloat16: return ref_f2bf((float)u);
    case ncclFloat8e4m3: { /* any finite code: sums saturate at 448 */
      uint8_t v = (uint8_t)(h >> 8);
      return (v & 0x7f) == 0x7f ? v & 0xfe : v;
    }
    default: { /* e5m2: any finite code (exponent field < 31) */
      uint8_t v = (uint8_t)(h >> 8);
      return (v & 0x7c) == 0x7c ? v & 0xbf : v;
    }
  }
}

static float lowp_dec(int dt, uint64_t v) {
  switch (dt) {
    case ncclFloat16: return ref_h2f((uint16_t)v);
    case ncclBfloat16: return ref_bf2f((uint16_t)v);
    case ncclFloat8e4m3: return ref_fp8_value((uint8_t)v, 0);
    default: return ref_fp8_value((uint8_t)v, 1);
  }
}
static uint64_t lowp_enc(int dt, float f) {
  switch (dt) {
    case ncclFloat16: return ref_f2h(f);
    case ncclBfloat16: return ref_f2bf(f);
    case ncclFloat8e4m3: return ref_f2fp8(f, 0);
    default: return ref_f2fp8(f, 1);
  }
}

/* max/min of floating values: a NaN operand is ignored, -0 orders below +0. */
static double ref_max(double a, double b, int is_max) {
  if (a != a) return b;
  if (b != b) return a;
  if (a == 0 && b == 0) return (is_max ? !__builtin_signbit(a) : __builtin_signbit(a)) ? a : b;
  return is_max ? (b > a ? b : a) : (b < a ? b : a);
}

/* Reference reduction of v[0..n) in NCCL's ring order v[first], v[first + 1], ... (mod n), every
 * step rounded in the type; avg: s = 1/n rounded to the type, first x * s rounded, then a fused
 * multiply-add per step (fp8: product rounded, then the sum). Written independently of reduce.c
 * (double arithmetic, one rounding per step). */
static uint64_t ref_red(int dt, int op, int n, int first, const uint64_t *v) {
  int lowp = dt == ncclFloat16 || dt == ncclBfloat16 || dt == ncclFloat8e4m3 || dt == ncclFloat8e5m2;
  if (dt == ncclFloat32 || lowp) {
    int fp8 = dt == ncclFloat8e4m3 || dt == ncclFloat8e5m2;
#define RND(y) (dt == ncclFloat32 ? (double)(float)(y) : (double)lowp_dec(dt, lowp_enc(dt, (float)(y))))
    double s = RND(1.0 / n), acc = 0;
    for (int k = 0; k < n; k++) {
      int j = (first + k) % n;
      double x = dt == ncclFloat32 ? as_float((uint32_t)v[j]) : lowp_dec(dt, v[j]);
      if (k == 0) acc = op == ncclAvg ? RND(x * s) : x;
      else if (op == ncclSum) acc = RND(acc + x);
      else if (op == ncclAvg) acc = fp8 ? RND(acc + RND(x * s)) : RND(acc + x * s);
      else if (op == ncclProd) acc = RND(acc * x);
      else acc = ref_max(acc, x, op == ncclMax);
    }
#undef RND
    return dt == ncclFloat32 ? float_bits((float)acc) : lowp_enc(dt, (float)acc);
  }
  if (dt == ncclFloat64) {
    double s = 1.0 / (double)n, acc = 0;
    for (int k = 0; k < n; k++) {
      double x;
      memcpy(&x, &v[(first + k) % n], 8);
      if (k == 0) acc = op == ncclAvg ? x * s : x;
      else if (op == ncclSum) acc = acc + x;
      else if (op == ncclAvg) acc = fma(x, s, acc);
      else if (op == ncclProd) acc = acc * x;
      else acc = ref_max(acc, x, op == ncclMax);
    }
    uint64_t b;
    memcpy(&b, &acc, 8);
    return b;
  }
  /* integers, in 64-bit arithmetic modulo 2^w */
  int w = (int)dsize(dt) * 8, sgn = dt == ncclInt8 || dt == ncclInt32 || dt == ncclInt64;
  uint64_t mask = w == 64 ? ~0ull : (1ull << w) - 1;
#define SEXT(x) (w == 64 ? (int64_t)(x) : (int64_t)((x) << (64 - w)) >> (64 - w))
  uint64_t acc = v[0] & mask;
  for (int j = 1; j < n; j++) {
    uint64_t x = v[j] & mask;
    if (op == ncclSum || op == ncclAvg) acc = (acc + x) & mask;
    else if (op == ncclProd) acc = (acc * x) & mask;
    else {
      int gt = sgn ? SEXT(x) > SEXT(acc) : x > acc;
      int lt = sgn ? SEXT(x) < SEXT(acc) : x < acc;
      if ((op == ncclMax && gt) || (op == ncclMin && lt)) acc = x;
    }
  }
  if (op == ncclAvg) acc = sgn ? (uint64_t)(SEXT(acc) / n) & mask : (acc / (uint64_t)n) & mask;
#undef SEXT
  return acc;
}

static void put_elem(void *buf, size_t i, int dt, uint64_t v) {
  memcpy((char *)buf + i * dsize(dt), &v, dsize(dt)); /* little endian */
}
static uint64_t get_elem(const void *buf, size_t i, int dt) {
  uint64_t v = 0;
  memcpy(&v, (const char *)buf + i * dsize(dt), dsize(dt));
  return v;
}

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

static ncclUniqueId g_last_id; /* id of the latest world */
#define NO_SHM_LEFT(what) EXPECT(!shm_exists(&g_last_id), "%s: shared memory segment left in /dev/shm", what)

/* Runs body on n rank threads. manual: the body creates its own communicator. */
static void run_world(int n, void (*body)(rank_ctx *), void *arg, int manual) {
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

static void barrier(rank_ctx *x) { pthread_barrier_wait(&x->w->bar); }

/* =========================================================== collectives */

enum { C_ALLREDUCE, C_REDUCESCATTER, C_ALLGATHER, C_BROADCAST, C_REDUCE, C_ALLTOALL, C_NKINDS };
static const char *CNAME[] = {"allreduce", "reducescatter", "allgather", "broadcast", "reduce", "alltoall"};
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
    case C_ALLGATHER: return gen(seed, (int)(i / count), i % count, dt);
    case C_BROADCAST: return gen(seed, root, i, dt);
    default: return gen(seed, (int)(i / count), (size_t)r * count + i % count, dt); /* alltoall */
  }
}

/* Runs one collective on this rank and checks its output element by element. */
static void coll_case(rank_ctx *x, int kind, int dt, int op, int inplace, size_t count, int root) {
  const int n = x->w->n, r = x->rank;
  const size_t es = dsize(dt);
  uint64_t seed = mix(((uint64_t)kind << 40) ^ ((uint64_t)dt << 32) ^ ((uint64_t)op << 24) ^ ((uint64_t)inplace << 20) ^
                      count ^ ((uint64_t)n << 48) ^ ((uint64_t)root << 56));
  size_t sn = count, rn = count;
  if (kind == C_REDUCESCATTER) sn = (size_t)n * count;
  if (kind == C_ALLGATHER) rn = (size_t)n * count;
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
    default: rc = ncclAlltoAll(ds, dr, count, dt, x->comm, x->stream); break;
  }
  EXPECT(rc == ncclSuccess, "%s enqueue -> %d: %s", CNAME[kind], rc, ncclGetLastError(x->comm));
  CK(cudaMemcpyAsync(hr, dr, rn * es, cudaMemcpyDeviceToHost, x->stream));
  CK(cudaStreamSynchronize(x->stream));
  ncclResult_t ae;
  NK(ncclCommGetAsyncError(x->comm, &ae));
  EXPECT(ae == ncclSuccess, "%s async error %d", CNAME[kind], ae);
  if (!(kind == C_REDUCE && r != root)) {
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
            int root = (kind == C_BROADCAST || kind == C_REDUCE) ? (int)((count + (size_t)d + (size_t)op) % (size_t)n) : 0;
            coll_case(x, kind, dt, op, inplace, count, root);
          }
        }
      }
    }
  }
}

static void test_sweep(void) {
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

static void test_chunking(void) {
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

static void test_special_values(void) {
  run_world(2, body_special, NULL, 0);
  printf("  special values ok\n");
}

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

static void test_send_recv(void) {
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

static void body_mismatch(rank_ctx *x) {
  void *d;
  CK(cudaMalloc(&d, 400));
  if (x->rank == 0) NK(ncclSend(d, 100, ncclFloat32, 1, x->comm, x->stream));
  else NK(ncclRecv(d, 50, ncclFloat32, 0, x->comm, x->stream));
  CK(cudaStreamSynchronize(x->stream)); /* nothing hangs */
  barrier(x);                           /* the receiver has seen the mismatch */
  ncclResult_t ae;
  NK(ncclCommGetAsyncError(x->comm, &ae));
  EXPECT(ae == ncclInvalidUsage, "mismatch: rank %d async error %d, expected ncclInvalidUsage", x->rank, ae);
  const char *t = ncclGetLastError(x->comm);
  EXPECT(strstr(t, "rank 0 sends 400 bytes to rank 1, which receives 200 bytes") != NULL, "mismatch text: %s", t);
  /* later operations fail at the call with the comm's error; so does ncclCommDestroy (as in
   * NCCL): a failed communicator must be aborted */
  EXPECT_NCCL(ncclAllReduce(d, d, 1, ncclFloat32, ncclSum, x->comm, x->stream), ncclInvalidUsage);
  EXPECT_NCCL(ncclCommDestroy(x->comm), ncclInvalidUsage);
  NK(ncclCommAbort(x->comm));
  x->comm = NULL;
  CK(cudaFree(d));
}

static void test_mismatch(void) {
  run_world(2, body_mismatch, NULL, 0);
  NO_SHM_LEFT("size mismatch");
  printf("  send/recv size mismatch ok\n");
}

/* ================================================== init variants, split */

/* What NCCL_CONFIG_INITIALIZER gives. */
static ncclConfig_t config_init(void) {
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

static void test_init_and_split(void) {
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

static void test_faults(void) {
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

static void test_delay_rank(void) {
  setenv("JNCCL_HOST_DELAY_RANK", "1", 1);
  setenv("JNCCL_HOST_DELAY_US", "50000", 1);
  run_world(2, body_delay_rank, NULL, 0);
  unsetenv("JNCCL_HOST_DELAY_RANK");
  unsetenv("JNCCL_HOST_DELAY_US");
  printf("  rank delay ok\n");
}

/* ====================================================== CUDA runtime tests */

static void test_runtime_basics(void) {
  int v, n, dev;
  CK(cudaRuntimeGetVersion(&v));
  EXPECT(v == 13000, "runtime version %d", v);
  CK(cudaDriverGetVersion(&v));
  EXPECT(v == 13000, "driver version %d", v);
  NK(ncclGetVersion(&v));
  EXPECT(v == 22803, "nccl version %d", v);
  CK(cudaGetDeviceCount(&n));
  EXPECT(n == 8, "device count %d (JNCCL_HOST_DEVICES unset: 8)", n);
  CK(cudaGetDevice(&dev));
  EXPECT(dev == 0, "default device %d", dev);
  /* errors are sticky per thread until cudaGetLastError */
  EXPECT_CUDA(cudaGetLastError(), cudaSuccess);
  EXPECT_CUDA(cudaSetDevice(n), cudaErrorInvalidDevice);
  EXPECT_CUDA(cudaSetDevice(-1), cudaErrorInvalidDevice);
  EXPECT_CUDA(cudaGetDevice(&dev), cudaSuccess);
  EXPECT(dev == 0, "device changed by a failed cudaSetDevice");
  EXPECT_CUDA(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_CUDA(cudaGetLastError(), cudaSuccess);
  EXPECT(strcmp(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument") == 0, "error string");
  EXPECT(strcmp(cudaGetErrorString(cudaErrorNotReady), "device not ready") == 0, "error string");
  EXPECT(strcmp(cudaGetErrorString((cudaError_t)12345), "unrecognized error code") == 0, "unknown error string");
  EXPECT(strcmp(ncclGetErrorString(ncclInvalidUsage), "invalid usage (run with NCCL_DEBUG=WARN for details)") == 0,
         "nccl error string");
  EXPECT(strcmp(ncclGetErrorString((ncclResult_t)99), "unknown result code") == 0, "nccl unknown");
  int can;
  CK(cudaDeviceCanAccessPeer(&can, 0, 1));
  EXPECT(can == 1, "peer access 0->1");
  CK(cudaDeviceCanAccessPeer(&can, 2, 2));
  EXPECT(can == 0, "peer access to itself");
  EXPECT_CUDA(cudaDeviceCanAccessPeer(&can, 0, 99), cudaErrorInvalidDevice);
  CK(cudaSetDevice(3));
  EXPECT_CUDA(cudaDeviceEnablePeerAccess(5, 0), cudaSuccess);
  EXPECT_CUDA(cudaDeviceEnablePeerAccess(5, 0), cudaErrorPeerAccessAlreadyEnabled);
  EXPECT_CUDA(cudaDeviceEnablePeerAccess(3, 0), cudaErrorPeerAccessUnsupported); /* itself, as CUDA 13 */
  EXPECT_CUDA(cudaDeviceEnablePeerAccess(99, 0), cudaErrorInvalidDevice);
  char bus[32];
  CK(cudaDeviceGetPCIBusId(bus, sizeof bus, 3));
  EXPECT(strcmp(bus, "0000:04:00.0") == 0, "bus id %s", bus);
  EXPECT_CUDA(cudaDeviceGetPCIBusId(bus, 12, 3), cudaErrorInvalidValue); /* no room for the NUL */
  CK(cudaDeviceGetPCIBusId(bus, 13, 3));
  EXPECT_CUDA(cudaDeviceGetPCIBusId(bus, 13, 8), cudaErrorInvalidDevice);
  cudaGetLastError();

  /* memory */
  void *d = NULL, *h = NULL, *z = (void *)1;
  EXPECT_CUDA(cudaMalloc(NULL, 16), cudaErrorInvalidValue);
  CK(cudaMalloc(&z, 0));
  EXPECT(z == NULL, "cudaMalloc(0) gave %p", z);
  CK(cudaMalloc(&d, 1000));
  EXPECT(((uintptr_t)d & 255) == 0, "alignment of %p", d);
  CK(cudaMallocHost(&h, 100));
  struct cudaPointerAttributes a;
  CK(cudaPointerGetAttributes(&a, (char *)d + 999));
  EXPECT(a.type == cudaMemoryTypeDevice && a.device == 3 && a.devicePointer == (char *)d + 999 && a.hostPointer == NULL,
         "device attributes: type %d device %d", a.type, a.device);
  CK(cudaPointerGetAttributes(&a, h));
  EXPECT(a.type == cudaMemoryTypeHost && a.device == 3 && a.hostPointer == h, "host attributes");
  int local;
  CK(cudaPointerGetAttributes(&a, &local));
  EXPECT(a.type == cudaMemoryTypeUnregistered && a.device == -2 && a.devicePointer == NULL && a.hostPointer == &local,
         "unregistered attributes: type %d device %d", a.type, a.device);
  CK(cudaPointerGetAttributes(&a, (char *)d + 1000)); /* one past the end: not in it */
  EXPECT(a.type == cudaMemoryTypeUnregistered, "one-past-the-end attributes: type %d", a.type);
  EXPECT_CUDA(cudaFree(&local), cudaErrorInvalidValue);
  EXPECT_CUDA(cudaFree((char *)d + 8), cudaErrorInvalidValue);
  EXPECT_CUDA(cudaFree(h), cudaErrorInvalidValue); /* host memory goes to cudaFreeHost */
  EXPECT_CUDA(cudaFreeHost(d), cudaErrorInvalidValue);
  CK(cudaFree(NULL));
  /* copies: kinds, ranges */
  char buf[1000], back[1000];
  for (int i = 0; i < 1000; i++) buf[i] = (char)i;
  CK(cudaMemcpy(d, buf, 1000, cudaMemcpyHostToDevice));
  EXPECT_CUDA(cudaMemcpy(d, buf, 1001, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_CUDA(cudaMemcpy(buf, d, 10, (enum cudaMemcpyKind)7), cudaErrorInvalidMemcpyDirection);
  EXPECT_CUDA(cudaMemcpy(back, buf, 10, cudaMemcpyDeviceToHost), cudaErrorInvalidValue); /* src is not device */
  CK(cudaMemcpy(back, d, 1000, cudaMemcpyDefault));
  EXPECT(memcmp(back, buf, 1000) == 0, "round trip");
  CK(cudaMemsetAsync((char *)d + 10, 7, 5, NULL));
  CK(cudaMemcpy(back, d, 20, cudaMemcpyDeviceToHost));
  EXPECT(back[9] == 9 && back[10] == 7 && back[14] == 7 && back[15] == 15, "memset");
  EXPECT_CUDA(cudaMemsetAsync(buf, 0, 4, NULL), cudaErrorInvalidValue);
  EXPECT_CUDA(cudaMemcpyPeerAsync(h, 3, d, 3, 100, NULL), cudaSuccess);
  EXPECT_CUDA(cudaMemcpyPeerAsync(h, 9, d, 3, 100, NULL), cudaErrorInvalidDevice);
  CK(cudaMemcpy(back, d, 100, cudaMemcpyDeviceToHost));
  EXPECT(memcmp(h, back, 100) == 0, "peer copy");
  /* ncclMemAlloc maps to cudaMalloc */
  void *m;
  NK(ncclMemAlloc(&m, 4096));
  CK(cudaPointerGetAttributes(&a, m));
  EXPECT(a.type == cudaMemoryTypeDevice, "ncclMemAlloc memory is device memory");
  NK(ncclMemFree(m));
  EXPECT_NCCL(ncclMemFree(&local), ncclUnhandledCudaError);
  EXPECT_NCCL(ncclMemAlloc(NULL, 4), ncclUnhandledCudaError);
  cudaGetLastError();
  /* bad stream handles */
  EXPECT_CUDA(cudaMemcpyAsync(d, buf, 4, cudaMemcpyHostToDevice, (cudaStream_t)JN_cudaStreamPerThread),
              cudaErrorInvalidResourceHandle);
  EXPECT_CUDA(cudaStreamSynchronize((cudaStream_t)(uintptr_t)0x1234), cudaErrorInvalidResourceHandle);
  EXPECT_CUDA(cudaStreamDestroy(NULL), cudaErrorInvalidResourceHandle);
  EXPECT_CUDA(cudaStreamCreateWithFlags(NULL, 0), cudaErrorInvalidValue);
  CK(cudaFree(d));
  CK(cudaFreeHost(h));
  CK(cudaSetDevice(0));
  cudaGetLastError();
  printf("  runtime basics ok\n");
}

/* Stream asynchrony: with JNCCL_HOST_DELAY_US a copy enqueued without waiting is not yet
 * visible; after cudaStreamWaitEvent / synchronize it is. Also events and legacy stream. */
static void test_streams_events(void) {
  const long delay_ms = 100;
  char dly[32];
  snprintf(dly, sizeof dly, "%ld", delay_ms * 1000);
  setenv("JNCCL_HOST_DELAY_US", dly, 1);
  setenv("JNCCL_HOST_DELAY_DEVICE", "1", 1);
  CK(cudaSetDevice(1));
  cudaStream_t slow, fast, other;
  CK(cudaStreamCreateWithFlags(&slow, 0)); /* delayed: device 1 */
  CK(cudaSetDevice(2));
  CK(cudaStreamCreateWithFlags(&other, 0)); /* device 2: not delayed */
  unsetenv("JNCCL_HOST_DELAY_US");
  unsetenv("JNCCL_HOST_DELAY_DEVICE");
  CK(cudaSetDevice(1));
  CK(cudaStreamCreateWithFlags(&fast, JN_cudaStreamNonBlocking));
  int *src, *dst, h[4] = {1, 2, 3, 4}, got[4];
  CK(cudaMalloc((void **)&src, 16));
  CK(cudaMalloc((void **)&dst, 16));
  CK(cudaMemcpy(src, h, 16, cudaMemcpyHostToDevice));
  CK(cudaMemsetAsync(dst, 0, 16, fast));
  CK(cudaStreamSynchronize(fast));
  cudaEvent_t copied, t0, t1, notime, never;
  CK(cudaEventCreateWithFlags(&copied, JN_cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&t0, JN_cudaEventDefault));
  CK(cudaEventCreateWithFlags(&t1, JN_cudaEventBlockingSync));
  CK(cudaEventCreateWithFlags(&notime, JN_cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&never, 0));
  EXPECT_CUDA(cudaEventCreateWithFlags(&never, JN_cudaEventInterprocess | JN_cudaEventDisableTiming),
              cudaErrorInvalidValue);
  cudaGetLastError();
  CK(cudaEventRecord(t0, slow));
  CK(cudaMemcpyAsync(dst, src, 16, cudaMemcpyDeviceToDevice, slow));
  CK(cudaEventRecord(copied, slow));
  CK(cudaEventRecord(t1, slow));
  EXPECT_CUDA(cudaStreamQuery(slow), cudaErrorNotReady);
  EXPECT_CUDA(cudaGetLastError(), cudaSuccess); /* NotReady is not recorded as an error */
  EXPECT_CUDA(cudaEventQuery(copied), cudaErrorNotReady);
  float ms;
  EXPECT_CUDA(cudaEventElapsedTime(&ms, t0, t1), cudaErrorNotReady);
  /* no wait: the copy is not visible yet */
  CK(cudaMemcpyAsync(got, dst, 16, cudaMemcpyDeviceToHost, fast));
  CK(cudaStreamSynchronize(fast));
  EXPECT(got[0] == 0 && got[3] == 0, "copy visible without a wait: %d %d", got[0], got[3]);
  /* with the event wait it is */
  CK(cudaStreamWaitEvent(fast, copied, 0));
  CK(cudaMemcpyAsync(got, dst, 16, cudaMemcpyDeviceToHost, fast));
  CK(cudaStreamSynchronize(fast));
  EXPECT(memcmp(got, h, 16) == 0, "copy not visible after cudaStreamWaitEvent: %d %d", got[0], got[3]);
  /* a stream of another device waits for it too */
  CK(cudaStreamWaitEvent(other, t1, 0));
  CK(cudaStreamSynchronize(other));
  EXPECT_CUDA(cudaEventQuery(t1), cudaSuccess);
  CK(cudaEventSynchronize(t1));
  CK(cudaEventElapsedTime(&ms, t0, t1));
  EXPECT(ms >= (float)(2 * delay_ms) * 0.9f && ms < 5000, "elapsed %.3f ms, expected about %ld", ms, 3 * delay_ms);
  EXPECT_CUDA(cudaEventElapsedTime(&ms, t0, copied), cudaErrorInvalidResourceHandle); /* DisableTiming */
  EXPECT_CUDA(cudaEventElapsedTime(&ms, t0, never), cudaErrorInvalidResourceHandle);  /* never recorded */
  EXPECT_CUDA(cudaEventElapsedTime(NULL, t0, t1), cudaErrorInvalidValue);
  EXPECT_CUDA(cudaEventQuery(never), cudaSuccess); /* never recorded: complete */
  CK(cudaEventSynchronize(never));
  CK(cudaStreamWaitEvent(fast, never, 0));
  EXPECT_CUDA(cudaStreamWaitEvent(fast, never, 8), cudaErrorInvalidValue);
  cudaGetLastError();

  /* the most recent record counts: re-record on the slow stream */
  CK(cudaEventRecord(copied, slow));
  EXPECT_CUDA(cudaEventQuery(copied), cudaErrorNotReady);
  CK(cudaEventSynchronize(copied));
  EXPECT_CUDA(cudaEventQuery(copied), cudaSuccess);

  /* legacy stream: a synchronous copy on device 1 waits for the slow (blocking) stream */
  CK(cudaMemsetAsync(dst, 0, 16, slow));
  CK(cudaMemcpy(got, dst, 16, cudaMemcpyDeviceToHost));
  EXPECT(got[0] == 0, "legacy copy did not wait for the blocking stream");
  CK(cudaMemsetAsync(dst, 0xff, 16, slow));
  CK(cudaEventRecord(notime, NULL)); /* legacy record: after the memset */
  EXPECT_CUDA(cudaEventQuery(notime), cudaSuccess);
  CK(cudaMemcpyAsync(got, dst, 16, cudaMemcpyDeviceToHost, fast));
  CK(cudaStreamSynchronize(fast));
  EXPECT(got[0] == -1, "legacy event record did not wait for the blocking stream");
  /* non-blocking streams are not waited for by the legacy stream */
  CK(cudaStreamWaitEvent(fast, t1, 0));

  /* destroying a stream with pending work: it still completes */
  CK(cudaMemsetAsync(dst, 0x11, 16, slow));
  CK(cudaStreamDestroy(slow));
  EXPECT_CUDA(cudaStreamQuery(slow), cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  CK(cudaDeviceSynchronize()); /* waits for the destroyed stream's work */
  CK(cudaMemcpy(got, dst, 16, cudaMemcpyDeviceToHost));
  EXPECT(got[0] == 0x11111111, "work of a destroyed stream did not complete: %#x", got[0]);

  CK(cudaEventDestroy(copied));
  CK(cudaEventDestroy(t0));
  CK(cudaEventDestroy(t1));
  CK(cudaEventDestroy(notime));
  CK(cudaEventDestroy(never));
  EXPECT_CUDA(cudaEventQuery(never), cudaErrorInvalidResourceHandle);
  CK(cudaStreamDestroy(fast));
  CK(cudaStreamDestroy(other));
  CK(cudaFree(src));
  CK(cudaFree(dst));
  CK(cudaSetDevice(0));
  cudaGetLastError();
  printf("  streams and events ok\n");
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

static void test_nccl_args(void) {
  run_world(2, body_args, NULL, 0);
  printf("  NCCL argument errors ok\n");
}

/* ================================================ cycles: no leaks */

static void body_cycle(rank_ctx *x) { coll_case(x, C_ALLREDUCE, ncclFloat32, ncclSum, 0, 64, 0); }

static void test_cycles(void) {
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

/* ============================================== two processes (fork) */

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

static void test_two_processes(void) {
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

/* ================================================================= main */

int main(void) {
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
  RUN(test_two_processes);
  if (cudaGetDeviceCount(&g_ndev) != cudaSuccess) fatal();
  RUN(test_runtime_basics);
  RUN(test_streams_events);
  RUN(test_nccl_args);
  RUN(test_special_values);
  RUN(test_sweep);
  RUN(test_chunking);
  RUN(test_send_recv);
  RUN(test_mismatch);
  RUN(test_init_and_split);
  RUN(test_faults);
  RUN(test_delay_rank);
  RUN(test_cycles);
  int f = atomic_load(&g_failures);
  printf("emu_test: %s (%d failures, %.1f s)\n", f ? "FAILED" : "all passed", f, now_s() - t0);
  return f ? 1 : 0;
}
