/*
 * reduction_dump.c - what real NCCL computes for low-precision reductions, so the host emulation
 * can be made to match it bit for bit (bindings/src/main/c/reduce.c).
 *
 * One process, W ranks on device 0 (ncclCommInitRank x W in one group, all on device 0: needs an NCCL
 * that accepts several ranks of one process per GPU, e.g. 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1).
 * For each world, dtype, collective (reduce-scatter, all-reduce), op (sum, avg) and chunk size, the
 * inputs are generated from their bit patterns (so any machine can regenerate them exactly, see
 * input_bits), the collective runs once, and every rank's output is appended to DIR/<dtype>.bin as
 * records: a 64-byte text header "W C coll op count bytes" then the raw output of rank 0..W-1.
 *
 * Build and run (GPU machine):
 *   nvcc -O2 -o /tmp/reduction_dump bindings/src/test/c/reduction_dump.c -lnccl
 *   NCCL_MULTI_RANK_GPU_ENABLE=1 LD_LIBRARY_PATH=<dir of NCCL 2.30> /tmp/reduction_dump DIR
 * Against the host emulation (any machine):
 *   gcc -O2 -DJNCCL_HOST -Ibindings/src/main/c -o /tmp/reduction_dump_host reduction_dump.c \
 *       -L<dir of libjnccl_host.so> -l:libjnccl_host.so -Wl,-rpath,<that dir>
 */
#ifdef JNCCL_HOST /* against the host emulation, to test this program without a GPU */
#include "jnccl_abi.h"
#include "jnccl_api.h"
#else
#include <cuda_runtime.h>
#include <nccl.h>
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_CUDA(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define CHECK_NCCL(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) { \
  fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, ncclGetErrorString(r_)); exit(1); } } while (0)

static uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

struct dtype { const char *name; ncclDataType_t nccl; int bytes; int exp_bits, man_bits, exp_lo, exp_hi; };
static const struct dtype DTYPES[] = {
  {"f16", ncclFloat16, 2, 5, 10, 13, 17},
  {"bf16", ncclBfloat16, 2, 8, 7, 125, 129},
  {"e4m3", ncclFloat8e4m3, 1, 4, 3, 5, 9},
  {"e5m2", ncclFloat8e5m2, 1, 5, 2, 13, 17},
  {"f32", ncclFloat32, 4, 8, 23, 125, 129},
};

/* Element i of rank r's input: sign, exponent in [exp_lo, exp_hi], random mantissa (values of
 * magnitude about 0.25 .. 8, no NaN, infinity or subnormal). */
static uint32_t input_bits(const struct dtype *t, int world, int coll, int rank, uint64_t i) {
  uint64_t h = splitmix64(((uint64_t)world << 56) ^ ((uint64_t)coll << 52) ^ ((uint64_t)rank << 44) ^ i);
  uint32_t sign = (uint32_t)(h & 1);
  uint32_t exp = t->exp_lo + (uint32_t)((h >> 8) % (uint64_t)(t->exp_hi - t->exp_lo + 1));
  uint32_t man = (uint32_t)(h >> 20) & ((1u << t->man_bits) - 1);
  return (sign << (t->exp_bits + t->man_bits)) | (exp << t->man_bits) | man;
}

static void store(void *p, int bytes, uint64_t i, uint32_t v) {
  if (bytes == 1) ((uint8_t *)p)[i] = (uint8_t)v;
  else if (bytes == 2) ((uint16_t *)p)[i] = (uint16_t)v;
  else ((uint32_t *)p)[i] = v;
}

int main(int argc, char **argv) {
  if (argc < 2) { fprintf(stderr, "usage: reduction_dump DIR\n"); return 2; }
  const int worlds[] = {2, 3, 4, 8};
  const size_t chunks[] = {4096, 16384};
  int version;
  CHECK_NCCL(ncclGetVersion(&version));
  printf("NCCL version %d\n", version);
  for (size_t d = 0; d < sizeof DTYPES / sizeof DTYPES[0]; d++) {
    const struct dtype *t = &DTYPES[d];
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.bin", argv[1], t->name);
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); return 1; }
    for (size_t wi = 0; wi < sizeof worlds / sizeof worlds[0]; wi++) {
      int w = worlds[wi];
      ncclComm_t comms[8];
      ncclUniqueId id;
      CHECK_CUDA(cudaSetDevice(0));
      CHECK_NCCL(ncclGetUniqueId(&id));
      CHECK_NCCL(ncclGroupStart()); /* ncclCommInitAll refuses a devlist naming a device twice */
      for (int r = 0; r < w; r++) CHECK_NCCL(ncclCommInitRank(&comms[r], w, id, r));
      CHECK_NCCL(ncclGroupEnd());
      cudaStream_t streams[8];
      for (int r = 0; r < w; r++) CHECK_CUDA(cudaStreamCreateWithFlags(&streams[r], 1 /* cudaStreamNonBlocking */));
      for (size_t ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++) {
        size_t chunk = chunks[ci];
        if (t->bytes == 4 && chunk > 4096) continue;
        for (int coll = 0; coll < 2; coll++) {       /* 0 reduce-scatter, 1 all-reduce */
          size_t in_count = coll == 0 ? chunk * w : chunk, out_count = chunk;
          for (int op = 0; op < 2; op++) {           /* 0 sum, 1 avg */
            void *in[8], *out[8];
            void *host = malloc(in_count * t->bytes);
            for (int r = 0; r < w; r++) {
              for (size_t i = 0; i < in_count; i++) store(host, t->bytes, i, input_bits(t, w, coll, r, i));
              CHECK_CUDA(cudaMalloc(&in[r], in_count * t->bytes));
              CHECK_CUDA(cudaMalloc(&out[r], out_count * t->bytes));
              CHECK_CUDA(cudaMemcpy(in[r], host, in_count * t->bytes, cudaMemcpyHostToDevice));
            }
            CHECK_NCCL(ncclGroupStart());
            for (int r = 0; r < w; r++) {
              ncclRedOp_t redop = op == 0 ? ncclSum : ncclAvg;
              if (coll == 0) CHECK_NCCL(ncclReduceScatter(in[r], out[r], chunk, t->nccl, redop, comms[r], streams[r]));
              else CHECK_NCCL(ncclAllReduce(in[r], out[r], chunk, t->nccl, redop, comms[r], streams[r]));
            }
            CHECK_NCCL(ncclGroupEnd());
            for (int r = 0; r < w; r++) CHECK_CUDA(cudaStreamSynchronize(streams[r]));
            char header[64];
            memset(header, 0, sizeof header);
            snprintf(header, sizeof header, "%d %zu %d %d %zu %d", w, chunk, coll, op, out_count, t->bytes);
            fwrite(header, 1, sizeof header, f);
            void *res = malloc(out_count * t->bytes);
            for (int r = 0; r < w; r++) {
              CHECK_CUDA(cudaMemcpy(res, out[r], out_count * t->bytes, cudaMemcpyDeviceToHost));
              fwrite(res, 1, out_count * t->bytes, f);
              CHECK_CUDA(cudaFree(in[r]));
              CHECK_CUDA(cudaFree(out[r]));
            }
            free(res);
            free(host);
          }
        }
      }
      for (int r = 0; r < w; r++) {
        CHECK_CUDA(cudaStreamDestroy(streams[r]));
        CHECK_NCCL(ncclCommDestroy(comms[r]));
      }
      printf("%s world %d done\n", t->name, w);
      fflush(stdout);
    }
    fclose(f);
  }
  return 0;
}
