/*
 * What an MPI implementation does when one process of a job dies (SIGKILL), seen by the
 * survivors the way jnccl's MPI host side talks: point-to-point messages on a duplicate of
 * MPI_COMM_WORLD with MPI_ERRORS_RETURN, Isend/Irecv polled with MPI_Test, every wait bounded.
 *
 *   mpicc.openmpi -o lostrank lostrank.c && mpirun.openmpi --enable-recovery -np 3 ./lostrank
 *
 * Rank LOSTRANK_DEAD (default size-1) SIGKILLs itself after one exchange among all ranks. The survivors then:
 *   b) exchange ROUNDS rounds of messages among themselves (never with the dead rank);
 *   c) wait (bounded) for a message from the dead rank posted before it died, and send it a
 *      small and a large message: does MPI_Test report an error, or never complete?
 *   b') exchange among themselves again (does an error about the dead rank poison the rest?);
 *   d) MPI_Finalize, with an alarm that names a hang.
 * Each step prints one line "rank R STEP: RESULT".
 */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 20
#define BIG (1 << 22)

static int rank, size, dead = -1; /* the dead rank, skipped by exchange() once it died */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static const char *error_text(int code) {
    static char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    return text;
}

/* Polls req until it completes, fails or `seconds` pass; describes what happened. */
static const char *poll(MPI_Request *req, double seconds) {
    static char out[600];
    double start = now();
    while (1) {
        int done = 0;
        MPI_Status status;
        int rc = MPI_Test(req, &done, &status);
        if (rc != MPI_SUCCESS) {
            snprintf(out, sizeof out, "error after %.0f ms: %s", (now() - start) * 1e3, error_text(rc));
            return out;
        }
        if (done) {
            snprintf(out, sizeof out, "completed after %.0f ms", (now() - start) * 1e3);
            return out;
        }
        if (now() - start > seconds) {
            snprintf(out, sizeof out, "still pending after %.0f s", seconds);
            return out;
        }
        usleep(1000);
    }
}

/* One round among ranks 0..count-1 but `dead`: each sends its rank+round to every other, checks what it gets. */
static int exchange(MPI_Comm comm, int count, int round, int tag) {
    int sent = rank * 1000 + round, got[16];
    MPI_Request reqs[32];
    int n = 0;
    for (int peer = 0; peer < count; peer++) {
        if (peer == rank || peer == dead) continue;
        int rc = MPI_Irecv(&got[peer], 1, MPI_INT, peer, tag, comm, &reqs[n++]);
        if (rc != MPI_SUCCESS) { printf("rank %d irecv from %d: %s\n", rank, peer, error_text(rc)); return 0; }
    }
    for (int peer = 0; peer < count; peer++) {
        if (peer == rank || peer == dead) continue;
        int rc = MPI_Isend(&sent, 1, MPI_INT, peer, tag, comm, &reqs[n++]);
        if (rc != MPI_SUCCESS) { printf("rank %d isend to %d: %s\n", rank, peer, error_text(rc)); return 0; }
    }
    for (int i = 0; i < n; i++) {
        const char *what = poll(&reqs[i], 10);
        if (strncmp(what, "completed", 9) != 0) { printf("rank %d round %d request %d: %s\n", rank, round, i, what); return 0; }
    }
    for (int peer = 0; peer < count; peer++) {
        if (peer != rank && peer != dead && got[peer] != peer * 1000 + round) {
            printf("rank %d round %d: got %d from %d\n", rank, round, got[peer], peer);
            return 0;
        }
    }
    return 1;
}

static void finalize_hang(int signal) {
    (void) signal;
    static const char text[] = "FINALIZE HANG (30 s)\n";
    write(1, text, sizeof text - 1);
    _exit(3);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    setvbuf(stdout, NULL, _IOLBF, 0);
    int victim = getenv("LOSTRANK_DEAD") ? atoi(getenv("LOSTRANK_DEAD")) : size - 1;
    printf("rank %d pid %d: all-ranks exchange %s\n", rank, (int) getpid(), exchange(comm, size, 0, 1) ? "ok" : "FAILED");
    dead = victim;
    MPI_Request early;
    int from_dead = 0;
    if (rank != dead) {
        MPI_Irecv(&from_dead, 1, MPI_INT, dead, 7, comm, &early); /* posted while the rank lives */
    }
    MPI_Barrier(comm);
    if (rank == dead) {
        raise(SIGKILL);
    }
    if (!getenv("LOSTRANK_QUICK")) sleep(1);
    double start = now();
    int ok = 1;
    for (int round = 1; round <= ROUNDS && ok; round++) ok = exchange(comm, size, round, 2);
    printf("rank %d b) survivors' exchange, %d rounds: %s (%.0f ms)\n", rank, ROUNDS, ok ? "ok" : "FAILED", (now() - start) * 1e3);
    if (getenv("LOSTRANK_QUICK")) goto finalize; /* d) right after the death */
    printf("rank %d c) receive from the dead rank posted before its death: %s\n", rank, poll(&early, 5));
    int small = 42;
    MPI_Request req;
    int rc = MPI_Isend(&small, 1, MPI_INT, dead, 8, comm, &req);
    printf("rank %d c) small send to the dead rank: %s\n", rank, rc != MPI_SUCCESS ? error_text(rc) : poll(&req, 5));
    char *big = calloc(BIG, 1);
    rc = MPI_Isend(big, BIG, MPI_CHAR, dead, 9, comm, &req);
    printf("rank %d c) %d-byte send to the dead rank: %s\n", rank, BIG, rc != MPI_SUCCESS ? error_text(rc) : poll(&req, 5));
    rc = MPI_Irecv(&from_dead, 1, MPI_INT, dead, 10, comm, &req);
    printf("rank %d c) receive from the dead rank posted after its death: %s\n", rank, rc != MPI_SUCCESS ? error_text(rc) : poll(&req, 5));
    ok = 1;
    start = now();
    for (int round = 1; round <= ROUNDS && ok; round++) ok = exchange(comm, size, round, 3);
    printf("rank %d b') survivors' exchange after c): %s (%.0f ms)\n", rank, ok ? "ok" : "FAILED", (now() - start) * 1e3);
    /* e) a communicator of the survivors, made by the survivors only (MPI_Comm_create_group is
     * collective over the group's members, not the parent's), used and freed; the parent freed. */
    MPI_Group world_group, survivors_group;
    MPI_Comm survivors;
    int members[16];
    int survivor_count = 0;
    for (int i = 0; i < size; i++) if (i != dead) members[survivor_count++] = i;
    MPI_Comm_group(comm, &world_group);
    MPI_Group_incl(world_group, survivor_count, members, &survivors_group);
    start = now();
    rc = MPI_Comm_create_group(comm, survivors_group, 11, &survivors);
    printf("rank %d e) MPI_Comm_create_group of the survivors: %s (%.0f ms)\n", rank, rc == MPI_SUCCESS ? "ok" : error_text(rc), (now() - start) * 1e3);
    if (rc == MPI_SUCCESS) {
        int sum = 0, one = rank + 1;
        MPI_Comm_set_errhandler(survivors, MPI_ERRORS_RETURN);
        rc = MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, survivors);
        printf("rank %d e) all-reduce on it: rc %d sum %d (expected %d)\n", rank, rc, sum, size * (size + 1) / 2 - (dead + 1));
        printf("rank %d e) MPI_Comm_free of it: %d\n", rank, MPI_Comm_free(&survivors));
    }
    printf("rank %d e) MPI_Comm_free of the parent: %d\n", rank, MPI_Comm_free(&comm));
finalize:
    if (getenv("LOSTRANK_NO_FINALIZE")) { printf("rank %d exits without MPI_Finalize\n", rank); return 0; }
    signal(SIGALRM, finalize_hang);
    alarm(30);
    start = now();
    rc = MPI_Finalize();
    printf("rank %d d) MPI_Finalize: %d after %.0f ms\n", rank, rc, (now() - start) * 1e3);
    return 0;
}
