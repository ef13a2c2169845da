// delay_wire: a point-to-point link between two network namespaces that
// delays every packet, for tests on kernels without netem (the
// tests/netns/delay_test.sh bed).
//
//   delay_wire --ns-a NS_A --ns-b NS_B [--dev-a eth0] [--dev-b eth0]
//              [--delay-ms 20] [--jitter-ms 0] [--reorder] [--limit 1000]
//              [--seed N]
//
// It creates a TUN device (IFF_TUN | IFF_NO_PI) in each namespace (a TUN fd
// stays bound to the namespace it was made in, so the process enters each
// in turn and then returns to its own), reads every IP packet one side
// sends and writes it into the other side at now + delay + a uniform draw
// in [-jitter, +jitter] (never below zero). By default a direction keeps
// its order: a packet is never released before the one read before it, so
// jitter varies the delay without reordering; --reorder lets each packet
// keep its own draw (netem's jitter). Each direction holds at most --limit
// packets (netem's default, 1000); a packet beyond that is dropped and
// counted, so memory stays bounded.
//
// The devices vanish with the process. The caller gives them addresses and
// brings them up (ip -n NS addr add ... dev eth0; ip -n NS link set eth0
// up). One line "delay_wire: ready: ..." on stdout says both exist; on
// SIGTERM or SIGINT it prints its counters (packets and bytes each way,
// drops, how long packets were held, how late any was released) and exits
// 0. Any failed system call ends it with status 1 and a message naming the
// call and the namespace.

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr int64_t kNsPerMs = 1000000;
// The most a TUN device hands over in one read (an IP packet's maximum).
constexpr size_t kMaxPacket = 65535;
// Packets read from one device per wakeup, so that a flood on one side
// cannot hold back the releases of the other.
constexpr int kReadBurst = 64;

[[noreturn]] void Die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fputs("delay_wire: ", stderr);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
  std::exit(1);
}

int64_t NowNs() {
  timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) {
    Die("clock_gettime(CLOCK_MONOTONIC): %s", std::strerror(errno));
  }
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

struct Options {
  std::string ns_a;
  std::string ns_b;
  std::string dev_a = "eth0";
  std::string dev_b = "eth0";
  double delay_ms = 20;
  double jitter_ms = 0;
  bool reorder = false;
  long limit = 1000;
  uint64_t seed = 0;
  bool seed_given = false;
};

void Usage(FILE* out) {
  std::fputs(
      "usage: delay_wire --ns-a NS --ns-b NS [--dev-a NAME] [--dev-b NAME]\n"
      "                  [--delay-ms MS] [--jitter-ms MS] [--reorder]\n"
      "                  [--limit PACKETS] [--seed N]\n"
      "Joins namespaces NS (names under /var/run/netns, or paths) with TUN\n"
      "devices (default eth0 on both) and delays each packet by MS\n"
      "(default 20) plus a uniform draw in [-jitter, +jitter] (default 0),\n"
      "in order unless --reorder; at most PACKETS (default 1000) held each\n"
      "way, more are dropped. SIGTERM prints the counters and exits 0.\n",
      out);
}

double ParseMs(const char* flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !(v >= 0) || v > 3600000) {
    Die("%s wants milliseconds from 0 to 3600000, not '%s'", flag, text);
  }
  return v;
}

long ParseCount(const char* flag, const char* text, long min, long max) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < min || v > max) {
    Die("%s wants a whole number from %ld to %ld, not '%s'", flag, min, max,
        text);
  }
  return static_cast<long>(v);
}

Options ParseOptions(int argc, char** argv) {
  enum { kNsA = 1000, kNsB, kDevA, kDevB, kDelay, kJitter, kReorder, kLimit,
         kSeed, kHelp };
  static const option kLong[] = {
      {"ns-a", required_argument, nullptr, kNsA},
      {"ns-b", required_argument, nullptr, kNsB},
      {"dev-a", required_argument, nullptr, kDevA},
      {"dev-b", required_argument, nullptr, kDevB},
      {"delay-ms", required_argument, nullptr, kDelay},
      {"jitter-ms", required_argument, nullptr, kJitter},
      {"reorder", no_argument, nullptr, kReorder},
      {"limit", required_argument, nullptr, kLimit},
      {"seed", required_argument, nullptr, kSeed},
      {"help", no_argument, nullptr, kHelp},
      {nullptr, 0, nullptr, 0},
  };
  Options o;
  int c;
  while ((c = getopt_long(argc, argv, "", kLong, nullptr)) != -1) {
    switch (c) {
      case kNsA: o.ns_a = optarg; break;
      case kNsB: o.ns_b = optarg; break;
      case kDevA: o.dev_a = optarg; break;
      case kDevB: o.dev_b = optarg; break;
      case kDelay: o.delay_ms = ParseMs("--delay-ms", optarg); break;
      case kJitter: o.jitter_ms = ParseMs("--jitter-ms", optarg); break;
      case kReorder: o.reorder = true; break;
      case kLimit: o.limit = ParseCount("--limit", optarg, 1, 1000000); break;
      case kSeed:
        o.seed = static_cast<uint64_t>(
            ParseCount("--seed", optarg, 0, 0x7fffffffffffffffL));
        o.seed_given = true;
        break;
      case kHelp: Usage(stdout); std::exit(0);
      default: Usage(stderr); std::exit(2);
    }
  }
  if (optind != argc) {
    Usage(stderr);
    Die("unexpected argument '%s'", argv[optind]);
  }
  if (o.ns_a.empty() || o.ns_b.empty()) {
    Usage(stderr);
    Die("--ns-a and --ns-b are required");
  }
  for (const std::string* dev : {&o.dev_a, &o.dev_b}) {
    if (dev->empty() || dev->size() >= IFNAMSIZ) {
      Die("device name '%s' must have 1 to %d characters", dev->c_str(),
          IFNAMSIZ - 1);
    }
  }
  return o;
}

std::string NsPath(const std::string& ns) {
  return ns.find('/') == std::string::npos ? "/var/run/netns/" + ns : ns;
}

// Enters network namespace NS (a name or a path); LABEL names it in errors.
void EnterNs(const std::string& path, const std::string& label) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    Die("open(%s) for namespace %s: %s", path.c_str(), label.c_str(),
        std::strerror(errno));
  }
  if (setns(fd, CLONE_NEWNET) != 0) {
    Die("setns(%s, CLONE_NEWNET) into namespace %s: %s", path.c_str(),
        label.c_str(), std::strerror(errno));
  }
  if (close(fd) != 0) {
    Die("close(%s) for namespace %s: %s", path.c_str(), label.c_str(),
        std::strerror(errno));
  }
}

// A non-blocking TUN device DEV in the current namespace (NS, for errors).
int OpenTun(const std::string& dev, const std::string& ns) {
  const int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    Die("open(/dev/net/tun) in namespace %s: %s", ns.c_str(),
        std::strerror(errno));
  }
  ifreq ifr;
  std::memset(&ifr, 0, sizeof ifr);
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
  std::memcpy(ifr.ifr_name, dev.c_str(), dev.size());  // size < IFNAMSIZ
  if (ioctl(fd, TUNSETIFF, &ifr) != 0) {
    Die("ioctl(TUNSETIFF, %s) in namespace %s: %s", dev.c_str(), ns.c_str(),
        std::strerror(errno));
  }
  if (dev != ifr.ifr_name) {
    Die("ioctl(TUNSETIFF, %s) in namespace %s made device %s instead",
        dev.c_str(), ns.c_str(), ifr.ifr_name);
  }
  return fd;
}

struct Packet {
  int64_t release_ns;
  int64_t read_ns;
  uint64_t seq;  // ties in release_ns go out in the order read
  std::vector<uint8_t> data;
};

// Min-heap order on (release_ns, seq) for std::push_heap / pop_heap.
bool ReleasesLater(const Packet& x, const Packet& y) {
  return x.release_ns != y.release_ns ? x.release_ns > y.release_ns
                                      : x.seq > y.seq;
}

// One direction of the wire: packets read from `in` wait here until their
// release time, then are written to `out`.
struct Direction {
  std::string name;     // "a->b"
  std::string in_desc;  // "ns/dev" read from, for errors
  std::string out_desc;
  int in = -1;
  int out = -1;
  std::vector<Packet> heap;
  int64_t last_release_ns = 0;
  uint64_t next_seq = 0;
  // Counters.
  uint64_t packets = 0;  // written to the other side
  uint64_t bytes = 0;
  uint64_t dropped_full = 0;
  uint64_t dropped_write = 0;
  int64_t held_min_ns = INT64_MAX;
  int64_t held_max_ns = 0;
  int64_t held_sum_ns = 0;
  int64_t late_max_ns = 0;
};

class Wire {
 public:
  explicit Wire(const Options& o)
      : o_(o),
        delay_ns_(static_cast<int64_t>(o.delay_ms * kNsPerMs)),
        jitter_ns_(static_cast<int64_t>(o.jitter_ms * kNsPerMs)),
        rng_(o.seed_given ? o.seed : std::random_device{}()),
        buf_(kMaxPacket) {}

  // Reads what `d.in` has (up to kReadBurst packets) into d's queue.
  void ReadFrom(Direction& d) {
    for (int i = 0; i < kReadBurst; ++i) {
      const ssize_t n = read(d.in, buf_.data(), buf_.size());
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        if (errno == EINTR) continue;
        Die("read(%s): %s", d.in_desc.c_str(), std::strerror(errno));
      }
      if (n == 0) return;
      if (d.heap.size() >= static_cast<size_t>(o_.limit)) {
        ++d.dropped_full;
        continue;
      }
      const int64_t now = NowNs();
      int64_t hold = delay_ns_;
      if (jitter_ns_ > 0) {
        hold += std::uniform_int_distribution<int64_t>(-jitter_ns_,
                                                       jitter_ns_)(rng_);
        hold = std::max<int64_t>(hold, 0);
      }
      int64_t release = now + hold;
      if (!o_.reorder) release = std::max(release, d.last_release_ns);
      d.last_release_ns = std::max(d.last_release_ns, release);
      Packet p{release, now, d.next_seq++,
               std::vector<uint8_t>(buf_.begin(), buf_.begin() + n)};
      d.heap.push_back(std::move(p));
      std::push_heap(d.heap.begin(), d.heap.end(), ReleasesLater);
    }
  }

  // Writes every packet of d whose time has come.
  void ReleaseDue(Direction& d) {
    while (!d.heap.empty()) {
      const int64_t now = NowNs();
      if (d.heap.front().release_ns > now) return;
      std::pop_heap(d.heap.begin(), d.heap.end(), ReleasesLater);
      Packet p = std::move(d.heap.back());
      d.heap.pop_back();
      const ssize_t n = write(d.out, p.data.data(), p.data.size());
      if (n < 0) {
        // The far device down (EIO), its queue full (ENOBUFS, EAGAIN) or a
        // packet it refuses (EINVAL): what a cable does, a lost packet.
        if (errno == EIO || errno == ENOBUFS || errno == EAGAIN ||
            errno == EWOULDBLOCK || errno == EINVAL || errno == ENOMEM) {
          if (d.dropped_write++ == 0) {
            std::fprintf(stderr,
                         "delay_wire: write(%s) of %zu bytes: %s (dropped and"
                         " counted; later ones are only counted)\n",
                         d.out_desc.c_str(), p.data.size(),
                         std::strerror(errno));
          }
          continue;
        }
        Die("write(%s) of %zu bytes: %s", d.out_desc.c_str(), p.data.size(),
            std::strerror(errno));
      }
      if (static_cast<size_t>(n) != p.data.size()) {
        Die("write(%s) wrote %zd of %zu bytes", d.out_desc.c_str(), n,
            p.data.size());
      }
      ++d.packets;
      d.bytes += p.data.size();
      const int64_t held = now - p.read_ns;
      d.held_min_ns = std::min(d.held_min_ns, held);
      d.held_max_ns = std::max(d.held_max_ns, held);
      d.held_sum_ns += held;
      d.late_max_ns = std::max(d.late_max_ns, now - p.release_ns);
    }
  }

  void Print(const Direction& d) const {
    const double avg_ms =
        d.packets ? static_cast<double>(d.held_sum_ns) / d.packets / kNsPerMs
                  : 0;
    std::printf(
        "delay_wire: %s: %llu packets (%llu bytes), %llu dropped (queue full"
        " %llu, write failed %llu), held min %.2f avg %.2f max %.2f ms, late"
        " max %.2f ms\n",
        d.name.c_str(), static_cast<unsigned long long>(d.packets),
        static_cast<unsigned long long>(d.bytes),
        static_cast<unsigned long long>(d.dropped_full + d.dropped_write),
        static_cast<unsigned long long>(d.dropped_full),
        static_cast<unsigned long long>(d.dropped_write),
        d.packets ? static_cast<double>(d.held_min_ns) / kNsPerMs : 0.0,
        avg_ms, static_cast<double>(d.held_max_ns) / kNsPerMs,
        static_cast<double>(d.late_max_ns) / kNsPerMs);
  }

  int Run() {
    const std::string label_a = o_.ns_a + "/" + o_.dev_a;
    const std::string label_b = o_.ns_b + "/" + o_.dev_b;
    const char* const kOwn = "/proc/self/ns/net";
    const int own = open(kOwn, O_RDONLY | O_CLOEXEC);
    if (own < 0) Die("open(%s): %s", kOwn, std::strerror(errno));
    EnterNs(NsPath(o_.ns_a), o_.ns_a);
    const int fd_a = OpenTun(o_.dev_a, o_.ns_a);
    EnterNs(NsPath(o_.ns_b), o_.ns_b);
    const int fd_b = OpenTun(o_.dev_b, o_.ns_b);
    if (setns(own, CLONE_NEWNET) != 0) {
      Die("setns(%s, CLONE_NEWNET) back to our own namespace: %s", kOwn,
          std::strerror(errno));
    }
    if (close(own) != 0) Die("close(%s): %s", kOwn, std::strerror(errno));

    // SIGTERM and SIGINT arrive through a descriptor, in the same poll.
    sigset_t stop_signals;
    if (sigemptyset(&stop_signals) != 0 ||
        sigaddset(&stop_signals, SIGTERM) != 0 ||
        sigaddset(&stop_signals, SIGINT) != 0) {
      Die("sigemptyset/sigaddset: %s", std::strerror(errno));
    }
    if (sigprocmask(SIG_BLOCK, &stop_signals, nullptr) != 0) {
      Die("sigprocmask(SIG_BLOCK, SIGTERM|SIGINT): %s", std::strerror(errno));
    }
    const int sig_fd = signalfd(-1, &stop_signals, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sig_fd < 0) Die("signalfd(SIGTERM|SIGINT): %s", std::strerror(errno));

    Direction dirs[2];
    dirs[0].name = "a->b";
    dirs[0].in_desc = label_a;
    dirs[0].out_desc = label_b;
    dirs[0].in = fd_a;
    dirs[0].out = fd_b;
    dirs[1].name = "b->a";
    dirs[1].in_desc = label_b;
    dirs[1].out_desc = label_a;
    dirs[1].in = fd_b;
    dirs[1].out = fd_a;

    std::printf(
        "delay_wire: ready: a=%s b=%s, delay %g ms, jitter +-%g ms (%s), limit"
        " %ld packets each way\n",
        label_a.c_str(), label_b.c_str(), o_.delay_ms, o_.jitter_ms,
        o_.reorder ? "may reorder" : "in order", o_.limit);
    if (std::fflush(stdout) != 0) {
      Die("fflush(stdout): %s", std::strerror(errno));
    }

    bool stop = false;
    while (!stop) {
      for (Direction& d : dirs) ReleaseDue(d);
      // Sleep until a device has a packet, a signal comes, or the next
      // release is due: no spinning.
      int64_t next = INT64_MAX;
      for (const Direction& d : dirs) {
        if (!d.heap.empty()) next = std::min(next, d.heap.front().release_ns);
      }
      timespec timeout;
      timespec* timeout_p = nullptr;
      if (next != INT64_MAX) {
        const int64_t wait = std::max<int64_t>(next - NowNs(), 0);
        timeout.tv_sec = wait / 1000000000;
        timeout.tv_nsec = wait % 1000000000;
        timeout_p = &timeout;
      }
      pollfd fds[3] = {{fd_a, POLLIN, 0}, {fd_b, POLLIN, 0}, {sig_fd, POLLIN, 0}};
      const int ready = ppoll(fds, 3, timeout_p, nullptr);
      if (ready < 0) {
        if (errno == EINTR) continue;
        Die("ppoll(%s, %s, signalfd): %s", label_a.c_str(), label_b.c_str(),
            std::strerror(errno));
      }
      for (int i = 0; i < 2; ++i) {
        if (fds[i].revents & (POLLERR | POLLHUP | POLLNVAL)) {
          Die("ppoll: device %s reports %s%s%s", dirs[i].in_desc.c_str(),
              fds[i].revents & POLLERR ? "POLLERR " : "",
              fds[i].revents & POLLHUP ? "POLLHUP " : "",
              fds[i].revents & POLLNVAL ? "POLLNVAL" : "");
        }
        if (fds[i].revents & POLLIN) ReadFrom(dirs[i]);
      }
      if (fds[2].revents & POLLIN) {
        signalfd_siginfo si;
        const ssize_t n = read(sig_fd, &si, sizeof si);
        if (n != static_cast<ssize_t>(sizeof si)) {
          Die("read(signalfd): %s", n < 0 ? std::strerror(errno) : "short");
        }
        std::printf("delay_wire: %s, stopping\n", strsignal(si.ssi_signo));
        stop = true;
      }
    }

    uint64_t total = 0;
    uint64_t dropped = 0;
    size_t held = 0;
    for (const Direction& d : dirs) {
      Print(d);
      total += d.packets;
      dropped += d.dropped_full + d.dropped_write;
      held += d.heap.size();
    }
    std::printf(
        "delay_wire: total: %llu packets through, %llu dropped, %zu still"
        " held at the stop\n",
        static_cast<unsigned long long>(total),
        static_cast<unsigned long long>(dropped), held);
    if (std::fflush(stdout) != 0) {
      Die("fflush(stdout): %s", std::strerror(errno));
    }
    for (int fd : {fd_a, fd_b, sig_fd}) {
      if (close(fd) != 0) Die("close(%d): %s", fd, std::strerror(errno));
    }
    return 0;
  }

 private:
  const Options o_;
  const int64_t delay_ns_;
  const int64_t jitter_ns_;
  std::mt19937_64 rng_;
  std::vector<uint8_t> buf_;
};

}  // namespace

int main(int argc, char** argv) {
  const Options o = ParseOptions(argc, argv);
  return Wire(o).Run();
}
