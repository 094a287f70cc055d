/*
 * coll.c - collectives of the host emulation's NCCL half (see comm.h for the
 * design): execution in chunk-sized rounds through the staging slots, NCCL's
 * ring order of reductions, and the collective API functions.
 */
#include "comm.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
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

/* ============================================================= mismatches */

const char *dtype_label(int dtype) {
  static const char *const names[] = {"int8",    "uint8",   "int32",    "uint32",   "int64",     "uint64",
                                      "float16", "float32", "float64",  "bfloat16", "float8e4m3", "float8e5m2"};
  return dtype >= 0 && dtype < (int)(sizeof names / sizeof names[0]) ? names[dtype] : "invalid type";
}

static const char *kind_name(int kind) {
  switch (kind) {
    case K_ALLREDUCE: return "ncclAllReduce";
    case K_REDUCESCATTER: return "ncclReduceScatter";
    case K_ALLGATHER: return "ncclAllGather";
    case K_BROADCAST: return "ncclBroadcast";
    case K_REDUCE: return "ncclReduce";
    case K_ALLTOALL: return "ncclAlltoAll";
    case K_GATHER: return "ncclGather";
    case K_SCATTER: return "ncclScatter";
    default: return "?";
  }
}

/* Appends to a bounded text; a text that did not fit ends with "...". */
typedef struct {
  char *p;
  size_t cap, len;
} text_buf;

__attribute__((format(printf, 2, 3))) static void tb_add(text_buf *b, const char *fmt, ...) {
  if (b->len + 1 >= b->cap) return;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
  va_end(ap);
  if (w < 0) return;
  if ((size_t)w >= b->cap - b->len) {
    b->len = b->cap - 1;
    memcpy(b->p + b->cap - 4, "...", 4);
  } else {
    b->len += (size_t)w;
  }
}

/* The shortest decimal that reads back as the same float (or double): distinct scalars of two
 * pre-multiplied sums never print alike. */
static void tb_float(text_buf *b, double v, int is_double) {
  char t[40];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(t, sizeof t, "%.*g", prec, v);
    if (is_double ? strtod(t, NULL) == v : strtof(t, NULL) == (float)v) break;
  }
  tb_add(b, "%s", t);
}

/* A pre-multiplied sum's scalar (its bits, in the data type) as a number. */
static void tb_scalar(text_buf *b, int dtype, uint64_t bits) {
  switch (dtype) {
    case ncclInt8: tb_add(b, "%d", (int)(int8_t)bits); break;
    case ncclInt32: tb_add(b, "%d", (int)(int32_t)bits); break;
    case ncclInt64: tb_add(b, "%lld", (long long)(int64_t)bits); break;
    case ncclUint8: tb_add(b, "%u", (unsigned)(uint8_t)bits); break;
    case ncclUint32: tb_add(b, "%u", (unsigned)(uint32_t)bits); break;
    case ncclUint64: tb_add(b, "%llu", (unsigned long long)bits); break;
    case ncclFloat64: {
      double d;
      memcpy(&d, &bits, sizeof d);
      tb_float(b, d, 1);
      break;
    }
    case ncclFloat32: {
      float f;
      uint32_t u = (uint32_t)bits;
      memcpy(&f, &u, sizeof f);
      tb_float(b, f, 0);
      break;
    }
    case ncclFloat16: tb_float(b, jn_half_to_float((uint16_t)bits), 0); break;
    case ncclBfloat16: tb_float(b, jn_bf16_to_float((uint16_t)bits), 0); break;
    case ncclFloat8e4m3: tb_float(b, jn_fp8e4m3_to_float((uint8_t)bits), 0); break;
    case ncclFloat8e5m2: tb_float(b, jn_fp8e5m2_to_float((uint8_t)bits), 0); break;
    default: tb_add(b, "0x%llx", (unsigned long long)bits); break;
  }
}

/* "ncclReduce 4096 x float32 sum root 0": the call as the verdict names it. */
static void tb_desc(text_buf *b, const coll_desc *d) {
  static const char *const ops[] = {"sum", "prod", "max", "min", "avg"};
  tb_add(b, "%s %llu x %s", kind_name(d->kind), (unsigned long long)d->count, dtype_label(d->dtype));
  if (d->redop == JN_REDOP_PREMUL) {
    tb_add(b, " premulsum(");
    tb_scalar(b, d->dtype, d->scalar);
    tb_add(b, ")");
  } else if (d->redop >= 0 && d->redop < (int)(sizeof ops / sizeof ops[0])) {
    tb_add(b, " %s", ops[d->redop]);
  }
  if (d->root >= 0) tb_add(b, " root %d", d->root);
}

static coll_desc desc_of(const jn_op *op, uint64_t seq) {
  const int reducing = op->kind == K_ALLREDUCE || op->kind == K_REDUCESCATTER || op->kind == K_REDUCE;
  const int rooted = op->kind == K_BROADCAST || op->kind == K_REDUCE || op->kind == K_GATHER || op->kind == K_SCATTER;
  coll_desc d = {.seq = seq, .count = op->count, .kind = op->kind, .dtype = op->dtype};
  d.redop = reducing ? op->redop : -1;
  d.scalar = reducing && op->redop == JN_REDOP_PREMUL ? op->scalar : 0;
  d.root = rooted ? op->peer : -1;
  return d;
}

static int desc_same(const coll_desc *a, const coll_desc *b) {
  return a->kind == b->kind && a->count == b->count && a->dtype == b->dtype && a->redop == b->redop &&
         a->scalar == b->scalar && a->root == b->root;
}

/*
 * Compares what every rank called for this collective (all have filled its first round; segment
 * lock held). If they differ, fills e with the verdict: the groups of ranks that called the same,
 * the smallest first (the odd ones out), each as "rank 2 <call>" or "ranks 0,1 <call>".
 */
static ncclResult_t coll_check(struct ncclComm *c, op_err *e) {
  const int n = c->nranks;
  int leaders = 0, differs = 0;
  for (int r = 1; r < n && !differs; r++) differs = !desc_same(&c->ranks[r].coll, &c->ranks[0].coll);
  if (!differs) return ncclSuccess;
  /* group[r]: the lowest rank that called the same as r; size[l]: how many ranks did */
  int *group = calloc((size_t)n, sizeof(int)), *size = calloc((size_t)n, sizeof(int));
  if (group == NULL || size == NULL) {
    free(group);
    free(size);
    errf(e, ncclInvalidUsage, -1, "collective #%llu differs between the ranks (no memory to say how)",
         (unsigned long long)c->coll_seq);
    return e->code;
  }
  for (int r = 0; r < n; r++) {
    int l = 0;
    while (l < r && !(group[l] == l && desc_same(&c->ranks[l].coll, &c->ranks[r].coll))) l++;
    group[r] = l;
    leaders += l == r;
    size[l]++;
  }
  text_buf b = {e->text, sizeof e->text, 0};
  e->text[0] = '\0';
  tb_add(&b, "collective #%llu differs: ", (unsigned long long)c->coll_seq);
  for (int shown = 0, want = 1; shown < leaders; want++) /* by group size, then by lowest rank */
    for (int l = 0; l < n; l++) {
      if (group[l] != l || size[l] != want) continue;
      tb_add(&b, "%s%s ", shown++ ? ", " : "", size[l] == 1 ? "rank" : "ranks");
      for (int r = l, first = 1; r < n; r++) { /* runs of three or more as "a-b" */
        if (group[r] != l) continue;
        int end = r;
        while (end + 1 < n && group[end + 1] == l) end++;
        if (end - r >= 2) tb_add(&b, "%s%d-%d", first ? "" : ",", r, end);
        else for (int q = r; q <= end; q++) tb_add(&b, "%s%d", first && q == r ? "" : ",", q);
        first = 0;
        r = end;
      }
      tb_add(&b, " ");
      tb_desc(&b, &c->ranks[l].coll);
    }
  free(group);
  free(size);
  e->code = ncclInvalidUsage;
  e->blame = -1;
  return e->code;
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
  /* A collective of 0 elements is none (NCCL drops it at the call): no round, no number. */
  const coll_desc desc = desc_of(op, count > 0 ? ++c->coll_seq : c->coll_seq);
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
    if (off == 0) c->ranks[me].coll = desc; /* what we called travels with the first round */
    c->ranks[me].fill_seq = k;
    seg_notify(c->sh);
    rc = wait_ranks(c, -1, ready_seq, &fill, 0, e);
    if (rc == ncclSuccess && off == 0) rc = coll_check(c, e); /* see MISMATCHES in comm.h */
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
