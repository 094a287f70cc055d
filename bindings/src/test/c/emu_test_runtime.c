/*
 * emu_test_runtime.c - the CUDA runtime half: devices, errors, memory, streams and events.
 */
#include "emu_test.h"

/* ====================================================== CUDA runtime tests */

void test_runtime_basics(void) {
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
void test_streams_events(void) {
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

