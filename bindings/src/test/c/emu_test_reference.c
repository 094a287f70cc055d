/*
 * emu_test_reference.c - the inputs of the collective tests (deterministic pseudo-random
 * data per rank) and their expected results, with conversions written independently of
 * the library (_Float16 for fp16, nearest-candidate search for bf16 and fp8).
 */
#include "emu_test.h"

/* ============================================ reference conversions */

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

const int DTYPES[] = {ncclInt8,    ncclUint8,   ncclInt32,    ncclUint32,     ncclInt64,     ncclUint64,
                             ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
const char *DTNAME[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                               "fp16", "fp32",  "fp64",  "bf16",   "e4m3",  "e5m2"};
const char *OPNAME[] = {"sum", "prod", "max", "min", "avg"};

size_t dsize(int dt) {
  static const size_t s[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return s[dt];
}

/* Element i of rank r's input for a case, as raw bits. */
uint64_t gen(uint64_t seed, int r, size_t i, int dt) {
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
uint64_t ref_red(int dt, int op, int n, int first, const uint64_t *v) {
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

void put_elem(void *buf, size_t i, int dt, uint64_t v) {
  memcpy((char *)buf + i * dsize(dt), &v, dsize(dt)); /* little endian */
}
uint64_t get_elem(const void *buf, size_t i, int dt) {
  uint64_t v = 0;
  memcpy(&v, (const char *)buf + i * dsize(dt), dsize(dt));
  return v;
}

