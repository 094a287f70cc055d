/*
 * init.c - creation of communicators (see comm.h for the design): unique ids,
 * configs, the shared-memory rendezvous, ncclCommInitRank / InitRankConfig /
 * InitAll, ncclCommSplit, ncclCommShrink, ncclCommGetUniqueId and ncclCommGrow.
 */
#include "comm.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

/* ============================================================ shared layout */

static size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

static size_t seg_layout(int n, uint64_t chunk, uint64_t ring, uint64_t off[5]) {
  size_t o = align_up(sizeof(seg_hdr), 64);
  off[0] = o;
  o = align_up(o + (size_t)n * sizeof(seg_rank), 64);
  off[1] = o;
  o = align_up(o + (size_t)n * (size_t)n * sizeof(seg_chan), 4096);
  off[2] = o;
  o += (size_t)n * chunk;
  off[3] = o;
  o += (size_t)n * (size_t)n * ring;
  off[4] = o; /* result area of the split all-reduce: one chunk */
  o += chunk;
  return o;
}

/* Runs in the creating rank before the segment is marked ready (the file is zero-filled). */
static void seg_init(void *base, void *arg) {
  seg_hdr *h = base;
  const seg_params *p = arg;
  jn_pshared_mutex_init(&h->mu);
  jn_pshared_cond_init(&h->cv);
  h->version = SEG_VERSION;
  h->nranks = p->nranks;
  h->chunk = p->chunk;
  h->ring = p->ring;
  uint64_t off[5];
  seg_layout(p->nranks, p->chunk, p->ring, off);
  h->off_ranks = off[0];
  h->off_chans = off[1];
  h->off_slots = off[2];
  h->off_rings = off[3];
  h->off_result = off[4];
}

/* ========================================================= unique ids */

typedef struct {
  char magic[8];
  char name[64];
  uint32_t pid;
  uint32_t pad;
  uint64_t time_ns;
} id_payload;

_Static_assert(sizeof(id_payload) <= JN_NCCL_UNIQUE_ID_BYTES, "unique id payload too large");

static uint64_t mix64(uint64_t x) { /* splitmix64 finaliser */
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId) {
  static _Atomic uint64_t counter;
  if (uniqueId == NULL) return failf(ncclInvalidArgument, "ncclGetUniqueId : uniqueId argument is NULL");
  uint64_t r[2] = {0, 0};
  if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) { /* fall back on pid/time/counter only */
    r[0] = 0;
    r[1] = 0;
  }
  uint64_t t = jn_now_ns(), n = atomic_fetch_add(&counter, 1);
  uint64_t a = mix64(r[0] ^ t ^ ((uint64_t)getpid() << 32));
  uint64_t b = mix64(r[1] ^ mix64(n + 0x9e3779b97f4a7c15ull) ^ (uint64_t)(uintptr_t)&counter);
  id_payload p;
  memset(&p, 0, sizeof p);
  memcpy(p.magic, ID_MAGIC, sizeof p.magic);
  snprintf(p.name, sizeof p.name, NAME_PREFIX "%016llx%016llx", (unsigned long long)a, (unsigned long long)b);
  p.pid = (uint32_t)getpid();
  p.time_ns = t;
  memset(uniqueId, 0, sizeof *uniqueId);
  memcpy(uniqueId->internal, &p, sizeof p);
  return ncclSuccess;
}

/* Extracts the segment name from an id; 0 if the id was not made by ncclGetUniqueId. */
static int id_name(const ncclUniqueId *id, char out[64]) {
  id_payload p;
  memcpy(&p, id->internal, sizeof p);
  if (memcmp(p.magic, ID_MAGIC, sizeof p.magic) != 0) return 0;
  if (memchr(p.name, '\0', sizeof p.name) == NULL) return 0;
  if (strncmp(p.name, NAME_PREFIX, strlen(NAME_PREFIX)) != 0 || strchr(p.name + 1, '/') != NULL) return 0;
  memcpy(out, p.name, sizeof p.name);
  return 1;
}
/* ====================================================== comm creation */

static ncclResult_t parse_config(const char *fn, const ncclConfig_t *config, int dflt_blocking, int *blocking) {
  *blocking = dflt_blocking;
  if (config == NULL) return ncclSuccess; /* NULL config: defaults (or the parent's, for split) */
  /* As NCCL's parseCommConfig: copy at most sizeof(ncclConfig_t) bytes, as config->size
   * says, over the defaults; check the magic; let the version decide which fields exist;
   * check each attribute that is not NCCL_CONFIG_UNDEF_INT. */
  const int U = JN_NCCL_CONFIG_UNDEF_INT;
  ncclConfig_t t;
  memset(&t, 0, sizeof t);
  t.blocking = t.cgaClusterSize = t.minCTAs = t.maxCTAs = t.splitShare = t.trafficClass = U;
  t.collnetEnable = t.CTAPolicy = t.shrinkShare = t.nvlsCTAs = t.nChannelsPerNetPeer = t.nvlinkCentricSched = U;
  size_t n = config->size > sizeof(ncclConfig_t) ? sizeof(ncclConfig_t) : config->size;
  memcpy(&t, config, n);
  if (t.magic != JN_NCCL_CONFIG_MAGIC)
    return failf(ncclInvalidArgument, "%s : ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER", fn);
  if (t.version < 21400) t.blocking = U;
  if (t.version < 21700) t.cgaClusterSize = t.minCTAs = t.maxCTAs = U;
  if (t.version < 22700) t.collnetEnable = t.CTAPolicy = t.shrinkShare = t.nvlsCTAs = U;
  const char *bad = NULL;
  int value = 0;
  if (t.blocking != U && t.blocking != 0 && t.blocking != 1) bad = "blocking", value = t.blocking;
  else if (t.cgaClusterSize != U && t.cgaClusterSize < 0) bad = "cgaClusterSize", value = t.cgaClusterSize;
  else if ((t.minCTAs != U && t.minCTAs <= 0) || (t.maxCTAs != U && t.maxCTAs <= 0) || t.minCTAs > t.maxCTAs)
    return failf(ncclInvalidArgument, "%s : Invalid config min/max channels attribute value %d/%d", fn, t.minCTAs,
                 t.maxCTAs);
  else if (t.splitShare != U && t.splitShare != 0 && t.splitShare != 1) bad = "splitShare", value = t.splitShare;
  else if (t.collnetEnable != U && t.collnetEnable != 0 && t.collnetEnable != 1)
    bad = "collnetEnable", value = t.collnetEnable;
  else if (t.CTAPolicy != U && (t.CTAPolicy < 0 || t.CTAPolicy > 3)) bad = "policy", value = t.CTAPolicy;
  else if (t.shrinkShare != U && t.shrinkShare != 0 && t.shrinkShare != 1) bad = "shrinkShare", value = t.shrinkShare;
  else if (t.nvlsCTAs != U && t.nvlsCTAs <= 0) bad = "nvlsCTAs", value = t.nvlsCTAs;
  if (bad != NULL) return failf(ncclInvalidArgument, "%s : Invalid config %s attribute value %d", fn, bad, value);
  if (t.blocking != U) *blocking = t.blocking;
  return ncclSuccess;
}

/* Reads and checks the environment of a new communicator (config.c); the text names fn. */
static ncclResult_t comm_env(const char *fn, jn_comm_env *env) {
  char err[256];
  const char *bad = jn_config_error();
  if (bad != NULL) return failf(ncclInvalidUsage, "%s : %s", fn, bad);
  if (!jn_comm_env_read(env, err, sizeof err)) return failf(ncclInvalidUsage, "%s : %s", fn, err);
  return ncclSuccess;
}

/* Allocates and registers a communicator in state CS_INIT, configured by env. */
static struct ncclComm *comm_new(int nranks, const char *name, int rank, int device, int blocking,
                                 const jn_comm_env *env) {
  struct ncclComm *c = calloc(1, sizeof(*c));
  if (c == NULL) return NULL;
  c->magic = COMM_MAGIC;
  c->rank = rank;
  c->nranks = nranks;
  c->device = device;
  c->blocking = blocking;
  text_copy(c->name, sizeof c->name, name);
  atomic_init(&c->refs, 1);
  atomic_init(&c->state, CS_INIT);
  pthread_mutex_init(&c->mu, NULL);
  jn_cond_init_mono(&c->cv);
  /* Staging chunk per rank (the creating rank's value wins; see README). */
  c->chunk_env = env->chunk;
  c->init_timeout_ms = env->init_timeout_ms;
  fault_configure(c, env);
  comm_register(c);
  return c;
}

static void comm_set_init_error(struct ncclComm *c, const op_err *e) {
  pthread_mutex_lock(&c->mu);
  text_copy(c->async_text, sizeof c->async_text, e->text);
  atomic_store(&c->async_err, e->code);
  pthread_mutex_unlock(&c->mu);
  atomic_store(&c->state, CS_FAILED);
}

/* Joins the communicator's segment and waits until all ranks have. Sets c->state. */
static void rendezvous(struct ncclComm *c) {
  op_err e = {ncclSuccess, -1, ""};
  int n = c->nranks;
  uint64_t chunk = JN_MAX(c->chunk_env, (uint64_t)n * 64);
  uint64_t ring = JN_MIN(JN_MAX(chunk / 16, 4096), 65536);
  while (ring > 4096 && (uint64_t)n * n * ring > (32ull << 20)) ring /= 2; /* bound n*n rings */
  uint64_t off[5];
  seg_params params = {n, chunk, ring};
  size_t total = seg_layout(n, chunk, ring, off);
  e.code = jn_seg_attach(c->name, total, seg_init, &params, c->init_timeout_ms, &c->aborted, &c->seg, e.text,
                         sizeof e.text);
  if (e.code != ncclSuccess) goto fail;
  seg_hdr *h = c->seg->base;
  if (h->version != SEG_VERSION) {
    errf(&e, ncclInternalError, -1, "shared memory %s has an unknown layout version %d", c->name, (int)h->version);
    goto fail;
  }
  if (h->nranks != n) { /* make the ranks already waiting fail too, instead of timing out */
    errf(&e, ncclInvalidUsage, -1, "ncclCommInitRank: rank %d was given nranks=%d, but the communicator has %d ranks",
         c->rank, n, h->nranks);
    jn_plock(&h->mu);
    if (!h->failed) {
      h->failed = 1;
      h->fail_code = ncclInvalidUsage;
      text_copy(h->fail_text, sizeof h->fail_text, e.text);
    }
    seg_notify(h);
    jn_punlock(&h->mu);
    goto fail;
  }
  c->sh = h;
  c->ranks = (seg_rank *)((char *)h + h->off_ranks);
  c->chans = (seg_chan *)((char *)h + h->off_chans);
  c->slots = (char *)h + h->off_slots;
  c->rings = (char *)h + h->off_rings;
  c->result = (char *)h + h->off_result;
  c->chunk = h->chunk;
  c->ring = h->ring;

  int unlink_now = 0;
  jn_plock(&h->mu);
  seg_rank *me = &c->ranks[c->rank];
  if (!h->failed && me->present) {
    h->failed = 1;
    h->fail_code = ncclInvalidUsage;
    snprintf(h->fail_text, sizeof h->fail_text, "ncclCommInitRank: rank %d was initialised twice", c->rank);
  }
  if (!me->present) {
    /* NCCL refuses two ranks of one machine (its host hash) on one GPU, threads of one process or
     * processes alike; 2.30+ allows it when NCCL_MULTI_RANK_GPU_ENABLE=1. The emulation follows
     * both: every rank meeting here is on this machine, unless NCCL_HOSTID names another. */
    const char *multi = getenv("NCCL_MULTI_RANK_GPU_ENABLE");
    int shared_ok = multi != NULL && atoi(multi) == 1;
    uint64_t host = jn_host_hash();
    for (int r = 0; r < n && !h->failed && !shared_ok; r++) {
      if (c->ranks[r].present && c->ranks[r].host == host && c->ranks[r].device == c->device) {
        h->failed = 1;
        h->fail_code = ncclInvalidUsage;
        snprintf(h->fail_text, sizeof h->fail_text,
                 "Duplicate GPU detected : rank %d and rank %d both on CUDA device %d", r, c->rank, c->device);
      }
    }
    me->present = 1;
    me->pid = getpid();
    me->host = host;
    me->device = c->device;
    me->status = RS_OK;
    me->blame = -1;
    h->joined++;
    h->attached++;
    c->joined = 1;
    if (h->joined == n && !h->unlinked) { /* everybody is here: remove the name now */
      h->unlinked = 1;
      unlink_now = 1;
    }
  }
  seg_notify(h);
  uint64_t deadline = jn_now_ns() + (uint64_t)c->init_timeout_ms * 1000000ull;
  while (!h->failed && h->joined < n) {
    if (atomic_load(&c->aborted)) {
      errf(&e, ncclInvalidUsage, -1, "communicator aborted during initialisation");
      break;
    }
    if (jn_now_ns() > deadline) {
      h->failed = 1;
      h->fail_code = ncclSystemError;
      snprintf(h->fail_text, sizeof h->fail_text,
               "timed out after %ld ms waiting for ranks to join communicator %s (%d of %d joined)",
               c->init_timeout_ms, c->name, h->joined, n);
      seg_notify(h);
      break;
    }
    jn_pcond_wait_ms(&h->cv, &h->mu, WAIT_SLICE_MS);
  }
  if (e.code == ncclSuccess && h->failed) errf(&e, (ncclResult_t)h->fail_code, -1, "%s", h->fail_text);
  jn_punlock(&h->mu);
  if (unlink_now) jn_seg_unlink(c->name);
  if (e.code != ncclSuccess) goto fail;
  c->ins = calloc((size_t)n, sizeof(*c->ins));
  if (c->ins == NULL) {
    errf(&e, ncclSystemError, -1, "out of memory");
    goto fail;
  }
  if (c->grow_out != NULL) *c->grow_out = c; /* NCCL's grow job ends with this store, after the call returned */
  atomic_store(&c->state, CS_READY);
  return;
fail:
  if (c->grow_out != NULL) *c->grow_out = c; /* on failure too, before the state says so */
  comm_set_init_error(c, &e);
}

static void *init_main(void *arg) {
  rendezvous(arg);
  return NULL;
}

ncclResult_t start_init_thread(struct ncclComm *c) {
  pthread_mutex_lock(&c->mu);
  int rc = pthread_create(&c->init_thread, NULL, init_main, c);
  c->init_thread_live = rc == 0;
  pthread_mutex_unlock(&c->mu);
  if (rc != 0) {
    op_err e;
    errf(&e, ncclSystemError, -1, "pthread_create: %s", strerror(rc));
    comm_set_init_error(c, &e);
    return ncclSystemError;
  }
  return ncclSuccess;
}

void comm_discard(struct ncclComm *c) {
  atomic_store(&c->aborted, 1);
  init_join(c);
  comm_unregister(c);
  comm_put(c);
}

/* parent: NULL, or the existing communicator of a grow (its device, blocking mode and config
 * are the defaults). */
static ncclResult_t init_rank(const char *fn, ncclComm_t *out, int nranks, const ncclUniqueId *id, int rank,
                              const ncclConfig_t *config, const struct ncclComm *parent, int grow) {
  int blocking;
  ncclResult_t rc = parse_config(fn, config, parent != NULL ? parent->blocking : 1, &blocking);
  if (rc == ncclSuccess && out == NULL) rc = failf(ncclInvalidArgument, "%s : comm argument is NULL", fn);
  if (rc == ncclSuccess && (nranks < 1 || rank < 0 || rank >= nranks))
    rc = failf(ncclInvalidArgument, "%s : Invalid rank requested : %d/%d", fn, rank, nranks);
  char name[64];
  if (rc == ncclSuccess && !id_name(id, name))
    rc = failf(ncclInvalidArgument, "%s : invalid ncclUniqueId (not created by ncclGetUniqueId)", fn);
  jn_comm_env env;
  if (rc == ncclSuccess) rc = comm_env(fn, &env);
  if (rc == ncclSuccess && jn_device_count() == 0)
    rc = failf(ncclUnhandledCudaError, "%s : Cuda failure 100 'no CUDA-capable device is detected'", fn);
  if (rc != ncclSuccess) {
    group_note_error(rc);
    return rc;
  }
  struct ncclComm *c = comm_new(nranks, name, rank, parent != NULL ? parent->device : jn_current_device(), blocking,
                                &env);
  if (c == NULL) {
    group_note_error(ncclSystemError);
    return failf(ncclSystemError, "%s : out of memory", fn);
  }
  config_apply(&c->config, config, parent != NULL ? &parent->config : NULL);
  *out = c;
  if (grow && !blocking) c->grow_out = out;
  if (group_open()) return group_defer_init(fn, c, out); /* launched by the outermost ncclGroupEnd */
  if (blocking) {
    rendezvous(c);
    if (atomic_load(&c->state) != CS_READY) {
      rc = comm_async(c);
      *out = NULL;
      comm_discard(c);
      return rc;
    }
    return ncclSuccess;
  }
  rc = start_init_thread(c);
  return rc == ncclSuccess ? ncclInProgress : failf(rc, "%s : cannot start the initialisation thread", fn);
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
  return init_rank("ncclCommInitRank", comm, nranks, &commId, rank, NULL, NULL, 0);
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config) {
  return init_rank("ncclCommInitRankConfig", comm, nranks, &commId, rank, config, NULL, 0);
}

ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist) {
  if (comm == NULL) return failf(ncclInvalidArgument, "ncclCommInitAll : comm argument is NULL");
  if (ndev < 1) return failf(ncclInvalidArgument, "ncclCommInitAll : Invalid device count requested : %d", ndev);
  const char *bad = jn_config_error();
  if (bad != NULL) return failf(ncclInvalidUsage, "ncclCommInitAll : %s", bad);
  int total = jn_device_count();
  for (int i = 0; i < ndev; i++) {
    int d = devlist ? devlist[i] : i;
    if (d < 0 || d >= total)
      return failf(ncclInvalidArgument, "ncclCommInitAll : Invalid device %d (number of devices %d)", d, total);
    for (int j = 0; j < i && devlist; j++)
      if (devlist[j] == d) return failf(ncclInvalidUsage, "ncclCommInitAll : Duplicate device %d in devlist", d);
  }
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  int saved = jn_current_device();
  ncclGroupStart();
  ncclResult_t rc = ncclSuccess;
  for (int i = 0; i < ndev && rc == ncclSuccess; i++) {
    cudaSetDevice(devlist ? devlist[i] : i);
    rc = ncclCommInitRank(&comm[i], ndev, id, i);
  }
  ncclResult_t rc2 = ncclGroupEnd();
  cudaSetDevice(saved);
  return rc != ncclSuccess ? rc : rc2;
}

/* ================================================================ split */

typedef struct {
  uint64_t gen;
} split_arg;

static int ready_split(const struct ncclComm *c, int r, const void *arg) {
  uint64_t gen = ((const split_arg *)arg)->gen;
  return c->ranks[r].split[gen & 1].gen == gen;
}

/* Name of the segment of a split's child: a hash of the parent's name, split number and color. */
static void split_name(char out[64], const char *parent, uint64_t gen, int color) {
  uint64_t h1 = 0xcbf29ce484222325ull, h2 = 0x84222325cbf29ce4ull;
  for (const char *p = parent; *p; p++) {
    h1 = (h1 ^ (unsigned char)*p) * 0x100000001b3ull;
    h2 = (h2 ^ (unsigned char)*p) * 0x1000193ull + 0x9e37ull;
  }
  h1 = mix64(h1 ^ mix64(gen) ^ ((uint64_t)(uint32_t)color << 17));
  h2 = mix64(h2 ^ mix64(gen + 0x51ull) ^ (uint64_t)(uint32_t)color);
  snprintf(out, 64, NAME_PREFIX "%016llx%016llx", (unsigned long long)h1, (unsigned long long)h2);
}

/* Exchanges (color, key) through the parent's segment and works out the child's size and
 * rank (newn = 0 for NCCL_SPLIT_NOCOLOR). Fails on abort, a dead peer, or the init timeout. */
static ncclResult_t split_exchange(struct ncclComm *c, int color, int key, uint64_t gen, int *newn_out,
                                   int *newrank_out, op_err *e) {
  split_arg a = {gen};
  int n = c->nranks, newn = 0, newrank = 0;
  jn_plock(&c->sh->mu);
  c->ranks[c->rank].split[gen & 1].color = color;
  c->ranks[c->rank].split[gen & 1].key = key;
  c->ranks[c->rank].split[gen & 1].gen = gen;
  seg_notify(c->sh);
  ncclResult_t rc = wait_ranks(c, -1, ready_split, &a, jn_now_ns() + (uint64_t)c->init_timeout_ms * 1000000ull, e);
  if (rc == ncclSuccess && color != JN_NCCL_SPLIT_NOCOLOR) {
    for (int r = 0; r < n; r++) { /* new rank = position in (key, old rank) order */
      const seg_rank *p = &c->ranks[r];
      if (p->split[gen & 1].color != color) continue;
      newn++;
      int pk = p->split[gen & 1].key;
      if (pk < key || (pk == key && r < c->rank)) newrank++;
    }
  }
  jn_punlock(&c->sh->mu);
  *newn_out = newn;
  *newrank_out = newrank;
  return rc;
}

/* A child of a parent communicator (split or shrink): where its ranks meet, its size, this rank's
 * rank, and what it is made with (read by the API call, so the caller's config need not outlive it). */
typedef struct {
  char name[64];
  int nranks, rank, blocking;
  jn_comm_env env;
  jn_comm_config config;
} child_spec;

typedef struct {
  const char *fn;
  struct ncclComm *parent;
  ncclComm_t *out;
  int color, key; /* split only: exchanged first; a shrink's child_spec is complete at the call */
  uint64_t gen;
  child_spec spec;
} split_job;

/* Records a failure of an asynchronous operation of c as its async error (locally, as NCCL's
 * ncclCommSetAsyncError: the peers are not told). */
static void comm_set_async_local(struct ncclComm *c, ncclResult_t code, const char *text) {
  pthread_mutex_lock(&c->mu);
  if (atomic_load(&c->async_err) == ncclSuccess) {
    text_copy(c->async_text, sizeof c->async_text, text);
    atomic_store(&c->async_err, code);
  }
  pthread_mutex_unlock(&c->mu);
}

/* Creates the child of a non-blocking parent and waits for all its ranks (the parent's abort
 * aborts it too). Returns the ready child, or NULL with e filled. */
static struct ncclComm *child_make_async(struct ncclComm *c, const child_spec *s, op_err *e) {
  struct ncclComm *nc = comm_new(s->nranks, s->name, s->rank, c->device, s->blocking, &s->env);
  if (nc == NULL) {
    errf(e, ncclSystemError, -1, "out of memory");
    return NULL;
  }
  nc->config = s->config;
  pthread_mutex_lock(&c->mu);
  c->split_child = nc;
  if (atomic_load(&c->aborted)) atomic_store(&nc->aborted, 1);
  pthread_mutex_unlock(&c->mu);
  rendezvous(nc);
  pthread_mutex_lock(&c->mu);
  c->split_child = NULL;
  pthread_mutex_unlock(&c->mu);
  if (atomic_load(&nc->state) == CS_READY) return nc;
  ncclResult_t rc = atomic_load(&nc->async_err);
  pthread_mutex_lock(&nc->mu);
  errf(e, rc == ncclSuccess ? ncclSystemError : rc, -1, "%s", nc->async_text);
  pthread_mutex_unlock(&nc->mu);
  comm_discard(nc);
  return NULL;
}

/* The split or shrink of a non-blocking parent, on its own thread: (split: exchange,) create the
 * child, wait for all its ranks, then publish the handle and leave ncclInProgress (NCCL sets
 * *newcomm only when the child is complete). The parent outlives the thread: abort, destroy and
 * teardown join it first, and destroy/finalize refuse while it is running. */
static void *split_main(void *arg) {
  split_job *j = arg;
  struct ncclComm *c = j->parent;
  op_err e = {ncclSuccess, -1, ""};
  ncclResult_t rc = ncclSuccess;
  int member = 1;
  if (j->spec.nranks == 0) { /* a split: the child's size and our rank come from the exchange */
    rc = split_exchange(c, j->color, j->key, j->gen, &j->spec.nranks, &j->spec.rank, &e);
    member = j->color != JN_NCCL_SPLIT_NOCOLOR;
    split_name(j->spec.name, c->name, j->gen, j->color);
  }
  if (rc == ncclSuccess && member) {
    struct ncclComm *nc = child_make_async(c, &j->spec, &e);
    rc = e.code;
    if (nc != NULL) *j->out = nc;
  }
  if (rc != ncclSuccess) {
    char text[sizeof e.text + 32];
    snprintf(text, sizeof text, "%s : %s", j->fn, e.text);
    comm_set_async_local(c, rc, text);
  }
  atomic_store(&c->split_busy, 0); /* after *out: who sees "not in progress" sees the handle */
  free(j);
  return NULL;
}

/* Starts the split or shrink job of a non-blocking parent (j allocated by the caller, freed by the
 * job, or here on failure); drops the caller's reference to c. */
static ncclResult_t split_start(struct ncclComm *c, split_job *j) {
  const char *fn = j->fn; /* read first: once started, the job frees j whenever it ends */
  *j->out = NULL;
  atomic_store(&c->split_busy, 1);
  pthread_mutex_lock(&c->mu);
  int err = pthread_create(&c->split_thread, NULL, split_main, j);
  c->split_thread_live = err == 0;
  pthread_mutex_unlock(&c->mu);
  if (err != 0) {
    atomic_store(&c->split_busy, 0);
    free(j);
  }
  comm_put(c);
  if (err != 0) return failf(ncclSystemError, "%s : cannot start the split thread: %s", fn, strerror(err));
  return ncclSuccess;
}

/* The child of a blocking parent (already released by the caller): a blocking child's rendezvous
 * happens here, a non-blocking child's in the background (ncclInProgress). */
static ncclResult_t child_start(const char *fn, struct ncclComm *c, const child_spec *s, ncclComm_t *newcomm) {
  struct ncclComm *nc = comm_new(s->nranks, s->name, s->rank, c->device, s->blocking, &s->env);
  comm_put(c);
  if (nc == NULL) return failf(ncclSystemError, "%s : out of memory", fn);
  nc->config = s->config;
  *newcomm = nc;
  if (s->blocking) {
    rendezvous(nc);
    if (atomic_load(&nc->state) != CS_READY) {
      ncclResult_t rc = comm_async(nc);
      *newcomm = NULL;
      comm_discard(nc);
      return rc;
    }
    return ncclSuccess;
  }
  ncclResult_t rc = start_init_thread(nc);
  return rc == ncclSuccess ? ncclInProgress : failf(rc, "%s : cannot start the initialisation thread", fn);
}

/* What every child of c is made with: the config (NULL: the parent's) and the environment.
 * Checked before any exchange so that a bad value fails at once. */
static ncclResult_t child_prepare(const char *fn, struct ncclComm *c, const ncclConfig_t *config, child_spec *s) {
  memset(s, 0, sizeof *s);
  ncclResult_t rc = parse_config(fn, config, c->blocking, &s->blocking); /* NULL: inherit */
  if (rc == ncclSuccess) rc = comm_env(fn, &s->env);
  if (rc == ncclSuccess) config_apply(&s->config, config, &c->config);
  return rc;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config) {
  static const char fn[] = "ncclCommSplit";
  struct ncclComm *c;
  ncclResult_t rc = get_comm(fn, comm, &c);
  if (rc != ncclSuccess) return rc;
  child_spec spec;
  /* Any color is valid (NCCL accepts negative ones too); NCCL_SPLIT_NOCOLOR opts out. */
  if (newcomm == NULL) rc = failf(ncclInvalidArgument, "%s : newcomm argument is NULL", fn);
  if (rc == ncclSuccess) rc = ensure_ready(fn, c);
  if (rc == ncclSuccess) rc = child_prepare(fn, c, config, &spec);
  if (rc != ncclSuccess) {
    comm_put(c);
    return rc;
  }
  uint64_t gen = ++c->split_gen;
  if (!c->blocking) {
    /* As NCCL: the split is a job of the parent's group, which is non-blocking because the
     * parent is, whatever the child's config says. *newcomm is NULL until the parent's async
     * state leaves ncclInProgress; then it is the ready child (or NULL for NOCOLOR/failure). */
    split_job *j = calloc(1, sizeof(*j));
    if (j == NULL) {
      comm_put(c);
      return failf(ncclSystemError, "%s : out of memory", fn);
    }
    *j = (split_job){fn, c, newcomm, color, key, gen, spec};
    rc = split_start(c, j);
    return rc == ncclSuccess ? ncclInProgress : rc;
  }
  op_err e = {ncclSuccess, -1, ""};
  rc = split_exchange(c, color, key, gen, &spec.nranks, &spec.rank, &e);
  if (rc != ncclSuccess || color == JN_NCCL_SPLIT_NOCOLOR) {
    *newcomm = NULL;
    if (rc != ncclSuccess) rc = failf(rc, "%s : %s", fn, e.text);
    comm_put(c);
    return rc;
  }
  split_name(spec.name, c->name, gen, color);
  return child_start(fn, c, &spec, newcomm);
}

/* ================================================================ shrink */

/* NCCL's checks of ncclCommShrink's arguments (c is the caller's parent). */
static ncclResult_t shrink_args(const char *fn, const struct ncclComm *c, const int *list, int count,
                                const ncclComm_t *newcomm, int flags) {
  if (newcomm == NULL) return failf(ncclInvalidArgument, "%s : newcomm argument is NULL", fn);
  if (flags != JN_NCCL_SHRINK_DEFAULT && flags != JN_NCCL_SHRINK_ABORT)
    return failf(ncclInvalidArgument, "%s : shrinkFlags %d is not NCCL_SHRINK_DEFAULT (0) or NCCL_SHRINK_ABORT (1)",
                 fn, flags);
  if (count < 0 || count > c->nranks)
    return failf(ncclInvalidArgument, "%s : excludeRanksCount %d is not in [0, %d]", fn, count, c->nranks);
  if (count > 0 && list == NULL) return failf(ncclInvalidArgument, "%s : excludeRanksList argument is NULL", fn);
  for (int i = 0; i < count; i++) {
    if (list[i] < 0 || list[i] >= c->nranks)
      return failf(ncclInvalidArgument, "%s : excludeRanksList[%d] = %d is not a rank in [0, %d)", fn, i, list[i],
                   c->nranks);
    if (list[i] == c->rank)
      return failf(ncclInvalidArgument, "%s : excludeRanksList[%d] = %d is the calling rank (excluded ranks must not "
                   "call ncclCommShrink)", fn, i, list[i]);
    for (int k = 0; k < i; k++)
      if (list[k] == list[i])
        return failf(ncclInvalidArgument, "%s : rank %d is listed twice in excludeRanksList", fn, list[i]);
  }
  return ncclSuccess;
}

/* The parent before a shrink: NCCL_SHRINK_ABORT ends its pending work first (as a revoke; the
 * parent is left for abort or destroy); the default waits for it (bounded by the init timeout),
 * and a parent in error, e.g. because a pending operation involved a lost rank, refuses. */
static ncclResult_t shrink_quiesce(const char *fn, struct ncclComm *c, int flags) {
  if (atomic_load(&c->aborted)) return failf(ncclInvalidUsage, "%s : the communicator was aborted", fn);
  if (atomic_load(&c->state) == CS_INIT || atomic_load(&c->split_busy))
    return failf(ncclInvalidArgument,
                 "%s : Attempt to use communicator before the previous operation returned ncclSuccess", fn);
  if (flags == JN_NCCL_SHRINK_ABORT) {
    comm_stop(c);
    return ncclSuccess;
  }
  if (!comm_wait_idle(c, c->init_timeout_ms))
    return failf(ncclInvalidUsage, "%s : the communicator's pending operations did not complete within %ld ms "
                 "(NCCL_SHRINK_ABORT ends them)", fn, c->init_timeout_ms);
  ncclResult_t rc = comm_async(c);
  if (rc != ncclSuccess) {
    char text[600];
    snprintf(text, sizeof text, "%s : the communicator is in error: %s", fn, ncclGetLastError(NULL));
    return failf(rc, "%s", text);
  }
  return ncclSuccess;
}

ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount, ncclComm_t *newcomm,
                            ncclConfig_t *config, int shrinkFlags) {
  static const char fn[] = "ncclCommShrink";
  struct ncclComm *c;
  ncclResult_t rc = get_comm(fn, comm, &c);
  if (rc != ncclSuccess) return rc;
  child_spec spec;
  rc = shrink_args(fn, c, excludeRanksList, excludeRanksCount, newcomm, shrinkFlags);
  if (rc == ncclSuccess) rc = shrink_quiesce(fn, c, shrinkFlags);
  if (rc == ncclSuccess) rc = child_prepare(fn, c, config, &spec);
  if (rc != ncclSuccess) {
    if (newcomm != NULL) *newcomm = NULL;
    comm_put(c);
    return rc;
  }
  /* No exchange: every survivor knows the child from the list alone (ranks in old-rank order),
   * so nobody waits for an excluded rank. Successive shrinks of one parent meet in different
   * segments (the survivors call them in the same order, so their counters agree). */
  spec.nranks = c->nranks - excludeRanksCount;
  spec.rank = c->rank;
  for (int i = 0; i < excludeRanksCount; i++)
    if (excludeRanksList[i] < c->rank) spec.rank--;
  char base[80];
  snprintf(base, sizeof base, "%s/shrink", c->name);
  split_name(spec.name, base, ++c->shrink_gen, 0);
  if (!c->blocking) {
    /* As measured on NCCL 2.28/2.30: ncclSuccess with *newcomm still NULL; the parent's async
     * state is ncclInProgress until the child is ready. */
    split_job *j = calloc(1, sizeof(*j));
    if (j == NULL) {
      comm_put(c);
      return failf(ncclSystemError, "%s : out of memory", fn);
    }
    *j = (split_job){fn, c, newcomm, 0, 0, 0, spec};
    return split_start(c, j);
  }
  return child_start(fn, c, &spec, newcomm);
}

/* ================================================================= grow */

ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId *uniqueId) {
  static const char fn[] = "ncclCommGetUniqueId";
  struct ncclComm *c;
  ncclResult_t rc = get_comm(fn, comm, &c);
  if (rc != ncclSuccess) return rc;
  if (uniqueId == NULL) rc = failf(ncclInvalidArgument, "%s : uniqueId argument is NULL", fn);
  if (rc == ncclSuccess) rc = ensure_ready(fn, c);
  if (rc == ncclSuccess) rc = ncclGetUniqueId(uniqueId); /* the grown communicator meets there */
  comm_put(c);
  return rc;
}

ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank, ncclComm_t *newcomm,
                          ncclConfig_t *config) {
  static const char fn[] = "ncclCommGrow";
  if (uniqueId == NULL) return failf(ncclInvalidArgument, "%s : uniqueId argument is NULL", fn);
  if (comm == NULL) /* a new rank: as ncclCommInitRankConfig, on the calling thread's device */
    return init_rank(fn, newcomm, nRanks, uniqueId, rank, config, NULL, 1);
  struct ncclComm *c;
  ncclResult_t rc = get_comm(fn, comm, &c);
  if (rc != ncclSuccess) return rc;
  if (rank != -1)
    rc = failf(ncclInvalidArgument, "%s : rank %d given with an existing communicator (its ranks pass -1 and keep "
               "their rank)", fn, rank);
  else if (nRanks <= c->nranks)
    rc = failf(ncclInvalidArgument, "%s : nRanks %d is not larger than the communicator's %d ranks", fn, nRanks,
               c->nranks);
  if (rc == ncclSuccess) rc = ensure_ready(fn, c);
  if (rc == ncclSuccess) rc = init_rank(fn, newcomm, nRanks, uniqueId, c->rank, config, c, 1);
  comm_put(c); /* the existing communicator stays as it was, usable */
  return rc;
}
