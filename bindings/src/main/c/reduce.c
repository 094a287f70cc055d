/*
 * reduce.c - NCCL data types, reduction operators and the low-precision
 * float conversions.
 *
 * Conventions (the emulation's contract, tested element by element, and checked against NCCL
 * 2.30.7 on an H200 with bindings/src/test/c/reduction_dump.c):
 *  - Contributions are combined in NCCL's ring order: ins[first], ins[first + 1], ... (mod n).
 *    The caller picks `first` as NCCL's ring does: a reduce-scatter's chunk for rank r starts at
 *    rank r + 1 and ends at r; an all-reduce's element in ring chunk k starts at rank k + 1 (see
 *    coll.c, reduce_ring_chunks); a reduce to root starts at root + 1.
 *  - Floating types round every step in their own type (NCCL reduces pairwise in the type):
 *    float32 in float, float64 in double, float16 / bfloat16 / float8 decoded to float and each
 *    step's result rounded to nearest even, like CUDA's __float2half_rn / __float2bfloat16_rn /
 *    __nv_cvt_float_to_fp8 with __NV_SATFINITE: fp8 overflow (and infinity) saturates to the
 *    largest finite value, NaN stays NaN (canonical 0x7fff / 0x7f, as CUDA's host code).
 *  - integers in their own type with wrap-around (computed in the unsigned type: no C overflow
 *    UB); the order does not matter.
 *  - max/min on floating types return the non-NaN operand when one is NaN (fmaxf/fminf
 *    semantics, as NCCL) and order -0 below +0.
 *  - ncclAvg: floating types are NCCL's pre-multiplied sum with s = 1/n rounded to the type; the
 *    first contribution is x * s rounded, every later one is added with a fused multiply-add
 *    (float, double, float16, bfloat16) or as x * s rounded to the type, then added (float8);
 *    integer types sum, then divide by n (truncating towards zero, like NCCL's SumPostDiv).
 *  - a pre-multiplied sum (ncclRedOpCreatePreMulSum, JN_REDOP_PREMUL here) is NCCL's same
 *    FuncPreMulSum with the user's scalar s (given in the type): floating types exactly as the
 *    average above with that s; integer types multiply each contribution by s, then sum, both
 *    with wrap-around.
 */
#include "internal.h"

#include <math.h>
#include <string.h>

size_t jn_dtype_size(int dtype) {
  switch (dtype) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

const char *jn_dtype_name(int dtype) {
  static const char *names[] = {"ncclInt8",    "ncclUint8",   "ncclInt32",    "ncclUint32",
                                "ncclInt64",   "ncclUint64",  "ncclFloat16",  "ncclFloat32",
                                "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"};
  return dtype >= 0 && dtype < ncclNumTypes ? names[dtype] : "invalid";
}

/* ============================================================ conversions */

static inline float bits_to_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint32_t float_to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* 2^e for -126 <= e <= 127. */
static inline float pow2f(int e) { return bits_to_float((uint32_t)(e + 127) << 23); }

/* v / 2^s rounded to nearest, ties to even. */
static inline uint32_t rne_shift(uint32_t v, int s) {
  if (s <= 0) return v;
  if (s >= 32) return 0;
  uint32_t q = v >> s, rem = v & ((1u << s) - 1u), half = 1u << (s - 1);
  if (rem > half || (rem == half && (q & 1u))) q++;
  return q;
}

/*
 * Rounds a finite, non-negative float (given by its bits) to a binary format
 * with mbits mantissa bits and exponent bias `bias` (subnormals included) and
 * returns (exponent field << mbits) | mantissa. A mantissa carry simply
 * propagates into the exponent field thanks to the addition; the caller
 * handles results beyond the format's largest finite value.
 */
static uint32_t round_magnitude(uint32_t u, int mbits, int bias) {
  int e = (int)(u >> 23);
  uint32_t full = u & 0x7fffffu;
  if (e == 0) e = 1; /* float subnormal: exponent -126, no implicit bit */
  else full |= 0x800000u;
  int exp = e - 127, emin = 1 - bias, shift = 23 - mbits;
  if (exp < emin) return rne_shift(full, shift + (emin - exp)); /* subnormal (or rounds up to min normal) */
  uint32_t q = rne_shift(full, shift);                          /* in [2^mbits, 2^(mbits+1)] */
  return ((uint32_t)(exp + bias) << mbits) + (q - (1u << mbits));
}

float jn_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return bits_to_float(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0));
  float v = e == 0 ? (float)m * pow2f(-24) : (float)(m | 0x400u) * pow2f((int)e - 25);
  return sign ? -v : v;
}

uint16_t jn_float_to_half(float f) {
  uint32_t u = float_to_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7fffu; /* NaN */
  if (a == 0x7f800000u) return (uint16_t)(sign | 0x7c00u);
  uint32_t r = round_magnitude(a, 10, 15);
  if (r >= 0x7c00u) r = 0x7c00u; /* overflow: infinity, as __float2half_rn */
  return (uint16_t)(sign | r);
}

float jn_bf16_to_float(uint16_t h) { return bits_to_float((uint32_t)h << 16); }

uint16_t jn_float_to_bf16(float f) {
  uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu; /* NaN */
  u += 0x7fffu + ((u >> 16) & 1u);                       /* round to nearest even (overflow -> inf) */
  return (uint16_t)(u >> 16);
}

float jn_fp8e4m3_to_float(uint8_t v) {
  uint32_t e = (v >> 3) & 0xfu, m = v & 0x7u;
  float r;
  if (e == 0xf && m == 0x7) r = bits_to_float(0x7fc00000u); /* the only NaN encoding */
  else if (e == 0) r = (float)m * pow2f(-9);
  else r = (float)(m | 0x8u) * pow2f((int)e - 10);
  return (v & 0x80u) ? -r : r;
}

uint8_t jn_float_to_fp8e4m3(float f) {
  uint32_t u = float_to_bits(f), sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7fu;                     /* NaN */
  uint32_t r = a == 0x7f800000u ? 0x7eu : round_magnitude(a, 3, 7);
  if (r > 0x7eu) r = 0x7eu;                              /* saturate to 448 */
  return (uint8_t)(sign | r);
}

float jn_fp8e5m2_to_float(uint8_t v) {
  uint32_t e = (v >> 2) & 0x1fu, m = v & 0x3u;
  float r;
  if (e == 0x1f) r = m ? bits_to_float(0x7fc00000u) : bits_to_float(0x7f800000u);
  else if (e == 0) r = (float)m * pow2f(-16);
  else r = (float)(m | 0x4u) * pow2f((int)e - 17);
  return (v & 0x80u) ? -r : r;
}

uint8_t jn_float_to_fp8e5m2(float f) {
  uint32_t u = float_to_bits(f), sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7fu;                     /* NaN */
  uint32_t r = a == 0x7f800000u ? 0x7bu : round_magnitude(a, 2, 15);
  if (r > 0x7bu) r = 0x7bu;                              /* saturate to 57344 */
  return (uint8_t)(sign | r);
}

/* ============================================================== reduction */

/* max/min ignore a NaN operand (fmaxf/fminf) and order -0 below +0. */
#define MAXMIN(NAME, T, CMP, ZERO_PICK_A)                      \
  static inline T NAME(T a, T b) {                             \
    if (a != a) return b;                                      \
    if (b != b) return a;                                      \
    if (a == b) return (ZERO_PICK_A) ? a : b; /* +0 vs -0 */   \
    return a CMP b ? a : b;                                    \
  }
MAXMIN(fmax_nan, float, >, !__builtin_signbit(a))
MAXMIN(fmin_nan, float, <, __builtin_signbit(a))
MAXMIN(dmax_nan, double, >, !__builtin_signbit(a))
MAXMIN(dmin_nan, double, <, __builtin_signbit(a))

/* Integers: T is the type, U its unsigned counterpart (wrap-around arithmetic), W a 64-bit
 * type of the same signedness for the average's division. */
#define REDUCE_INT(T, U, W)                                                                 \
  do {                                                                                    \
    T *o = (T *)out;                                                                      \
    const U s = (U)(T)scalar;                                                             \
    memcpy(o, ins[0], count * sizeof(T));                                                 \
    if (op == JN_REDOP_PREMUL)                                                            \
      for (size_t i = 0; i < count; i++) o[i] = (T)((U)((U)o[i] * s));                    \
    for (int j = 1; j < n; j++) {                                                         \
      const T *x = (const T *)ins[j];                                                     \
      switch (op) {                                                                       \
        case JN_REDOP_PREMUL:                                                             \
          for (size_t i = 0; i < count; i++) o[i] = (T)((U)o[i] + (U)((U)x[i] * s));      \
          break;                                                                          \
        case ncclSum:                                                                     \
        case ncclAvg:                                                                     \
          for (size_t i = 0; i < count; i++) o[i] = (T)((U)o[i] + (U)x[i]);               \
          break;                                                                          \
        case ncclProd:                                                                    \
          for (size_t i = 0; i < count; i++) o[i] = (T)((U)((U)o[i] * (U)x[i]));          \
          break;                                                                          \
        case ncclMax:                                                                     \
          for (size_t i = 0; i < count; i++) o[i] = x[i] > o[i] ? x[i] : o[i];            \
          break;                                                                          \
        default:                                                                          \
          for (size_t i = 0; i < count; i++) o[i] = x[i] < o[i] ? x[i] : o[i];            \
          break;                                                                          \
      }                                                                                   \
    }                                                                                     \
    if (op == ncclAvg)                                                                    \
      for (size_t i = 0; i < count; i++) o[i] = (T)((W)o[i] / (W)n);                       \
  } while (0)

/* float / double in NCCL's ring order: contributions ins[first], ins[first+1], ... (mod n), each
 * step rounded in T; the average multiplies by s = 1/n (computed in T) with a fused multiply-add
 * per step, as NCCL's FuncPreMulSum on sm_90. */
#define REDUCE_FLT(T, FMA, MAXF, MINF)                                                    \
  do {                                                                                    \
    T *o = (T *)out;                                                                      \
    T scale = (T)1 / (T)n;                                                                \
    if (op == JN_REDOP_PREMUL) memcpy(&scale, &scalar, sizeof scale);                     \
    const int premul = op == ncclAvg || op == JN_REDOP_PREMUL;                            \
    const T *x0 = (const T *)ins[first];                                                  \
    if (premul)                                                                           \
      for (size_t i = 0; i < count; i++) o[i] = x0[i] * scale;                            \
    else                                                                                  \
      memcpy(o, x0, count * sizeof(T));                                                   \
    for (int k = 1; k < n; k++) {                                                         \
      const T *x = (const T *)ins[(first + k) % n];                                       \
      switch (op) {                                                                       \
        case ncclSum: for (size_t i = 0; i < count; i++) o[i] = o[i] + x[i]; break;       \
        case JN_REDOP_PREMUL:                                                             \
        case ncclAvg: for (size_t i = 0; i < count; i++) o[i] = FMA(x[i], scale, o[i]); break; \
        case ncclProd: for (size_t i = 0; i < count; i++) o[i] = o[i] * x[i]; break;      \
        case ncclMax: for (size_t i = 0; i < count; i++) o[i] = MAXF(o[i], x[i]); break;  \
        default: for (size_t i = 0; i < count; i++) o[i] = MINF(o[i], x[i]); break;      \
      }                                                                                   \
    }                                                                                     \
  } while (0)

/* Low-precision floats (storage type S) in NCCL's ring order: decoded to float, and every step's
 * result rounded back to S (NCCL reduces S values pairwise: __hadd, __hmul, ...). Float holds
 * each exact step result before its rounding to S, or rounds it innocuously (24 >= 2p + 2 bits).
 * The average: s = 1/n rounded to S; 16-bit types multiply-add per step with one rounding
 * (__hfma); fp8 types round the product to S, then the sum (checked against NCCL 2.30.7). */
#define REDUCE_LOWP(S, DEC, ENC, FUSED_AVG)                                               \
  do {                                                                                    \
    S *o = (S *)out;                                                                      \
    const float scale = op == JN_REDOP_PREMUL ? DEC((S)scalar) : DEC(ENC(1.0f / (float)n)); \
    const int premul = op == ncclAvg || op == JN_REDOP_PREMUL;                            \
    float acc[512];                                                                       \
    for (size_t b = 0; b < count; b += 512) {                                             \
      size_t m = count - b < 512 ? count - b : 512;                                       \
      const S *x0 = (const S *)ins[first] + b;                                            \
      for (size_t i = 0; i < m; i++) acc[i] = premul ? DEC(ENC(DEC(x0[i]) * scale)) : DEC(x0[i]); \
      for (int k = 1; k < n; k++) {                                                       \
        const S *x = (const S *)ins[(first + k) % n] + b;                                 \
        switch (op) {                                                                     \
          case ncclSum: for (size_t i = 0; i < m; i++) acc[i] = DEC(ENC(acc[i] + DEC(x[i]))); break; \
          case JN_REDOP_PREMUL:                                                           \
          case ncclAvg:                                                                   \
            for (size_t i = 0; i < m; i++)                                                \
              acc[i] = DEC(ENC(acc[i] + (FUSED_AVG ? DEC(x[i]) * scale : DEC(ENC(DEC(x[i]) * scale))))); \
            break;                                                                        \
          case ncclProd: for (size_t i = 0; i < m; i++) acc[i] = DEC(ENC(acc[i] * DEC(x[i]))); break; \
          case ncclMax: for (size_t i = 0; i < m; i++) acc[i] = fmax_nan(acc[i], DEC(x[i])); break; \
          default: for (size_t i = 0; i < m; i++) acc[i] = fmin_nan(acc[i], DEC(x[i])); break; \
        }                                                                                 \
      }                                                                                   \
      for (size_t i = 0; i < m; i++) o[b + i] = ENC(acc[i]);                              \
    }                                                                                     \
  } while (0)

void jn_reduce(void *out, const void *const *ins, int n, int first, size_t count, int dtype, int op,
               uint64_t scalar) {
  if (count == 0 || n <= 0) return;
  first = ((first % n) + n) % n;
  switch (dtype) {
    case ncclInt8: REDUCE_INT(int8_t, uint8_t, int64_t); break;
    case ncclUint8: REDUCE_INT(uint8_t, uint8_t, uint64_t); break;
    case ncclInt32: REDUCE_INT(int32_t, uint32_t, int64_t); break;
    case ncclUint32: REDUCE_INT(uint32_t, uint32_t, uint64_t); break;
    case ncclInt64: REDUCE_INT(int64_t, uint64_t, int64_t); break;
    case ncclUint64: REDUCE_INT(uint64_t, uint64_t, uint64_t); break;
    case ncclFloat32: REDUCE_FLT(float, fmaf, fmax_nan, fmin_nan); break;
    case ncclFloat64: REDUCE_FLT(double, fma, dmax_nan, dmin_nan); break;
    case ncclFloat16: REDUCE_LOWP(uint16_t, jn_half_to_float, jn_float_to_half, 1); break;
    case ncclBfloat16: REDUCE_LOWP(uint16_t, jn_bf16_to_float, jn_float_to_bf16, 1); break;
    case ncclFloat8e4m3: REDUCE_LOWP(uint8_t, jn_fp8e4m3_to_float, jn_float_to_fp8e4m3, 0); break;
    case ncclFloat8e5m2: REDUCE_LOWP(uint8_t, jn_fp8e5m2_to_float, jn_float_to_fp8e5m2, 0); break;
    default: break;
  }
}
