/*
 * exec.c - execution order of the host emulation's NCCL operations (see
 * EXECUTION ORDER in comm.h): per-communicator tickets and turns, the stream
 * join of a group that uses several streams, the stream items, and the
 * validation and enqueueing shared by every operation.
 */
#include "comm.h"

#include <stdlib.h>
#include <string.h>

/* ============================================================ turns */

/* ============================================================= execution */

static void turn_acquire(struct ncclComm *c, uint64_t ticket) {
  pthread_mutex_lock(&c->mu);
  while (c->serving != ticket) jn_cond_wait_ms(&c->cv, &c->mu, 50);
  pthread_mutex_unlock(&c->mu);
}

static void turn_release(struct ncclComm *c) {
  pthread_mutex_lock(&c->mu);
  c->serving++;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

static jn_join *join_new(int followers) {
  jn_join *j = calloc(1, sizeof(*j));
  if (j == NULL) return NULL;
  pthread_mutex_init(&j->mu, NULL);
  pthread_cond_init(&j->cv, NULL);
  j->followers = followers;
  atomic_init(&j->refs, followers + 1);
  return j;
}

static void join_put(jn_join *j) {
  if (atomic_fetch_sub(&j->refs, 1) == 1) {
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
  }
}

static void join_arrive(jn_join *j) {
  pthread_mutex_lock(&j->mu);
  j->arrived++;
  pthread_cond_broadcast(&j->cv);
  pthread_mutex_unlock(&j->mu);
}

static void join_finish(jn_join *j) {
  pthread_mutex_lock(&j->mu);
  j->done = 1;
  pthread_cond_broadcast(&j->cv);
  pthread_mutex_unlock(&j->mu);
}

static void join_wait(jn_join *j, int for_done) {
  pthread_mutex_lock(&j->mu);
  while (for_done ? !j->done : j->arrived < j->followers) pthread_cond_wait(&j->cv, &j->mu);
  pthread_mutex_unlock(&j->mu);
}

static void nccl_item_run(jn_item *base) {
  nccl_item *it = (nccl_item *)base;
  for (int i = 0; i < it->nfollow; i++) join_arrive(it->follow[i]);
  if (it->nops > 0) {
    for (int i = 0; i < it->nlead; i++) join_wait(it->lead[i], 0); /* other streams' earlier work is done */
    for (int t = 0; t < it->ntickets; t++) turn_acquire(it->tickets[t].comm, it->tickets[t].ticket);
    run_p2p(it);
    for (int i = 0; i < it->nops; i++) {
      jn_op *op = &it->ops[i];
      if (is_p2p(op)) continue;
      op_err e;
      int b = op_begin(op->comm, &e);
      if (b == 0 && run_coll(op->comm, op, &e) != ncclSuccess) b = 1;
      if (b == 1) comm_fail(op->comm, &e);
    }
    for (int t = 0; t < it->ntickets; t++) turn_release(it->tickets[t].comm);
    for (int i = 0; i < it->nlead; i++) join_finish(it->lead[i]);
  }
  for (int i = 0; i < it->nfollow; i++) join_wait(it->follow[i], 1);
}

static void op_finished(struct ncclComm *c) {
  pthread_mutex_lock(&c->mu);
  if (--c->pending == 0) pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  comm_put(c);
}

static void nccl_item_free(jn_item *base) {
  nccl_item *it = (nccl_item *)base;
  for (int i = 0; i < it->nops; i++) op_finished(it->ops[i].comm);
  for (int i = 0; i < it->nlead; i++) join_put(it->lead[i]);
  for (int i = 0; i < it->nfollow; i++) join_put(it->follow[i]);
  free(it->lead);
  free(it->follow);
  free(it->tickets);
  free(it->ops);
  free(it);
}

/* ====================================================== captured operations */

/* NCCL operations captured in a graph (see graph.c): the group as it was posted; each launch
 * posts a copy on the launch stream, with tickets taken then, as a group enqueued at that time. */
typedef struct {
  jn_node base;
  jn_op *ops; /* each holds a comm reference for the graph's life */
  int n;
} nccl_node;

static void nccl_node_release(jn_node *base) {
  nccl_node *g = (nccl_node *)base;
  for (int i = 0; i < g->n; i++) comm_put(g->ops[i].comm);
  free(g->ops);
  free(g);
}

static cudaError_t nccl_node_launch(jn_node *base, cudaStream_t stream) {
  nccl_node *g = (nccl_node *)base;
  jn_op *ops = malloc((size_t)g->n * sizeof(*ops));
  if (ops == NULL) return cudaErrorMemoryAllocation;
  for (int i = 0; i < g->n; i++) {
    ops[i] = g->ops[i];
    ops[i].stream = stream;
    /* A new reference for the posted operation; the graph's keeps the address from being reused,
     * so a communicator destroyed since the capture is found missing instead of another one used. */
    if (get_comm("cudaGraphLaunch", g->ops[i].comm, &ops[i].comm) != ncclSuccess) {
      for (int k = 0; k < i; k++) comm_put(ops[k].comm);
      free(ops);
      return cudaErrorIllegalState;
    }
  }
  ncclResult_t rc = post_ops(ops, g->n);
  free(ops);
  return rc == ncclSuccess ? cudaSuccess : rc == ncclInvalidArgument ? cudaErrorInvalidResourceHandle
                                                                     : cudaErrorMemoryAllocation;
}

/*
 * If the operations' stream is capturing, appends them to its capture as one node instead of
 * posting them (the comm references move into the node): returns 1 with *rc. Returns 0 when no
 * operation's stream is capturing. A group must then use that one stream only.
 */
static int capture_ops(jn_op *ops, int n, ncclResult_t *rc) {
  int any = 0, same = 1;
  for (int i = 0; i < n; i++) {
    any |= jn_capture_status(ops[i].stream) != JN_CAPTURE_NONE;
    same &= ops[i].stream == ops[0].stream;
  }
  if (!any) return 0;
  nccl_node *g = same ? calloc(1, sizeof(*g)) : NULL;
  jn_op *copy = g ? malloc((size_t)n * sizeof(*copy)) : NULL;
  if (copy == NULL) {
    for (int i = 0; i < n; i++) comm_put(ops[i].comm);
    free(g);
    *rc = same ? failf(ncclSystemError, "out of memory")
               : failf(ncclInvalidUsage, "the host emulation captures a group of NCCL operations in a CUDA graph "
                                         "only when all of them use one stream");
    return 1;
  }
  memcpy(copy, ops, (size_t)n * sizeof(*copy));
  jn_node_init(&g->base, nccl_node_launch, nccl_node_release);
  g->ops = copy;
  g->n = n;
  cudaError_t e = jn_capture_add(ops[0].stream, &g->base);
  *rc = e == cudaSuccess ? ncclSuccess
                         : failf(ncclUnhandledCudaError, "Cuda failure %d '%s'", (int)e, cudaGetErrorString(e));
  return 1;
}

/*
 * Posts operations (each holding a comm reference) as one stream item per stream.
 * All operations of a communicator go to the item of the first stream it uses in the
 * group (its launch stream); the other streams it uses get follower items (see jn_join).
 */
ncclResult_t post_ops(jn_op *ops, int n) {
  if (enqueue_fault(ops, n)) { /* nothing was posted: release the operations' references */
    for (int i = 0; i < n; i++) comm_put(ops[i].comm);
    return failf(ncclSystemError, "operation aborted by ncclCommAbort while connecting (JNCCL_HOST_FAULT=hang-enqueue)");
  }
  ncclResult_t rc = ncclSuccess;
  if (jn_capture_any() && capture_ops(ops, n, &rc)) return rc;
  /* distinct streams and communicators, in order of first appearance */
  cudaStream_t *streams = calloc((size_t)n, sizeof(*streams));
  struct ncclComm **comms = calloc((size_t)n, sizeof(*comms));
  int *launch = calloc((size_t)n, sizeof(*launch));   /* per comm: index of its launch stream */
  int *op_stream = calloc((size_t)n, sizeof(*op_stream));
  char *uses = calloc((size_t)n * (size_t)n, 1);       /* uses[comm * n + stream] */
  jn_join **joins = calloc((size_t)n, sizeof(*joins)); /* per comm, if it uses several streams */
  nccl_item **items = calloc((size_t)n, sizeof(*items));
  int ns = 0, nc = 0, oom = !streams || !comms || !launch || !op_stream || !uses || !joins || !items;
  for (int i = 0; i < n && !oom; i++) {
    int si = 0, ci = 0;
    while (si < ns && streams[si] != ops[i].stream) si++;
    if (si == ns) streams[ns++] = ops[i].stream;
    while (ci < nc && comms[ci] != ops[i].comm) ci++;
    if (ci == nc) {
      comms[nc++] = ops[i].comm;
      launch[ci] = si;
    }
    op_stream[i] = launch[ci];
    uses[(size_t)ci * (size_t)n + (size_t)si] = 1;
  }
  for (int ci = 0; ci < nc && !oom; ci++) {
    int k = 0;
    for (int si = 0; si < ns; si++) k += uses[(size_t)ci * (size_t)n + (size_t)si];
    if (k > 1 && (joins[ci] = join_new(k - 1)) == NULL) oom = 1;
  }
  /* build one item per stream */
  for (int si = 0; si < ns && !oom; si++) {
    nccl_item *it = calloc(1, sizeof(*it));
    if (it == NULL) {
      oom = 1;
      break;
    }
    items[si] = it;
    it->base = (jn_item){NULL, nccl_item_run, nccl_item_free};
    for (int i = 0; i < n; i++) it->nops += op_stream[i] == si;
    it->ops = calloc((size_t)it->nops + 1, sizeof(*it->ops));
    it->tickets = calloc((size_t)nc + 1, sizeof(*it->tickets));
    it->lead = calloc((size_t)nc + 1, sizeof(*it->lead));
    it->follow = calloc((size_t)nc + 1, sizeof(*it->follow));
    if (!it->ops || !it->tickets || !it->lead || !it->follow) {
      oom = 1;
      break;
    }
    for (int i = 0, k = 0; i < n; i++)
      if (op_stream[i] == si) it->ops[k++] = ops[i];
    for (int ci = 0; ci < nc; ci++) {
      if (joins[ci] == NULL) continue;
      if (launch[ci] == si) it->lead[it->nlead++] = joins[ci];
      else if (uses[(size_t)ci * (size_t)n + (size_t)si]) it->follow[it->nfollow++] = joins[ci];
    }
  }
  if (oom) { /* nothing was posted: release everything */
    for (int i = 0; i < n; i++) comm_put(ops[i].comm);
    for (int ci = 0; ci < nc; ci++)
      if (joins && joins[ci]) {
        pthread_mutex_destroy(&joins[ci]->mu);
        pthread_cond_destroy(&joins[ci]->cv);
        free(joins[ci]);
      }
    for (int si = 0; si < ns && items; si++)
      if (items[si]) {
        free(items[si]->ops);
        free(items[si]->tickets);
        free(items[si]->lead);
        free(items[si]->follow);
        free(items[si]);
      }
    rc = failf(ncclSystemError, "out of memory");
    goto out;
  }
  jn_enqueue_lock();
  for (int si = 0; si < ns; si++) {
    nccl_item *it = items[si];
    for (int j = 0; j < it->nops; j++) { /* one ticket per distinct communicator */
      struct ncclComm *c = it->ops[j].comm;
      int seen = 0;
      for (int t = 0; t < it->ntickets && !seen; t++) seen = it->tickets[t].comm == c;
      if (!seen) it->tickets[it->ntickets++] = (jn_ticket){c, c->next_ticket++};
      pthread_mutex_lock(&c->mu);
      c->pending++;
      pthread_mutex_unlock(&c->mu);
    }
    jn_item *one[1] = {&it->base};
    if (jn_stream_submit(streams[si], one, 1) != cudaSuccess) {
      /* The stream was destroyed since the call: undo, and release the joins' partners. */
      for (int t = 0; t < it->ntickets; t++) it->tickets[t].comm->next_ticket--;
      it->ntickets = 0;
      for (int i = 0; i < it->nlead; i++) join_finish(it->lead[i]);
      for (int i = 0; i < it->nfollow; i++) join_arrive(it->follow[i]);
      nccl_item_free(&it->base);
      rc = failf(ncclInvalidArgument, "invalid stream %p (destroyed?)", (void *)streams[si]);
    }
  }
  jn_enqueue_unlock();
out:
  free(streams);
  free(comms);
  free(launch);
  free(op_stream);
  free(uses);
  free(joins);
  free(items);
  return rc;
}

/* ============================================================ enqueueing */

static ncclResult_t check_buf(const char *fn, const char *what, const void *p, size_t bytes) {
  if (bytes == 0) return ncclSuccess;
  if (p == NULL) return failf(ncclInvalidArgument, "%s : %s argument is NULL", fn, what);
  if (!jn_mem_range_ok(p, bytes, NULL))
    return failf(ncclInvalidArgument,
                 "%s : %s %p is not device memory (cudaMalloc/ncclMemAlloc) holding %zu bytes", fn, what, p, bytes);
  return ncclSuccess;
}

/* Gather and scatter at the root: the root's own piece may be in place (gather: sendbuff ==
 * recvbuff + root * count; scatter: recvbuff == sendbuff + root * count, as nccl.h documents);
 * any other overlap of the two buffers would read what the operation writes, so it is refused. */
static ncclResult_t check_rooted_overlap(const char *fn, const jn_op *op, int rank, size_t unit, size_t sbytes,
                                         size_t rbytes) {
  if ((op->kind != K_GATHER && op->kind != K_SCATTER) || rank != op->peer || unit == 0) return ncclSuccess;
  const char *s = op->send, *r = op->recv;
  if (!(s < r + rbytes && r < s + sbytes)) return ncclSuccess;
  const size_t at = (size_t)op->peer * unit;
  if (op->kind == K_GATHER ? s == r + at : r == s + at) return ncclSuccess;
  return failf(ncclInvalidArgument,
               "%s : sendbuff %p and recvbuff %p overlap; in place only with %s + root * count", fn, op->send,
               op->recv, op->kind == K_GATHER ? "sendbuff == recvbuff" : "recvbuff == sendbuff");
}

static ncclResult_t validate(const char *fn, jn_op *op, struct ncclComm *c, cudaStream_t stream) {
  ncclResult_t rc = ensure_not_revoked(fn, c);
  if (rc == ncclSuccess) rc = ensure_ready(fn, c);
  if (rc != ncclSuccess) return rc;
  const int n = c->nranks;
  const int rooted = op->kind == K_BROADCAST || op->kind == K_REDUCE || op->kind == K_GATHER || op->kind == K_SCATTER;
  if (rooted && (op->peer < 0 || op->peer >= n))
    return failf(ncclInvalidArgument, "%s : invalid root %d (root should be in the 0..%d range)", fn, op->peer, n - 1);
  if (is_p2p(op) && (op->peer < 0 || op->peer >= n))
    return failf(ncclInvalidArgument, "%s : invalid peer %d (peer should be in the 0..%d range)", fn, op->peer, n - 1);
  size_t es = jn_dtype_size(op->dtype);
  if (es == 0) return failf(ncclInvalidArgument, "%s : invalid type %d", fn, op->dtype);
  const int reducing = op->kind == K_ALLREDUCE || op->kind == K_REDUCESCATTER || op->kind == K_REDUCE;
  if (reducing && (rc = redop_resolve(fn, c, op)) != ncclSuccess) return rc;
  int sdev = -1;
  switch (jn_stream_classify(stream, &sdev)) {
    case JN_STREAM_LEGACY:
      return failf(ncclInvalidUsage,
                   "%s : the host emulation needs an explicit stream: NCCL operations on the legacy default "
                   "stream (0) are not supported",
                   fn);
    case JN_STREAM_PER_THREAD:
      return failf(ncclInvalidUsage, "%s : cudaStreamPerThread is not supported by the host emulation", fn);
    case JN_STREAM_USER: break;
    default: return failf(ncclInvalidArgument, "%s : invalid stream %p", fn, (void *)stream);
  }
  if (sdev != c->device)
    return failf(ncclInvalidArgument, "%s : the stream belongs to device %d but the communicator to device %d", fn,
                 sdev, c->device);
  /* Byte sizes of the buffers the operation touches on this rank. */
  size_t unit, sbytes = 0, rbytes = 0;
  if (__builtin_mul_overflow(op->count, es, &unit))
    return failf(ncclInvalidArgument, "%s : count %zu is too large", fn, op->count);
  size_t whole;
  if (__builtin_mul_overflow(unit, (size_t)n, &whole))
    return failf(ncclInvalidArgument, "%s : count %zu is too large", fn, op->count);
  switch (op->kind) {
    case K_ALLREDUCE: sbytes = rbytes = unit; break;
    case K_REDUCESCATTER: sbytes = whole; rbytes = unit; break;
    case K_ALLGATHER: sbytes = unit; rbytes = whole; break;
    case K_ALLTOALL: sbytes = rbytes = whole; break;
    case K_BROADCAST: sbytes = c->rank == op->peer ? unit : 0; rbytes = unit; break;
    case K_REDUCE: sbytes = unit; rbytes = c->rank == op->peer ? unit : 0; break;
    case K_GATHER: sbytes = unit; rbytes = c->rank == op->peer ? whole : 0; break;
    case K_SCATTER: sbytes = c->rank == op->peer ? whole : 0; rbytes = unit; break;
    case K_SEND: sbytes = unit; break;
    case K_RECV: rbytes = unit; break;
    default: break;
  }
  if ((rc = check_buf(fn, "sendbuff", op->send, sbytes)) != ncclSuccess) return rc;
  if ((rc = check_buf(fn, "recvbuff", op->recv, rbytes)) != ncclSuccess) return rc;
  if ((rc = check_rooted_overlap(fn, op, c->rank, unit, sbytes, rbytes)) != ncclSuccess) return rc;
  op->bytes = unit;
  return ncclSuccess;
}

ncclResult_t enqueue(const char *fn, jn_op *op, ncclComm_t comm, cudaStream_t stream) {
  struct ncclComm *c;
  ncclResult_t rc = get_comm(fn, comm, &c);
  if (rc == ncclSuccess) {
    rc = validate(fn, op, c, stream);
    if (rc != ncclSuccess) comm_put(c);
  }
  if (rc != ncclSuccess) {
    group_note_error(rc);
    return rc;
  }
  op->comm = c; /* the reference travels with the operation */
  op->stream = stream;
  if (group_open()) return group_defer_op(fn, op);
  return post_ops(op, 1);
}
