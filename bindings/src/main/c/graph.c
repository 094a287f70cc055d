/*
 * graph.c - stream capture and CUDA graphs: cudaStreamBeginCapture / EndCapture / IsCapturing,
 * cudaThreadExchangeStreamCaptureMode, cudaGraphInstantiate / Launch / ExecDestroy / Destroy.
 *
 * CAPTURE
 * -------
 * A capture starts on one stream (its origin) and records, instead of running them, the
 * operations enqueued on the streams that take part in it. Every capturable operation of the
 * emulation (copies, memsets, host functions, external event records and waits, NCCL
 * operations) is a jn_node: an immutable, reference-counted description that launch() enqueues
 * afresh on the launch stream, so that a graph can be launched any number of times. A node gets
 * as dependencies the current "frontier" of its stream (the nodes the stream's next work must
 * follow) and becomes the stream's new frontier; capture order is therefore a topological order
 * of the graph.
 *
 * An event recorded (without cudaEventRecordExternal) on a capturing stream makes no node: it
 * remembers that stream's frontier. A stream waiting for it joins the capture (a cross-stream
 * fork) or, already in it, adds that frontier to its own (a join). cudaStreamEndCapture fails
 * with cudaErrorStreamCaptureUnjoined when a joined stream has work that the origin's frontier
 * does not follow. Waiting in a capture for an event recorded outside it is
 * cudaErrorStreamCaptureIsolation unless the wait carries cudaEventWaitExternal (then it is a
 * wait node, re-issued at each launch). As in CUDA, an illegal call (synchronize or query of a
 * capturing stream, a "potentially unsafe" call prohibited by the capture modes, see
 * jn_capture_unsafe_call) invalidates the capture: later operations on its streams fail with
 * cudaErrorStreamCaptureInvalidated, and cudaStreamEndCapture returns that error and no graph.
 * An event recorded in a capture answers queries and synchronizes with cudaErrorCapturedEvent
 * while the capture is active; once it ended, the event is as it was before the capture.
 *
 * LAUNCH
 * ------
 * cudaGraphLaunch enqueues the nodes one after the other, in capture order, on the launch
 * stream: one valid linearisation of the graph (branches that could run concurrently on a GPU
 * run in sequence here). A graph with NCCL operations of several communicators on parallel
 * branches could need their concurrency; jnccl's captures do not. The launching thread enqueues
 * the nodes one by one: work enqueued on the same stream by another thread during the call may
 * fall between them.
 *
 * All state here is guarded by g_cap_mu; node launch() and release() are called without it.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* ============================================================ node sets */

typedef struct {
  int *v;
  int n, cap;
} iset;

static int iset_add(iset *s, int x) {
  for (int i = 0; i < s->n; i++)
    if (s->v[i] == x) return 1;
  if (s->n == s->cap) {
    int cap = s->cap ? s->cap * 2 : 4;
    int *v = realloc(s->v, (size_t)cap * sizeof(*v));
    if (v == NULL) return 0;
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = x;
  return 1;
}

static int iset_union(iset *s, const iset *o) {
  for (int i = 0; i < o->n; i++)
    if (!iset_add(s, o->v[i])) return 0;
  return 1;
}

static void iset_free(iset *s) {
  free(s->v);
  *s = (iset){0};
}

/* ================================================================ nodes */

void jn_node_init(jn_node *n, cudaError_t (*launch)(jn_node *, cudaStream_t), void (*release)(jn_node *)) {
  atomic_init(&n->refs, 1);
  n->launch = launch;
  n->release = release;
}

static void node_ref(jn_node *n) { atomic_fetch_add(&n->refs, 1); }

void jn_node_put(jn_node *n) {
  if (n != NULL && atomic_fetch_sub(&n->refs, 1) == 1) n->release(n);
}

/* ============================================================= captures */

typedef struct {
  cudaStream_t stream;
  iset front;
} member;

typedef struct capture {
  cudaStream_t origin;
  int mode; /* enum cudaStreamCaptureMode */
  pthread_t thread;
  int invalid;
  member *m;
  int nm, capm;
  jn_node **nodes;
  iset *deps;
  int nn, capn;
  struct capture *next;
} capture;

/* An event whose latest record was made on a stream of an active capture. */
typedef struct evcap {
  cudaEvent_t event;
  capture *cap;
  iset front;
  struct evcap *next;
} evcap;

/* The nodes of a graph or an executable graph (which share them), in a registry of live handles. */
typedef struct nodelist {
  jn_node **nodes;
  int n;
  struct nodelist *next;
} nodelist;

struct CUgraph_st {
  nodelist l; /* first: the registry links graphs through it */
};

struct CUgraphExec_st {
  nodelist l;        /* first, as in CUgraph_st */
  cudaEvent_t order; /* recorded after each launch: the next launch waits for it (CUDA's rule) */
};

static pthread_mutex_t g_cap_mu = PTHREAD_MUTEX_INITIALIZER;
static capture *g_caps;           /* active captures */
static evcap *g_evcaps;
static nodelist *g_graphs; /* of struct CUgraph_st */
static nodelist *g_execs;  /* of struct CUgraphExec_st */
static _Atomic int g_ncaps;       /* number of active captures: the fast path of every stream call */
static _Thread_local int tl_mode; /* cudaThreadExchangeStreamCaptureMode; Global (0) by default */

int jn_capture_any(void) { return atomic_load_explicit(&g_ncaps, memory_order_acquire) > 0; }

/* Caller holds g_cap_mu. */
static member *find_member(cudaStream_t s, capture **out) {
  for (capture *c = g_caps; c != NULL; c = c->next)
    for (int i = 0; i < c->nm; i++)
      if (c->m[i].stream == s) {
        if (out) *out = c;
        return &c->m[i];
      }
  return NULL;
}

static evcap *find_evcap(cudaEvent_t e) {
  for (evcap *p = g_evcaps; p != NULL; p = p->next)
    if (p->event == e) return p;
  return NULL;
}

static void drop_evcap(cudaEvent_t e) {
  for (evcap **pp = &g_evcaps; *pp != NULL; pp = &(*pp)->next)
    if ((*pp)->event == e) {
      evcap *p = *pp;
      *pp = p->next;
      iset_free(&p->front);
      free(p);
      return;
    }
}

static member *add_member(capture *c, cudaStream_t s) {
  if (c->nm == c->capm) {
    int cap = c->capm ? c->capm * 2 : 4;
    member *m = realloc(c->m, (size_t)cap * sizeof(*m));
    if (m == NULL) return NULL;
    c->m = m;
    c->capm = cap;
  }
  c->m[c->nm] = (member){s, {0}};
  return &c->m[c->nm++];
}

/* Appends node (its reference passed: stored, or released on failure) with the member's
 * frontier as dependencies; the node becomes the frontier. */
static cudaError_t append_node(capture *c, member *m, jn_node *node) {
  if (c->nn == c->capn) {
    int cap = c->capn ? c->capn * 2 : 16;
    jn_node **nodes = realloc(c->nodes, (size_t)cap * sizeof(*nodes));
    if (nodes != NULL) c->nodes = nodes;
    iset *deps = nodes ? realloc(c->deps, (size_t)cap * sizeof(*deps)) : NULL;
    if (deps != NULL) c->deps = deps;
    if (nodes == NULL || deps == NULL) {
      c->invalid = 1;
      jn_node_put(node);
      return cudaErrorMemoryAllocation;
    }
    c->capn = cap;
  }
  int id = c->nn;
  c->nodes[id] = node;
  c->deps[id] = m->front;
  c->nn++;
  m->front = (iset){0};
  if (!iset_add(&m->front, id)) { /* the node stays in the (now invalid) capture */
    c->invalid = 1;
    return cudaErrorMemoryAllocation;
  }
  return cudaSuccess;
}

/* Ends capture c (caller holds g_cap_mu): no stream or event refers to it any more. */
static void capture_unlink(capture *c) {
  for (capture **pp = &g_caps; *pp != NULL; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  for (evcap **pp = &g_evcaps; *pp != NULL;) {
    evcap *p = *pp;
    if (p->cap == c) {
      *pp = p->next;
      iset_free(&p->front);
      free(p);
    } else {
      pp = &p->next;
    }
  }
  for (int i = 0; i < c->nm; i++) iset_free(&c->m[i].front);
  free(c->m);
  for (int i = 0; i < c->nn; i++) iset_free(&c->deps[i]);
  free(c->deps);
  atomic_fetch_sub_explicit(&g_ncaps, 1, memory_order_release);
}

/* Whether every node of some joined stream's frontier is followed by the origin's frontier. */
static int capture_joined(const capture *c) {
  const member *origin = NULL;
  for (int i = 0; i < c->nm; i++)
    if (c->m[i].stream == c->origin) origin = &c->m[i];
  if (origin == NULL || c->nm == 1) return 1;
  char *marked = calloc((size_t)c->nn + 1, 1);
  int *stack = malloc(((size_t)c->nn + 1) * sizeof(*stack));
  if (marked == NULL || stack == NULL) {
    free(marked);
    free(stack);
    return 1; /* out of memory: cannot tell, do not refuse */
  }
  int sp = 0;
  for (int i = 0; i < origin->front.n; i++) {
    int x = origin->front.v[i];
    if (!marked[x]) {
      marked[x] = 1;
      stack[sp++] = x;
    }
  }
  while (sp > 0) {
    int x = stack[--sp];
    for (int i = 0; i < c->deps[x].n; i++) {
      int d = c->deps[x].v[i];
      if (!marked[d]) {
        marked[d] = 1;
        stack[sp++] = d;
      }
    }
  }
  int ok = 1;
  for (int i = 0; i < c->nm && ok; i++)
    for (int k = 0; k < c->m[i].front.n && ok; k++) ok = marked[c->m[i].front.v[k]];
  free(marked);
  free(stack);
  return ok;
}

/* Whether x is in the registry (caller holds g_cap_mu). */
static int list_has(nodelist *head, const void *x) {
  while (head != NULL && (const void *)head != x) head = head->next;
  return head != NULL;
}

/* Removes x from the registry; returns whether it was there. */
static int list_unlink(nodelist **head, const void *x) {
  pthread_mutex_lock(&g_cap_mu);
  nodelist **pp = head;
  while (*pp != NULL && (const void *)*pp != x) pp = &(*pp)->next;
  int found = *pp != NULL;
  if (found) *pp = (*pp)->next;
  pthread_mutex_unlock(&g_cap_mu);
  return found;
}

/* *out = a new array of from's nodes, each referenced (NULL when empty). Returns 0 when out of memory. */
static int list_share(const nodelist *from, jn_node ***out) {
  *out = NULL;
  if (from->n == 0) return 1;
  if ((*out = malloc((size_t)from->n * sizeof(**out))) == NULL) return 0;
  for (int i = 0; i < from->n; i++) {
    node_ref(from->nodes[i]);
    (*out)[i] = from->nodes[i];
  }
  return 1;
}

static void list_release(nodelist *l) {
  for (int i = 0; i < l->n; i++) jn_node_put(l->nodes[i]);
  free(l->nodes);
}

/* =============================================== hooks of the stream calls */

int jn_capture_status(cudaStream_t s) {
  if (!jn_capture_any()) return JN_CAPTURE_NONE;
  pthread_mutex_lock(&g_cap_mu);
  capture *c = NULL;
  int st = find_member(s, &c) == NULL ? JN_CAPTURE_NONE : c->invalid ? JN_CAPTURE_INVALIDATED : JN_CAPTURE_ACTIVE;
  pthread_mutex_unlock(&g_cap_mu);
  return st;
}

cudaError_t jn_capture_add(cudaStream_t s, jn_node *node) {
  pthread_mutex_lock(&g_cap_mu);
  capture *c = NULL;
  member *m = find_member(s, &c);
  cudaError_t e;
  if (m == NULL) {
    e = cudaErrorIllegalState; /* the capture ended since the caller looked */
  } else if (c->invalid) {
    e = cudaErrorStreamCaptureInvalidated;
  } else {
    e = append_node(c, m, node); /* takes the node, whatever the result */
    node = NULL;
  }
  pthread_mutex_unlock(&g_cap_mu);
  jn_node_put(node);
  return e;
}

cudaError_t jn_capture_refuse_stream(cudaStream_t s) {
  if (!jn_capture_any()) return cudaSuccess;
  pthread_mutex_lock(&g_cap_mu);
  capture *c = NULL;
  int capturing = find_member(s, &c) != NULL;
  if (capturing) c->invalid = 1;
  pthread_mutex_unlock(&g_cap_mu);
  return capturing ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

/*
 * The rule of cudaThreadExchangeStreamCaptureMode for "potentially unsafe" calls (the emulation
 * counts synchronizations and queries of streams, events and the device, cudaMalloc and cudaFree):
 * with the thread's mode Global, the call is prohibited while this thread has a capture not begun
 * in Relaxed mode or any thread has a capture begun in Global mode; ThreadLocal: only the first;
 * Relaxed: never. A prohibited call invalidates the captures that prohibit it.
 */
cudaError_t jn_capture_unsafe_call(void) {
  if (!jn_capture_any() || tl_mode == JN_cudaStreamCaptureModeRelaxed) return cudaSuccess;
  int hit = 0;
  pthread_t self = pthread_self();
  pthread_mutex_lock(&g_cap_mu);
  for (capture *c = g_caps; c != NULL; c = c->next) {
    int mine = pthread_equal(c->thread, self) && c->mode != JN_cudaStreamCaptureModeRelaxed;
    int global = tl_mode == JN_cudaStreamCaptureModeGlobal && c->mode == JN_cudaStreamCaptureModeGlobal;
    if (mine || global) {
      c->invalid = 1;
      hit = 1;
    }
  }
  pthread_mutex_unlock(&g_cap_mu);
  return hit ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

int jn_capture_event_record(cudaEvent_t e, cudaStream_t s, jn_node *external, cudaError_t *err) {
  pthread_mutex_lock(&g_cap_mu);
  capture *c = NULL;
  member *m = jn_capture_any() ? find_member(s, &c) : NULL;
  if (m == NULL) { /* recorded outside any capture: forget an earlier captured record */
    drop_evcap(e);
    pthread_mutex_unlock(&g_cap_mu);
    jn_node_put(external);
    return 0;
  }
  *err = cudaSuccess;
  if (c->invalid) *err = cudaErrorStreamCaptureInvalidated;
  else if (external != NULL) *err = append_node(c, m, external), external = NULL;
  if (*err == cudaSuccess) {
    evcap *p = find_evcap(e);
    if (p == NULL && (p = calloc(1, sizeof(*p))) != NULL) {
      p->event = e;
      p->next = g_evcaps;
      g_evcaps = p;
    }
    if (p == NULL) {
      *err = cudaErrorMemoryAllocation;
    } else {
      p->cap = c;
      p->front.n = 0;
      if (!iset_union(&p->front, &m->front)) *err = cudaErrorMemoryAllocation;
    }
    if (*err != cudaSuccess) c->invalid = 1;
  }
  pthread_mutex_unlock(&g_cap_mu);
  jn_node_put(external);
  return 1;
}

int jn_capture_event_wait(cudaStream_t s, cudaEvent_t e, jn_node *external, cudaError_t *err) {
  if (!jn_capture_any()) {
    jn_node_put(external);
    return 0;
  }
  pthread_mutex_lock(&g_cap_mu);
  capture *c = NULL;
  member *m = find_member(s, &c);
  evcap *p = find_evcap(e);
  int handled = 1;
  *err = cudaSuccess;
  if (p != NULL && m == NULL) {
    if (s == NULL || (void *)s == JN_cudaStreamLegacy) {
      *err = cudaErrorStreamCaptureImplicit; /* the legacy stream cannot join a capture */
    } else if (c = p->cap, (m = add_member(c, s)) == NULL || !iset_union(&m->front, &p->front)) {
      c->invalid = 1; /* a fork: s joins the capture of the event */
      *err = cudaErrorMemoryAllocation;
    }
  } else if (p != NULL && p->cap == c) {
    if (c->invalid) *err = cudaErrorStreamCaptureInvalidated;
    else if (!iset_union(&m->front, &p->front)) *err = cudaErrorMemoryAllocation, c->invalid = 1;
  } else if (p != NULL) {
    c->invalid = 1; /* two independent captures */
    *err = cudaErrorStreamCaptureMerge;
  } else if (m != NULL) {
    if (c->invalid) *err = cudaErrorStreamCaptureInvalidated;
    else if (external != NULL) *err = append_node(c, m, external), external = NULL;
    else *err = cudaErrorStreamCaptureIsolation, c->invalid = 1; /* work outside the capture */
  } else {
    handled = 0;
  }
  pthread_mutex_unlock(&g_cap_mu);
  jn_node_put(external);
  return handled;
}

int jn_capture_event_captured(cudaEvent_t e) {
  if (!jn_capture_any()) return 0;
  pthread_mutex_lock(&g_cap_mu);
  int captured = find_evcap(e) != NULL;
  pthread_mutex_unlock(&g_cap_mu);
  return captured;
}

void jn_capture_stream_gone(cudaStream_t s) {
  if (!jn_capture_any()) return;
  pthread_mutex_lock(&g_cap_mu);
  capture *c = NULL;
  member *m = find_member(s, &c);
  if (m != NULL) {
    c->invalid = 1;
    if (s == c->origin) { /* nobody can end it any more: drop it */
      capture_unlink(c);
      for (int i = 0; i < c->nn; i++) jn_node_put(c->nodes[i]);
      free(c->nodes);
      free(c);
    } else { /* leaves the capture (its frontier can no longer be joined) */
      iset_free(&m->front);
      *m = c->m[--c->nm];
    }
  }
  pthread_mutex_unlock(&g_cap_mu);
}

void jn_capture_event_gone(cudaEvent_t e) {
  pthread_mutex_lock(&g_cap_mu);
  drop_evcap(e);
  pthread_mutex_unlock(&g_cap_mu);
}

/* ================================================================== API */

#define FAIL(e) return jn_cuda_error(e)

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) {
  if (mode == NULL) FAIL(cudaErrorInvalidValue);
  int m = (int)*mode;
  if (m < JN_cudaStreamCaptureModeGlobal || m > JN_cudaStreamCaptureModeRelaxed) FAIL(cudaErrorInvalidValue);
  *mode = (enum cudaStreamCaptureMode)tl_mode;
  tl_mode = m;
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  int kind = jn_stream_classify(stream, NULL);
  if (kind == JN_STREAM_LEGACY) FAIL(cudaErrorStreamCaptureUnsupported); /* not on cudaStreamLegacy */
  if (kind != JN_STREAM_USER) FAIL(cudaErrorInvalidResourceHandle);
  if ((int)mode < JN_cudaStreamCaptureModeGlobal || (int)mode > JN_cudaStreamCaptureModeRelaxed)
    FAIL(cudaErrorInvalidValue);
  capture *c = calloc(1, sizeof(*c));
  if (c == NULL) FAIL(cudaErrorMemoryAllocation);
  c->origin = stream;
  c->mode = (int)mode;
  c->thread = pthread_self();
  pthread_mutex_lock(&g_cap_mu);
  cudaError_t e = cudaSuccess;
  if (find_member(stream, NULL) != NULL) e = cudaErrorIllegalState; /* already capturing */
  else if (add_member(c, stream) == NULL) e = cudaErrorMemoryAllocation;
  if (e == cudaSuccess) {
    c->next = g_caps;
    g_caps = c;
    atomic_fetch_add_explicit(&g_ncaps, 1, memory_order_release);
  }
  pthread_mutex_unlock(&g_cap_mu);
  if (e != cudaSuccess) {
    free(c->m);
    free(c);
    FAIL(e);
  }
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph) {
  if (pGraph == NULL) FAIL(cudaErrorInvalidValue);
  int kind = jn_stream_classify(stream, NULL);
  if (kind != JN_STREAM_USER && kind != JN_STREAM_LEGACY) FAIL(cudaErrorInvalidResourceHandle);
  struct CUgraph_st *g = calloc(1, sizeof(*g));
  if (g == NULL) FAIL(cudaErrorMemoryAllocation);
  pthread_mutex_lock(&g_cap_mu);
  capture *c = NULL;
  cudaError_t e = cudaSuccess;
  if (find_member(stream, &c) == NULL) {
    e = cudaErrorIllegalState; /* not capturing */
  } else if (c->origin != stream) {
    c->invalid = 1;
    e = cudaErrorStreamCaptureUnmatched;
  } else if (c->mode != JN_cudaStreamCaptureModeRelaxed && !pthread_equal(c->thread, pthread_self())) {
    e = cudaErrorStreamCaptureWrongThread;
  }
  if (e == cudaSuccess) {
    if (c->invalid) e = cudaErrorStreamCaptureInvalidated;
    else if (!capture_joined(c)) e = cudaErrorStreamCaptureUnjoined;
    capture_unlink(c);
    if (e == cudaSuccess) {
      g->l.nodes = c->nodes;
      g->l.n = c->nn;
      g->l.next = g_graphs;
      g_graphs = &g->l;
      c->nodes = NULL;
      c->nn = 0;
    }
  }
  pthread_mutex_unlock(&g_cap_mu);
  *pGraph = e == cudaSuccess ? g : NULL;
  if (e != cudaSuccess) free(g);
  if (c != NULL && (e == cudaSuccess || e == cudaErrorStreamCaptureInvalidated || e == cudaErrorStreamCaptureUnjoined)) {
    for (int i = 0; i < c->nn; i++) jn_node_put(c->nodes[i]); /* a failed capture's nodes */
    free(c->nodes);
    free(c);
  }
  if (e != cudaSuccess) FAIL(e);
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus) {
  if (pCaptureStatus == NULL) FAIL(cudaErrorInvalidValue);
  int kind = jn_stream_classify(stream, NULL);
  if (kind == JN_STREAM_LEGACY) { /* the legacy stream never captures (see the README) */
    *pCaptureStatus = (enum cudaStreamCaptureStatus)JN_CAPTURE_NONE;
    return cudaSuccess;
  }
  if (kind != JN_STREAM_USER) FAIL(cudaErrorInvalidResourceHandle);
  *pCaptureStatus = (enum cudaStreamCaptureStatus)jn_capture_status(stream);
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  if (!list_unlink(&g_graphs, graph)) FAIL(cudaErrorInvalidResourceHandle);
  list_release(&graph->l);
  free(graph);
  return cudaSuccess;
}

/* Flags accepted: AutoFreeOnLaunch and UseNodePriority mean nothing here (the emulation has no
 * graph memory nodes and no priorities); Upload and DeviceLaunch are not emulated. */
#define JN_GRAPH_FLAGS_OK (JN_cudaGraphInstantiateFlagAutoFreeOnLaunch | JN_cudaGraphInstantiateFlagUseNodePriority)

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags) {
  if (pGraphExec == NULL) FAIL(cudaErrorInvalidValue);
  if (flags & ~(unsigned long long)JN_GRAPH_FLAGS_OK) FAIL(cudaErrorInvalidValue);
  struct CUgraphExec_st *x = calloc(1, sizeof(*x));
  if (x == NULL) FAIL(cudaErrorMemoryAllocation);
  if (cudaEventCreateWithFlags(&x->order, JN_cudaEventDisableTiming) != cudaSuccess) {
    free(x);
    FAIL(cudaErrorMemoryAllocation);
  }
  pthread_mutex_lock(&g_cap_mu);
  nodelist *g = list_has(g_graphs, graph) ? &graph->l : NULL;
  cudaError_t e = g == NULL ? cudaErrorInvalidResourceHandle : cudaSuccess;
  if (g != NULL && !list_share(g, &x->l.nodes)) e = cudaErrorMemoryAllocation; /* the exec shares the nodes */
  if (e == cudaSuccess) {
    x->l.n = g->n;
    x->l.next = g_execs;
    g_execs = &x->l;
  }
  pthread_mutex_unlock(&g_cap_mu);
  if (e != cudaSuccess) {
    cudaEventDestroy(x->order);
    free(x->l.nodes);
    free(x);
    FAIL(e);
  }
  *pGraphExec = x;
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  if (!list_unlink(&g_execs, graphExec)) FAIL(cudaErrorInvalidResourceHandle);
  list_release(&graphExec->l);
  cudaEventDestroy(graphExec->order);
  free(graphExec);
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  int kind = jn_stream_classify(stream, NULL);
  if (kind != JN_STREAM_USER && kind != JN_STREAM_LEGACY) FAIL(cudaErrorInvalidResourceHandle);
  /* A launch into a capture would be a child graph node: not emulated, refused as unsupported. */
  cudaError_t e = jn_capture_refuse_stream(stream);
  if (e != cudaSuccess) FAIL(e);
  pthread_mutex_lock(&g_cap_mu);
  struct CUgraphExec_st *x = list_has(g_execs, graphExec) ? graphExec : NULL;
  jn_node **nodes = NULL;
  int n = 0;
  cudaEvent_t order = x != NULL ? x->order : NULL;
  if (x == NULL) e = cudaErrorInvalidResourceHandle;
  else if (!list_share(&x->l, &nodes)) e = cudaErrorMemoryAllocation; /* a concurrent destroy cannot free them */
  else n = x->l.n;
  pthread_mutex_unlock(&g_cap_mu);
  /* "Each launch is ordered behind both any previous work in stream and any previous launches of
   * graphExec" (cudaGraphLaunch), also when the launches use different streams. */
  if (e == cudaSuccess) e = cudaStreamWaitEvent(stream, order, 0);
  for (int i = 0; i < n; i++) {
    if (e == cudaSuccess) e = nodes[i]->launch(nodes[i], stream);
    jn_node_put(nodes[i]);
  }
  if (e == cudaSuccess) e = cudaEventRecord(order, stream);
  free(nodes);
  if (e != cudaSuccess) FAIL(e);
  return cudaSuccess;
}

/* ========================================================= event nodes */

typedef struct {
  jn_node base;
  cudaEvent_t event;
} event_node;

static cudaError_t record_launch(jn_node *n, cudaStream_t s) { return cudaEventRecord(((event_node *)n)->event, s); }
static cudaError_t wait_launch(jn_node *n, cudaStream_t s) { return cudaStreamWaitEvent(s, ((event_node *)n)->event, 0); }
static void event_node_release(jn_node *n) { free(n); }

jn_node *jn_event_node(cudaEvent_t event, int wait) {
  event_node *n = calloc(1, sizeof(*n));
  if (n == NULL) return NULL;
  jn_node_init(&n->base, wait ? wait_launch : record_launch, event_node_release);
  n->event = event;
  return &n->base;
}
