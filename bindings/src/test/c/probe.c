/*
 * probe.c - prints how the CUDA runtime / NCCL answer a list of edge cases
 * (error codes, pointer attributes, event and stream states), one "key: value"
 * line each, so that the host emulation can be compared with the real
 * libraries by diffing two runs:
 *
 *   emulation:  cc -std=c11 -D_GNU_SOURCE -I bindings/src/main/c probe.c \
 *                 -L<dir> -ljnccl_host -pthread -o probe_emu && ./probe_emu
 *   real:       cc -std=c11 -D_GNU_SOURCE -DPROBE_REAL -I<cuda>/include -I<nccl>/include probe.c \
 *                 -L<cuda>/lib64 -L<nccl>/lib -lcudart -lnccl -o probe_real && ./probe_real
 *
 * World-1 NCCL communicators only (one GPU is enough). Not part of the build.
 */
#ifdef PROBE_REAL
#include <cuda_runtime_api.h>
#include <nccl.h>
#define STREAM_NONBLOCKING cudaStreamNonBlocking
#define EV_DISABLE_TIMING cudaEventDisableTiming
#define EV_INTERPROCESS cudaEventInterprocess
#define CONFIG_MAGIC 0xcafebeef
#else
#include "jnccl_abi.h"
#define STREAM_NONBLOCKING JN_cudaStreamNonBlocking
#define EV_DISABLE_TIMING JN_cudaEventDisableTiming
#define EV_INTERPROCESS JN_cudaEventInterprocess
#define CONFIG_MAGIC JN_NCCL_CONFIG_MAGIC
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define P(key, expr) printf("%-44s: %d\n", key, (int)(expr))
#define PS(key, expr) printf("%-44s: %s\n", key, (expr))

#ifdef PROBE_REAL
static void CUDART_CB sleeper(void *arg) {
  (void)arg;
  usleep(300000);
}
#endif

/* Makes s busy for a while: a sleeping host function (real), the stream delay (emulation). */
static void make_busy(cudaStream_t s, void *d) {
#ifdef PROBE_REAL
  (void)d;
  cudaLaunchHostFunc(s, sleeper, NULL);
#else
  cudaMemsetAsync(d, 0, 4, s); /* s was created with JNCCL_HOST_DELAY_US set */
#endif
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0); /* a crash must not swallow the lines before it */
  int v = -1;
  cudaRuntimeGetVersion(&v);
  P("cudaRuntimeGetVersion", v);
  ncclGetVersion(&v);
  P("ncclGetVersion", v);
  int codes[] = {0, 1, 2, 3, 17, 21, 100, 101, 217, 400, 401, 600, 704, 705, 719, 800, 801, 999, 12345};
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
    char k[64];
    snprintf(k, sizeof k, "cudaGetErrorString(%d)", codes[i]);
    PS(k, cudaGetErrorString((cudaError_t)codes[i]));
  }
  for (int i = 0; i <= 9; i++) {
    char k[64];
    snprintf(k, sizeof k, "ncclGetErrorString(%d)", i);
    PS(k, ncclGetErrorString((ncclResult_t)i));
  }

  /* ------------------------------------------------------------- memory */
  cudaSetDevice(0);
  void *d = NULL, *h = NULL, *z = (void *)1;
  int local = 0;
  P("cudaMalloc(NULL,16)", cudaMalloc(NULL, 16));
  P("  then cudaGetLastError", cudaGetLastError());
  P("  then cudaGetLastError again", cudaGetLastError());
  P("cudaMalloc(&p,0)", cudaMalloc(&z, 0));
  P("  p == NULL", z == NULL);
  cudaMalloc(&d, 1000);
  cudaMallocHost(&h, 100);
  P("cudaMalloc alignment % 256", (int)((uintptr_t)d % 256));
  struct cudaPointerAttributes a;
  memset(&a, 0x55, sizeof a);
  P("attrs(dev+999)", cudaPointerGetAttributes(&a, (char *)d + 999));
  P("  type", a.type);
  P("  device", a.device);
  P("  devicePointer == ptr", a.devicePointer == (char *)d + 999);
  P("  hostPointer == NULL", a.hostPointer == NULL);
  memset(&a, 0x55, sizeof a);
  P("attrs(dev+1000, one past end)", cudaPointerGetAttributes(&a, (char *)d + 1000));
  P("  type", a.type);
  memset(&a, 0x55, sizeof a);
  P("attrs(mallocHost)", cudaPointerGetAttributes(&a, h));
  P("  type", a.type);
  P("  device", a.device);
  P("  devicePointer == ptr", a.devicePointer == h);
  P("  hostPointer == ptr", a.hostPointer == h);
  memset(&a, 0x55, sizeof a);
  P("attrs(stack)", cudaPointerGetAttributes(&a, &local));
  P("  type", a.type);
  P("  device", a.device);
  P("  devicePointer == NULL", a.devicePointer == NULL);
  P("  hostPointer == NULL", a.hostPointer == NULL);
  P("  hostPointer == ptr", a.hostPointer == &local);
  memset(&a, 0x55, sizeof a);
  P("attrs(NULL)", cudaPointerGetAttributes(&a, NULL));
  P("  type", a.type);
  P("  device", a.device);
  P("attrs(attributes NULL)", cudaPointerGetAttributes(NULL, d));
  cudaGetLastError();
  P("cudaFree(stack)", cudaFree(&local));
  P("cudaFree(dev+8)", cudaFree((char *)d + 8));
  P("cudaFree(mallocHost)", cudaFree(h));
  P("cudaFreeHost(dev)", cudaFreeHost(d));
  P("cudaFree(NULL)", cudaFree(NULL));
  cudaGetLastError();
  char buf[2000], back[2000];
  memset(buf, 1, sizeof buf);
  P("cudaMemcpy H2D count > alloc", cudaMemcpy(d, buf, 1001, cudaMemcpyHostToDevice));
  P("cudaMemcpy kind 7", cudaMemcpy(buf, d, 10, (enum cudaMemcpyKind)7));
  P("cudaMemcpy D2H from stack", cudaMemcpy(back, buf, 10, cudaMemcpyDeviceToHost));
#ifndef PROBE_REAL /* the real runtime crashes (SIGSEGV) on these */
  P("cudaMemcpy H2D to stack", cudaMemcpy(back, buf, 10, cudaMemcpyHostToDevice));
  P("cudaMemcpy D2D dev->stack", cudaMemcpy(back, d, 10, cudaMemcpyDeviceToDevice));
#endif
  P("cudaMemcpy Default H->H", cudaMemcpy(back, buf, 10, cudaMemcpyDefault));
  P("cudaMemcpy count 0 NULL ptrs", cudaMemcpy(NULL, NULL, 0, cudaMemcpyHostToDevice));
#ifndef PROBE_REAL /* on a GPU these may fault later, poisoning the context */
  P("cudaMemsetAsync(stack)", cudaMemsetAsync(&local, 0, 4, 0));
  P("cudaMemsetAsync(dev, count > alloc)", cudaMemsetAsync(d, 0, 1001, 0));
#endif
  cudaDeviceSynchronize();
  cudaGetLastError();

  /* ------------------------------------------------------------ devices */
  int can = -1;
  P("cudaDeviceCanAccessPeer(0,0)", cudaDeviceCanAccessPeer(&can, 0, 0));
  P("  value", can);
  P("cudaDeviceCanAccessPeer(0,99)", cudaDeviceCanAccessPeer(&can, 0, 99));
  P("cudaDeviceCanAccessPeer(NULL,0,0)", cudaDeviceCanAccessPeer(NULL, 0, 0));
  P("cudaDeviceEnablePeerAccess(self,0)", cudaDeviceEnablePeerAccess(0, 0));
  P("cudaDeviceEnablePeerAccess(99,0)", cudaDeviceEnablePeerAccess(99, 0));
  P("cudaDeviceEnablePeerAccess(0,flags 5)", cudaDeviceEnablePeerAccess(0, 5));
  P("cudaSetDevice(99)", cudaSetDevice(99));
  P("cudaSetDevice(-1)", cudaSetDevice(-1));
  P("  then cudaGetLastError", cudaGetLastError());
  char bus[64];
  P("cudaDeviceGetPCIBusId(len 64)", cudaDeviceGetPCIBusId(bus, 64, 0));
  P("  strlen", (int)strlen(bus));
  memset(bus, 'x', sizeof bus);
  P("cudaDeviceGetPCIBusId(len 12)", cudaDeviceGetPCIBusId(bus, 12, 0));
  P("cudaDeviceGetPCIBusId(len 13)", cudaDeviceGetPCIBusId(bus, 13, 0));
  P("cudaDeviceGetPCIBusId(len 5)", cudaDeviceGetPCIBusId(bus, 5, 0));
  P("  strnlen", (int)strnlen(bus, 64));
  P("cudaDeviceGetPCIBusId(len 0)", cudaDeviceGetPCIBusId(bus, 0, 0));
  P("cudaDeviceGetPCIBusId(dev 99)", cudaDeviceGetPCIBusId(bus, 64, 99));
  cudaGetLastError();

  /* ---------------------------------------------------- streams, events */
  P("cudaStreamCreateWithFlags(NULL)", cudaStreamCreateWithFlags(NULL, 0));
  cudaStream_t s, s2;
  P("cudaStreamCreateWithFlags(flags 4)", cudaStreamCreateWithFlags(&s, 4));
  P("cudaStreamQuery(0)", cudaStreamQuery(0));
  P("cudaStreamSynchronize(0)", cudaStreamSynchronize(0));
  P("cudaStreamDestroy(NULL)", cudaStreamDestroy(NULL));
  cudaGetLastError();
  setenv("JNCCL_HOST_DELAY_US", "300000", 1);
  cudaStreamCreateWithFlags(&s, STREAM_NONBLOCKING);
  unsetenv("JNCCL_HOST_DELAY_US");
  cudaStreamCreateWithFlags(&s2, STREAM_NONBLOCKING);
  cudaEvent_t e0, e1, enone, enot, tmp;
  P("cudaEventCreateWithFlags(Interprocess)", cudaEventCreateWithFlags(&tmp, EV_INTERPROCESS));
  P("cudaEventCreateWithFlags(0x80)", cudaEventCreateWithFlags(&tmp, 0x80));
  P("cudaEventCreateWithFlags(NULL)", cudaEventCreateWithFlags(NULL, 0));
  cudaGetLastError();
  cudaEventCreateWithFlags(&e0, 0);
  cudaEventCreateWithFlags(&e1, 0);
  cudaEventCreateWithFlags(&enone, 0);
  cudaEventCreateWithFlags(&enot, EV_DISABLE_TIMING);
  float ms = 0;
  P("never recorded: cudaEventQuery", cudaEventQuery(enone));
  P("never recorded: cudaEventSynchronize", cudaEventSynchronize(enone));
  P("never recorded: cudaStreamWaitEvent", cudaStreamWaitEvent(s2, enone, 0));
  P("elapsed(never, never)", cudaEventElapsedTime(&ms, enone, e0));
  cudaGetLastError();
  P("cudaStreamWaitEvent flags 8", cudaStreamWaitEvent(s2, e0, 8));
  P("elapsed(NULL ms)", cudaEventElapsedTime(NULL, e0, e1));
  cudaGetLastError();
  cudaEventRecord(e0, s);
  make_busy(s, d);
  cudaEventRecord(e1, s);
  cudaEventRecord(enot, s);
  P("busy: cudaStreamQuery", cudaStreamQuery(s));
  P("  then cudaGetLastError", cudaGetLastError());
  P("busy: cudaEventQuery(pending)", cudaEventQuery(e1));
  P("  then cudaGetLastError", cudaGetLastError());
  P("busy: elapsed(done?, pending)", cudaEventElapsedTime(&ms, e0, e1));
  P("  then cudaGetLastError", cudaGetLastError());
  P("busy: elapsed(pending, never)", cudaEventElapsedTime(&ms, e1, enone));
  cudaGetLastError();
  cudaStreamSynchronize(s);
  P("done: elapsed(e0,e1) >= 250 ms", cudaEventElapsedTime(&ms, e0, e1) == 0 && ms >= 250);
  P("done: elapsed(e1,e0) < 0", cudaEventElapsedTime(&ms, e1, e0) == 0 && ms < 0);
  P("done: elapsed(e0, disableTiming)", cudaEventElapsedTime(&ms, e0, enot));
  P("cudaMemcpyAsync on cudaStreamPerThread", cudaMemcpyAsync(back, buf, 4, cudaMemcpyHostToHost, (cudaStream_t)0x2));
  cudaGetLastError();
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaEventDestroy(enone);
  cudaEventDestroy(enot);

  /* --------------------------------------------------------------- NCCL */
  ncclUniqueId id;
  ncclComm_t c = NULL, nc = NULL;
  P("ncclGetUniqueId(NULL)", ncclGetUniqueId(NULL));
  ncclGetUniqueId(&id);
  P("ncclCommInitRank(NULL comm)", ncclCommInitRank(NULL, 1, id, 0));
  P("ncclCommInitRank(nranks 0)", ncclCommInitRank(&nc, 0, id, 0));
  P("ncclCommInitRank(rank 1 of 1)", ncclCommInitRank(&nc, 1, id, 1));
  ncclConfig_t cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.size = sizeof cfg;
  cfg.magic = 0x1234;
  cfg.version = 22803;
  cfg.blocking = 1;
  P("InitRankConfig(bad magic)", ncclCommInitRankConfig(&nc, 1, id, 0, &cfg));
  cfg.magic = CONFIG_MAGIC;
  cfg.blocking = 5;
  P("InitRankConfig(blocking 5)", ncclCommInitRankConfig(&nc, 1, id, 0, &cfg));
#ifndef PROBE_REAL /* NCCL 2.28 crashes (SIGSEGV) on this */
  P("ncclCommInitAll(ndev 0)", ncclCommInitAll(&nc, 0, NULL));
#endif
  P("ncclCommInitRank(ok)", ncclCommInitRank(&c, 1, id, 0));
  float *fd;
  cudaMalloc((void **)&fd, 64);
  P("AllReduce(comm NULL)", ncclAllReduce(fd, fd, 4, ncclFloat32, ncclSum, NULL, s2));
  P("AllReduce(dtype 12)", ncclAllReduce(fd, fd, 4, (ncclDataType_t)12, ncclSum, c, s2));
  P("AllReduce(op 5)", ncclAllReduce(fd, fd, 4, ncclFloat32, (ncclRedOp_t)5, c, s2));
  P("AllReduce(count 0, NULL buffers)", ncclAllReduce(NULL, NULL, 0, ncclFloat32, ncclSum, c, s2));
  P("Broadcast(root 1)", ncclBroadcast(fd, fd, 4, ncclFloat32, 1, c, s2));
  P("Reduce(root -1)", ncclReduce(fd, fd, 4, ncclFloat32, ncclSum, -1, c, s2));
  P("Send(peer 1)", ncclSend(fd, 4, ncclFloat32, 1, c, s2));
  P("Recv(peer -1)", ncclRecv(fd, 4, ncclFloat32, -1, c, s2));
  P("AllReduce(stream 0)", ncclAllReduce(fd, fd, 4, ncclFloat32, ncclSum, c, 0));
  P("GroupEnd without start", ncclGroupEnd());
  ncclGroupStart();
  P("in group: AllReduce(op 9)", ncclAllReduce(fd, fd, 4, ncclFloat32, (ncclRedOp_t)9, c, s2));
  P("  then GroupEnd", ncclGroupEnd());
  int n = -1;
  ncclResult_t ae0;
  P("CommCount(c, NULL)", ncclCommCount(c, NULL));
  P("CommCount(NULL, &n)", ncclCommCount(NULL, &n));
  P("GetVersion(NULL)", ncclGetVersion(NULL));
  void *m = (void *)1, *hd = NULL;
  P("ncclMemAlloc(NULL,4)", ncclMemAlloc(NULL, 4));
  P("ncclMemAlloc(&p,0)", ncclMemAlloc(&m, 0));
  P("  p == NULL", m == NULL);
  P("ncclMemFree(NULL)", ncclMemFree(NULL));
  P("ncclMemFree(stack)", ncclMemFree(&local));
  P("CommRegister(ok)", ncclCommRegister(c, fd, 64, &hd));
  P("CommDeregister(ok)", ncclCommDeregister(c, hd));
  P("CommRegister(NULL buff)", ncclCommRegister(c, NULL, 64, &hd));
  P("CommDeregister(NULL)", ncclCommDeregister(c, NULL));
  P("CommSplit(color -5)", ncclCommSplit(c, -5, 0, &nc, NULL));
  P("  newcomm != NULL", nc != NULL);
  if (nc != NULL) ncclCommDestroy(nc);
  nc = NULL;
  P("CommSplit(NOCOLOR)", ncclCommSplit(c, -1, 0, &nc, NULL));
  P("  newcomm == NULL", nc == NULL);
  P("CommGetAsyncError(NULL comm)", ncclCommGetAsyncError(NULL, &ae0));
  P("CommGetAsyncError(c, NULL)", ncclCommGetAsyncError(c, NULL));
  P("CommDestroy(NULL)", ncclCommDestroy(NULL));
  P("CommAbort(NULL)", ncclCommAbort(NULL));
  P("GetLastError(NULL) non-empty", ncclGetLastError(NULL)[0] != 0);
  cudaGetLastError();
  ncclResult_t ae = ncclInternalError;
  P("CommGetAsyncError", ncclCommGetAsyncError(c, &ae));
  P("  value", ae);
  P("CommFinalize (blocking)", ncclCommFinalize(c));
  P("CommDestroy", ncclCommDestroy(c));
  /* non-blocking world-1 init, with the config as NCCL_CONFIG_INITIALIZER makes it */
  cfg.cgaClusterSize = cfg.minCTAs = cfg.maxCTAs = cfg.splitShare = cfg.trafficClass = INT32_MIN;
  cfg.collnetEnable = cfg.CTAPolicy = cfg.shrinkShare = cfg.nvlsCTAs = INT32_MIN;
  cfg.nChannelsPerNetPeer = cfg.nvlinkCentricSched = INT32_MIN;
  cfg.minCTAs = 0;
  P("InitRankConfig(minCTAs 0)", ncclCommInitRankConfig(&nc, 1, id, 0, &cfg));
  cfg.minCTAs = INT32_MIN;
  cfg.blocking = 0;
  ncclGetUniqueId(&id);
  P("InitRankConfig(non-blocking)", ncclCommInitRankConfig(&c, 1, id, 0, &cfg));
  ae = ncclInProgress;
  for (int i = 0; i < 100000 && ae == ncclInProgress; i++) ncclCommGetAsyncError(c, &ae);
  P("  final async state", ae);
  P("AllReduce on non-blocking comm", ncclAllReduce(fd, fd, 4, ncclFloat32, ncclSum, c, s2));
  P("CommFinalize (non-blocking)", ncclCommFinalize(c));
  ae = ncclInProgress;
  for (int i = 0; i < 1000000 && ae == ncclInProgress; i++) ncclCommGetAsyncError(c, &ae);
  P("  final async state", ae);
  P("CommDestroy", ncclCommDestroy(c));
  /* an init inside a group, completed by ncclGroupEnd */
  ncclGetUniqueId(&id);
  P("GroupStart", ncclGroupStart());
  P("  InitRank inside group", ncclCommInitRank(&c, 1, id, 0));
  P("  GroupEnd", ncclGroupEnd());
  P("  CommCount after", ncclCommCount(c, &n));
  P("  count", n);
  P("  CommDestroy", ncclCommDestroy(c));
  cudaStreamSynchronize(s2);
  cudaStreamDestroy(s);
  cudaStreamDestroy(s2);
  cudaFree(fd);
  cudaFree(d);
  cudaFreeHost(h);
  return 0;
}
