/* channel_c_test: hcomm_channel_* through the public C header, checked from
 * a plain C99 program linked against libhcomm_c.so. Prints "ok: <check>"
 * per check and "ok: all" at the end; the first failure prints
 * "FAIL: <check>: ..." with hcomm_last_error() and exits 1.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hcomm/hcomm.h"

static const char* g_check = "start";

static void Fail(int line, const char* what) {
  fprintf(stderr, "FAIL: %s: line %d: %s (last error: \"%s\")\n", g_check, line, what,
          hcomm_last_error());
  exit(1);
}

#define CHECK(cond)                \
  do {                             \
    if (!(cond)) Fail(__LINE__, #cond); \
  } while (0)

/* The call returns `code` and hcomm_last_error() contains `text`. */
#define EXPECT_ERR(call, code, text)                                              \
  do {                                                                            \
    hcomm_status_t st_ = (call);                                                  \
    if (st_ != (code)) {                                                          \
      fprintf(stderr, "FAIL: %s: line %d: %s returned %s, wanted %s\n", g_check,  \
              __LINE__, #call, hcomm_status_string(st_), hcomm_status_string(code)); \
      exit(1);                                                                    \
    }                                                                             \
    if (strstr(hcomm_last_error(), (text)) == NULL) {                             \
      fprintf(stderr, "FAIL: %s: line %d: error \"%s\" lacks \"%s\"\n", g_check,   \
              __LINE__, hcomm_last_error(), (text));                              \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

#define EXPECT_OK(call) CHECK((call) == HCOMM_SUCCESS)

static void Done(void) { printf("ok: %s\n", g_check); }

int main(void) {
  char name[64];
  char other[64];
  char long_name[202];
  char buf[128];
  char path[128];
  unsigned char big[100];
  size_t n = 0;
  hcomm_channel_t ch = NULL;
  hcomm_channel_t reader = NULL;
  hcomm_channel_t refused = NULL;
  hcomm_channel_t junk = (hcomm_channel_t)&n; /* must never be written through */
  int i;

  snprintf(name, sizeof(name), "ctest-%ld", (long)getpid());
  snprintf(other, sizeof(other), "ctest-missing-%ld", (long)getpid());
  memset(long_name, 'a', 201);
  long_name[201] = '\0';
  for (i = 0; i < 100; ++i) big[i] = (unsigned char)(i * 7);

  g_check = "open arguments";
  EXPECT_ERR(hcomm_channel_open(NULL, 64, 1, &ch), HCOMM_ERR_INVALID_ARGUMENT, "name is NULL");
  EXPECT_ERR(hcomm_channel_open(name, 64, 1, NULL), HCOMM_ERR_INVALID_ARGUMENT, "out is NULL");
  ch = junk;
  EXPECT_ERR(hcomm_channel_open("", 64, 1, &ch), HCOMM_ERR_INVALID_ARGUMENT, "name is empty");
  CHECK(ch == NULL);
  EXPECT_ERR(hcomm_channel_open("a/b", 64, 1, &ch), HCOMM_ERR_INVALID_ARGUMENT, "'/'");
  EXPECT_ERR(hcomm_channel_open(long_name, 64, 1, &ch), HCOMM_ERR_INVALID_ARGUMENT,
             "201 characters");
  EXPECT_ERR(hcomm_channel_open(name, 0, 1, &ch), HCOMM_ERR_INVALID_ARGUMENT, "capacity_bytes");
  EXPECT_ERR(hcomm_channel_open(other, 64, 0, &ch), HCOMM_ERR_NO_DEVICE, other);
  CHECK(ch == NULL);
  Done();

  g_check = "create";
  EXPECT_OK(hcomm_channel_open(name, 64, 1, &ch));
  CHECK(ch != NULL);
  EXPECT_ERR(hcomm_channel_open(name, 64, 1, &reader), HCOMM_ERR_INVALID_ARGUMENT,
             "already exists");
  CHECK(reader == NULL);
  EXPECT_OK(hcomm_channel_open(name, 0, 0, &reader));
  Done();

  /* An existing segment that others may write is never mapped. */
  g_check = "open refuses a world-writable segment";
  snprintf(path, sizeof(path), "/dev/shm/hcomm-ch-%s", name);
  CHECK(chmod(path, 0666) == 0);
  EXPECT_ERR(hcomm_channel_open(name, 0, 0, &refused), HCOMM_ERR_PERMISSION_DENIED, "mode 0666");
  CHECK(refused == NULL);
  CHECK(strstr(hcomm_last_error(), path) != NULL);
  CHECK(chmod(path, 0600) == 0);
  Done();

  g_check = "write arguments";
  EXPECT_ERR(hcomm_channel_write(NULL, "x", 1, 0), HCOMM_ERR_INVALID_ARGUMENT, "ch is NULL");
  EXPECT_ERR(hcomm_channel_write(ch, NULL, 5, 0), HCOMM_ERR_INVALID_ARGUMENT,
             "data is NULL with nbytes 5");
  EXPECT_ERR(hcomm_channel_write(ch, "x", 1, -1), HCOMM_ERR_INVALID_ARGUMENT, "timeout_ms");
  EXPECT_ERR(hcomm_channel_write(ch, big, 57, 1000), HCOMM_ERR_INVALID_ARGUMENT,
             "can never fit");
  Done();

  g_check = "read arguments";
  EXPECT_ERR(hcomm_channel_read(NULL, buf, sizeof(buf), &n, 0), HCOMM_ERR_INVALID_ARGUMENT,
             "ch is NULL");
  EXPECT_ERR(hcomm_channel_read(reader, NULL, 4, &n, 0), HCOMM_ERR_INVALID_ARGUMENT,
             "buf is NULL");
  EXPECT_ERR(hcomm_channel_read(reader, buf, sizeof(buf), NULL, 0), HCOMM_ERR_INVALID_ARGUMENT,
             "nbytes is NULL");
  EXPECT_ERR(hcomm_channel_read(reader, buf, sizeof(buf), &n, -5), HCOMM_ERR_INVALID_ARGUMENT,
             "timeout_ms");
  Done();

  g_check = "empty read times out";
  EXPECT_ERR(hcomm_channel_read(reader, buf, sizeof(buf), &n, 0), HCOMM_ERR_TIMEOUT, name);
  EXPECT_ERR(hcomm_channel_read(reader, buf, sizeof(buf), &n, 20), HCOMM_ERR_TIMEOUT, "empty");
  Done();

  g_check = "round trip";
  EXPECT_OK(hcomm_channel_write(ch, NULL, 0, 0)); /* an empty message is a message */
  EXPECT_OK(hcomm_channel_write(ch, big, 40, 0));
  n = 99;
  EXPECT_OK(hcomm_channel_read(reader, NULL, 0, &n, 1000));
  CHECK(n == 0);
  EXPECT_OK(hcomm_channel_read(reader, buf, sizeof(buf), &n, 1000));
  CHECK(n == 40);
  CHECK(memcmp(buf, big, 40) == 0);
  Done();

  g_check = "full write times out";
  EXPECT_OK(hcomm_channel_write(ch, big, 48, 0)); /* 56 of 64 bytes */
  EXPECT_ERR(hcomm_channel_write(ch, big, 16, 0), HCOMM_ERR_TIMEOUT, "8 of 64 bytes are free");
  Done();

  g_check = "mismatch keeps the message";
  n = 0;
  EXPECT_ERR(hcomm_channel_read(reader, buf, 10, &n, 0), HCOMM_ERR_MISMATCH, "48 bytes");
  CHECK(n == 48);
  EXPECT_OK(hcomm_channel_read(reader, buf, sizeof(buf), &n, 0));
  CHECK(n == 48);
  CHECK(memcmp(buf, big, 48) == 0);
  Done();

  g_check = "close";
  EXPECT_OK(hcomm_channel_close(NULL));
  EXPECT_OK(hcomm_channel_close(ch)); /* the creator: removes the name */
  ch = NULL;
  EXPECT_ERR(hcomm_channel_open(name, 0, 0, &ch), HCOMM_ERR_NO_DEVICE, name);
  EXPECT_OK(hcomm_channel_write(reader, "still", 5, 0)); /* open handles keep working */
  EXPECT_OK(hcomm_channel_read(reader, buf, sizeof(buf), &n, 0));
  CHECK(n == 5 && memcmp(buf, "still", 5) == 0);
  EXPECT_OK(hcomm_channel_close(reader));
  Done();

  g_check = "all";
  Done();
  return 0;
}
