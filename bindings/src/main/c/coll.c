/*
 * coll.c - collectives of the host emulation's NCCL half (see comm.h for the
 * design): execution in chunk-sized rounds through the staging slots, NCCL's
 * ring order of reductions, and the collective API functions.
 */
#include "comm.h"

#include <string.h>

/* ============================================================= execution */

enum { SEQ_FILL, SEQ_READ, SEQ_RED };

typedef struct {
  uint64_t k;
  int which; /* SEQ_* */
} seq_arg;

static int ready_seq(const struct ncclComm *c, int r, const void *arg) {
  const seq_arg *a = arg;
  const seg_rank *p = &c->ranks[r];
  return (a->which == SEQ_FILL ? p->fill_seq : a->which == SEQ_READ ? p->read_seq : p->red_seq) >= a->k;
}

static char *slot_of(const struct ncclComm *c, int r) { return c->slots + (size_t)r * c->chunk; }

/* NCCL's ring all-reduce splits the buffer into n chunks; chunk k is reduced along the ring from
 * rank k + 1 to rank k. The chunk is ceil(count / n) elements rounded up to 16 bytes, as NCCL
 * does with one channel (with several channels each channel's share is split this way, which
 * the emulation does not model: it then differs in rounding order from NCCL for some elements). */
static size_t ring_chunk(size_t count, int n, size_t es) {
  size_t granule = es >= 16 ? 1 : 16 / es;
  size_t per = (count + (size_t)n - 1) / (size_t)n;
  per = (per + granule - 1) / granule * granule;
  return per == 0 ? 1 : per;
}

/* Reduces elements [at, at + len) of an all-reduce of `count` elements (ins point at element
 * `at`), each ring chunk in its ring order. */
static void reduce_ring_chunks(struct ncclComm *c, char *out, size_t at, size_t len, const jn_op *op) {
  const int n = c->nranks;
  const size_t es = jn_dtype_size(op->dtype), chunk = ring_chunk(op->count, n, es);
  size_t done = 0;
  while (done < len) {
    size_t g = at + done, k = g / chunk, part = JN_MIN(len - done, (k + 1) * chunk - g);
    for (int j = 0; j < n; j++) c->ins[j] = (const char *)c->ins[j] + done * es;
    jn_reduce(out + done * es, c->ins, n, (int)((k + 1) % (size_t)n), part, op->dtype, op->redop, op->scalar);
    for (int j = 0; j < n; j++) c->ins[j] = (const char *)c->ins[j] - done * es;
    done += part;
  }
}

/* As NCCL 2.28 on one rank: a reduction with a pre-multiplied sum is one kernel
 * (src/device/onerank.cu) of min(32, ceil(bytes / 16 KiB)) blocks, each taking count / blocks
 * elements rounded down, then up to 16 bytes: the elements past blocks times that share (at
 * most 31) are neither scaled nor written. NCCL 2.30 rounds the share up; jnccl splits that tail
 * off into a call of its own (CommandRunner), which this keeps honest without a GPU. */
static size_t one_rank_premul_covers(size_t count, size_t es) {
  size_t pack = 16 / es, blocks = (count * es + (16u << 10) - 1) / (16u << 10);
  if (blocks > 32) blocks = 32;
  if (blocks <= 1) return count;
  size_t share = (count / blocks + pack - 1) / pack * pack;
  return JN_MIN(count, blocks * share);
}

/* Runs one collective in chunk-sized rounds (see COLLECTIVES in comm.h). */
ncclResult_t run_coll(struct ncclComm *c, const jn_op *op, op_err *e) {
  const int n = c->nranks, me = c->rank, root = op->peer;
  const size_t es = jn_dtype_size(op->dtype);
  const int reducing = op->kind == K_ALLREDUCE || op->kind == K_REDUCE || op->kind == K_REDUCESCATTER;
  const size_t count = n == 1 && reducing && op->redop == JN_REDOP_PREMUL
                           ? one_rank_premul_covers(op->count, es) : op->count;
  const char *send = op->send;
  char *recv = op->recv;
  size_t per = c->chunk / es; /* elements of one rank's piece per round */
  if (op->kind == K_REDUCESCATTER || op->kind == K_ALLTOALL || op->kind == K_SCATTER) per /= (size_t)n;
  if (per == 0) per = 1;
  for (size_t off = 0; off < count; off += per) {
    const size_t len = JN_MIN(per, count - off), lb = len * es;
    const uint64_t k = ++c->round;
    char *mine = slot_of(c, me);
    /* 1. our slot is free once everyone has read round k-1 */
    seq_arg prev = {k - 1, SEQ_READ};
    jn_plock(&c->sh->mu);
    ncclResult_t rc = wait_ranks(c, -1, ready_seq, &prev, 0, e);
    jn_punlock(&c->sh->mu);
    if (rc != ncclSuccess) return rc;
    /* 2. write our piece */
    switch (op->kind) {
      case K_ALLREDUCE:
      case K_REDUCE:
      case K_ALLGATHER:
      case K_GATHER: memcpy(mine, send + off * es, lb); break;
      case K_BROADCAST:
        if (me == root) memcpy(mine, send + off * es, lb);
        break;
      case K_REDUCESCATTER:
      case K_ALLTOALL: /* the piece for rank d sits at d*lb */
        for (int d = 0; d < n; d++) memcpy(mine + (size_t)d * lb, send + ((size_t)d * op->count + off) * es, lb);
        break;
      case K_SCATTER: /* only the root sends: the piece for rank d at d*lb, as for all-to-all */
        if (me == root)
          for (int d = 0; d < n; d++) memcpy(mine + (size_t)d * lb, send + ((size_t)d * op->count + off) * es, lb);
        break;
      default: break;
    }
    /* 3. publish it and wait for everybody's */
    seq_arg fill = {k, SEQ_FILL};
    jn_plock(&c->sh->mu);
    c->ranks[me].fill_seq = k;
    seg_notify(c->sh);
    rc = wait_ranks(c, -1, ready_seq, &fill, 0, e);
    jn_punlock(&c->sh->mu);
    if (rc != ncclSuccess) return rc;
    /* 4. read / reduce */
    if (op->kind == K_ALLREDUCE && n > 2 && lb >= SPLIT_ALLREDUCE_BYTES) {
      /* Split all-reduce: each rank reduces 1/n of the piece (same rank order, so the same
       * bits) into the result area; then everybody copies the whole result. */
      size_t lo = len * (size_t)me / (size_t)n, hi = len * (size_t)(me + 1) / (size_t)n;
      for (int j = 0; j < n; j++) c->ins[j] = slot_of(c, j) + lo * es;
      reduce_ring_chunks(c, c->result + lo * es, off + lo, hi - lo, op);
      seq_arg red = {k, SEQ_RED};
      jn_plock(&c->sh->mu);
      c->ranks[me].red_seq = k;
      seg_notify(c->sh);
      rc = wait_ranks(c, -1, ready_seq, &red, 0, e);
      jn_punlock(&c->sh->mu);
      if (rc != ncclSuccess) return rc;
      memcpy(recv + off * es, c->result, lb);
    } else switch (op->kind) {
      case K_ALLREDUCE:
        for (int j = 0; j < n; j++) c->ins[j] = slot_of(c, j);
        reduce_ring_chunks(c, recv + off * es, off, len, op);
        break;
      case K_REDUCE: /* NCCL's ring reduce ends at the root */
        if (me != root) break;
        for (int j = 0; j < n; j++) c->ins[j] = slot_of(c, j);
        jn_reduce(recv + off * es, c->ins, n, root + 1, len, op->dtype, op->redop, op->scalar);
        break;
      case K_REDUCESCATTER: /* rank me's chunk travels the ring from rank me + 1 to me */
        for (int j = 0; j < n; j++) c->ins[j] = slot_of(c, j) + (size_t)me * lb;
        jn_reduce(recv + off * es, c->ins, n, me + 1, len, op->dtype, op->redop, op->scalar);
        break;
      case K_BROADCAST:
        if (recv + off * es != send + off * es || me != root) memcpy(recv + off * es, slot_of(c, root), lb);
        break;
      case K_ALLGATHER:
        for (int j = 0; j < n; j++) memcpy(recv + ((size_t)j * op->count + off) * es, slot_of(c, j), lb);
        break;
      case K_ALLTOALL:
        for (int j = 0; j < n; j++)
          memcpy(recv + ((size_t)j * op->count + off) * es, slot_of(c, j) + (size_t)me * lb, lb);
        break;
      case K_GATHER: /* only the root receives; in place its own piece is copied onto itself */
        if (me != root) break;
        for (int j = 0; j < n; j++) {
          char *to = recv + ((size_t)j * op->count + off) * es;
          if (to != send + off * es) memcpy(to, slot_of(c, j), lb);
        }
        break;
      case K_SCATTER:
        if (me != root || recv != send + (size_t)me * op->count * es)
          memcpy(recv + off * es, slot_of(c, root) + (size_t)me * lb, lb);
        break;
      default: break;
    }
    /* 5. done with the others' slots */
    jn_plock(&c->sh->mu);
    c->ranks[me].read_seq = k;
    seg_notify(c->sh);
    jn_punlock(&c->sh->mu);
  }
  return ncclSuccess;
}

/* ==================================================================== API */

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  jn_op o = {.kind = K_ALLREDUCE, .send = sendbuff, .recv = recvbuff, .count = count, .dtype = (int)datatype,
             .redop = (int)op};
  return enqueue("ncclAllReduce", &o, comm, stream);
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  jn_op o = {.kind = K_REDUCESCATTER, .send = sendbuff, .recv = recvbuff, .count = recvcount,
             .dtype = (int)datatype, .redop = (int)op};
  return enqueue("ncclReduceScatter", &o, comm, stream);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  jn_op o = {.kind = K_ALLGATHER, .send = sendbuff, .recv = recvbuff, .count = sendcount, .dtype = (int)datatype};
  return enqueue("ncclAllGather", &o, comm, stream);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  jn_op o = {.kind = K_BROADCAST, .send = sendbuff, .recv = recvbuff, .count = count, .dtype = (int)datatype,
             .peer = root};
  return enqueue("ncclBroadcast", &o, comm, stream);
}

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  jn_op o = {.kind = K_REDUCE, .send = sendbuff, .recv = recvbuff, .count = count, .dtype = (int)datatype,
             .redop = (int)op, .peer = root};
  return enqueue("ncclReduce", &o, comm, stream);
}

ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                          ncclComm_t comm, cudaStream_t stream) {
  jn_op o = {.kind = K_ALLTOALL, .send = sendbuff, .recv = recvbuff, .count = count, .dtype = (int)datatype};
  return enqueue("ncclAlltoAll", &o, comm, stream);
}

/* Gather and scatter (NCCL 2.28): NCCL runs them as sends and receives to and from the root; here
 * they run as collectives in rounds like the others (the same bytes land in the same places). */
ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream) {
  jn_op o = {.kind = K_GATHER, .send = sendbuff, .recv = recvbuff, .count = count, .dtype = (int)datatype,
             .peer = root};
  return enqueue("ncclGather", &o, comm, stream);
}

ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                         ncclComm_t comm, cudaStream_t stream) {
  jn_op o = {.kind = K_SCATTER, .send = sendbuff, .recv = recvbuff, .count = count, .dtype = (int)datatype,
             .peer = root};
  return enqueue("ncclScatter", &o, comm, stream);
}
