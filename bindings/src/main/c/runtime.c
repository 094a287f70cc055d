/*
 * runtime.c - the CUDA runtime half of the host emulation: virtual devices,
 * errors, device memory, streams and events.
 *
 * LEGACY DEFAULT STREAM (handle 0, and cudaStreamLegacy = 0x1, its alias)
 * -----------------------------------------------------------------------
 * Supported for cudaMemcpy (which always uses it), cudaMemcpyAsync,
 * cudaMemcpyPeerAsync, cudaMemsetAsync, cudaEventRecord and
 * cudaStreamWaitEvent, with CUDA's legacy semantics implemented
 * conservatively: the call first waits until all work enqueued so far on the
 * current device's *blocking* streams (those created without
 * cudaStreamNonBlocking) has completed, then performs the operation
 * synchronously in the caller's thread. Anything enqueued afterwards on a
 * blocking stream therefore runs after it, which is what the legacy stream
 * promises; the price is that these calls block the host (a GPU would return
 * at once). cudaStreamSynchronize/Query(0) wait for / query the device's
 * blocking streams.
 * NCCL operations on the legacy stream are refused with ncclInvalidUsage (see
 * exec.c). cudaStreamPerThread (0x2) is not implemented: every call given it
 * fails with cudaErrorInvalidResourceHandle.
 *
 * STREAMS
 * -------
 * A stream created by cudaStreamCreateWithFlags is a FIFO of jn_items drained
 * by its own worker thread, so enqueued work runs later and in order. Handles
 * are validated against a registry (a list under g_streams_lock). A destroyed
 * stream leaves the registry of valid handles at once but stays in the list as
 * a "zombie" until its worker has drained the FIFO and exited; the worker is
 * then joined and the stream freed by reap(), which runs on later stream
 * create/destroy calls, cudaDeviceSynchronize and library unload. A stream
 * destroyed while idle is joined before cudaStreamDestroy returns.
 *
 * EVENTS
 * ------
 * Each cudaEventRecord creates a reference-counted record (jn_rec) and makes
 * it the event's latest; the stream item completes the record (timestamp from
 * CLOCK_MONOTONIC). Query/synchronize/wait refer to the latest record at the
 * time of the call, exactly as CUDA's "most recent cudaEventRecord" rule; an
 * event never recorded counts as complete.
 */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ================================================================ utilities */

uint64_t jn_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void jn_deadline_ms(struct timespec *ts, long ms) {
  clock_gettime(CLOCK_MONOTONIC, ts);
  ts->tv_sec += ms / 1000;
  ts->tv_nsec += (ms % 1000) * 1000000L;
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec += 1;
    ts->tv_nsec -= 1000000000L;
  }
}

void jn_sleep_us(long us) {
  if (us <= 0) return;
  struct timespec ts = {us / 1000000L, (us % 1000000L) * 1000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

void jn_cond_init_mono(pthread_cond_t *cv) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(cv, &a);
  pthread_condattr_destroy(&a);
}

void jn_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, long ms) {
  struct timespec ts;
  jn_deadline_ms(&ts, ms);
  pthread_cond_timedwait(cv, mu, &ts);
}

/* ============================================================ devices, errors */

static int g_ndev;
static pthread_once_t g_dev_once = PTHREAD_ONCE_INIT;
static _Thread_local int tl_device;               /* current device, 0 by default as in CUDA */
static _Thread_local cudaError_t tl_last_error;   /* sticky until cudaGetLastError */

static pthread_mutex_t g_peer_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_peer_enabled[JN_MAX_DEVICES][(JN_MAX_DEVICES + 63) / 64];

static void dev_init(void) { g_ndev = jn_config_devices(); }

int jn_device_count(void) {
  pthread_once(&g_dev_once, dev_init);
  return g_ndev;
}

int jn_current_device(void) { return tl_device; }

int jn_valid_device(int dev) { return dev >= 0 && dev < jn_device_count(); }

cudaError_t jn_cuda_error(cudaError_t e) {
  /* cudaErrorNotReady is a status, not an error: like CUDA, it is never recorded. */
  if (e != cudaSuccess && e != cudaErrorNotReady) tl_last_error = e;
  return e;
}
#define FAIL(e) return jn_cuda_error(e)

/* Why no device is there: none configured (JNCCL_HOST_DEVICES=0), or an environment variable of
 * the emulation is not valid (jnccl_emu_config_error says which), an initialisation error. */
static cudaError_t no_device(void) {
  return jn_config_error() != NULL ? cudaErrorInitializationError : cudaErrorNoDevice;
}

cudaError_t cudaRuntimeGetVersion(int *runtimeVersion) {
  if (runtimeVersion == NULL) FAIL(cudaErrorInvalidValue);
  *runtimeVersion = JNCCL_CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *driverVersion) {
  if (driverVersion == NULL) FAIL(cudaErrorInvalidValue);
  *driverVersion = JNCCL_CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *count) {
  if (count == NULL) FAIL(cudaErrorInvalidValue);
  *count = jn_device_count();
  if (*count == 0) FAIL(no_device());
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (jn_device_count() == 0) FAIL(no_device());
  if (!jn_valid_device(device)) FAIL(cudaErrorInvalidDevice);
  tl_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
  if (device == NULL) FAIL(cudaErrorInvalidValue);
  if (jn_device_count() == 0) FAIL(no_device());
  *device = tl_device;
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice) {
  if (canAccessPeer == NULL) FAIL(cudaErrorInvalidValue);
  if (!jn_valid_device(device) || !jn_valid_device(peerDevice)) FAIL(cudaErrorInvalidDevice);
  *canAccessPeer = device != peerDevice; /* CUDA answers 0 for a device and itself */
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
  if (flags != JN_cudaPeerAccessDefault) FAIL(cudaErrorInvalidValue);
  int me = tl_device;
  if (!jn_valid_device(peerDevice)) FAIL(cudaErrorInvalidDevice);
  if (peerDevice == me) FAIL(cudaErrorPeerAccessUnsupported); /* what CUDA 13 answers */
  pthread_mutex_lock(&g_peer_mu);
  uint64_t bit = 1ull << (peerDevice % 64);
  int already = (g_peer_enabled[me][peerDevice / 64] & bit) != 0;
  g_peer_enabled[me][peerDevice / 64] |= bit;
  pthread_mutex_unlock(&g_peer_mu);
  if (already) FAIL(cudaErrorPeerAccessAlreadyEnabled);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device) {
  if (pciBusId == NULL || len <= 0) FAIL(cudaErrorInvalidValue);
  if (!jn_valid_device(device)) FAIL(cudaErrorInvalidDevice);
  /* Stable fake id "0000:BB:00.0", bus = device + 1. Like CUDA 13, a buffer too small for
   * the id and its NUL (13 bytes) is cudaErrorInvalidValue. */
  int n = snprintf(pciBusId, (size_t)len, "0000:%02x:00.0", (unsigned)(device + 1));
  if (len < n + 1) FAIL(cudaErrorInvalidValue); /* (the truncated id is written, as by CUDA) */
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = tl_last_error;
  tl_last_error = cudaSuccess;
  return e;
}

const char *cudaGetErrorString(cudaError_t error) {
  switch ((int)error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorPeerAccessUnsupported: return "peer access is not supported between these two devices";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorPeerAccessAlreadyEnabled: return "peer access is already enabled";
    case cudaErrorPeerAccessNotEnabled: return "peer access has not been enabled";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotPermitted: return "operation not permitted";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureMerge: return "operation would result in a merge of separate capture sequences";
    case cudaErrorStreamCaptureUnmatched: return "capture was not ended in the same stream as it began";
    case cudaErrorStreamCaptureUnjoined: return "capturing stream has unjoined work";
    case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorStreamCaptureWrongThread: return "attempt to terminate a thread-local capture sequence from another thread";
    case cudaErrorTimeout: return "wait operation timed out";
    case cudaErrorGraphExecUpdateFailure:
      return "the graph update was not performed because it included changes which violated constraints specific "
             "to instantiated graph update";
    case cudaErrorUnknown: return "unknown error";
    default: return "unrecognized error code";
  }
}

/* =================================================================== memory */

/* Registry of live allocations, sorted by base address, so that interior
 * pointers resolve by binary search. */
static pthread_rwlock_t g_mem_lock = PTHREAD_RWLOCK_INITIALIZER;
static jn_alloc_info *g_mem;
static size_t g_mem_n, g_mem_cap;

/* Index of the last allocation with base <= p, or -1. Caller holds g_mem_lock. */
static long mem_floor(const void *p) {
  long lo = 0, hi = (long)g_mem_n - 1, ans = -1;
  while (lo <= hi) {
    long mid = lo + (hi - lo) / 2;
    if ((uintptr_t)g_mem[mid].base <= (uintptr_t)p) {
      ans = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return ans;
}

static int mem_insert(char *base, size_t size, int device, int kind) {
  pthread_rwlock_wrlock(&g_mem_lock);
  if (g_mem_n == g_mem_cap) {
    size_t cap = g_mem_cap ? g_mem_cap * 2 : 64;
    jn_alloc_info *n = realloc(g_mem, cap * sizeof(*n));
    if (n == NULL) {
      pthread_rwlock_unlock(&g_mem_lock);
      return 0;
    }
    g_mem = n;
    g_mem_cap = cap;
  }
  size_t pos = (size_t)(mem_floor(base) + 1);
  memmove(&g_mem[pos + 1], &g_mem[pos], (g_mem_n - pos) * sizeof(*g_mem));
  g_mem[pos] = (jn_alloc_info){base, size, device, kind};
  g_mem_n++;
  pthread_rwlock_unlock(&g_mem_lock);
  return 1;
}

/* Removes the allocation starting exactly at base with the given kind. */
static int mem_remove(const void *base, int kind, jn_alloc_info *out) {
  int ok = 0;
  pthread_rwlock_wrlock(&g_mem_lock);
  long i = mem_floor(base);
  if (i >= 0 && g_mem[i].base == base && g_mem[i].kind == kind) {
    *out = g_mem[i];
    memmove(&g_mem[i], &g_mem[i + 1], (g_mem_n - (size_t)i - 1) * sizeof(*g_mem));
    g_mem_n--;
    ok = 1;
  }
  pthread_rwlock_unlock(&g_mem_lock);
  return ok;
}

int jn_mem_lookup(const void *p, jn_alloc_info *out) {
  int found = 0;
  pthread_rwlock_rdlock(&g_mem_lock);
  long i = mem_floor(p);
  if (i >= 0 && (uintptr_t)p < (uintptr_t)g_mem[i].base + g_mem[i].size) {
    if (out) *out = g_mem[i];
    found = 1;
  }
  pthread_rwlock_unlock(&g_mem_lock);
  return found;
}

int jn_mem_range_ok(const void *p, size_t bytes, jn_alloc_info *out) {
  jn_alloc_info a;
  if (p == NULL || !jn_mem_lookup(p, &a)) return 0;
  size_t off = (size_t)((const char *)p - a.base);
  if (bytes > a.size - off) return 0;
  if (out) *out = a;
  return 1;
}

static cudaError_t alloc_common(void **ptr, size_t size, int kind) {
  if (ptr == NULL) FAIL(cudaErrorInvalidValue);
  if (jn_device_count() == 0) FAIL(no_device());
  cudaError_t unsafe = jn_capture_unsafe_call(); /* allocation is prohibited by the capture modes */
  if (unsafe != cudaSuccess) FAIL(unsafe);
  if (size == 0) { /* CUDA: success, and a NULL pointer */
    *ptr = NULL;
    return cudaSuccess;
  }
  void *p = NULL;
  if (posix_memalign(&p, 256, size) != 0) FAIL(cudaErrorMemoryAllocation);
  if (!mem_insert(p, size, tl_device, kind)) {
    free(p);
    FAIL(cudaErrorMemoryAllocation);
  }
  *ptr = p;
  return cudaSuccess;
}

/* cudaFree/cudaFreeHost synchronize like CUDA's: queued work that may still use
 * the memory (on the allocation's device) completes before it is released. */
static cudaError_t free_common(void *ptr, int kind) {
  if (ptr == NULL) return cudaSuccess;
  cudaError_t unsafe = jn_capture_unsafe_call(); /* it synchronizes: prohibited by the capture modes */
  if (unsafe != cudaSuccess) FAIL(unsafe);
  jn_alloc_info a;
  if (!mem_remove(ptr, kind, &a)) FAIL(cudaErrorInvalidValue);
  jn_device_drain(a.device, 0);
  free(a.base);
  return cudaSuccess;
}

cudaError_t cudaMalloc(void **devPtr, size_t size) { return alloc_common(devPtr, size, JN_MEM_DEVICE); }
cudaError_t cudaFree(void *devPtr) { return free_common(devPtr, JN_MEM_DEVICE); }
cudaError_t cudaMallocHost(void **ptr, size_t size) { return alloc_common(ptr, size, JN_MEM_HOST); }
cudaError_t cudaFreeHost(void *ptr) { return free_common(ptr, JN_MEM_HOST); }

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr) {
  if (attributes == NULL) FAIL(cudaErrorInvalidValue);
  memset(attributes, 0, sizeof(*attributes));
  jn_alloc_info a;
  if (ptr != NULL && jn_mem_lookup(ptr, &a)) {
    attributes->device = a.device;
    attributes->devicePointer = (void *)ptr;
    if (a.kind == JN_MEM_DEVICE) {
      attributes->type = cudaMemoryTypeDevice;
      attributes->hostPointer = NULL; /* device memory has no host alias on a GPU */
    } else {
      attributes->type = cudaMemoryTypeHost;
      attributes->hostPointer = (void *)ptr;
    }
  } else {
    /* CUDA >= 11: unregistered host memory is a success with type Unregistered. */
    attributes->type = cudaMemoryTypeUnregistered; /* as CUDA 13 answers (checked on an H200) */
    attributes->device = -2;
    attributes->devicePointer = NULL;
    attributes->hostPointer = (void *)ptr;
  }
  return cudaSuccess;
}

/* ================================================================== streams */

struct CUstream_st {
  int device;
  unsigned flags;
  long delay_us;          /* JNCCL_HOST_DELAY_US applied before every item */
  pthread_mutex_t mu;
  pthread_cond_t cv;      /* signalled on enqueue, completion and exit */
  jn_item *head, *tail;
  uint64_t enq, done;     /* items enqueued / completed */
  int destroying, exited;
  int valid;              /* 0 once cudaStreamDestroy was called (handle invalid) */
  _Atomic int users;      /* threads waiting on this stream outside the registry lock */
  pthread_t worker;
  struct CUstream_st *next;
};

static pthread_rwlock_t g_streams_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct CUstream_st *g_streams; /* valid streams and zombies */
static pthread_mutex_t g_enqueue_mu = PTHREAD_MUTEX_INITIALIZER;

void jn_enqueue_lock(void) { pthread_mutex_lock(&g_enqueue_mu); }
void jn_enqueue_unlock(void) { pthread_mutex_unlock(&g_enqueue_mu); }

/* Caller holds g_streams_lock. */
static struct CUstream_st *stream_find_valid(cudaStream_t s) {
  for (struct CUstream_st *p = g_streams; p != NULL; p = p->next)
    if (p == s && p->valid) return p;
  return NULL;
}

static void *stream_worker(void *arg) {
  struct CUstream_st *s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (s->head == NULL && !s->destroying) pthread_cond_wait(&s->cv, &s->mu);
    if (s->head == NULL) break; /* destroyed and drained */
    jn_item *it = s->head;
    pthread_mutex_unlock(&s->mu);
    if (s->delay_us > 0) jn_sleep_us(s->delay_us);
    it->run(it);
    pthread_mutex_lock(&s->mu);
    s->head = it->next;
    if (s->head == NULL) s->tail = NULL;
    pthread_mutex_unlock(&s->mu);
    /* Released before the item counts as done, so that whatever it held (e.g. a
     * communicator reference) is gone once a synchronize returns. */
    it->destroy(it);
    pthread_mutex_lock(&s->mu);
    s->done++;
    pthread_cond_broadcast(&s->cv);
  }
  s->exited = 1;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* Joins and frees zombie streams whose worker has exited and that nobody waits on. */
static void reap(void) {
  pthread_rwlock_wrlock(&g_streams_lock);
  struct CUstream_st **pp = &g_streams;
  while (*pp != NULL) {
    struct CUstream_st *s = *pp;
    int done = 0;
    if (!s->valid && atomic_load(&s->users) == 0) {
      pthread_mutex_lock(&s->mu);
      done = s->exited;
      pthread_mutex_unlock(&s->mu);
    }
    if (done) {
      *pp = s->next;
      pthread_join(s->worker, NULL);
      pthread_mutex_destroy(&s->mu);
      pthread_cond_destroy(&s->cv);
      free(s);
    } else {
      pp = &s->next;
    }
  }
  pthread_rwlock_unlock(&g_streams_lock);
}

__attribute__((destructor)) static void runtime_fini(void) { reap(); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags) {
  if (pStream == NULL) FAIL(cudaErrorInvalidValue);
  if (flags & ~JN_cudaStreamNonBlocking) FAIL(cudaErrorInvalidValue);
  if (jn_device_count() == 0) FAIL(no_device());
  jn_stream_env env;
  char err[256];
  if (!jn_stream_env_read(&env, err, sizeof err)) {
    /* A CUDA error carries no text: say which variable is wrong where the user will look. */
    fprintf(stderr, "jnccl host emulation: cudaStreamCreateWithFlags: %s\n", err);
    FAIL(cudaErrorInvalidValue);
  }
  reap();
  struct CUstream_st *s = calloc(1, sizeof(*s));
  if (s == NULL) FAIL(cudaErrorMemoryAllocation);
  s->device = tl_device;
  s->flags = flags;
  s->valid = 1;
  /* JNCCL_HOST_DELAY_US delays streams unless JNCCL_HOST_DELAY_RANK narrows it to one rank's
   * NCCL operations (fault.c); JNCCL_HOST_DELAY_DEVICE narrows it to one device's streams. */
  if (env.delay_rank < 0 && (env.delay_device < 0 || env.delay_device == s->device)) s->delay_us = env.delay_us;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  if (pthread_create(&s->worker, NULL, stream_worker, s) != 0) {
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    FAIL(cudaErrorMemoryAllocation);
  }
  pthread_rwlock_wrlock(&g_streams_lock);
  s->next = g_streams;
  g_streams = s;
  pthread_rwlock_unlock(&g_streams_lock);
  *pStream = s;
  return cudaSuccess;
}

int jn_stream_classify(cudaStream_t s, int *device) {
  if (s == NULL || (void *)s == JN_cudaStreamLegacy) return JN_STREAM_LEGACY;
  if ((void *)s == JN_cudaStreamPerThread) return JN_STREAM_PER_THREAD;
  int kind = JN_STREAM_INVALID;
  pthread_rwlock_rdlock(&g_streams_lock);
  struct CUstream_st *p = stream_find_valid(s);
  if (p != NULL) {
    kind = JN_STREAM_USER;
    if (device) *device = p->device;
  }
  pthread_rwlock_unlock(&g_streams_lock);
  return kind;
}

cudaError_t jn_stream_submit(cudaStream_t s, jn_item **items, int n) {
  pthread_rwlock_rdlock(&g_streams_lock);
  struct CUstream_st *p = stream_find_valid(s);
  if (p == NULL) {
    pthread_rwlock_unlock(&g_streams_lock);
    return cudaErrorInvalidResourceHandle;
  }
  pthread_mutex_lock(&p->mu);
  for (int i = 0; i < n; i++) {
    items[i]->next = NULL;
    if (p->tail) p->tail->next = items[i];
    else p->head = items[i];
    p->tail = items[i];
  }
  p->enq += (uint64_t)n;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  pthread_rwlock_unlock(&g_streams_lock);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  pthread_rwlock_wrlock(&g_streams_lock);
  struct CUstream_st *s = stream_find_valid(stream);
  if (s == NULL) {
    pthread_rwlock_unlock(&g_streams_lock);
    FAIL(cudaErrorInvalidResourceHandle);
  }
  s->valid = 0;
  jn_capture_stream_gone(s);
  atomic_fetch_add(&s->users, 1);
  pthread_mutex_lock(&s->mu);
  s->destroying = 1;
  int idle = s->head == NULL;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_rwlock_unlock(&g_streams_lock);
  if (idle) { /* the worker exits at once: join it now */
    pthread_mutex_lock(&s->mu);
    while (!s->exited) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
  }
  atomic_fetch_sub(&s->users, 1);
  reap();
  return cudaSuccess;
}

/* Waits until s->done reaches target. The caller holds a users reference. */
static void stream_wait_done(struct CUstream_st *s, uint64_t target) {
  pthread_mutex_lock(&s->mu);
  while (s->done < target) pthread_cond_wait(&s->cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
}

void jn_device_drain(int device, int blocking_only) {
  struct CUstream_st *small[16], **list = small;
  uint64_t small_t[16], *targets = small_t;
  size_t n = 0, cap = 16;
  pthread_rwlock_rdlock(&g_streams_lock);
  for (struct CUstream_st *s = g_streams; s != NULL; s = s->next) {
    if (s->device != device) continue;
    if (blocking_only && (s->flags & JN_cudaStreamNonBlocking)) continue;
    if (n == cap) {
      size_t ncap = cap * 2;
      struct CUstream_st **nl = malloc(ncap * sizeof(*nl));
      uint64_t *nt = malloc(ncap * sizeof(*nt));
      if (nl == NULL || nt == NULL) { /* out of memory: wait for what we have */
        free(nl);
        free(nt);
        break;
      }
      memcpy(nl, list, n * sizeof(*nl));
      memcpy(nt, targets, n * sizeof(*nt));
      if (list != small) {
        free(list);
        free(targets);
      }
      list = nl;
      targets = nt;
      cap = ncap;
    }
    atomic_fetch_add(&s->users, 1);
    pthread_mutex_lock(&s->mu);
    targets[n] = s->enq;
    pthread_mutex_unlock(&s->mu);
    list[n++] = s;
  }
  pthread_rwlock_unlock(&g_streams_lock);
  for (size_t i = 0; i < n; i++) {
    stream_wait_done(list[i], targets[i]);
    atomic_fetch_sub(&list[i]->users, 1);
  }
  if (list != small) {
    free(list);
    free(targets);
  }
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  int kind = jn_stream_classify(stream, NULL);
  if (kind == JN_STREAM_LEGACY) {
    jn_device_drain(tl_device, 1);
    return cudaSuccess;
  }
  if (kind != JN_STREAM_USER) FAIL(cudaErrorInvalidResourceHandle);
  cudaError_t refused = jn_capture_refuse_stream(stream); /* a capturing stream never completes */
  if (refused == cudaSuccess) refused = jn_capture_unsafe_call();
  if (refused != cudaSuccess) FAIL(refused);
  pthread_rwlock_rdlock(&g_streams_lock);
  struct CUstream_st *s = stream_find_valid(stream);
  if (s == NULL) {
    pthread_rwlock_unlock(&g_streams_lock);
    FAIL(cudaErrorInvalidResourceHandle);
  }
  atomic_fetch_add(&s->users, 1);
  pthread_mutex_lock(&s->mu);
  uint64_t target = s->enq;
  pthread_mutex_unlock(&s->mu);
  pthread_rwlock_unlock(&g_streams_lock);
  stream_wait_done(s, target);
  atomic_fetch_sub(&s->users, 1);
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  int kind = jn_stream_classify(stream, NULL);
  if (kind != JN_STREAM_LEGACY && kind != JN_STREAM_USER) FAIL(cudaErrorInvalidResourceHandle);
  cudaError_t refused = kind == JN_STREAM_USER ? jn_capture_refuse_stream(stream) : cudaSuccess;
  if (refused != cudaSuccess) FAIL(refused);
  int legacy = kind == JN_STREAM_LEGACY, busy = 0, found = legacy;
  pthread_rwlock_rdlock(&g_streams_lock);
  for (struct CUstream_st *s = g_streams; s != NULL; s = s->next) {
    int match = legacy ? (s->device == tl_device && !(s->flags & JN_cudaStreamNonBlocking)) : (s == stream && s->valid);
    if (!match) continue;
    found = 1;
    pthread_mutex_lock(&s->mu);
    busy |= s->done < s->enq;
    pthread_mutex_unlock(&s->mu);
  }
  pthread_rwlock_unlock(&g_streams_lock);
  if (!found) FAIL(cudaErrorInvalidResourceHandle);
  return busy ? cudaErrorNotReady : cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  cudaError_t unsafe = jn_capture_unsafe_call();
  if (unsafe != cudaSuccess) FAIL(unsafe);
  jn_device_drain(tl_device, 0);
  reap();
  return cudaSuccess;
}

/* ============================================================ memcpy, memset */

typedef struct {
  jn_item base;
  void *dst;
  const void *src;
  size_t count;
  int value;
  int is_set;
} copy_item;

static void copy_run(jn_item *it) {
  copy_item *c = (copy_item *)it;
  if (c->is_set) memset(c->dst, c->value, c->count);
  else memmove(c->dst, c->src, c->count);
}

static void item_free(jn_item *it) { free(it); }

static cudaError_t copy_submit(void *dst, const void *src, size_t count, int value, int is_set, cudaStream_t stream);

/* A copy or memset captured in a graph: enqueued again at each launch. */
typedef struct {
  jn_node base;
  void *dst;
  const void *src;
  size_t count;
  int value, is_set;
} copy_node;

static cudaError_t copy_node_launch(jn_node *n, cudaStream_t s) {
  copy_node *c = (copy_node *)n;
  return copy_submit(c->dst, c->src, c->count, c->value, c->is_set, s);
}

static void node_free(jn_node *n) { free(n); }

/* Whether a call on user stream s is captured: then *err is its result (the node appended, or
 * why not). node is the call as a graph node, made only when s is capturing. */
static int captured(cudaStream_t s, jn_node *(*make)(void *), void *arg, cudaError_t *err) {
  if (!jn_capture_any() || jn_capture_status(s) == JN_CAPTURE_NONE) return 0;
  jn_node *node = make(arg);
  *err = node == NULL ? cudaErrorMemoryAllocation : jn_capture_add(s, node);
  return 1;
}

static jn_node *make_copy_node(void *arg) {
  copy_node *c = malloc(sizeof(*c));
  if (c == NULL) return NULL;
  *c = *(copy_node *)arg;
  jn_node_init(&c->base, copy_node_launch, node_free);
  return &c->base;
}

/* Runs a copy/set on a stream: synchronously on the legacy stream (after the
 * device's blocking streams drained), else as a stream item. */
static cudaError_t copy_submit(void *dst, const void *src, size_t count, int value, int is_set, cudaStream_t stream) {
  int kind = jn_stream_classify(stream, NULL);
  if (kind == JN_STREAM_LEGACY) {
    jn_device_drain(tl_device, 1);
    if (count) {
      if (is_set) memset(dst, value, count);
      else memmove(dst, src, count);
    }
    return cudaSuccess;
  }
  if (kind != JN_STREAM_USER) FAIL(cudaErrorInvalidResourceHandle);
  copy_node proto = {.dst = dst, .src = src, .count = count, .value = value, .is_set = is_set};
  cudaError_t ce;
  if (captured(stream, make_copy_node, &proto, &ce)) {
    if (ce != cudaSuccess) FAIL(ce);
    return cudaSuccess;
  }
  copy_item *c = calloc(1, sizeof(*c));
  if (c == NULL) FAIL(cudaErrorMemoryAllocation);
  *c = (copy_item){{NULL, copy_run, item_free}, dst, src, count, value, is_set};
  jn_item *items[1] = {&c->base};
  cudaError_t e = jn_stream_submit(stream, items, 1);
  if (e != cudaSuccess) {
    free(c);
    FAIL(e);
  }
  return cudaSuccess;
}

/* A pointer on the device side of a copy must be a registered allocation that holds
 * the whole range; host-side pointers are not checked (pageable memory is fine).
 * cudaMemcpyDefault infers the side from the registry. */
static cudaError_t check_copy(void *dst, const void *src, size_t count, int kind) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return cudaErrorInvalidMemcpyDirection;
  if (count == 0) return cudaSuccess;
  if (dst == NULL || src == NULL) return cudaErrorInvalidValue;
  int dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  int src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind == cudaMemcpyDefault) {
    dst_dev = jn_mem_lookup(dst, NULL);
    src_dev = jn_mem_lookup(src, NULL);
  }
  if (dst_dev && !jn_mem_range_ok(dst, count, NULL)) return cudaErrorInvalidValue;
  if (src_dev && !jn_mem_range_ok(src, count, NULL)) return cudaErrorInvalidValue;
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream) {
  cudaError_t e = check_copy(dst, src, count, (int)kind);
  if (e != cudaSuccess) FAIL(e);
  return copy_submit(dst, src, count, 0, 0, stream);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
  return cudaMemcpyAsync(dst, src, count, kind, NULL); /* the legacy stream: synchronous */
}

cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice, size_t count,
                                cudaStream_t stream) {
  if (!jn_valid_device(dstDevice) || !jn_valid_device(srcDevice)) FAIL(cudaErrorInvalidDevice);
  if (count == 0) return copy_submit(dst, src, 0, 0, 0, stream);
  if (!jn_mem_range_ok(dst, count, NULL) || !jn_mem_range_ok(src, count, NULL)) FAIL(cudaErrorInvalidValue);
  return copy_submit(dst, src, count, 0, 0, stream);
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream) {
  if (count != 0 && !jn_mem_range_ok(devPtr, count, NULL)) FAIL(cudaErrorInvalidValue);
  return copy_submit(devPtr, NULL, count, value, 1, stream);
}

/* =================================================================== events */

typedef struct jn_rec {
  int refs;       /* under g_ev_mu */
  int done;
  uint64_t t_ns;  /* completion time */
} jn_rec;

struct CUevent_st {
  unsigned flags;
  jn_rec *last; /* most recent record, NULL if never recorded */
  struct CUevent_st *next;
};

static pthread_mutex_t g_ev_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_ev_cv = PTHREAD_COND_INITIALIZER; /* broadcast on every completion */
static struct CUevent_st *g_events;

/* Caller holds g_ev_mu. */
static struct CUevent_st *event_find(cudaEvent_t e) {
  for (struct CUevent_st *p = g_events; p != NULL; p = p->next)
    if (p == e) return p;
  return NULL;
}

static void rec_unref_locked(jn_rec *r) {
  if (r != NULL && --r->refs == 0) free(r);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
  if (event == NULL) FAIL(cudaErrorInvalidValue);
  if (flags & ~(JN_cudaEventBlockingSync | JN_cudaEventDisableTiming | JN_cudaEventInterprocess))
    FAIL(cudaErrorInvalidValue);
  if (flags & JN_cudaEventInterprocess) FAIL(cudaErrorInvalidValue); /* not emulated */
  struct CUevent_st *e = calloc(1, sizeof(*e));
  if (e == NULL) FAIL(cudaErrorMemoryAllocation);
  e->flags = flags;
  pthread_mutex_lock(&g_ev_mu);
  e->next = g_events;
  g_events = e;
  pthread_mutex_unlock(&g_ev_mu);
  *event = e;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  pthread_mutex_lock(&g_ev_mu);
  struct CUevent_st **pp = &g_events;
  while (*pp != NULL && *pp != event) pp = &(*pp)->next;
  if (*pp == NULL) {
    pthread_mutex_unlock(&g_ev_mu);
    FAIL(cudaErrorInvalidResourceHandle);
  }
  *pp = event->next;
  jn_capture_event_gone(event);
  /* A pending record stays alive (referenced by its stream item) until it completes. */
  rec_unref_locked(event->last);
  pthread_mutex_unlock(&g_ev_mu);
  free(event);
  return cudaSuccess;
}

typedef struct {
  jn_item base;
  jn_rec *rec;
} rec_item;

static void rec_complete(jn_item *it) {
  jn_rec *r = ((rec_item *)it)->rec;
  pthread_mutex_lock(&g_ev_mu);
  r->t_ns = jn_now_ns();
  r->done = 1;
  pthread_cond_broadcast(&g_ev_cv);
  pthread_mutex_unlock(&g_ev_mu);
}

static void rec_wait(jn_item *it) {
  jn_rec *r = ((rec_item *)it)->rec;
  pthread_mutex_lock(&g_ev_mu);
  while (!r->done) pthread_cond_wait(&g_ev_cv, &g_ev_mu);
  pthread_mutex_unlock(&g_ev_mu);
}

static void rec_item_free(jn_item *it) {
  pthread_mutex_lock(&g_ev_mu);
  rec_unref_locked(((rec_item *)it)->rec);
  pthread_mutex_unlock(&g_ev_mu);
  free(it);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return cudaEventRecordWithFlags(event, stream, JN_cudaEventRecordDefault);
}

/* Whether event is a live event handle. */
static int event_valid(cudaEvent_t event) {
  pthread_mutex_lock(&g_ev_mu);
  int found = event_find(event) != NULL;
  pthread_mutex_unlock(&g_ev_mu);
  return found;
}

cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags) {
  if (flags & ~JN_cudaEventRecordExternal) FAIL(cudaErrorInvalidValue);
  int kind = jn_stream_classify(stream, NULL);
  if (kind != JN_STREAM_LEGACY && kind != JN_STREAM_USER) FAIL(cudaErrorInvalidResourceHandle);
  if (jn_capture_any()) { /* in a capture, a record is a dependency (and, external, a node) */
    if (!event_valid(event)) FAIL(cudaErrorInvalidResourceHandle);
    jn_node *external = NULL;
    if ((flags & JN_cudaEventRecordExternal) && jn_capture_status(stream) != JN_CAPTURE_NONE &&
        (external = jn_event_node(event, 0)) == NULL)
      FAIL(cudaErrorMemoryAllocation);
    cudaError_t ce;
    if (jn_capture_event_record(event, stream, external, &ce)) {
      if (ce != cudaSuccess) FAIL(ce);
      return cudaSuccess;
    }
  }
  jn_rec *r = calloc(1, sizeof(*r));
  rec_item *it = kind == JN_STREAM_USER ? calloc(1, sizeof(*it)) : NULL;
  if (r == NULL || (kind == JN_STREAM_USER && it == NULL)) {
    free(r);
    free(it);
    FAIL(cudaErrorMemoryAllocation);
  }
  if (kind == JN_STREAM_LEGACY) jn_device_drain(tl_device, 1);
  pthread_mutex_lock(&g_ev_mu);
  struct CUevent_st *e = event_find(event);
  if (e == NULL) {
    pthread_mutex_unlock(&g_ev_mu);
    free(r);
    free(it);
    FAIL(cudaErrorInvalidResourceHandle);
  }
  r->refs = kind == JN_STREAM_USER ? 2 : 1; /* the event, and the stream item */
  if (kind == JN_STREAM_LEGACY) { /* everything before it has completed: complete now */
    r->done = 1;
    r->t_ns = jn_now_ns();
    pthread_cond_broadcast(&g_ev_cv);
  }
  rec_unref_locked(e->last);
  e->last = r;
  pthread_mutex_unlock(&g_ev_mu);
  if (kind == JN_STREAM_LEGACY) return cudaSuccess;
  *it = (rec_item){{NULL, rec_complete, rec_item_free}, r};
  jn_item *items[1] = {&it->base};
  if (jn_stream_submit(stream, items, 1) != cudaSuccess) { /* stream destroyed meanwhile */
    rec_complete(&it->base);
    rec_item_free(&it->base);
    FAIL(cudaErrorInvalidResourceHandle);
  }
  return cudaSuccess;
}

/* Queries and synchronizes: prohibited by the capture modes, and impossible on a captured record. */
static cudaError_t event_capture_check(cudaEvent_t event) {
  cudaError_t e = jn_capture_unsafe_call();
  if (e == cudaSuccess && jn_capture_event_captured(event)) e = cudaErrorCapturedEvent;
  return e;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  cudaError_t ce = event_capture_check(event);
  if (ce != cudaSuccess) FAIL(ce);
  pthread_mutex_lock(&g_ev_mu);
  struct CUevent_st *e = event_find(event);
  int found = e != NULL, done = e == NULL || e->last == NULL || e->last->done;
  pthread_mutex_unlock(&g_ev_mu);
  if (!found) FAIL(cudaErrorInvalidResourceHandle);
  return done ? cudaSuccess : cudaErrorNotReady;
}

/* Returns the event's latest record with a reference taken (NULL if never recorded);
 * *found tells whether the handle is valid. */
static jn_rec *event_latest_ref(cudaEvent_t event, int *found) {
  pthread_mutex_lock(&g_ev_mu);
  struct CUevent_st *e = event_find(event);
  jn_rec *r = NULL;
  *found = e != NULL;
  if (e != NULL && e->last != NULL && !e->last->done) {
    r = e->last;
    r->refs++;
  }
  pthread_mutex_unlock(&g_ev_mu);
  return r;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  cudaError_t ce = event_capture_check(event);
  if (ce != cudaSuccess) FAIL(ce);
  int found;
  jn_rec *r = event_latest_ref(event, &found);
  if (!found) FAIL(cudaErrorInvalidResourceHandle);
  if (r != NULL) {
    pthread_mutex_lock(&g_ev_mu);
    while (!r->done) pthread_cond_wait(&g_ev_cv, &g_ev_mu);
    rec_unref_locked(r);
    pthread_mutex_unlock(&g_ev_mu);
  }
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  if (flags & ~JN_cudaEventWaitExternal) FAIL(cudaErrorInvalidValue);
  int kind = jn_stream_classify(stream, NULL);
  if (kind != JN_STREAM_LEGACY && kind != JN_STREAM_USER) FAIL(cudaErrorInvalidResourceHandle);
  if (jn_capture_any()) { /* a fork, a join, an external wait node, or an isolation error */
    if (!event_valid(event)) FAIL(cudaErrorInvalidResourceHandle);
    jn_node *external = NULL;
    if ((flags & JN_cudaEventWaitExternal) && kind == JN_STREAM_USER &&
        jn_capture_status(stream) != JN_CAPTURE_NONE && (external = jn_event_node(event, 1)) == NULL)
      FAIL(cudaErrorMemoryAllocation);
    cudaError_t ce;
    if (jn_capture_event_wait(stream, event, external, &ce)) {
      if (ce != cudaSuccess) FAIL(ce);
      return cudaSuccess;
    }
  }
  int found;
  jn_rec *r = event_latest_ref(event, &found); /* the record current at the time of the call */
  if (!found) FAIL(cudaErrorInvalidResourceHandle);
  if (r == NULL) return cudaSuccess; /* never recorded, or already complete: nothing to wait for */
  rec_item *it = calloc(1, sizeof(*it));
  if (it == NULL) {
    pthread_mutex_lock(&g_ev_mu);
    rec_unref_locked(r);
    pthread_mutex_unlock(&g_ev_mu);
    FAIL(cudaErrorMemoryAllocation);
  }
  *it = (rec_item){{NULL, rec_wait, rec_item_free}, r};
  if (kind == JN_STREAM_LEGACY) { /* legacy stream: wait here, in the caller */
    rec_wait(&it->base);
    rec_item_free(&it->base);
    return cudaSuccess;
  }
  jn_item *items[1] = {&it->base};
  if (jn_stream_submit(stream, items, 1) != cudaSuccess) {
    rec_item_free(&it->base);
    FAIL(cudaErrorInvalidResourceHandle);
  }
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == NULL) FAIL(cudaErrorInvalidValue);
  cudaError_t e = cudaSuccess;
  pthread_mutex_lock(&g_ev_mu);
  struct CUevent_st *a = event_find(start), *b = event_find(end);
  if (a == NULL || b == NULL) e = cudaErrorInvalidResourceHandle;
  else if ((a->flags | b->flags) & JN_cudaEventDisableTiming) e = cudaErrorInvalidResourceHandle;
  else if (a->last == NULL || b->last == NULL) e = cudaErrorInvalidResourceHandle; /* never recorded */
  else if (!a->last->done || !b->last->done) e = cudaErrorNotReady;
  else *ms = (float)(((double)b->last->t_ns - (double)a->last->t_ns) / 1e6);
  pthread_mutex_unlock(&g_ev_mu);
  if (e != cudaSuccess) FAIL(e);
  return cudaSuccess;
}

/* ============================================================ host functions */

typedef struct {
  jn_item base;
  cudaHostFn_t fn;
  void *data;
} host_item;

static void host_run(jn_item *it) { ((host_item *)it)->fn(((host_item *)it)->data); }

typedef struct {
  jn_node base;
  cudaHostFn_t fn;
  void *data;
} host_node;

static cudaError_t host_node_launch(jn_node *n, cudaStream_t s) {
  return cudaLaunchHostFunc(s, ((host_node *)n)->fn, ((host_node *)n)->data);
}

static jn_node *make_host_node(void *arg) {
  host_node *h = malloc(sizeof(*h));
  if (h == NULL) return NULL;
  *h = *(host_node *)arg;
  jn_node_init(&h->base, host_node_launch, node_free);
  return &h->base;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData) {
  if (fn == NULL) FAIL(cudaErrorInvalidValue);
  int kind = jn_stream_classify(stream, NULL);
  if (kind == JN_STREAM_LEGACY) { /* after the blocking streams, in the caller (see the legacy stream) */
    jn_device_drain(tl_device, 1);
    fn(userData);
    return cudaSuccess;
  }
  if (kind != JN_STREAM_USER) FAIL(cudaErrorInvalidResourceHandle);
  host_node proto = {.fn = fn, .data = userData};
  cudaError_t ce;
  if (captured(stream, make_host_node, &proto, &ce)) {
    if (ce != cudaSuccess) FAIL(ce);
    return cudaSuccess;
  }
  host_item *h = calloc(1, sizeof(*h));
  if (h == NULL) FAIL(cudaErrorMemoryAllocation);
  *h = (host_item){{NULL, host_run, item_free}, fn, userData};
  jn_item *items[1] = {&h->base};
  cudaError_t e = jn_stream_submit(stream, items, 1);
  if (e != cudaSuccess) {
    free(h);
    FAIL(e);
  }
  return cudaSuccess;
}
