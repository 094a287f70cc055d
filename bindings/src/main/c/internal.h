/*
 * internal.h - declarations shared by the files of the host emulation.
 * Nothing here is exported (the library is built with -fvisibility=hidden).
 */
#ifndef JNCCL_INTERNAL_H
#define JNCCL_INTERNAL_H

#include "jnccl_abi.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#define JN_UNUSED(x) ((void)(x))
#define JN_MIN(a, b) ((a) < (b) ? (a) : (b))
#define JN_MAX(a, b) ((a) > (b) ? (a) : (b))

/* ------------------------------------------------------------ utilities -- */

uint64_t jn_now_ns(void);                           /* CLOCK_MONOTONIC */
void jn_deadline_ms(struct timespec *ts, long ms);  /* now + ms, CLOCK_MONOTONIC */
void jn_sleep_us(long us);
/* A condition variable whose timed waits use CLOCK_MONOTONIC (process-private). */
void jn_cond_init_mono(pthread_cond_t *cv);
/* Timed wait of at most ms milliseconds (spurious wake-ups are fine: callers loop). */
void jn_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, long ms);

/* -------------------------------------------------------- configuration -- */

#define JN_MAX_DEVICES 255
enum { JN_FAULT_NONE, JN_FAULT_FAIL, JN_FAULT_HANG, JN_FAULT_HANG_ENQUEUE, JN_FAULT_HANG_ABORT };

/* Variables read at stream creation (-1: unset, for the rank and the device). */
typedef struct {
  long delay_rank, delay_device, delay_us;
} jn_stream_env;

/* Variables read at communicator creation (-1: unset, for delay_rank). */
typedef struct {
  uint64_t chunk;
  long init_timeout_ms;
  int fault_mode; /* JN_FAULT_* */
  long fault_rank, fault_at, delay_rank, delay_us;
} jn_comm_env;

/* NULL when every variable of the emulation was valid at its first use; else what is wrong
 * ("NAME=value is not valid: expected ..."; several joined by "; "). */
const char *jn_config_error(void);
/* JNCCL_HOST_DEVICES; 0 when the configuration is not valid (then no call finds a device). */
int jn_config_devices(void);
/* Read and check the variables of a new stream / communicator now (a test may change them in
 * process). Return 1, or 0 with the text of the first bad variable in err. */
int jn_stream_env_read(jn_stream_env *env, char *err, size_t errlen);
int jn_comm_env_read(jn_comm_env *env, char *err, size_t errlen);

/* ------------------------------------------------------ devices, errors -- */

int jn_device_count(void);
int jn_current_device(void);
int jn_valid_device(int dev);
/* Records e as the calling thread's last CUDA error (if not cudaSuccess) and returns it. */
cudaError_t jn_cuda_error(cudaError_t e);

/* --------------------------------------------------------------- memory -- */

enum { JN_MEM_DEVICE = 1, JN_MEM_HOST = 2 };

typedef struct {
  char *base;
  size_t size;
  int device;
  int kind; /* JN_MEM_DEVICE or JN_MEM_HOST */
} jn_alloc_info;

/* Finds the allocation containing p (interior pointers resolve). Returns 1 if found. */
int jn_mem_lookup(const void *p, jn_alloc_info *out);
/* 1 if [p, p+bytes) lies inside one registered allocation (bytes may be 0). */
int jn_mem_range_ok(const void *p, size_t bytes, jn_alloc_info *out);

/* -------------------------------------------------------------- streams -- */

/*
 * A unit of stream work. The stream's worker calls run() when the item
 * reaches the head of the FIFO, then destroy() (which frees the item).
 */
typedef struct jn_item jn_item;
struct jn_item {
  jn_item *next;
  void (*run)(jn_item *it);
  void (*destroy)(jn_item *it);
};

/* Kind of stream handle the caller passed. */
enum { JN_STREAM_INVALID = 0, JN_STREAM_LEGACY = 1, JN_STREAM_PER_THREAD = 2, JN_STREAM_USER = 3 };
/* Classifies a handle: legacy (0 / cudaStreamLegacy), per-thread, a live user stream, or invalid.
 * For a user stream, *device receives its device. */
int jn_stream_classify(cudaStream_t s, int *device);
/* Appends items[0..n) (n >= 1) to one live user stream atomically. Returns cudaSuccess or
 * cudaErrorInvalidResourceHandle (then nothing was enqueued and the items are untouched). */
cudaError_t jn_stream_submit(cudaStream_t s, jn_item **items, int n);

/* Global lock that NCCL takes while it hands out per-communicator tickets and posts the
 * corresponding stream items, so that the ticket order of every communicator agrees with
 * one global order (see comm.h, "EXECUTION ORDER"). */
void jn_enqueue_lock(void);
void jn_enqueue_unlock(void);

/* Waits until all work of the device's streams enqueued before the call has completed.
 * blocking_only: only streams created without cudaStreamNonBlocking (legacy semantics). */
void jn_device_drain(int device, int blocking_only);

/* ------------------------------------------------- stream capture (graph.c) -- */

/*
 * A captured operation: immutable once made, shared (reference-counted) by the capture, the
 * graph and its executable graphs. launch() enqueues the operation afresh on a stream that is
 * not capturing; release() frees it (called when the last reference goes).
 */
typedef struct jn_node jn_node;
struct jn_node {
  _Atomic int refs;
  cudaError_t (*launch)(jn_node *n, cudaStream_t stream);
  void (*release)(jn_node *n);
};
void jn_node_init(jn_node *n, cudaError_t (*launch)(jn_node *, cudaStream_t), void (*release)(jn_node *));
void jn_node_put(jn_node *n); /* drops a reference (NULL is fine) */
/* A node that records event (wait = 0) or makes the stream wait for it (wait = 1) at launch. */
jn_node *jn_event_node(cudaEvent_t event, int wait);

enum { JN_CAPTURE_NONE = 0, JN_CAPTURE_ACTIVE = 1, JN_CAPTURE_INVALIDATED = 2 }; /* cudaStreamCaptureStatus */
/* Whether any capture is active (one atomic load: the fast path of every stream call). */
int jn_capture_any(void);
/* The capture status of stream s. */
int jn_capture_status(cudaStream_t s);
/* Appends node (its reference is passed) to the capture of s. Returns cudaSuccess, or an error
 * (cudaErrorStreamCaptureInvalidated, ...) with the node released. */
cudaError_t jn_capture_add(cudaStream_t s, jn_node *node);
/* For a call illegal on a capturing stream (synchronize, query, a launch): if s is capturing,
 * invalidates its capture and returns cudaErrorStreamCaptureUnsupported; else cudaSuccess. */
cudaError_t jn_capture_refuse_stream(cudaStream_t s);
/* For a "potentially unsafe" call (see graph.c): cudaErrorStreamCaptureUnsupported, the captures
 * that prohibit it invalidated, or cudaSuccess. */
cudaError_t jn_capture_unsafe_call(void);
/* cudaEventRecord on s: returns 0 when s is not capturing (external, may be NULL, is released);
 * else 1 with *err, the record remembered for waits in the capture and external (when given:
 * cudaEventRecordExternal) appended as a node. */
int jn_capture_event_record(cudaEvent_t e, cudaStream_t s, jn_node *external, cudaError_t *err);
/* cudaStreamWaitEvent: returns 0 when neither s nor e's latest record is in a capture; else 1
 * with *err (a fork, a join, an external wait node, or the capture's errors). */
int jn_capture_event_wait(cudaStream_t s, cudaEvent_t e, jn_node *external, cudaError_t *err);
/* Whether e's latest record was made in an active capture. */
int jn_capture_event_captured(cudaEvent_t e);
/* cudaStreamDestroy / cudaEventDestroy: the handle leaves every capture (a capture losing a
 * stream is invalidated; one losing its origin is dropped). */
void jn_capture_stream_gone(cudaStream_t s);
void jn_capture_event_gone(cudaEvent_t e);

/* ------------------------------------------------------ reduce / dtypes -- */

/* The reduction that jn_reduce runs for a pre-multiplied sum; a resolved operation carries it (and
 * the scalar) instead of the user operator's handle, which may be destroyed once enqueued. */
#define JN_REDOP_PREMUL (-2)

/* Element size of an ncclDataType_t, or 0 if invalid. */
size_t jn_dtype_size(int dtype);
const char *jn_dtype_name(int dtype);
/* out[i] = op over ins[first][i], ins[first + 1][i], ... (ring order, mod n) for i < count, with
 * NCCL's rounding (see reduce.c). out may alias none of ins. op may be JN_REDOP_PREMUL (comm.h):
 * scalar then holds the multiplier's bits in the data type (ignored otherwise). */
void jn_reduce(void *out, const void *const *ins, int n, int first, size_t count, int dtype, int op,
               uint64_t scalar);
/* Scalar conversions (round to nearest even; fp8 saturates to the largest finite value). */
float jn_half_to_float(uint16_t h);
uint16_t jn_float_to_half(float f);
float jn_bf16_to_float(uint16_t h);
uint16_t jn_float_to_bf16(float f);
float jn_fp8e4m3_to_float(uint8_t v);
uint8_t jn_float_to_fp8e4m3(float f);
float jn_fp8e5m2_to_float(uint8_t v);
uint8_t jn_float_to_fp8e5m2(float f);

/* ---------------------------------------------------------- shared memory -- */

/* Every segment starts with this prefix; the creator sets ready once the rest is initialised. */
typedef struct {
  _Atomic uint32_t ready;
  uint32_t pad;
  uint64_t size;
} jn_seg_prefix;

typedef struct jn_seg jn_seg;
struct jn_seg {
  char name[64];
  void *base;
  size_t size;
  int refs; /* process-local users of this mapping */
  jn_seg *next;
};

/*
 * Maps the POSIX shared-memory segment `name`, creating it (O_CREAT|O_EXCL, mode 0600,
 * create_size bytes, init(base, arg) run before it is marked ready) if no other rank has.
 * Ranks in one process share one mapping. Waits at most timeout_ms for a creator in another
 * process to finish initialising. abort_flag (may be NULL) cuts the wait short.
 * On failure returns an NCCL error with a message in err.
 */
/* The machine a rank is on, as NCCL's host hash sees it: NCCL_HOSTID when set (NCCL then takes
 * processes of one machine for separate nodes), else the host name. */
uint64_t jn_host_hash(void);
ncclResult_t jn_seg_attach(const char *name, size_t create_size, void (*init)(void *base, void *arg), void *arg,
                           long timeout_ms, _Atomic int *abort_flag, jn_seg **out, char *err, size_t errlen);
void jn_seg_detach(jn_seg *seg);
void jn_seg_unlink(const char *name);

/*
 * Process-shared, robust mutex, and a process-shared condition made of a futex word. Not a
 * pthread_cond_t: glibc's process-shared condvar keeps waiter state in the shared memory, and a
 * waiter process killed (SIGKILL) inside pthread_cond_timedwait can leave pthread_cond_broadcast
 * blocked forever in every other process. A futex holds no such state: a dead waiter is just gone.
 */
typedef struct {
  _Atomic uint32_t seq; /* bumped by every broadcast; waiters sleep on it (FUTEX_WAIT) */
} jn_pcond;
void jn_pshared_mutex_init(pthread_mutex_t *mu);
void jn_pshared_cond_init(jn_pcond *cv);
/* Wakes every waiter of cv. Call it with the mutex held (that makes waits lost-wake-up-free). */
void jn_pcond_broadcast(jn_pcond *cv);
/* Locks a robust mutex; if its previous owner died, makes it consistent and returns 1. */
int jn_plock(pthread_mutex_t *mu);
void jn_punlock(pthread_mutex_t *mu);
/* Timed wait on cv (mutex held on entry and exit; robust-mutex aware). May wake spuriously. */
void jn_pcond_wait_ms(jn_pcond *cv, pthread_mutex_t *mu, long ms);

#endif /* JNCCL_INTERNAL_H */
