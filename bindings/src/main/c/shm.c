/*
 * shm.c - POSIX shared-memory segments for the communicators' rendezvous,
 * and the process-shared synchronisation helpers used inside them.
 *
 * A segment is created by the first rank that arrives (shm_open with
 * O_CREAT|O_EXCL, mode 0600), sized with ftruncate and backed up-front with
 * posix_fallocate, so a full /dev/shm is an error at init rather than a
 * SIGBUS later. The creator initialises it and then sets prefix.ready; ranks
 * that find it existing open it and wait (bounded, re-checking an abort flag)
 * for that. Ranks that are threads of one process share one mapping (a small
 * process-local table keyed by name, reference counted), which also lets
 * ThreadSanitizer see the cross-rank synchronisation. When to unlink is the
 * caller's decision (init.c unlinks as soon as every rank has joined).
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_mutex_t g_seg_mu = PTHREAD_MUTEX_INITIALIZER;
static jn_seg *g_segs; /* this process's mappings */

static ncclResult_t seg_error(char *err, size_t errlen, ncclResult_t code, const char *fmt, const char *name,
                              int e) {
  snprintf(err, errlen, fmt, name, strerror(e));
  return code;
}

/* Creates, sizes and initialises the segment as its creator. fd is open O_RDWR. */
static ncclResult_t seg_create(int fd, const char *name, size_t size, void (*init)(void *, void *), void *arg,
                               void **base_out, char *err, size_t errlen) {
  if (ftruncate(fd, (off_t)size) != 0) return seg_error(err, errlen, ncclSystemError, "ftruncate(%s): %s", name, errno);
  int rc = posix_fallocate(fd, 0, (off_t)size);
  if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL)
    return seg_error(err, errlen, ncclSystemError, "cannot allocate shared memory %s (is /dev/shm full?): %s", name,
                     rc);
  void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return seg_error(err, errlen, ncclSystemError, "mmap(%s): %s", name, errno);
  jn_seg_prefix *p = base;
  p->size = size;
  init(base, arg);
  atomic_store_explicit(&p->ready, 1, memory_order_release);
  *base_out = base;
  return ncclSuccess;
}

/* Maps a segment another process (or a thread of another process) creates, waiting until
 * its creator marked it ready. */
static ncclResult_t seg_open_existing(int fd, const char *name, uint64_t deadline_ns, _Atomic int *abort_flag,
                                      void **base_out, size_t *size_out, char *err, size_t errlen) {
  struct stat st;
  void *base = NULL;
  size_t size = 0;
  for (;;) {
    if (base == NULL) {
      if (fstat(fd, &st) != 0) return seg_error(err, errlen, ncclSystemError, "fstat(%s): %s", name, errno);
      if ((size_t)st.st_size >= sizeof(jn_seg_prefix)) { /* sized: the creator is initialising */
        size = (size_t)st.st_size;
        base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (base == MAP_FAILED) return seg_error(err, errlen, ncclSystemError, "mmap(%s): %s", name, errno);
      }
    }
    if (base != NULL && atomic_load_explicit(&((jn_seg_prefix *)base)->ready, memory_order_acquire) == 1) break;
    if (abort_flag != NULL && atomic_load(abort_flag)) {
      snprintf(err, errlen, "communicator aborted while waiting for shared memory %s", name);
      if (base != NULL) munmap(base, size);
      return ncclInvalidUsage;
    }
    if (jn_now_ns() > deadline_ns) {
      snprintf(err, errlen, "timed out waiting for the creator of shared memory %s to initialise it", name);
      if (base != NULL) munmap(base, size);
      return ncclSystemError;
    }
    jn_sleep_us(500);
  }
  *base_out = base;
  *size_out = size;
  return ncclSuccess;
}

ncclResult_t jn_seg_attach(const char *name, size_t create_size, void (*init)(void *base, void *arg), void *arg,
                           long timeout_ms, _Atomic int *abort_flag, jn_seg **out, char *err, size_t errlen) {
  if (strlen(name) >= sizeof(((jn_seg *)0)->name)) {
    snprintf(err, errlen, "shared memory name too long");
    return ncclInternalError;
  }
  pthread_mutex_lock(&g_seg_mu);
  for (jn_seg *s = g_segs; s != NULL; s = s->next) {
    if (strcmp(s->name, name) == 0) {
      s->refs++;
      pthread_mutex_unlock(&g_seg_mu);
      *out = s;
      return ncclSuccess;
    }
  }
  uint64_t deadline = jn_now_ns() + (uint64_t)timeout_ms * 1000000ull;
  void *base = NULL;
  size_t size = 0;
  ncclResult_t rc = ncclSuccess;
  for (;;) {
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd >= 0) { /* we are the creator */
      rc = seg_create(fd, name, create_size, init, arg, &base, err, errlen);
      close(fd);
      if (rc != ncclSuccess) shm_unlink(name);
      size = create_size;
      break;
    }
    if (errno != EEXIST) {
      rc = seg_error(err, errlen, ncclSystemError, "shm_open(%s): %s", name, errno);
      break;
    }
    fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) {
      if (errno == ENOENT) continue; /* unlinked between our two calls: try to create it again */
      rc = seg_error(err, errlen, ncclSystemError, "shm_open(%s): %s", name, errno);
      break;
    }
    rc = seg_open_existing(fd, name, deadline, abort_flag, &base, &size, err, errlen);
    close(fd);
    break;
  }
  if (rc != ncclSuccess) {
    pthread_mutex_unlock(&g_seg_mu);
    return rc;
  }
  jn_seg *s = calloc(1, sizeof(*s));
  if (s == NULL) {
    munmap(base, size);
    pthread_mutex_unlock(&g_seg_mu);
    snprintf(err, errlen, "out of memory");
    return ncclSystemError;
  }
  snprintf(s->name, sizeof s->name, "%s", name);
  s->base = base;
  s->size = size;
  s->refs = 1;
  s->next = g_segs;
  g_segs = s;
  pthread_mutex_unlock(&g_seg_mu);
  *out = s;
  return ncclSuccess;
}

void jn_seg_detach(jn_seg *seg) {
  pthread_mutex_lock(&g_seg_mu);
  if (--seg->refs == 0) {
    jn_seg **pp = &g_segs;
    while (*pp != seg) pp = &(*pp)->next;
    *pp = seg->next;
    munmap(seg->base, seg->size);
    free(seg);
  }
  pthread_mutex_unlock(&g_seg_mu);
}

void jn_seg_unlink(const char *name) { shm_unlink(name); }

/* ================================================= process-shared primitives */

void jn_pshared_mutex_init(pthread_mutex_t *mu) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  /* Robust: if a rank's process dies holding it, the next locker gets EOWNERDEAD and
   * carries on instead of blocking forever. */
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(mu, &a);
  pthread_mutexattr_destroy(&a);
}

void jn_pshared_cond_init(jn_pcond *cv) { atomic_store(&cv->seq, 0); }

void jn_pcond_broadcast(jn_pcond *cv) {
  atomic_fetch_add(&cv->seq, 1);
  /* A shared (not FUTEX_PRIVATE) futex: the word lives in a mapping shared between processes. */
  syscall(SYS_futex, (uint32_t *)&cv->seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

int jn_plock(pthread_mutex_t *mu) {
  int rc = pthread_mutex_lock(mu);
  if (rc == EOWNERDEAD) {
    pthread_mutex_consistent(mu);
    return 1;
  }
  return 0;
}

void jn_punlock(pthread_mutex_t *mu) { pthread_mutex_unlock(mu); }

void jn_pcond_wait_ms(jn_pcond *cv, pthread_mutex_t *mu, long ms) {
  /* The sequence is read with the mutex held, and broadcasts bump it with the mutex held: a
   * broadcast after the unlock changes the word, so FUTEX_WAIT returns at once (no lost wake-up). */
  uint32_t seen = atomic_load(&cv->seq);
  pthread_mutex_unlock(mu);
  struct timespec rel = {ms / 1000, (ms % 1000) * 1000000L};
  syscall(SYS_futex, (uint32_t *)&cv->seq, FUTEX_WAIT, seen, &rel, NULL, 0);
  jn_plock(mu);
}

uint64_t jn_host_hash(void) {
  char name[256] = "";
  const char *id = getenv("NCCL_HOSTID");
  if (id != NULL && id[0] != '\0') {
    snprintf(name, sizeof name, "id:%s", id);
  } else if (gethostname(name, sizeof name - 1) != 0) {
    name[0] = '\0';
  }
  uint64_t hash = 0xcbf29ce484222325ull; /* FNV-1a */
  for (const char *p = name; *p != '\0'; p++) hash = (hash ^ (unsigned char)*p) * 0x100000001b3ull;
  return hash;
}
