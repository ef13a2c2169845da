/* repeat_bench: repeated point-to-point sends of one message that changes a
 * little each time, the case `compression=delta` is made for
 * (docs/compression.md). Written against the public C API only.
 *
 *   hcomm_run -n 2 -- repeat_bench -s 16M -n 20 -p 1 -z delta
 *
 * Rank 0 sends -n messages of -s bytes to rank 1 under one tag; before each
 * send it changes -p percent of the bytes (XOR at positions drawn from a
 * generator seeded with the message's number). Rank 1 builds the same
 * messages the same way and checks that every one arrived bit-identical,
 * receiving into two buffers in turn (the next receive is posted before the
 * last message is checked).
 * The first message (which travels whole: there is no base yet) is not
 * timed; after it, rank 1 tells rank 0 to start, and the time of the other
 * n - 1 messages runs from that start on rank 0 to rank 1's acknowledgement
 * of the last one: time_per_message_us, which includes changing the
 * message on both ranks (random writes: a few ms for 1% of 16 MiB here) and
 * the check. send_us is rank 0's time inside hcomm_send per message (coding
 * and moving it; the receiver rebuilds a message while the sender changes
 * the next). Rank 0 prints one JSON line (written by nlohmann/json):
 *   {"op":"repeat","bytes":S,"messages":N,"changed_pct":P,"compression":"..",
 *    "time_per_message_us":T,"gbit_s":X,"send_us":U,"send_gbit_s":Y,
 *    "wrong_messages":W}
 * (gbit_s, send_gbit_s: message bytes per second of the respective time.) Exit status 0,
 * 1 when a call fails or a message arrived wrong, 2 on bad usage. */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nlohmann/json.hpp>

#include "hcomm/hcomm.h"

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* xorshift64*: the same changes on both ranks. */
static uint64_t next(uint64_t* s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ull;
}

static void mutate(unsigned char* m, size_t n, int round, double pct) {
  uint64_t s = 0x9e3779b97f4a7c15ull ^ (uint64_t)(round + 1) * 0x100000001b3ull;
  const size_t changes = (size_t)((double)n * pct / 100.0);
  for (size_t k = 0; k < changes; ++k) {
    const uint64_t r = next(&s);
    /* A position in [0, n) by multiply-shift (a division per change would
     * cost more than the transfer's own work per byte). */
    const size_t at = (size_t)(((r & 0xffffffffu) * (uint64_t)n) >> 32);
    m[at] ^= (unsigned char)(1 + (r >> 56) % 255);
  }
}

static int parse_size(const char* s, size_t* out) {
  char* end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s) return 0;
  if (*end == 'K' || *end == 'k') v <<= 10, ++end;
  else if (*end == 'M' || *end == 'm') v <<= 20, ++end;
  else if (*end == 'G' || *end == 'g') v <<= 30, ++end;
  if (*end != '\0' || v == 0) return 0;
  *out = (size_t)v;
  return 1;
}

#define CHECK(call)                                                                   \
  do {                                                                                \
    hcomm_status_t st_ = (call);                                                      \
    if (st_ != HCOMM_SUCCESS) {                                                       \
      fprintf(stderr, "repeat_bench: %s failed: %s\n", #call, hcomm_last_error());   \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)

int main(int argc, char** argv) {
  size_t bytes = 16u << 20;
  int messages = 20;
  double pct = 1.0;
  const char* compression = NULL;
  static const struct option kLong[] = {{"size", required_argument, NULL, 's'},
                                        {"messages", required_argument, NULL, 'n'},
                                        {"percent", required_argument, NULL, 'p'},
                                        {"compression", required_argument, NULL, 'z'},
                                        {"help", no_argument, NULL, 'h'},
                                        {NULL, 0, NULL, 0}};
  const char* usage =
      "usage: repeat_bench [-s BYTES (16M)] [-n MESSAGES >= 2 (20)] [-p PERCENT changed (1)]\n"
      "                    [-z COMPRESSION (the job's setting)]   (2 ranks: hcomm_run -n 2 --)\n";
  for (int c; (c = getopt_long(argc, argv, "s:n:p:z:h", kLong, NULL)) != -1;) {
    char* end = NULL;
    switch (c) {
      case 's':
        if (!parse_size(optarg, &bytes)) {
          fprintf(stderr, "repeat_bench: -s '%s' is not a size\n%s", optarg, usage);
          return 2;
        }
        break;
      case 'n':
        messages = (int)strtol(optarg, &end, 10);
        if (*end != '\0' || messages < 2) {
          fprintf(stderr, "repeat_bench: -n '%s' is not a count >= 2\n%s", optarg, usage);
          return 2;
        }
        break;
      case 'p':
        pct = strtod(optarg, &end);
        if (*end != '\0' || pct < 0 || pct > 100) {
          fprintf(stderr, "repeat_bench: -p '%s' is not a percentage\n%s", optarg, usage);
          return 2;
        }
        break;
      case 'z':
        compression = optarg;
        break;
      case 'h':
        fputs(usage, stdout);
        return 0;
      default:
        fputs(usage, stderr);
        return 2;
    }
  }
  hcomm_comm_t comm;
  CHECK(hcomm_comm_init(NULL, &comm));
  int rank, size;
  CHECK(hcomm_comm_rank(comm, &rank));
  CHECK(hcomm_comm_size(comm, &size));
  if (size != 2) {
    fprintf(stderr, "repeat_bench: needs 2 ranks, got %d\n", size);
    hcomm_comm_destroy(comm);
    return 2;
  }
  if (compression != NULL && hcomm_comm_set(comm, "compression", compression) != HCOMM_SUCCESS) {
    fprintf(stderr, "repeat_bench: bad -z '%s': %s\n", compression, hcomm_last_error());
    hcomm_comm_destroy(comm);
    return 2;
  }
  unsigned char* msg = static_cast<unsigned char*>(malloc(bytes));
  /* Rank 1 receives into two buffers in turn: the next receive is posted
   * before the last message is checked, as an application that overlaps its
   * work with the transfer would. */
  unsigned char* got[2] = {static_cast<unsigned char*>(malloc(bytes)),
                          static_cast<unsigned char*>(malloc(bytes))};
  hcomm_request_t req[2] = {NULL, NULL};
  if (msg == NULL || got[0] == NULL || got[1] == NULL) {
    fprintf(stderr, "repeat_bench: out of memory for %zu bytes\n", bytes);
    return 1;
  }
  for (size_t i = 0; i < bytes; ++i) msg[i] = (unsigned char)(i * 131 + (i >> 12));
  const int tag = 1, ack_tag = 2;
  char ack = 0;
  int wrong = 0;
  double start = 0, in_send = 0;
  if (rank == 1) CHECK(hcomm_irecv(got[0], bytes, HCOMM_UINT8, 0, tag, comm, &req[0]));
  for (int m = 0; m < messages; ++m) {
    if (rank == 0) {
      mutate(msg, bytes, m, pct);
      if (m == 1) start = now_us();
      const double t0 = now_us();
      CHECK(hcomm_send(msg, bytes, HCOMM_UINT8, 1, tag, comm));
      if (m >= 1) in_send += now_us() - t0;
      if (m == 0) CHECK(hcomm_recv(&ack, 1, HCOMM_INT8, 1, ack_tag, comm));
    } else {
      CHECK(hcomm_wait(req[m % 2]));
      CHECK(hcomm_request_free(req[m % 2]));
      req[m % 2] = NULL;
      if (m + 1 < messages) {
        CHECK(hcomm_irecv(got[(m + 1) % 2], bytes, HCOMM_UINT8, 0, tag, comm, &req[(m + 1) % 2]));
      }
      if (m == 0 || m == messages - 1) CHECK(hcomm_send(&ack, 1, HCOMM_INT8, 0, ack_tag, comm));
      mutate(msg, bytes, m, pct);
      if (memcmp(got[m % 2], msg, bytes) != 0) ++wrong;
    }
  }
  if (rank == 0) CHECK(hcomm_recv(&ack, 1, HCOMM_INT8, 1, ack_tag, comm));
  const double per = (now_us() - start) / (messages - 1);
  int all_wrong = wrong;
  CHECK(hcomm_allreduce(&wrong, &all_wrong, 1, HCOMM_INT32, HCOMM_SUM, comm));
  if (rank == 0) {
    const double send = in_send / (messages - 1);
    nlohmann::ordered_json row;
    row["op"] = "repeat";
    row["bytes"] = bytes;
    row["messages"] = messages;
    row["changed_pct"] = pct;
    row["compression"] = compression != NULL ? compression : "default";
    row["time_per_message_us"] = per;
    row["gbit_s"] = static_cast<double>(bytes) * 8 / per / 1e3;
    row["send_us"] = send;
    row["send_gbit_s"] = static_cast<double>(bytes) * 8 / send / 1e3;
    row["wrong_messages"] = all_wrong;
    printf("%s\n", row.dump().c_str());
  }
  free(msg);
  free(got[0]);
  free(got[1]);
  CHECK(hcomm_comm_destroy(comm));
  return all_wrong == 0 ? 0 : 1;
}
