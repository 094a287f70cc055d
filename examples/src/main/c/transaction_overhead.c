/*
 * transaction_overhead.c - host cost of jnccl's native calls, made from C: the baseline of
 * dev.jnccl.examples.bench.HostCostBenchmark (JMH) and of MultiRankHostCost. Small tensors; world
 * size 1 by default, or one rank of W processes (--world W --rank R --id-file F: rank 0 writes each
 * communicator's ncclUniqueId to F.<n> atomically, by writing F.<n>.tmp and renaming it, the
 * others poll for it; rank 0 removes the file once all ranks have joined), or all W ranks as threads
 * of this process (--threads W: jnccl's threads mode, the C side of ThreadsHostCost). With --threads
 * each pthread is one rank on the same device (-d), makes its own ncclCommInitRankConfig with the
 * unique id thread 0 made (as jnccl's ThreadsCommunicators does), and runs every case on its own
 * communicator, streams, events and buffer; the threads meet at a barrier (deadline 120 s) before
 * the warm-up and before every timed repetition, so that the ranks' repetitions overlap. Several
 * ranks of one process on one GPU need NCCL 2.30+ with NCCL_MULTI_RANK_GPU_ENABLE=1 (the emulation
 * follows the same variable); NCCL 2.28 refuses with "Duplicate GPU detected".
 *
 * Communicators (-m): blocking, nonblocking, split (jnccl's default CommunicatorMode.BLOCKING_SPLIT:
 * a non-blocking parent, split with ncclCommSplit(parent, 0, rank, &child, {blocking = 1,
 * splitShare = 1}); the child handle appears once the parent's async state leaves ncclInProgress;
 * the work runs on the blocking child), both (= blocking + nonblocking), all (the three).
 *
 * Cases (each with every communicator chosen):
 *   transaction         cudaStreamWaitEvent(comms, ready) + ncclGroupStart + ncclReduceScatter (in
 *                       place) + ncclAllGather (in place) + ncclGroupEnd + cudaEventRecord(signal, comms)
 *   all_reduce          ncclAllReduce (in place) alone on the comms stream
 *   all_reduce_ordered  the native calls of jnccl's comm.allReduce(t, SUM, compute):
 *                       cudaEventRecord(e1, compute) + cudaStreamWaitEvent(comms, e1) + ncclGroupStart
 *                       + ncclAllReduce + ncclGroupEnd + cudaEventRecord(e2, comms)
 *                       + cudaStreamWaitEvent(compute, e2)
 *   reduce_scatter_ordered, broadcast_ordered, all_to_all_ordered, reduce_mean_ordered,
 *   reduce_max_ordered, reduce_norm_squared_ordered
 *                       the same ordering around the native calls of jnccl's other convenience
 *                       operations (comm.reduceScatter(t, compute), broadcast(t, 0, compute),
 *                       allToAll(send, recv, compute), reduceMean, reduceMax, reduceNormSquared):
 *                       ncclReduceScatter (in place, sum); ncclBroadcast (in place, root 0);
 *                       ncclAlltoAll (buffer -> src, COUNT / W per peer; before NCCL 2.28 an
 *                       ncclSend + ncclRecv per peer, as jnccl); ncclAllReduce (in place) with
 *                       ncclAvg (ncclSum at world size 1, as jnccl), with ncclMax, and with ncclSum
 *                       on one element
 *   graph_step_eager    one training step of K transactions (--graph-transactions, one RESULT line
 *                       per K, with a k= field), the native calls of jnccl's
 *                       HostCostBenchmark.graphStepEager: K times cudaEventRecord(ready, compute) +
 *                       cudaStreamWaitEvent(comms, ready) + ncclGroupStart + ncclReduceScatter (out
 *                       of place, src -> part) + ncclAllGather (part -> buffer) + ncclGroupEnd, then
 *                       (jnccl's waitOnComms)
 *                       cudaEventRecord(done, comms) + cudaStreamWaitEvent(compute, done). As in
 *                       jnccl, one ready event serves all K transactions (comm.begin(compute) records
 *                       the communicator's one ready event) and the transactions record no signal
 *                       (execute(null)): the step's only signal is done.
 *   graph_replay        the same step captured once, before the timing, on the compute stream
 *                       (cudaStreamBeginCapture in cudaStreamCaptureModeThreadLocal, as jnccl's
 *                       CudaGraph.capture; cudaStreamEndCapture, cudaGraphInstantiate with no flags,
 *                       cudaGraphDestroy), then one cudaGraphLaunch(exec, compute) per step: what
 *                       CUDA itself charges to replay the step, the baseline of jnccl's graphReplay
 *                       (comm.launch(graph, compute)). C's figure includes that one call and nothing
 *                       else: no ordering with a comms stream, no tracking.
 *   graph_replay_ordered the same launch plus the native call jnccl's graphReplay makes with it
 *                       when its loop replays on one stream: cudaGraphLaunch(exec, compute) +
 *                       cudaEventRecord(done, compute) (jnccl's comms stream waits for done only
 *                       before its next work, in that loop the watchdog's probe once per interval,
 *                       so that the communicator's later work and the probes come after the
 *                       replay); jnccl over this case is jnccl's own Java cost, this case over
 *                       graph_replay what the ordering costs.
 * The graph cases score per step, not per transaction, as JMH does; they run with every communicator
 * chosen (-m) like the others.
 * On a non-blocking communicator ncclGroupEnd / an ungrouped collective may return ncclInProgress
 * (at world size > 1 NCCL 2.28 launches the group from a thread it creates per group; at world
 * size 1 it issues the collectives at once and returns ncclSuccess); the program then busy-polls
 * ncclCommGetAsyncError until ncclSuccess, as jnccl does, before going on.
 * Every call's result is checked. The comms stream is synchronized after every 256th operation,
 * inside the timed loop, exactly as in the JMH benchmark, so the device queue stays bounded. An
 * operation of the graph cases is a whole step (JMH's QueueBound ticks once per benchmark call, i.e.
 * per step too): graph_step_eager synchronizes the comms stream, where its collectives run,
 * graph_replay and graph_replay_ordered the compute stream, which their launches run on (as jnccl's
 * graphReplay, which launches on the compute stream and synchronizes that one); at K = 32 the device queue then holds up to 256 steps of
 * 64 collectives, so CUDA's own launch queue may hold the host back as well, alike in C and JMH.
 *
 * Timing: clock_gettime(CLOCK_MONOTONIC) around REPS repetitions of ITERS operations after a
 * warmup; the median of the repetitions is reported, one parseable line per case:
 *   RESULT case=transaction comm=nonblocking launch=process world=1 rank=0 median_us=5.912 min_us=5.870
 *          max_us=6.101 enqueue_median_us=5.801 enqueue_min_us=5.790 iters=100000 reps=5 warmup_us=6.020
 *          samples_us=5.912,...
 * (one line; launch=threads with --threads; min_us / enqueue_min_us: the best repetition). median_us includes the synchronizations, as the JMH figures do; enqueue_median_us
 * leaves out the time spent in them: when the two differ much, the device (or the emulation's
 * stream threads), not the host, set the pace. ITERS is lowered, in multiples of 256, when one
 * repetition would take longer than -t seconds.
 *
 * Build on a GPU machine (same shared libcudart that jnccl loads):
 *   nvcc -O2 -cudart shared -o /tmp/transaction_overhead examples/src/main/c/transaction_overhead.c -lnccl
 * or: gcc -O2 -I/usr/local/cuda/include -o /tmp/transaction_overhead transaction_overhead.c \
 *       -L/usr/local/cuda/lib64 -lcudart -lnccl
 * Against jnccl's host emulation (no GPU; nccl.h from e.g. /opt/headers):
 *   gcc -O2 -I/opt/headers -I/usr/local/cuda/include -o /tmp/transaction_overhead_host \
 *       transaction_overhead.c -L<dir of libjnccl_host.so> -l:libjnccl_host.so -Wl,-rpath,<that dir>
 *
 * Usage: transaction_overhead [-n ITERS] [-r REPS] [-w WARMUP] [-t MAX_SECONDS_PER_REP]
 *                             [-c COUNT] [-m MODE[,MODE...]: both|all|blocking|nonblocking|split|splitnoshare|splitbparent] [-d DEVICE]
 *                             [--cases LIST] [--graph-transactions K,...]
 *                             [--world W --rank R --id-file FILE | --threads W]
 * (--cases: default transaction,all_reduce,all_reduce_ordered; the other cases and the graph cases
 *  run only when named; an unknown name is refused.
 *  --graph-transactions: the step sizes of the graph cases, default 1,8,32.)
 * (the build lines above need -lpthread, or -pthread with gcc, on a glibc older than 2.34)
 */
#define _POSIX_C_SOURCE 200809L
#ifdef JNCCL_HOST_ABI
/* Built against jnccl's host emulation without NVIDIA's headers: its own declarations of the same
 * ABI (bindings/src/main/c/jnccl_abi.h), plus the macros of the real headers used here. */
#include "jnccl_abi.h"
#define cudaStreamNonBlocking JN_cudaStreamNonBlocking
#define cudaEventDisableTiming JN_cudaEventDisableTiming
#define cudaStreamCaptureModeThreadLocal JN_cudaStreamCaptureModeThreadLocal
#define NCCL_CONFIG_UNDEF_INT JN_NCCL_CONFIG_UNDEF_INT
#define NCCL_CONFIG_INITIALIZER                                                                       \
  {sizeof(ncclConfig_t), JN_NCCL_CONFIG_MAGIC, JNCCL_NCCL_VERSION_CODE, NCCL_CONFIG_UNDEF_INT,         \
   NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NULL, NCCL_CONFIG_UNDEF_INT,     \
   NCCL_CONFIG_UNDEF_INT, NULL, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,     \
   NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT}
#else
#include <cuda_runtime.h>
#include <nccl.h>
#endif
#if defined(JNCCL_HOST_ABI) /* the emulation follows NCCL 2.28.3 */
#define HAS_NCCL_ALLTOALL 1
#elif NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
#define HAS_NCCL_ALLTOALL 1
#else
#define HAS_NCCL_ALLTOALL 0
#endif
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SYNC_EVERY 256 /* a power of two, as HostCostBenchmark.SYNC_EVERY */

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause() /* what Thread.onSpinWait() emits on x86 */
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

#define CUDA_CHECK(call)                                                                    \
  do {                                                                                      \
    cudaError_t e_ = (call);                                                                \
    if (e_ != cudaSuccess) {                                                                \
      fprintf(stderr, "%s:%d: %s failed: %s (%d)\n", __FILE__, __LINE__, #call,             \
              cudaGetErrorString(e_), (int)e_);                                             \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

#define NCCL_CHECK(call)                                                                    \
  do {                                                                                      \
    ncclResult_t r_ = (call);                                                               \
    if (r_ != ncclSuccess) {                                                                \
      fprintf(stderr, "%s:%d: %s failed: %s (%d)\n", __FILE__, __LINE__, #call,             \
              ncclGetErrorString(r_), (int)r_);                                             \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

/* splitnoshare and splitbparent take jnccl's split apart: the same child without shared resources
 * (splitShare = 0), and the same child of a blocking parent; which of the two costs the split child
 * its extra host time against a plain blocking communicator. */
enum { COMM_NONBLOCKING = 0, COMM_BLOCKING = 1, COMM_SPLIT = 2, COMM_SPLIT_NOSHARE = 3, COMM_SPLIT_BPARENT = 4, COMM_KINDS = 5 };
static const char *COMM_NAMES[] = {"nonblocking", "blocking", "split", "splitnoshare", "splitbparent"};

/* --threads: what the rank threads of this process share. */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int waiting;           /* threads at the barrier now */
  unsigned long passed;  /* barriers completed: a waiter leaves when it changes */
  ncclUniqueId id;       /* the next communicator's unique id, made by thread 0 */
} shared_t;

/* Who this rank is; one per process, or one per thread with --threads (no global rank state). */
typedef struct {
  int world, rank;
  const char *id_file; /* --world W > 1: how the processes exchange unique ids */
  int comm_seq;        /* communicators created so far: names the id file of the next one */
  shared_t *shared;    /* --threads: the process's rank threads; NULL otherwise */
} rank_t;

/* What every rank runs: the same for all ranks of a world (their collectives must match). */
typedef struct {
  long iterations, warmup;
  int reps, device;
  size_t count;
  double maxSeconds;
  const char *cases;
  int modes[COMM_KINDS], nmodes;
  int graphSteps[16], ngraphSteps; /* --graph-transactions: K of each graph case's RESULT line */
} plan_t;

/* -m: adds a communicator kind once (a list may name it twice, e.g. -m both,blocking). */
static void add_mode(plan_t *plan, int kind) {
  for (int m = 0; m < plan->nmodes; m++) {
    if (plan->modes[m] == kind) return;
  }
  plan->modes[plan->nmodes++] = kind;
}

typedef struct {
  rank_t *self;
  int blocking;
  int kind;          /* COMM_* */
  ncclComm_t comm;   /* the communicator the work runs on */
  ncclComm_t parent; /* COMM_SPLIT: the non-blocking parent */
  cudaStream_t comms;   /* the communicator's comms stream */
  cudaStream_t compute; /* the "training" stream the ready event was recorded on */
  cudaEvent_t ready;
  cudaEvent_t signal;
  cudaEvent_t ready2; /* all_reduce_ordered, graph cases: recorded on compute, waited for by comms */
  cudaEvent_t done;   /* all_reduce_ordered, graph cases: recorded on comms, waited for by compute */
  float *buffer;
  float *shard; /* this rank's shard of buffer: all of it at world size 1 */
  float *src;   /* graph cases: the reduce-scatter's input (count), out of place */
  float *part;  /* graph cases: the reduce-scatter's output and the all-gather's input (shardCount) */
  size_t count;
  size_t shardCount;
  unsigned long operations;
  double syncSeconds; /* time spent in the every-256th synchronization */
  int k;                  /* graph cases: transactions per step; 0 for the others */
  cudaGraphExec_t graph;  /* graph_replay: the captured step */
} bench_t;

typedef void (*op_fn)(bench_t *);

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --threads: waits until every rank thread of the process has arrived (nothing without --threads).
 * A deadline instead of pthread_barrier_wait: a rank stuck inside NCCL ends the program, not hangs it. */
static void rendezvous(rank_t *self, const char *where) {
  shared_t *s = self->shared;
  if (s == NULL) return;
  pthread_mutex_lock(&s->mu);
  unsigned long generation = s->passed;
  if (++s->waiting == self->world) {
    s->waiting = 0;
    s->passed++;
    pthread_cond_broadcast(&s->cv);
  } else {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 120;
    while (s->passed == generation) {
      if (pthread_cond_timedwait(&s->cv, &s->mu, &deadline) == ETIMEDOUT && s->passed == generation) {
        fprintf(stderr, "rank %d: %d of %d rank threads at the barrier (%s) after 120 s\n", self->rank, s->waiting,
                self->world, where);
        exit(1);
      }
    }
  }
  pthread_mutex_unlock(&s->mu);
}

/* Non-blocking communicator: wait until the last call's asynchronous part has finished. */
static void await_handle(ncclComm_t comm, const char *what) {
  ncclResult_t state;
  for (;;) {
    NCCL_CHECK(ncclCommGetAsyncError(comm, &state));
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) {
      fprintf(stderr, "%s failed asynchronously: %s (%d)\n", what, ncclGetErrorString(state), (int)state);
      exit(1);
    }
    CPU_RELAX();
  }
}

static void await_comm(bench_t *b, const char *what) { await_handle(b->comm, what); }

/* The result of ncclGroupEnd or of an ungrouped collective. */
static inline void ended(bench_t *b, ncclResult_t result, const char *what) {
  if (result == ncclInProgress) {
    await_comm(b, what);
  } else if (result != ncclSuccess) {
    fprintf(stderr, "%s failed: %s (%d)\n", what, ncclGetErrorString(result), (int)result);
    exit(1);
  }
}

/* Synchronizes stream after every SYNC_EVERY-th operation (the queue bound of the timed loops). */
static inline void bound_stream(bench_t *b, cudaStream_t stream) {
  if ((++b->operations & (SYNC_EVERY - 1)) == 0) {
    double start = now_seconds();
    CUDA_CHECK(cudaStreamSynchronize(stream));
    b->syncSeconds += now_seconds() - start;
  }
}

static inline void bound(bench_t *b) { bound_stream(b, b->comms); }

/* A transaction's collectives: an in-place reduce-scatter and all-gather in one group, on the comms stream. */
static inline void reduce_scatter_all_gather(bench_t *b) {
  NCCL_CHECK(ncclGroupStart());
  NCCL_CHECK(ncclReduceScatter(b->buffer, b->shard, b->shardCount, ncclFloat32, ncclSum, b->comm, b->comms));
  NCCL_CHECK(ncclAllGather(b->shard, b->buffer, b->shardCount, ncclFloat32, b->comm, b->comms));
  ended(b, ncclGroupEnd(), "ncclGroupEnd");
}

static void transaction(bench_t *b) {
  CUDA_CHECK(cudaStreamWaitEvent(b->comms, b->ready, 0));
  reduce_scatter_all_gather(b);
  CUDA_CHECK(cudaEventRecord(b->signal, b->comms));
  bound(b);
}

static void all_reduce(bench_t *b) {
  ended(b, ncclAllReduce(b->buffer, b->buffer, b->count, ncclFloat32, ncclSum, b->comm, b->comms), "ncclAllReduce");
  bound(b);
}

/* What every convenience operation of jnccl does around its collective (comm.x(..., compute)): the
 * comms stream waits for the compute stream's work so far, the collective runs in a group of its
 * own, then the compute stream waits for it. */
static inline void begin_ordered(bench_t *b) {
  CUDA_CHECK(cudaEventRecord(b->ready2, b->compute));
  CUDA_CHECK(cudaStreamWaitEvent(b->comms, b->ready2, 0));
  NCCL_CHECK(ncclGroupStart());
}

static inline void end_ordered(bench_t *b) {
  ended(b, ncclGroupEnd(), "ncclGroupEnd");
  CUDA_CHECK(cudaEventRecord(b->done, b->comms));
  CUDA_CHECK(cudaStreamWaitEvent(b->compute, b->done, 0));
  bound(b);
}

/* An ordered in-place all-reduce of count elements of buffer with op. */
static inline void all_reduce_ordered_with(bench_t *b, size_t count, ncclRedOp_t op) {
  begin_ordered(b);
  NCCL_CHECK(ncclAllReduce(b->buffer, b->buffer, count, ncclFloat32, op, b->comm, b->comms));
  end_ordered(b);
}

/* jnccl's comm.allReduce(tensor, SUM, compute): the same native calls, ordering included. */
static void all_reduce_ordered(bench_t *b) { all_reduce_ordered_with(b, b->count, ncclSum); }

/* comm.reduceScatter(tensor, compute): in place (the receive buffer is this rank's shard). */
static void reduce_scatter_ordered(bench_t *b) {
  begin_ordered(b);
  NCCL_CHECK(ncclReduceScatter(b->buffer, b->shard, b->shardCount, ncclFloat32, ncclSum, b->comm, b->comms));
  end_ordered(b);
}

/* comm.broadcast(tensor, 0, compute): in place, from rank 0. */
static void broadcast_ordered(bench_t *b) {
  begin_ordered(b);
  NCCL_CHECK(ncclBroadcast(b->buffer, b->buffer, b->count, ncclFloat32, 0, b->comm, b->comms));
  end_ordered(b);
}

/* comm.allToAll(send, recv, compute): buffer -> src (count elements each, count / W per peer).
 * jnccl calls ncclAlltoAll where the library has it (NCCL 2.28+), else a send and a receive per
 * peer in the same group; this program decides by the header it was built against. */
static void all_to_all_ordered(bench_t *b) {
  begin_ordered(b);
#if HAS_NCCL_ALLTOALL
  NCCL_CHECK(ncclAlltoAll(b->buffer, b->src, b->shardCount, ncclFloat32, b->comm, b->comms));
#else
  for (int peer = 0; peer < b->self->world; peer++) {
    NCCL_CHECK(ncclSend(b->buffer + (size_t)peer * b->shardCount, b->shardCount, ncclFloat32, peer, b->comm, b->comms));
    NCCL_CHECK(ncclRecv(b->src + (size_t)peer * b->shardCount, b->shardCount, ncclFloat32, peer, b->comm, b->comms));
  }
#endif
  end_ordered(b);
}

/* comm.reduceMean(tensor, compute): ncclAvg, or ncclSum at world size 1 (jnccl's choice there). */
static void reduce_mean_ordered(bench_t *b) {
  all_reduce_ordered_with(b, b->count, b->self->world == 1 ? ncclSum : ncclAvg);
}

/* comm.reduceMax(tensor, compute). */
static void reduce_max_ordered(bench_t *b) { all_reduce_ordered_with(b, b->count, ncclMax); }

/* comm.reduceNormSquared(value, compute): a sum of one FP32 element. */
static void reduce_norm_squared_ordered(bench_t *b) { all_reduce_ordered_with(b, 1, ncclSum); }

/* One step of K transactions begun on the compute stream, which then waits for them: the native
 * calls of jnccl's HostCostBenchmark.step (comm.begin(compute)...execute(null), K times, then
 * comm.waitOnComms(compute)). Enqueued, or captured when the compute stream captures. */
static void enqueue_step(bench_t *b) {
  for (int i = 0; i < b->k; i++) {
    CUDA_CHECK(cudaEventRecord(b->ready2, b->compute));
    CUDA_CHECK(cudaStreamWaitEvent(b->comms, b->ready2, 0));
    /* Out of place: in place on one rank NCCL enqueues nothing, and the graph would be empty. */
    NCCL_CHECK(ncclGroupStart());
    NCCL_CHECK(ncclReduceScatter(b->src, b->part, b->shardCount, ncclFloat32, ncclSum, b->comm, b->comms));
    NCCL_CHECK(ncclAllGather(b->part, b->buffer, b->shardCount, ncclFloat32, b->comm, b->comms));
    ended(b, ncclGroupEnd(), "ncclGroupEnd");
  }
  CUDA_CHECK(cudaEventRecord(b->done, b->comms));
  CUDA_CHECK(cudaStreamWaitEvent(b->compute, b->done, 0));
}

static void graph_step_eager(bench_t *b) {
  enqueue_step(b);
  bound_stream(b, b->comms);
}

static void graph_replay(bench_t *b) {
  CUDA_CHECK(cudaGraphLaunch(b->graph, b->compute));
  bound_stream(b, b->compute);
}

/* jnccl's comm.launch(graph, compute) in a loop on one stream: the launch, then the event the comms
 * stream waits for before its next work (the compute stream's wait for the comms stream is skipped:
 * nothing ran there since the last replay). */
static void graph_replay_ordered(bench_t *b) {
  CUDA_CHECK(cudaGraphLaunch(b->graph, b->compute));
  CUDA_CHECK(cudaEventRecord(b->done, b->compute));
  bound_stream(b, b->compute);
}

/* graph_replay, graph_replay_ordered: captures the step into b->graph, as jnccl's CudaGraph.capture does. */
static void capture_step(bench_t *b) {
  cudaGraph_t graph = NULL;
  CUDA_CHECK(cudaStreamBeginCapture(b->compute, cudaStreamCaptureModeThreadLocal));
  enqueue_step(b);
  CUDA_CHECK(cudaStreamEndCapture(b->compute, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&b->graph, graph, 0));
  CUDA_CHECK(cudaGraphDestroy(graph)); /* the executable graph does not need it */
}

/* The unique id of the next communicator: made by rank 0 (whose process hosts NCCL's bootstrap
 * listener), handed to the others through the id file; world size 1 needs no file. */
static ncclUniqueId next_unique_id(rank_t *self, char *path, size_t path_size) {
  ncclUniqueId id;
  path[0] = '\0';
  int seq = self->comm_seq++;
  if (self->shared != NULL) { /* threads of one process: thread 0 makes it, the others copy it */
    if (self->rank == 0) NCCL_CHECK(ncclGetUniqueId(&self->shared->id));
    rendezvous(self, "unique id made");
    id = self->shared->id;
    rendezvous(self, "unique id read"); /* before thread 0 may overwrite it with the next one */
    return id;
  }
  if (self->world == 1 || self->id_file == NULL) {
    NCCL_CHECK(ncclGetUniqueId(&id));
    return id;
  }
  snprintf(path, path_size, "%s.%d", self->id_file, seq);
  if (self->rank == 0) {
    NCCL_CHECK(ncclGetUniqueId(&id));
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (f == NULL || fwrite(&id, sizeof id, 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0) {
      perror(tmp);
      exit(1);
    }
    return id;
  }
  double deadline = now_seconds() + 120;
  for (;;) {
    FILE *f = fopen(path, "rb");
    if (f != NULL) {
      size_t got = fread(&id, sizeof id, 1, f);
      fclose(f);
      if (got == 1) return id;
    }
    if (now_seconds() > deadline) {
      fprintf(stderr, "rank %d: no unique id in %s after 120 s\n", self->rank, path);
      exit(1);
    }
    struct timespec pause = {0, 2000000};
    nanosleep(&pause, NULL);
  }
}

static void setup(bench_t *b, rank_t *self, int device, size_t count, int kind) {
  memset(b, 0, sizeof *b);
  b->self = self;
  b->kind = kind;
  b->blocking = kind != COMM_NONBLOCKING;
  b->count = count;
  b->shardCount = count / (size_t)self->world;
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaStreamCreateWithFlags(&b->comms, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&b->compute, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&b->ready, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&b->signal, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&b->ready2, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&b->done, cudaEventDisableTiming));
  CUDA_CHECK(cudaMalloc((void **)&b->buffer, count * sizeof(float)));
  b->shard = b->buffer + (size_t)self->rank * b->shardCount;
  CUDA_CHECK(cudaMalloc((void **)&b->src, count * sizeof(float)));
  CUDA_CHECK(cudaMalloc((void **)&b->part, b->shardCount * sizeof(float)));
  CUDA_CHECK(cudaMemsetAsync(b->buffer, 0, count * sizeof(float), b->compute));
  CUDA_CHECK(cudaMemsetAsync(b->src, 0, count * sizeof(float), b->compute));
  CUDA_CHECK(cudaMemsetAsync(b->part, 0, b->shardCount * sizeof(float), b->compute));
  CUDA_CHECK(cudaEventRecord(b->ready, b->compute));
  CUDA_CHECK(cudaStreamSynchronize(b->compute));

  char path[4200];
  ncclUniqueId id = next_unique_id(self, path, sizeof path);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  int split = kind == COMM_SPLIT || kind == COMM_SPLIT_NOSHARE || kind == COMM_SPLIT_BPARENT;
  config.blocking = kind == COMM_BLOCKING || kind == COMM_SPLIT_BPARENT;
  ended(b, ncclCommInitRankConfig(&b->comm, self->world, id, self->rank, &config), "ncclCommInitRankConfig");
  if (split) {
    b->parent = b->comm;
    b->comm = NULL;
    ncclConfig_t child = NCCL_CONFIG_INITIALIZER;
    child.blocking = 1;
    child.splitShare = kind != COMM_SPLIT_NOSHARE;
    double start = now_seconds();
    ncclResult_t r = ncclCommSplit(b->parent, 0, self->rank, &b->comm, &child);
    if (r != ncclSuccess && r != ncclInProgress) {
      fprintf(stderr, "ncclCommSplit failed: %s (%d)\n", ncclGetErrorString(r), (int)r);
      exit(1);
    }
    /* The child appears once the parent's async state has left ncclInProgress. */
    await_handle(b->parent, "ncclCommSplit (parent)");
    /* volatile: the handle is written by NCCL's thread, not by this loop */
    while (*(ncclComm_t volatile *)&b->comm == NULL) {
      if (now_seconds() - start > 120) {
        fprintf(stderr, "ncclCommSplit: no child communicator after 120 s\n");
        exit(1);
      }
      CPU_RELAX();
    }
    await_handle(b->comm, "ncclCommSplit (child)");
    printf("# rank %d: split (%s) into a blocking child took %.3f ms\n", self->rank, COMM_NAMES[kind],
           (now_seconds() - start) * 1e3);
  }
  if (path[0] != '\0' && self->rank == 0) unlink(path); /* every rank has joined: the id was read */
}

static void teardown(bench_t *b) {
  CUDA_CHECK(cudaStreamSynchronize(b->comms));
  CUDA_CHECK(cudaStreamSynchronize(b->compute));
  if (b->graph != NULL) CUDA_CHECK(cudaGraphExecDestroy(b->graph)); /* before the communicator its nodes use */
  ended(b, ncclCommFinalize(b->comm), "ncclCommFinalize");
  NCCL_CHECK(ncclCommDestroy(b->comm));
  if (b->parent != NULL) {
    ncclResult_t r = ncclCommFinalize(b->parent);
    if (r == ncclInProgress) await_handle(b->parent, "ncclCommFinalize (parent)");
    else NCCL_CHECK(r);
    NCCL_CHECK(ncclCommDestroy(b->parent));
  }
  CUDA_CHECK(cudaFree(b->buffer));
  CUDA_CHECK(cudaFree(b->src));
  CUDA_CHECK(cudaFree(b->part));
  CUDA_CHECK(cudaStreamSynchronize(b->compute));
  CUDA_CHECK(cudaEventDestroy(b->done));
  CUDA_CHECK(cudaEventDestroy(b->ready2));
  CUDA_CHECK(cudaEventDestroy(b->signal));
  CUDA_CHECK(cudaEventDestroy(b->ready));
  CUDA_CHECK(cudaStreamDestroy(b->compute));
  CUDA_CHECK(cudaStreamDestroy(b->comms));
}

static int compare_doubles(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* us per operation, all included; *enqueueUs: the same without the time spent synchronizing. */
static double run(bench_t *b, op_fn op, long iterations, double *enqueueUs) {
  CUDA_CHECK(cudaStreamSynchronize(b->comms)); /* every repetition starts with an empty queue */
  CUDA_CHECK(cudaStreamSynchronize(b->compute));
  rendezvous(b->self, "repetition"); /* --threads: the ranks' repetitions start together */
  b->syncSeconds = 0;
  double start = now_seconds();
  for (long i = 0; i < iterations; i++) op(b);
  double elapsed = now_seconds() - start;
  if (enqueueUs) *enqueueUs = (elapsed - b->syncSeconds) * 1e6 / (double)iterations;
  return elapsed * 1e6 / (double)iterations;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(double), compare_doubles);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* k: the graph cases' transactions per step (graph_replay captures the step first); 0 for the others. */
static void measure(rank_t *self, const char *name, op_fn op, const plan_t *plan, int kind, int k) {
  bench_t b;
  int reps = plan->reps;
  double maxSeconds = plan->maxSeconds;
  setup(&b, self, plan->device, plan->count, kind);
  b.k = k;
  if (op == graph_replay || op == graph_replay_ordered) capture_step(&b);
  double warm = run(&b, op, plan->warmup, NULL);
  long iters = plan->iterations;
  double perRep = warm * 1e-6 * (double)iters;
  /* Ranks of one world must make the same number of calls: no per-rank adjustment there. */
  if (perRep > maxSeconds && self->world == 1) {
    iters = (long)(maxSeconds / (warm * 1e-6)) / SYNC_EVERY * SYNC_EVERY;
    if (iters < 4 * SYNC_EVERY) iters = 4 * SYNC_EVERY;
  }
  double *samples = calloc((size_t)reps, sizeof(double));
  double *enqueue = calloc((size_t)reps, sizeof(double));
  if (samples == NULL || enqueue == NULL) {
    perror("calloc");
    exit(1);
  }
  char all[1024] = "";
  for (int r = 0; r < reps; r++) {
    samples[r] = run(&b, op, iters, &enqueue[r]);
    size_t used = strlen(all);
    snprintf(all + used, sizeof all - used, "%s%.3f", r == 0 ? "" : ",", samples[r]);
  }
  teardown(&b);
  double enqueueMedian = median(enqueue, reps); /* sorts: enqueue[0] is the best */
  double allMedian = median(samples, reps);
  char kField[32] = ""; /* graph cases: the step size, before the figures */
  if (k > 0) snprintf(kField, sizeof kField, " k=%d", k);
  printf("RESULT case=%s comm=%s launch=%s world=%d rank=%d%s median_us=%.3f min_us=%.3f max_us=%.3f"
         " enqueue_median_us=%.3f enqueue_min_us=%.3f iters=%ld reps=%d warmup_us=%.3f samples_us=%s\n",
         name, COMM_NAMES[kind], self->shared != NULL ? "threads" : "process", self->world, self->rank, kField,
         allMedian, samples[0], samples[reps - 1], enqueueMedian, enqueue[0], iters, reps, warm, all);
  fflush(stdout);
  free(enqueue);
  free(samples);
}

static void usage(const char *argv0) {
  fprintf(stderr,
          "usage: %s [-n ITERS] [-r REPS] [-w WARMUP] [-t MAX_SECONDS_PER_REP] [-c COUNT]"
          " [-m MODE[,MODE...]: both|all|blocking|nonblocking|split|splitnoshare|splitbparent] [-d DEVICE]"
          " [--cases transaction,all_reduce,all_reduce_ordered,reduce_scatter_ordered,broadcast_ordered,"
          "all_to_all_ordered,reduce_mean_ordered,reduce_max_ordered,reduce_norm_squared_ordered,"
          "graph_step_eager,graph_replay,graph_replay_ordered]"
          " [--graph-transactions K,... (default 1,8,32)] [--world W --rank R --id-file FILE | --threads W]\n",
          argv0);
  exit(2);
}

/* --graph-transactions: a comma-separated list of step sizes, each 1..4096; 0 (after a message) when bad. */
static int parse_steps(const char *list, plan_t *plan) {
  const int maxSteps = (int)(sizeof plan->graphSteps / sizeof plan->graphSteps[0]);
  const char *p = list;
  plan->ngraphSteps = 0;
  for (;;) {
    char *end;
    errno = 0;
    long k = strtol(p, &end, 10);
    if (end == p || errno != 0 || k < 1 || k > 4096 || (*end != ',' && *end != '\0') || plan->ngraphSteps == maxSteps) {
      fprintf(stderr, "bad --graph-transactions %s: up to %d comma-separated step sizes, each 1 to 4096\n", list,
              maxSteps);
      return 0;
    }
    plan->graphSteps[plan->ngraphSteps++] = (int)k;
    if (*end == '\0') return 1;
    p = end + 1;
  }
}

/* The cases of one operation each, in the order they run (the graph cases come after them). */
static const struct {
  const char *name;
  op_fn op;
} SIMPLE_CASES[] = {{"transaction", transaction},
                    {"all_reduce", all_reduce},
                    {"all_reduce_ordered", all_reduce_ordered},
                    {"reduce_scatter_ordered", reduce_scatter_ordered},
                    {"broadcast_ordered", broadcast_ordered},
                    {"all_to_all_ordered", all_to_all_ordered},
                    {"reduce_mean_ordered", reduce_mean_ordered},
                    {"reduce_max_ordered", reduce_max_ordered},
                    {"reduce_norm_squared_ordered", reduce_norm_squared_ordered}};

/* Whether the comma-separated list names the case (whole names only: all_reduce is not all_reduce_ordered). */
static int has_case(const char *list, const char *name) {
  size_t len = strlen(name);
  for (const char *p = list; (p = strstr(p, name)) != NULL; p += len) {
    if ((p == list || p[-1] == ',') && (p[len] == ',' || p[len] == '\0')) return 1;
  }
  return 0;
}

/* Whether every name of the comma-separated list is a case (0 after a message naming the first that is not). */
static int known_cases(const char *list) {
  const char *p = list;
  for (;;) {
    size_t len = strcspn(p, ",");
    int known = (len == 16 && strncmp(p, "graph_step_eager", len) == 0) ||
                (len == 12 && strncmp(p, "graph_replay", len) == 0) ||
                (len == 20 && strncmp(p, "graph_replay_ordered", len) == 0);
    for (size_t c = 0; !known && c < sizeof SIMPLE_CASES / sizeof SIMPLE_CASES[0]; c++)
      known = strlen(SIMPLE_CASES[c].name) == len && strncmp(p, SIMPLE_CASES[c].name, len) == 0;
    if (!known) {
      fprintf(stderr, "unknown case '%.*s' in --cases %s\n", (int)len, p, list);
      return 0;
    }
    if (p[len] == '\0') return 1;
    p += len + 1;
  }
}

/* Every case the plan names, with every communicator mode: one rank's whole run. */
static void run_plan(rank_t *self, const plan_t *plan) {
  const char *cases = plan->cases;
  for (int m = 0; m < plan->nmodes; m++) {
    for (size_t c = 0; c < sizeof SIMPLE_CASES / sizeof SIMPLE_CASES[0]; c++)
      if (has_case(cases, SIMPLE_CASES[c].name))
        measure(self, SIMPLE_CASES[c].name, SIMPLE_CASES[c].op, plan, plan->modes[m], 0);
    for (int g = 0; g < plan->ngraphSteps; g++) {
      if (has_case(cases, "graph_step_eager"))
        measure(self, "graph_step_eager", graph_step_eager, plan, plan->modes[m], plan->graphSteps[g]);
      if (has_case(cases, "graph_replay")) measure(self, "graph_replay", graph_replay, plan, plan->modes[m], plan->graphSteps[g]);
      if (has_case(cases, "graph_replay_ordered"))
        measure(self, "graph_replay_ordered", graph_replay_ordered, plan, plan->modes[m], plan->graphSteps[g]);
    }
  }
}

typedef struct {
  rank_t self;
  const plan_t *plan;
  pthread_t thread;
} rank_thread_t;

static void *rank_thread(void *arg) {
  rank_thread_t *t = arg;
  run_plan(&t->self, t->plan);
  return NULL;
}

/* --threads W: W rank threads on plan->device; returns when all have finished (a failure exits). */
static void run_threads(int world, const plan_t *plan) {
  static shared_t shared; /* zeroed; the mutex and condition are initialised below */
  pthread_mutex_init(&shared.mu, NULL);
  pthread_cond_init(&shared.cv, NULL);
  rank_thread_t *threads = calloc((size_t)world, sizeof *threads);
  if (threads == NULL) {
    perror("calloc");
    exit(1);
  }
  for (int r = 0; r < world; r++) {
    threads[r].self = (rank_t){.world = world, .rank = r, .id_file = NULL, .comm_seq = 0, .shared = &shared};
    threads[r].plan = plan;
    int e = pthread_create(&threads[r].thread, NULL, rank_thread, &threads[r]);
    if (e != 0) {
      fprintf(stderr, "pthread_create of rank %d: %s\n", r, strerror(e));
      exit(1);
    }
  }
  for (int r = 0; r < world; r++) pthread_join(threads[r].thread, NULL);
  free(threads);
  pthread_cond_destroy(&shared.cv);
  pthread_mutex_destroy(&shared.mu);
}

int main(int argc, char **argv) {
  plan_t plan = {.iterations = 100000, .warmup = 20000, .reps = 5, .device = 0, .count = 1024, .maxSeconds = 2.0,
                 .cases = "transaction,all_reduce,all_reduce_ordered", .nmodes = 0};
  rank_t self = {.world = 1, .rank = 0, .id_file = NULL, .comm_seq = 0, .shared = NULL};
  int threads = 0;
  const char *mode = "both";
  const char *graphSteps = "1,8,32";
  static const struct option longs[] = {{"world", required_argument, NULL, 'W'},
                                        {"rank", required_argument, NULL, 'R'},
                                        {"id-file", required_argument, NULL, 'I'},
                                        {"cases", required_argument, NULL, 'C'},
                                        {"threads", required_argument, NULL, 'T'},
                                        {"graph-transactions", required_argument, NULL, 'K'},
                                        {NULL, 0, NULL, 0}};
  int opt;
  while ((opt = getopt_long(argc, argv, "n:r:w:t:c:m:d:h", longs, NULL)) != -1) {
    switch (opt) {
      case 'W': self.world = atoi(optarg); break;
      case 'R': self.rank = atoi(optarg); break;
      case 'I': self.id_file = optarg; break;
      case 'T': threads = atoi(optarg); break;
      case 'C': plan.cases = optarg; break;
      case 'K': graphSteps = optarg; break;
      case 'n': plan.iterations = atol(optarg); break;
      case 'r': plan.reps = atoi(optarg); break;
      case 'w': plan.warmup = atol(optarg); break;
      case 't': plan.maxSeconds = atof(optarg); break;
      case 'c': plan.count = (size_t)atol(optarg); break;
      case 'm': mode = optarg; break;
      case 'd': plan.device = atoi(optarg); break;
      default: usage(argv[0]);
    }
  }
  if (plan.iterations < 1 || plan.reps < 1 || plan.warmup < 1 || plan.count < 1 || plan.maxSeconds <= 0)
    usage(argv[0]);
  if (threads != 0) {
    if (threads < 1 || self.world != 1 || self.rank != 0 || self.id_file != NULL) {
      fprintf(stderr, "bad --threads %d (at least 1; not with --world, --rank or --id-file)\n", threads);
      usage(argv[0]);
    }
    self.world = threads;
  }
  if (self.world < 1 || self.rank < 0 || self.rank >= self.world ||
      (self.world > 1 && threads == 0 && self.id_file == NULL)) {
    fprintf(stderr, "bad --world %d / --rank %d (a world above 1 needs --id-file)\n", self.world, self.rank);
    usage(argv[0]);
  }
  if (!parse_steps(graphSteps, &plan) || !known_cases(plan.cases)) usage(argv[0]);
  if (plan.count % (size_t)self.world != 0) {
    fprintf(stderr, "-c %zu is not divisible by the world size %d\n", plan.count, self.world);
    usage(argv[0]);
  }
  /* -m: a comma list of the COMM_NAMES, both (nonblocking,blocking), all (those two and split). */
  {
    char modes[64];
    if (strlen(mode) >= sizeof modes) usage(argv[0]);
    strcpy(modes, mode);
    for (char *save = NULL, *name = strtok_r(modes, ",", &save); name != NULL; name = strtok_r(NULL, ",", &save)) {
      int all = strcmp(name, "all") == 0, both = strcmp(name, "both") == 0;
      if (all || both) add_mode(&plan, COMM_NONBLOCKING);
      if (all || both) add_mode(&plan, COMM_BLOCKING);
      int known = all || both;
      for (int k = 0; k < COMM_KINDS; k++) {
        if (strcmp(name, COMM_NAMES[k]) == 0) {
          add_mode(&plan, k);
          known = 1;
        }
      }
      if (all) add_mode(&plan, COMM_SPLIT);
      if (!known) usage(argv[0]);
    }
    if (plan.nmodes == 0) usage(argv[0]);
  }

  int ncclVersion = 0, runtime = 0, driver = 0;
  NCCL_CHECK(ncclGetVersion(&ncclVersion));
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  CUDA_CHECK(cudaDriverGetVersion(&driver));
  const char *multi = getenv("NCCL_MULTI_RANK_GPU_ENABLE");
  printf("# transaction_overhead: NCCL %d, CUDA runtime %d, driver %d, device %d, %s %d of %d, %zu x float32,"
         " sync every %d, %d reps of up to %ld iterations (max %.1f s each) after %ld warmup%s%s\n",
         ncclVersion, runtime, driver, plan.device, threads ? "threads" : "rank", threads ? threads : self.rank,
         self.world, plan.count, SYNC_EVERY, plan.reps, plan.iterations, plan.maxSeconds, plan.warmup,
         threads ? ", NCCL_MULTI_RANK_GPU_ENABLE=" : "", threads ? (multi ? multi : "(unset)") : "");
  fflush(stdout);
  if (threads) {
    run_threads(threads, &plan);
  } else {
    run_plan(&self, &plan);
  }
  return 0;
}
