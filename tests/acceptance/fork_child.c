/* fork_child: what a fork's child may do with its parent's handles, checked
 * from a C99 program as 2 processes (fork_child_test runs it over shared
 * memory and over TCP):
 *
 *   hcomm_run -n 2 --timeout 60 -- fork_child
 *
 * Each rank makes a channel and posts a receive, then forks. The child
 * (which has the parent's handles but none of its threads, and shares its
 * sockets and channels):
 *   - maps none of the communicator's segments in /dev/shm (the parent maps
 *     some over shared memory);
 *   - reads its rank and size;
 *   - is refused (HCOMM_ERR_INVALID_ARGUMENT, naming the fork) an
 *     allreduce, a send, a wait on the parent's request, a split and an
 *     abort;
 *   - writes a message into the parent's channel;
 *   - frees the request, destroys the communicator and closes the channel,
 *     each at once and successfully,
 * and exits through exit(). The parent then finds its job untouched: the
 * posted receive gets the peer's message, an allreduce sums, the child's
 * message is in the channel, and the channel's name still opens.
 *
 * Last, rank 1 forks a child that lingers (reading a channel) and dies
 * without destroying its communicator: rank 0's pending receive from it
 * must fail with HCOMM_ERR_PEER_FAILURE within 10 s (the child holds none
 * of the dead rank's connections open), after which rank 0 lets the
 * lingering child go through a channel.
 *
 * Prints "ok: all" at the end; the first failure prints "FAIL: ..." and
 * exits 1.
 */
#define _POSIX_C_SOURCE 200809L

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hcomm/hcomm.h"

static const char* g_who = "parent";

static double NowS(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void Fail(const char* what, hcomm_status_t st) {
  fprintf(stderr, "FAIL: %s: %s returned %d (%s)\n", g_who, what, (int)st, hcomm_last_error());
  exit(1);
}

#define CALL(expr)                                  \
  do {                                              \
    hcomm_status_t st_ = (expr);                    \
    if (st_ != HCOMM_SUCCESS) Fail(#expr, st_);     \
  } while (0)

/* The call must be refused as a parent's handle, naming the fork. */
#define REFUSED(expr)                                                          \
  do {                                                                         \
    hcomm_status_t st_ = (expr);                                               \
    if (st_ != HCOMM_ERR_INVALID_ARGUMENT || !strstr(hcomm_last_error(), "fork")) \
      Fail(#expr " (want INVALID_ARGUMENT naming the fork)", st_);             \
  } while (0)

/* How many of this process's mappings are hcomm segments in /dev/shm
 * (channels, /dev/shm/hcomm-ch-*, aside), or -1. */
static int HcommSegments(void) {
  FILE* f = fopen("/proc/self/maps", "r");
  if (f == NULL) return -1;
  char line[1024];
  int n = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    if (strstr(line, "/dev/shm/hcomm-") != NULL && strstr(line, "/dev/shm/hcomm-ch-") == NULL) {
      ++n;
    }
  }
  fclose(f);
  return n;
}

static void Child(hcomm_comm_t comm, hcomm_request_t req, hcomm_channel_t ch, int rank) {
  g_who = "child";
  const int segments = HcommSegments();
  if (segments != 0) {
    fprintf(stderr, "FAIL: child: maps %d of its parent's segments, want none\n", segments);
    exit(1);
  }
  int r = -1, n = 0;
  CALL(hcomm_comm_rank(comm, &r));
  CALL(hcomm_comm_size(comm, &n));
  if (r != rank || n != 2) {
    fprintf(stderr, "FAIL: child: rank %d of %d, want %d of 2\n", r, n, rank);
    exit(1);
  }
  float v = 1.0f;
  int x = 0;
  hcomm_comm_t sub = NULL;
  REFUSED(hcomm_allreduce(&v, &v, 1, HCOMM_FLOAT32, HCOMM_SUM, comm));
  REFUSED(hcomm_send(&x, 1, HCOMM_INT32, 1 - rank, 5, comm));
  REFUSED(hcomm_wait(req));
  REFUSED(hcomm_comm_split(comm, 0, 0, &sub));
  REFUSED(hcomm_comm_abort(comm));
  const char msg[] = "from the child";
  CALL(hcomm_channel_write(ch, msg, sizeof msg, 1000));
  const double t0 = NowS();
  CALL(hcomm_request_free(req));
  CALL(hcomm_comm_destroy(comm));
  CALL(hcomm_channel_close(ch));
  const double took = NowS() - t0;
  if (took > 1.0) {
    fprintf(stderr, "FAIL: child: letting go of the handles took %.2f s\n", took);
    exit(1);
  }
  exit(0); /* through atexit, as a normal program ends */
}

/* A name for this job's channels: the key hcomm_run made for it (pids
 * repeat between runs in a sandbox; the job token is a secret). */
static const char* JobName(void) {
  const char* key = getenv("HCOMM_JOB_KEY");
  return key != NULL && key[0] != '\0' ? key : "nokey";
}

/* Rank 1 dies leaving a forked child alive; rank 0 must see it die. */
static int Linger(hcomm_comm_t comm, int rank) {
  char name[64];
  snprintf(name, sizeof name, "fork-linger-%s", JobName());
  hcomm_channel_t linger = NULL;
  if (rank == 0) CALL(hcomm_channel_open(name, 4096, 1, &linger));
  CALL(hcomm_barrier(comm)); /* the channel exists */
  if (rank == 1) {
    CALL(hcomm_channel_open(name, 0, 0, &linger));
    printf("ok: all\n");
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0) {
      perror("FAIL: fork");
      return 1;
    }
    if (pid == 0) {
      /* Off the launcher's pipes, which it reads until they close. */
      const int devnull = open("/dev/null", O_WRONLY);
      dup2(devnull, 1);
      dup2(devnull, 2);
      char b[16];
      size_t n = 0;
      hcomm_channel_read(linger, b, sizeof b, &n, 20000);
      _exit(0);
    }
    _exit(0); /* no destroy: as a crash would leave it */
  }
  CALL(hcomm_comm_set(comm, "timeout_ms", "30000"));
  int x = 0;
  const double t0 = NowS();
  const hcomm_status_t st = hcomm_recv(&x, 1, HCOMM_INT32, 1, 9, comm);
  const double took = NowS() - t0;
  const int ok = st == HCOMM_ERR_PEER_FAILURE && took <= 10.0;
  if (!ok) {
    fprintf(stderr, "FAIL: parent: receive from a rank that died with a forked child alive "
            "returned %d after %.2f s (want PEER_FAILURE within 10 s): %s\n", (int)st, took,
            hcomm_last_error());
  }
  CALL(hcomm_channel_write(linger, "go", 3, 1000)); /* the child may go */
  CALL(hcomm_channel_close(linger));
  if (!ok) return 1;
  printf("ok: a dead rank's lingering child holds nothing open (%.2f s)\n", took);
  CALL(hcomm_comm_destroy(comm));
  printf("ok: all\n");
  return 0;
}

int main(void) {
  hcomm_comm_t comm = NULL;
  CALL(hcomm_comm_init(NULL, &comm));
  int rank = -1;
  CALL(hcomm_comm_rank(comm, &rank));
  const int peer = 1 - rank;

  char name[64];
  snprintf(name, sizeof name, "fork-child-%s-%d", JobName(), rank);
  hcomm_channel_t ch = NULL;
  CALL(hcomm_channel_open(name, 4096, 1, &ch));
  int got = -1;
  hcomm_request_t req = NULL;
  CALL(hcomm_irecv(&got, 1, HCOMM_INT32, peer, 7, comm, &req));
  float one = 1.0f; /* makes the collectives' segment where ranks share memory */
  CALL(hcomm_allreduce(&one, &one, 1, HCOMM_FLOAT32, HCOMM_SUM, comm));
  const char* transports = getenv("HCOMM_TRANSPORTS");
  if (transports != NULL && strcmp(transports, "shm") == 0 && HcommSegments() <= 0) {
    fprintf(stderr, "FAIL: parent: maps no segment in /dev/shm over shared memory\n");
    return 1;
  }

  fflush(NULL);
  const pid_t pid = fork();
  if (pid < 0) {
    perror("FAIL: fork");
    return 1;
  }
  if (pid == 0) Child(comm, req, ch, rank);

  /* The child has 20 s; one stuck letting go would fail here. */
  int status = 0;
  const double deadline = NowS() + 20.0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (NowS() > deadline) {
      kill(pid, SIGKILL);
      fprintf(stderr, "FAIL: parent: the child did not exit within 20 s\n");
      return 1;
    }
    struct timespec nap = {0, 10 * 1000 * 1000};
    nanosleep(&nap, NULL);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "FAIL: parent: the child ended with status 0x%x\n", status);
    return 1;
  }
  printf("ok: child\n");

  /* Both children are done before either rank sends. */
  CALL(hcomm_barrier(comm));
  const int mine = 100 + rank;
  CALL(hcomm_send(&mine, 1, HCOMM_INT32, peer, 7, comm));
  CALL(hcomm_wait(req));
  CALL(hcomm_request_free(req));
  if (got != 100 + peer) {
    fprintf(stderr, "FAIL: parent: the posted receive got %d, want %d\n", got, 100 + peer);
    return 1;
  }
  float sum = (float)(rank + 1);
  CALL(hcomm_allreduce(&sum, &sum, 1, HCOMM_FLOAT32, HCOMM_SUM, comm));
  if (sum != 3.0f) {
    fprintf(stderr, "FAIL: parent: allreduce gave %g, want 3\n", (double)sum);
    return 1;
  }
  printf("ok: job\n");

  char buf[64] = {0};
  size_t len = 0;
  CALL(hcomm_channel_read(ch, buf, sizeof buf, &len, 1000));
  if (strcmp(buf, "from the child") != 0) {
    fprintf(stderr, "FAIL: parent: the channel held '%s'\n", buf);
    return 1;
  }
  hcomm_channel_t again = NULL;
  CALL(hcomm_channel_open(name, 0, 0, &again)); /* the child's close left the name */
  CALL(hcomm_channel_close(again));
  CALL(hcomm_channel_close(ch));
  printf("ok: channel\n");
  return Linger(comm, rank);
}
