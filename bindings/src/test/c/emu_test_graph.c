/*
 * emu_test_graph.c - stream capture and CUDA graphs: captured copies, memsets, host functions,
 * external event records and waits, cross-stream forks and joins and NCCL operations replayed
 * and checked element by element; the errors of illegal calls during a capture.
 */
#include "emu_test.h"

/* A host function that blocks its stream until the test opens the gate. */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int open, ran;
} gate;

static void gate_init(gate *g) {
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  g->open = g->ran = 0;
}

static void gate_fn(void *arg) {
  gate *g = arg;
  pthread_mutex_lock(&g->mu);
  g->ran++;
  while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
}

static void gate_open(gate *g) {
  pthread_mutex_lock(&g->mu);
  g->open = 1;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

static void gate_destroy(gate *g) {
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->cv);
}

static void count_fn(void *arg) { atomic_fetch_add((atomic_int *)arg, 1); }

static void fill_random(uint32_t *p, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i++) p[i] = (uint32_t)mix(seed * 1000003u + i);
}

static cudaGraphExec_t end_and_instantiate(cudaStream_t s) {
  cudaGraph_t g = NULL;
  cudaGraphExec_t x = NULL;
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&x, g, 0));
  CK(cudaGraphDestroy(g)); /* the executable graph lives on without it, as in CUDA */
  return x;
}

/* Copies and memsets: nothing runs at capture; each launch runs them, in order. */
static void test_capture_copies(void) {
  enum { N = 4096 };
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, JN_cudaStreamNonBlocking));
  uint32_t *src, *mid, *dst, host[N], out[N];
  CK(cudaMalloc((void **)&src, N * 4));
  CK(cudaMalloc((void **)&mid, N * 4));
  CK(cudaMalloc((void **)&dst, N * 4));
  fill_random(host, N, 7);
  CK(cudaMemcpy(dst, host, N * 4, cudaMemcpyHostToDevice)); /* dst starts as a known pattern */
  atomic_int count = 0;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  enum cudaStreamCaptureStatus st;
  CK(cudaStreamIsCapturing(s, &st));
  EXPECT(st == cudaStreamCaptureStatusActive, "capture status %d", (int)st);
  CK(cudaMemcpyAsync(mid, src, N * 4, cudaMemcpyDeviceToDevice, s));
  CK(cudaMemsetAsync(mid, 0x5a, 64, s)); /* overwrites the first 16 elements after the copy */
  CK(cudaMemcpyAsync(dst, mid, N * 4, cudaMemcpyDeviceToDevice, s));
  CK(cudaLaunchHostFunc(s, count_fn, &count));
  cudaGraphExec_t x = end_and_instantiate(s);
  CK(cudaStreamIsCapturing(s, &st));
  EXPECT(st == cudaStreamCaptureStatusNone, "status after the capture %d", (int)st);
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy(out, dst, N * 4, cudaMemcpyDeviceToHost));
  EXPECT(memcmp(out, host, N * 4) == 0, "the capture ran the copies");
  EXPECT(atomic_load(&count) == 0, "the capture ran the host function");
  for (int launch = 1; launch <= 3; launch++) {
    uint32_t in[N];
    fill_random(in, N, 100 + (uint64_t)launch);
    CK(cudaMemcpy(src, in, N * 4, cudaMemcpyHostToDevice));
    CK(cudaGraphLaunch(x, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(out, dst, N * 4, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < N && bad < 3; i++) {
      uint32_t want = i < 16 ? 0x5a5a5a5au : in[i];
      if (out[i] != want) {
        FAILF("launch %d element %d: %08x, expected %08x", launch, i, out[i], want);
        bad++;
      }
    }
    EXPECT(atomic_load(&count) == launch, "host function ran %d times after %d launches", atomic_load(&count), launch);
  }
  CK(cudaGraphExecDestroy(x));
  EXPECT_CUDA(cudaGraphExecDestroy(x), cudaErrorInvalidResourceHandle);
  EXPECT_CUDA(cudaGraphLaunch(x, s), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  CK(cudaFree(src));
  CK(cudaFree(mid));
  CK(cudaFree(dst));
  CK(cudaStreamDestroy(s));
}

typedef struct {
  cudaEvent_t ev;
  cudaError_t out;
} graph_query;

/* Queries an event from a thread of its own (in the default, global, capture mode). */
static void *graph_query_thread(void *p) {
  graph_query *q = p;
  q->out = cudaEventQuery(q->ev);
  return NULL;
}

/* Synchronize / query of the capturing stream: refused, the capture invalidated. */
static void test_capture_illegal(void) {
  cudaStream_t s, s2;
  CK(cudaStreamCreateWithFlags(&s, JN_cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s2, JN_cudaStreamNonBlocking));
  char *buf;
  CK(cudaMalloc((void **)&buf, 256));
  cudaGraph_t g = (cudaGraph_t)0x1;
  enum cudaStreamCaptureStatus st;
  cudaError_t (*illegal[2])(cudaStream_t) = {cudaStreamSynchronize, cudaStreamQuery};
  for (int k = 0; k < 2; k++) {
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    CK(cudaMemsetAsync(buf, 1, 256, s));
    EXPECT_CUDA(illegal[k](s), cudaErrorStreamCaptureUnsupported);
    CK(cudaStreamIsCapturing(s, &st));
    EXPECT(st == cudaStreamCaptureStatusInvalidated, "status %d after an illegal call", (int)st);
    EXPECT_CUDA(cudaMemsetAsync(buf, 2, 256, s), cudaErrorStreamCaptureInvalidated);
    EXPECT_CUDA(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    EXPECT(g == NULL, "an invalidated capture gave a graph");
    CK(cudaStreamSynchronize(s)); /* usable again */
  }
  /* Thread-local mode: this thread's queries are prohibited, even of an unrelated event. */
  cudaEvent_t other;
  CK(cudaEventCreateWithFlags(&other, JN_cudaEventDisableTiming));
  CK(cudaEventRecord(other, s2));
  CK(cudaStreamSynchronize(s2)); /* complete: its queries answer cudaSuccess when allowed */
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  EXPECT_CUDA(cudaEventQuery(other), cudaErrorStreamCaptureUnsupported);
  EXPECT_CUDA(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  /* Relaxed: allowed; an event recorded in the capture cannot be queried (cudaErrorCapturedEvent). */
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, JN_cudaEventDisableTiming));
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  CK(cudaEventQuery(other));
  CK(cudaEventRecord(ev, s));
  EXPECT_CUDA(cudaEventQuery(ev), cudaErrorCapturedEvent);
  EXPECT_CUDA(cudaEventSynchronize(ev), cudaErrorCapturedEvent);
  /* A wait on work outside the capture: isolation error, unless external. */
  CK(cudaStreamWaitEvent(s, other, JN_cudaEventWaitExternal));
  EXPECT_CUDA(cudaStreamWaitEvent(s, other, 0), cudaErrorStreamCaptureIsolation);
  EXPECT_CUDA(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  CK(cudaEventQuery(ev)); /* the capture ended: the event is as before it (never recorded) */
  /* Misuse of the capture calls. */
  EXPECT_CUDA(cudaStreamEndCapture(s, &g), cudaErrorIllegalState);
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  EXPECT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaErrorIllegalState);
  EXPECT_CUDA(cudaGraphLaunch(NULL, s), cudaErrorStreamCaptureUnsupported); /* no child graphs */
  EXPECT_CUDA(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  EXPECT_CUDA(cudaStreamBeginCapture(NULL, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
  EXPECT_CUDA(cudaStreamBeginCapture(s, (enum cudaStreamCaptureMode)3), cudaErrorInvalidValue);
  /* Global mode: a query from another thread (global mode too) invalidates it; thread-local does not. */
  for (int mode = 0; mode < 2; mode++) {
    CK(cudaStreamBeginCapture(s, mode == 0 ? cudaStreamCaptureModeGlobal : cudaStreamCaptureModeThreadLocal));
    pthread_t t;
    graph_query q = {other, cudaSuccess};
    pthread_create(&t, NULL, graph_query_thread, &q);
    pthread_join(t, NULL);
    cudaError_t from_thread = q.out;
    EXPECT(from_thread == (mode == 0 ? cudaErrorStreamCaptureUnsupported : cudaSuccess),
           "query from another thread during a %s capture: %d", mode == 0 ? "global" : "thread-local",
           (int)from_thread);
    cudaGraph_t g2 = NULL;
    cudaError_t e = cudaStreamEndCapture(s, &g2);
    EXPECT(e == (mode == 0 ? cudaErrorStreamCaptureInvalidated : cudaSuccess), "end capture %d", (int)e);
    if (g2 != NULL) CK(cudaGraphDestroy(g2));
  }
  enum cudaStreamCaptureMode prev = cudaStreamCaptureModeRelaxed;
  CK(cudaThreadExchangeStreamCaptureMode(&prev));
  EXPECT(prev == cudaStreamCaptureModeGlobal, "default thread mode %d", (int)prev);
  CK(cudaThreadExchangeStreamCaptureMode(&prev));
  EXPECT(prev == cudaStreamCaptureModeRelaxed, "exchanged mode %d", (int)prev);
  cudaGraphExec_t x;
  EXPECT_CUDA(cudaGraphInstantiate(&x, (cudaGraph_t)&prev, 0), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  CK(cudaEventDestroy(ev));
  CK(cudaEventDestroy(other));
  CK(cudaFree(buf));
  CK(cudaStreamDestroy(s));
  CK(cudaStreamDestroy(s2));
}

/* A fork to a second stream and the join back; an unjoined fork. External record and wait. */
static void test_capture_fork_join_external(void) {
  enum { N = 1024 };
  cudaStream_t s, s2, s3;
  CK(cudaStreamCreateWithFlags(&s, JN_cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s2, JN_cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s3, JN_cudaStreamNonBlocking));
  uint32_t *a, *b, host[N], out[N];
  CK(cudaMalloc((void **)&a, N * 4));
  CK(cudaMalloc((void **)&b, N * 4));
  cudaEvent_t fork, join, outside, done;
  CK(cudaEventCreateWithFlags(&fork, JN_cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&join, JN_cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&outside, JN_cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&done, JN_cudaEventDisableTiming));
  /* s: wait(outside, external); copy a->b on s2 (forked); s joins; record done (external). */
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  CK(cudaStreamWaitEvent(s, outside, JN_cudaEventWaitExternal));
  CK(cudaEventRecord(fork, s));
  CK(cudaStreamWaitEvent(s2, fork, 0));
  enum cudaStreamCaptureStatus st;
  CK(cudaStreamIsCapturing(s2, &st));
  EXPECT(st == cudaStreamCaptureStatusActive, "the forked stream does not capture (%d)", (int)st);
  CK(cudaMemcpyAsync(b, a, N * 4, cudaMemcpyDeviceToDevice, s2));
  CK(cudaEventRecord(join, s2));
  CK(cudaStreamWaitEvent(s, join, 0));
  CK(cudaEventRecordWithFlags(done, s, JN_cudaEventRecordExternal));
  EXPECT_CUDA(cudaStreamEndCapture(s2, &(cudaGraph_t){0}), cudaErrorStreamCaptureUnmatched);
  cudaGraph_t g = NULL;
  EXPECT_CUDA(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated); /* the unmatched end */
  (void)cudaGetLastError();
  /* again, ended where it began */
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  CK(cudaStreamWaitEvent(s, outside, JN_cudaEventWaitExternal));
  CK(cudaEventRecord(fork, s));
  CK(cudaStreamWaitEvent(s2, fork, 0));
  CK(cudaMemcpyAsync(b, a, N * 4, cudaMemcpyDeviceToDevice, s2));
  CK(cudaEventRecord(join, s2));
  CK(cudaStreamWaitEvent(s, join, 0));
  CK(cudaEventRecordWithFlags(done, s, JN_cudaEventRecordExternal));
  cudaGraphExec_t x = end_and_instantiate(s);
  CK(cudaStreamIsCapturing(s2, &st));
  EXPECT(st == cudaStreamCaptureStatusNone, "the forked stream still captures (%d)", (int)st);
  for (int launch = 0; launch < 3; launch++) {
    fill_random(host, N, 500 + (uint64_t)launch);
    CK(cudaMemcpy(a, host, N * 4, cudaMemcpyHostToDevice));
    gate gt;
    gate_init(&gt);
    CK(cudaLaunchHostFunc(s3, gate_fn, &gt)); /* `outside` completes only when the gate opens */
    CK(cudaEventRecord(outside, s3));
    CK(cudaGraphLaunch(x, s));
    sleep_ms(20);
    EXPECT_CUDA(cudaEventQuery(done), cudaErrorNotReady); /* the external wait holds the graph */
    gate_open(&gt);
    CK(cudaEventSynchronize(done)); /* recorded by the launch */
    CK(cudaMemcpy(out, b, N * 4, cudaMemcpyDeviceToHost));
    EXPECT(memcmp(out, host, N * 4) == 0, "launch %d: forked copy wrong", launch);
    CK(cudaStreamSynchronize(s3));
    gate_destroy(&gt);
  }
  CK(cudaGraphExecDestroy(x));
  /* An unjoined fork. */
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  CK(cudaEventRecord(fork, s));
  CK(cudaStreamWaitEvent(s2, fork, 0));
  CK(cudaMemsetAsync(b, 0, N * 4, s2));
  g = (cudaGraph_t)0x1;
  EXPECT_CUDA(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureUnjoined);
  EXPECT(g == NULL, "an unjoined capture gave a graph");
  CK(cudaStreamIsCapturing(s2, &st));
  EXPECT(st == cudaStreamCaptureStatusNone, "the unjoined stream still captures (%d)", (int)st);
  /* Two captures cannot merge. */
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  CK(cudaStreamBeginCapture(s2, cudaStreamCaptureModeRelaxed));
  CK(cudaEventRecord(fork, s));
  EXPECT_CUDA(cudaStreamWaitEvent(s2, fork, 0), cudaErrorStreamCaptureMerge);
  EXPECT_CUDA(cudaStreamEndCapture(s2, &g), cudaErrorStreamCaptureInvalidated);
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphDestroy(g));
  EXPECT_CUDA(cudaGraphDestroy(g), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  /* A destroyed origin drops its capture; a destroyed fork invalidates it. */
  CK(cudaStreamBeginCapture(s3, cudaStreamCaptureModeRelaxed));
  CK(cudaStreamDestroy(s3));
  CK(cudaStreamCreateWithFlags(&s3, JN_cudaStreamNonBlocking));
  CK(cudaStreamIsCapturing(s3, &st));
  EXPECT(st == cudaStreamCaptureStatusNone, "a new stream captures (%d)", (int)st);
  CK(cudaEventDestroy(fork));
  CK(cudaEventDestroy(join));
  CK(cudaEventDestroy(outside));
  CK(cudaEventDestroy(done));
  CK(cudaFree(a));
  CK(cudaFree(b));
  CK(cudaStreamDestroy(s));
  CK(cudaStreamDestroy(s2));
  CK(cudaStreamDestroy(s3));
}

/* A world-1 NCCL group (reduce-scatter + all-gather) captured and replayed with new data. */
static void test_capture_nccl(void) {
  enum { N = 2048 };
  ncclComm_t comm;
  int dev = 0;
  NK(ncclCommInitAll(&comm, 1, &dev));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, JN_cudaStreamNonBlocking));
  float *buf, *ar, host[N], out[N];
  CK(cudaMalloc((void **)&buf, N * 4));
  CK(cudaMalloc((void **)&ar, N * 4));
  for (int i = 0; i < N; i++) host[i] = (float)(mix((uint64_t)i) % 1000) / 8.0f;
  CK(cudaMemcpy(buf, host, N * 4, cudaMemcpyHostToDevice));
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  NK(ncclGroupStart());
  NK(ncclReduceScatter(buf, buf, N, ncclFloat32, ncclSum, comm, s));
  NK(ncclAllGather(buf, buf, N, ncclFloat32, comm, s));
  NK(ncclGroupEnd());
  NK(ncclAllReduce(buf, ar, N, ncclFloat32, ncclMax, comm, s));
  cudaGraphExec_t x = end_and_instantiate(s);
  CK(cudaMemcpy(out, ar, N * 4, cudaMemcpyDeviceToHost)); /* nothing ran: ar is whatever it was */
  for (int launch = 0; launch < 4; launch++) {
    for (int i = 0; i < N; i++) host[i] = (float)(mix((uint64_t)(launch * N + i)) % 4096) / 16.0f - 100.0f;
    CK(cudaMemcpy(buf, host, N * 4, cudaMemcpyHostToDevice));
    memset(out, 0, sizeof out);
    CK(cudaMemcpy(ar, out, N * 4, cudaMemcpyHostToDevice));
    CK(cudaGraphLaunch(x, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(out, ar, N * 4, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < N && bad < 3; i++) /* world 1: every collective is the identity */
      if (out[i] != host[i]) {
        FAILF("launch %d element %d: %g, expected %g", launch, i, out[i], host[i]);
        bad++;
      }
    ncclResult_t ae;
    NK(ncclCommGetAsyncError(comm, &ae));
    EXPECT(ae == ncclSuccess, "async error %d after launch %d", (int)ae, launch);
  }
  /* A destroyed communicator: the launch fails instead of using a freed one. */
  NK(ncclCommDestroy(comm));
  EXPECT_CUDA(cudaGraphLaunch(x, s), cudaErrorIllegalState);
  (void)cudaGetLastError();
  CK(cudaGraphExecDestroy(x));
  CK(cudaFree(buf));
  CK(cudaFree(ar));
  CK(cudaStreamDestroy(s));
}

/* Launches of one executable graph are ordered, even on different streams. */
static void test_launch_order(void) {
  cudaStream_t s, s2;
  CK(cudaStreamCreateWithFlags(&s, JN_cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s2, JN_cudaStreamNonBlocking));
  gate gt;
  gate_init(&gt);
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  CK(cudaLaunchHostFunc(s, gate_fn, &gt));
  cudaGraphExec_t x = end_and_instantiate(s);
  CK(cudaGraphLaunch(x, s));
  CK(cudaGraphLaunch(x, s2)); /* waits for the first launch, which waits for the gate */
  /* The first launch's host call starts when its stream thread gets a core, which on a loaded machine
   * under a sanitizer can take far longer than a fixed pause: wait for it (bounded), then give a
   * wrongly unordered second launch time to run too. */
  int ran = 0;
  for (int waited = 0; waited < 10000 && ran == 0; waited += 5) {
    pthread_mutex_lock(&gt.mu);
    ran = gt.ran;
    pthread_mutex_unlock(&gt.mu);
    if (ran == 0) sleep_ms(5);
  }
  sleep_ms(30);
  pthread_mutex_lock(&gt.mu);
  ran = gt.ran;
  pthread_mutex_unlock(&gt.mu);
  EXPECT(ran == 1, "the second launch ran before the first finished (%d host calls)", ran);
  EXPECT_CUDA(cudaStreamQuery(s2), cudaErrorNotReady);
  gate_open(&gt);
  CK(cudaStreamSynchronize(s2));
  EXPECT(gt.ran == 2, "%d host calls after two launches", gt.ran);
  CK(cudaGraphExecDestroy(x));
  gate_destroy(&gt);
  CK(cudaStreamDestroy(s));
  CK(cudaStreamDestroy(s2));
}

void test_graphs(void) {
  test_launch_order();
  test_capture_copies();
  test_capture_illegal();
  test_capture_fork_join_external();
  test_capture_nccl();
  printf("  stream capture and graphs ok\n");
}
