#include "transports/shm/shm_transport.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/base/fence.h"
#include "algorithms/kernels/shared_copy.h"
#include "core/base/shm_file.h"
#include "core/base/spin.h"
#include "core/base/status.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace hcomm {

// ---------------------------------------------------------------------------
// Shared layout. A segment is [header page][ring 0 control page][ring 0
// data]...[ring n-1 control page][ring n-1 data]; ring i is written by
// header.ring_peer[i] and read by the segment's owner.

constexpr uint64_t kSegMagic = 0x314745534d434348ull;  // "HCCMSEG1"
constexpr uint32_t kSegVersion = 3;
constexpr size_t kHeaderBytes = 4096;
constexpr size_t kCtlBytes = 4096;
constexpr uint64_t kRecHdrBytes = 56;
constexpr uint64_t kRecAlign = 64;
// Record kinds. A whole record is sealed once all of it is written; a
// streamed one once its first piece is, the rest following the ring's tail.
constexpr uint16_t kRecWhole = 1;   // header, then the whole payload in the ring
constexpr uint16_t kRecStream = 2;  // header, then the payload in pieces
constexpr uint16_t kRecCma = 3;     // header only; payload read from the writer
constexpr uint16_t kRecClose = 4;   // the writer closed its side
constexpr uint32_t kSlotLive = 1;
constexpr uint32_t kSlotCancelled = 2;
constexpr uint32_t kLockReader = 1;
constexpr uint32_t kLockWriter = 2;
constexpr uint64_t kMaxPayload = uint64_t{1} << 48;
constexpr int kMaxRecordsPerVisit = 1024;
// Inline frames up to this record size are written whole by Send when
// they fit (one publish); larger ones stream through the queue.
constexpr uint64_t kWholeWriteMax = ShmTransport::kPipeChunkBytes + 2 * kRecAlign;

namespace shm_internal {

struct SegHeader {
  uint64_t magic;
  uint32_t version;
  int32_t owner_rank;
  int32_t owner_pid;
  uint32_t n_rings;
  uint64_t ring_bytes;
  uint64_t total_bytes;
  uint64_t probe;  // a random word peers read with process_vm_readv to test CMA
  uint64_t seal_key;  // a random word that record seals in this segment's rings mix in
  int32_t ring_peer[ShmTransport::kMaxLocalPeers + 1];
  // Futex word: bumped (then FUTEX_WAKE) by whoever wants the owner to look.
  alignas(64) std::atomic<uint32_t> doorbell;
  // Owner threads about to sleep on the doorbell; wakers skip the syscall at 0.
  alignas(64) std::atomic<uint32_t> sleepers;
  // Owner threads about to block elsewhere (ArmWake): wakers also send a
  // datagram to the owner's bell socket.
  std::atomic<uint32_t> ext_sleepers;
  // Set by the owner when it shuts down; `attention` is bumped by anyone who
  // sets a flag (here or in a ring) that the owner must notice.
  alignas(64) std::atomic<uint32_t> dead;
  std::atomic<uint32_t> attention;
};
static_assert(sizeof(SegHeader) <= kHeaderBytes, "segment header fits its page");

struct CmaSlot {
  std::atomic<uint32_t> lock;   // 0 free, kLockReader, kLockWriter
  std::atomic<uint32_t> state;  // kSlotLive or kSlotCancelled
  std::atomic<uint64_t> addr;   // payload address in the writer's process
};

// One ring's control block. Index lines are separate so that the writer's
// and the reader's stores never share a cache line.
struct RingCtl {
  alignas(64) std::atomic<uint64_t> tail;  // bytes published by the writer
  alignas(64) std::atomic<uint64_t> head;  // bytes released by the reader
  // The writer waits for space; the reader clears it and wakes the writer.
  alignas(64) std::atomic<uint32_t> writer_waiting;
  // CMA frames fully read by the reader (acknowledgements, in order).
  alignas(64) std::atomic<uint64_t> cma_acked;
  alignas(64) std::atomic<int32_t> writer_pid;  // set by the writer's Connect
  std::atomic<uint32_t> reader_cma;   // reader's Connect: 1 may read the writer, 2 may not
  std::atomic<uint32_t> writer_gone;  // the writer ended the connection
  std::atomic<uint32_t> reader_gone;  // the reader ended the connection
  alignas(64) CmaSlot slots[ShmTransport::kCmaSlots];
};
static_assert(sizeof(RingCtl) <= kCtlBytes, "ring control fits its page");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");

}  // namespace shm_internal

namespace {

using shm_internal::CmaSlot;
using shm_internal::RingCtl;
using shm_internal::SegHeader;

// A record starts 64-byte aligned; inline payload follows the header at
// offset 56 and the record is padded to a multiple of 64.
//
// The seal, the header's first word, says the record is there: the reader
// waits on the line the record starts in, and finds header (and, for small
// records, payload) in the line that told it, instead of waiting on the
// tail's line and then fetching the record's from the writer's cache (a
// second transfer between CPUs). The writer stores it last, with release.
// A seal is a 64-bit hash of the record's ring position and the segment's
// random key: an older lap's seal there never matches (its position was
// another), and older payload bytes match with odds of 2^-64.
//
// (Clearing the seal word after each record instead, so that a match were
// certain, put a second line's ownership before every seal: 2-rank 8-byte
// exchanges took 0.9 us instead of 0.7.)
struct RecHdr {
  uint64_t seal;       // Seal(key, position): the record is readable; written last
  uint64_t len : 48;   // payload bytes (< kMaxPayload)
  uint64_t kind : 8;
  uint64_t slot : 8;   // CMA: slot index
  FrameMeta meta;
};
static_assert(sizeof(RecHdr) == kRecHdrBytes, "record header has no padding");
static_assert(ShmTransport::kCmaSlots <= 255, "a CMA slot index fits the header");
static_assert(kMaxPayload == uint64_t{1} << 48, "a payload length fits the header");

// A 64-bit mix (Murmur3's finaliser): every input bit moves every output bit.
inline uint64_t Mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

// The seal of a record at ring position `pos` (never 0: the word of a
// fresh ring).
inline uint64_t Seal(uint64_t key, uint64_t pos) { return Mix64(pos ^ key) | 1; }

inline std::atomic<uint64_t>* SealWord(char* data, uint64_t size, uint64_t pos) {
  return reinterpret_cast<std::atomic<uint64_t>*>(data + (pos & (size - 1)));
}

// Seals the record written at ring position `pos`.
inline void SealRecord(char* data, uint64_t size, uint64_t key, uint64_t pos) {
  SealWord(data, size, pos)->store(Seal(key, pos), std::memory_order_release);
}

// Whether the record at ring position `pos` is sealed (then its header, and
// what the seal covers, may be read).
inline bool SealedAt(char* data, uint64_t size, uint64_t key, uint64_t pos) {
  return SealWord(data, size, pos)->load(std::memory_order_acquire) == Seal(key, pos);
}

inline RecHdr MakeRecHdr(uint16_t kind, uint16_t slot, uint64_t len, const FrameMeta& meta) {
  RecHdr h;
  h.seal = 0;
  h.kind = kind;
  h.slot = slot;
  h.len = len;
  h.meta = meta;
  return h;
}

inline uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
inline uint64_t RecordBytes(uint64_t len) { return RoundUp(kRecHdrBytes + len, kRecAlign); }

inline RingCtl* RingAt(void* base, uint64_t ring_bytes, int i) {
  return reinterpret_cast<RingCtl*>(static_cast<char*>(base) + kHeaderBytes +
                                    static_cast<size_t>(i) * (kCtlBytes + ring_bytes));
}
inline char* RingData(RingCtl* ctl) { return reinterpret_cast<char*>(ctl) + kCtlBytes; }

// Short pieces (record headers) are plain memcpy in SharedCopier::Copy.
void RingWrite(char* data, uint64_t size, uint64_t pos, const void* src, uint64_t n,
               SharedCopier& copier) {
  uint64_t off = pos & (size - 1);
  uint64_t first = std::min(n, size - off);
  copier.Copy(data + off, src, first);
  if (first < n) copier.Copy(data, static_cast<const char*>(src) + first, n - first);
}

void RingRead(const char* data, uint64_t size, uint64_t pos, void* dst, uint64_t n) {
  uint64_t off = pos & (size - 1);
  uint64_t first = std::min(n, size - off);
  memcpy(dst, data + off, first);
  if (first < n) memcpy(static_cast<char*>(dst) + first, data, n - first);
}

// Writes bytes [a, a+n) of the record (header, payload, padding) at ring
// position pos.
void WriteRecordPiece(char* data, uint64_t size, uint64_t pos, const RecHdr& h, const char* payload,
                      uint64_t a, uint64_t n, SharedCopier& copier) {
  const uint64_t end = a + n;
  uint64_t p0 = std::max(a, kRecHdrBytes);
  uint64_t p1 = std::min(end, kRecHdrBytes + h.len);
  if (p1 > p0) {
    RingWrite(data, size, pos + (p0 - a), payload + (p0 - kRecHdrBytes), p1 - p0, copier);
  }
  // The header last: its line is the one the reader watches, and taking it
  // from the reader before a long payload copy would make the seal take it
  // once more.
  if (a < kRecHdrBytes) {
    uint64_t k = std::min(end, kRecHdrBytes) - a;
    RingWrite(data, size, pos, reinterpret_cast<const char*>(&h) + a, k, copier);
  }
}

// Copies the payload part of record bytes [a, a+n) at ring position pos to
// dst (the payload's start); nothing if dst is null.
void ReadRecordPiece(const char* data, uint64_t size, uint64_t pos, uint64_t len, char* dst,
                     uint64_t a, uint64_t n) {
  if (dst == nullptr) return;
  const uint64_t end = a + n;
  uint64_t p0 = std::max(a, kRecHdrBytes);
  uint64_t p1 = std::min(end, kRecHdrBytes + len);
  if (p1 > p0) RingRead(data, size, pos + (p0 - a), dst + (p0 - kRecHdrBytes), p1 - p0);
}

// The Dekker-style handshakes between a publisher and a sleeper below
// fence fully on both sides (FullFence, core/base/fence.h).
void WakeOwner(SegHeader* h) {
  // Pairs with the fence a sleeper runs between announcing itself and
  // checking for work: either it sees what we published, or we see it.
  FullFence();
  if (h->sleepers.load(std::memory_order_relaxed) == 0) return;
  h->doorbell.fetch_add(1, std::memory_order_release);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&h->doorbell), FUTEX_WAKE, INT_MAX, nullptr,
          nullptr, 0);
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t ns) {
  struct timespec ts;
  ts.tv_sec = ns / 1'000'000'000;
  ts.tv_nsec = ns % 1'000'000'000;
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void AllowPtraceOnce() {
  // Yama (if present) would otherwise refuse process_vm_readv from peers.
  static std::atomic<pid_t> done_for{0};
  pid_t me = getpid();
  if (done_for.load(std::memory_order_relaxed) == me) return;
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);  // EINVAL without Yama: fine
  done_for.store(me, std::memory_order_relaxed);
}

// Single-copy CMA is opt-in (HCOMM_SHM_CMA=1): on the 2-vCPU VMs this
// library is measured on, the pipelined copy through the ring moved 256 KiB
// to 16 MiB 1.6-3.3x faster than process_vm_readv (10.9 / 17.1 / 8.9 GB/s
// against 6.7 / 5.2 / 4.0 GB/s at 256 KiB / 2 MiB / 16 MiB, same session),
// whose page pinning is expensive in this VM.
bool CmaAllowedByEnv() {
  const char* v = getenv("HCOMM_SHM_CMA");
  if (v == nullptr) return false;
  std::string s(v);
  return s == "1" || s == "true" || s == "on" || s == "yes";
}

// The abstract Unix socket (no file) that a segment's owner may wait on,
// named after the segment.
bool BellAddress(const std::string& segment_name, sockaddr_un* a, socklen_t* len) {
  const std::string name = absl::StrCat("hcomm-bell", segment_name);
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  if (name.size() + 1 > sizeof a->sun_path) return false;
  memcpy(a->sun_path + 1, name.data(), name.size());  // sun_path[0] == 0: abstract
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return true;
}

std::string SegmentName(const std::string& job_key, int self) {
  std::string key;
  for (char ch : job_key) {
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '.' || ch == '-';
    key.push_back(ok ? ch : '_');
  }
  if (key.size() > 160) {
    key = absl::StrCat(key.substr(0, 140), "_", absl::Hex(std::hash<std::string>()(job_key)));
  }
  return absl::StrCat("/hcomm-", key, "-", self);
}

uint64_t RandomWord() {
  uint64_t x = static_cast<uint64_t>(MonoNs()) ^ (static_cast<uint64_t>(getpid()) << 32) ^
               reinterpret_cast<uintptr_t>(&x);
  return Mix64(x) | 1;
}

void Prefault(void* base, size_t len) {
  if (madvise(base, len, MADV_POPULATE_WRITE) == 0) return;
  // Older kernels: touch every page (the segment's space is reserved, so
  // this cannot SIGBUS).
  volatile char* p = static_cast<volatile char*>(base);
  for (size_t off = 0; off < len; off += 4096) p[off] = p[off];
}

}  // namespace

// ---------------------------------------------------------------------------

struct ShmTransport::Segment {
  std::string name;
  bool linked = false;
  void* base = nullptr;
  size_t size = 0;
  SegHeader* hdr = nullptr;
  uint64_t ring_bytes = 0;
  pid_t pid = 0;

  ~Segment() {
    if (base != nullptr) munmap(base, size);
    if (linked) shm_unlink(name.c_str());
  }
};

namespace {
enum RxState { kRxIdle = 0, kRxInline = 1, kRxCma = 2, kRxStopped = 3 };
enum OutStateBits : uint32_t { kOutRetry = 1, kOutSpace = 2, kOutAcks = 4 };
enum CmaResult { kCmaDone, kCmaMore, kCmaFailed };
}  // namespace

absl::Status ShmTransport::Conn::Died() const {
  return PeerFailure(absl::StrCat("rank ", peer, " (pid ", pid, ") died"));
}

namespace {

using Completions = std::vector<std::pair<SendCallback, absl::Status>>;

void RunCompletions(Completions* done) {
  for (auto& [cb, st] : *done) {
    if (cb) cb(st);
  }
  done->clear();
}

}  // namespace

// ---------------------------------------------------------------------------
// Setup

ShmTransport::ShmTransport(int self, int world_size, FrameSink* sink)
    : self_(self), world_size_(world_size), sink_(sink), conns_(world_size) {}

std::string ShmTransport::Domain() {
  std::string boot = "noboot";
  if (FILE* f = fopen("/proc/sys/kernel/random/boot_id", "re")) {
    char buf[64] = {0};
    if (fgets(buf, sizeof buf, f) != nullptr) {
      boot.clear();
      for (const char* c = buf; *c != '\0'; ++c) {
        if (isxdigit(static_cast<unsigned char>(*c))) boot.push_back(*c);
      }
    }
    fclose(f);
  }
  struct stat st;
  const uint64_t dev = stat("/dev/shm", &st) == 0 ? static_cast<uint64_t>(st.st_dev) : 0;
  return absl::StrCat(boot, ".", absl::Hex(dev));
}

absl::Status ShmTransport::Probe(const std::string& job_key, int self) {
  const std::string name = SegmentName(job_key, self) + "-probe";
  const size_t page = 4096;
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    return Unavailable(absl::StrCat("shm_open(/dev/shm", name, "): ", strerror(errno)));
  }
  absl::Status s =
      ReserveHalving(fd, name, page, page, [](size_t b) { return b; }).status();
  if (s.ok()) {
    void* p = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      s = Unavailable(absl::StrCat("mmap of /dev/shm", name, ": ", strerror(errno)));
    } else {
      munmap(p, page);
    }
  }
  shm_unlink(name.c_str());
  close(fd);
  return s;
}

absl::StatusOr<std::unique_ptr<ShmTransport>> ShmTransport::Create(
    int self, int world_size, const std::vector<int>& local_peers, const std::string& job_key,
    FrameSink* sink) {
  if (sink == nullptr) return InvalidArgument("shm: the frame sink is null");
  if (world_size <= 0 || self < 0 || self >= world_size) {
    return InvalidArgument(absl::StrCat("shm: rank ", self, " is outside a world of ", world_size));
  }
  if (job_key.empty()) return InvalidArgument("shm: the job key is empty");
  std::vector<int> peers = local_peers;
  std::sort(peers.begin(), peers.end());
  for (size_t i = 0; i < peers.size(); ++i) {
    if (peers[i] < 0 || peers[i] >= world_size || peers[i] == self) {
      return InvalidArgument(absl::StrCat("shm: rank ", self, ": local peer ", peers[i],
                                          " is not another rank of a world of ", world_size));
    }
    if (i > 0 && peers[i] == peers[i - 1]) {
      return InvalidArgument(
          absl::StrCat("shm: rank ", self, ": local peer ", peers[i], " is listed twice"));
    }
  }
  if (peers.size() > static_cast<size_t>(kMaxLocalPeers)) {
    return InvalidArgument(absl::StrCat("shm: rank ", self, " has ", peers.size(),
                                        " local peers; at most ", kMaxLocalPeers,
                                        " are supported"));
  }
  AllowPtraceOnce();

  const int n = static_cast<int>(peers.size());
  auto segment_bytes = [n](uint64_t ring) {
    return kHeaderBytes + static_cast<size_t>(n) * (kCtlBytes + ring);
  };
  uint64_t ring_bytes = kMaxRingBytes;
  if (n > 0) {
    while (ring_bytes > kMinRingBytes && ring_bytes * n > kSegmentBudgetBytes) ring_bytes /= 2;
  }
  const uint64_t planned_ring_bytes = ring_bytes;
  // At most this rank's share of what /dev/shm has free (its local peers
  // make theirs at the same time): a container's 64 MiB holds 12 ranks'
  // rings of 256 KiB, not of 512. Each rank takes at most 1/(n+1) of what
  // it sees free, so all of them fit in what the first one saw.
  struct statvfs vfs;
  if (n > 0 && statvfs("/dev/shm", &vfs) == 0) {
    const uint64_t share = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize / (n + 1);
    while (ring_bytes > kMinRingBytes && segment_bytes(ring_bytes) > share) ring_bytes /= 2;
  }

  std::unique_ptr<ShmTransport> t(new ShmTransport(self, world_size, sink));
  t->cma_enabled_ = CmaAllowedByEnv();
  auto seg = std::make_unique<Segment>();
  seg->name = SegmentName(job_key, self);
  seg->pid = getpid();
  int fd = shm_open(seg->name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    int e = errno;
    if (e == EEXIST) {
      return Unavailable(absl::StrCat(
          "shm: rank ", self, ": segment /dev/shm", seg->name,
          " exists already (another job with the same key, or one that crashed during setup; "
          "remove it if no job uses it)"));
    }
    return Unavailable(
        absl::StrCat("shm: rank ", self, ": shm_open(", seg->name, "): ", strerror(e)));
  }
  seg->linked = true;  // from here on ~Segment unlinks on failure
  auto fail_fd = [&](absl::Status s) {
    close(fd);
    return s;
  };
  if (fchmod(fd, 0600) != 0) {
    return fail_fd(Unavailable(
        absl::StrCat("shm: rank ", self, ": fchmod of ", seg->name, ": ", strerror(errno))));
  }
  // Where another job took the room since statvfs, smaller rings.
  absl::StatusOr<size_t> reserved =
      ReserveHalving(fd, seg->name, ring_bytes, kMinRingBytes, segment_bytes);
  if (!reserved.ok()) {
    return fail_fd(Annotate(reserved.status(), absl::StrCat("shm: rank ", self)));
  }
  ring_bytes = *reserved;
  const size_t total = segment_bytes(ring_bytes);
  seg->ring_bytes = ring_bytes;
  t->planned_ring_bytes_ = planned_ring_bytes;
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    return OutOfMem(
        absl::StrCat("shm: rank ", self, ": mmap of ", total, " bytes: ", strerror(errno)));
  }
  KeepFromForks(base, total);
  seg->base = base;
  seg->size = total;
  madvise(base, total, MADV_HUGEPAGE);  // only helps where shmem THP is in advise mode
  Prefault(base, total);

  SegHeader* h = static_cast<SegHeader*>(base);
  seg->hdr = h;
  h->version = kSegVersion;
  h->owner_rank = self;
  h->owner_pid = static_cast<int32_t>(seg->pid);
  h->n_rings = static_cast<uint32_t>(n);
  h->ring_bytes = ring_bytes;
  h->total_bytes = total;
  h->probe = RandomWord();
  h->seal_key = RandomWord();
  for (int i = 0; i <= kMaxLocalPeers; ++i) h->ring_peer[i] = i < n ? peers[i] : -1;

  for (int i = 0; i < n; ++i) {
    auto c = std::make_unique<Conn>();
    c->peer = peers[i];
    c->in_ctl = RingAt(base, ring_bytes, i);
    c->in_data = RingData(c->in_ctl);
    c->in_size = ring_bytes;
    c->in_seal_key = h->seal_key;
    t->local_.push_back(c.get());
    t->conns_[peers[i]] = std::move(c);
  }
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kSegMagic;
  t->seg_ = std::move(seg);
  // Our bell, for OpenWakeFd, bound now so that peers find it when they
  // attach; and a socket to ring peers' bells. Without them, only futexes.
  t->bell_tx_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  t->bell_rx_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (t->bell_rx_ >= 0 &&
      (!BellAddress(t->seg_->name, &t->bell_, &t->bell_len_) ||
       bind(t->bell_rx_, reinterpret_cast<const sockaddr*>(&t->bell_), t->bell_len_) != 0)) {
    close(t->bell_rx_);
    t->bell_rx_ = -1;
    t->bell_len_ = 0;
  }
  return t;
}

ShmTransport::~ShmTransport() {
  // Peers must stop reading our memory now and notice at once. Queued
  // frames' callbacks do not run (as with TcpTransport).
  if (seg_ != nullptr && seg_->hdr != nullptr) {
    seg_->hdr->dead.store(1, std::memory_order_release);
  }
  for (Conn* c : local_) {
    if (!c->connected.load(std::memory_order_acquire)) continue;
    {
      Locked l(&c->send_mu);
      for (OutFrame& f : c->inflight) CancelSlotLocked(c, &f);
    }
    SignalPeerGone(c);
  }
  for (Conn* c : local_) {
    if (c->peer_base != nullptr) munmap(c->peer_base, c->peer_size);
    if (c->pidfd >= 0) close(c->pidfd);
  }
  if (bell_rx_ >= 0) close(bell_rx_);
  if (bell_tx_ >= 0) close(bell_tx_);
  seg_.reset();
}

std::string ShmTransport::Address() const {
  return absl::StrCat("shm1:", seg_->pid, ":", self_, ":",
                      absl::Hex(reinterpret_cast<uintptr_t>(seg_->base)), ":", seg_->name);
}

ShmTransport::Conn* ShmTransport::ConnFor(int peer) const {
  if (peer < 0 || peer >= world_size_) return nullptr;
  return conns_[peer].get();
}

absl::Status ShmTransport::Connect(int peer, const std::string& peer_address, absl::Time deadline) {
  Conn* c = ConnFor(peer);
  const std::string where = absl::StrCat("shm: rank ", self_, " attaching to rank ", peer);
  if (c == nullptr) {
    return InvalidArgument(absl::StrCat(where, ": rank ", peer, " is not a local peer"));
  }
  if (c->connected.load()) return InvalidArgument(absl::StrCat(where, ": already attached"));
  std::vector<std::string> parts = absl::StrSplit(peer_address, ':');
  int64_t pid = 0;
  int rank = -1;
  uint64_t addr = 0;
  if (parts.size() != 5 || parts[0] != "shm1" || !absl::SimpleAtoi(parts[1], &pid) || pid <= 0 ||
      !absl::SimpleAtoi(parts[2], &rank) || !absl::SimpleHexAtoi(parts[3], &addr) ||
      parts[4].empty() || parts[4][0] != '/') {
    return InvalidArgument(
        absl::StrCat(where, ": malformed address '", peer_address.substr(0, 200), "'"));
  }
  if (rank != peer) {
    return InvalidArgument(absl::StrCat(where, ": the address given belongs to rank ", rank));
  }
  int fd = -1;
  for (;;) {
    fd = shm_open(parts[4].c_str(), O_RDWR | O_CLOEXEC, 0);
    if (fd >= 0) break;
    int e = errno;
    if (e != ENOENT) {
      return Unavailable(absl::StrCat(where, ": shm_open(", parts[4], "): ", strerror(e)));
    }
    if (absl::Now() >= deadline) {
      return Timeout(absl::StrCat(where, ": segment /dev/shm", parts[4],
                                  " did not appear before the deadline"));
    }
    usleep(1000);  // setup only: the peer has not created its segment yet
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(kHeaderBytes)) {
    close(fd);
    return Unavailable(absl::StrCat(where, ": segment ", parts[4], " is too small"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    return Unavailable(absl::StrCat(where, ": mmap: ", strerror(errno)));
  }
  KeepFromForks(base, size);
  int pidfd = -1;
  auto fail = [&](absl::Status s) {
    munmap(base, size);
    if (pidfd >= 0) close(pidfd);
    return s;
  };
  SegHeader* h = static_cast<SegHeader*>(base);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (h->magic != kSegMagic || h->version != kSegVersion) {
    return fail(Unavailable(absl::StrCat(where, ": ", parts[4], " is not an hcomm segment")));
  }
  const uint64_t rb = h->ring_bytes;
  if (h->owner_rank != peer || h->owner_pid != pid || h->n_rings > kMaxLocalPeers ||
      rb < kMinRingBytes || rb > kMaxRingBytes || (rb & (rb - 1)) != 0 || h->total_bytes != size ||
      kHeaderBytes + h->n_rings * (kCtlBytes + rb) != size) {
    return fail(Unavailable(absl::StrCat(where, ": segment ", parts[4],
                                         " does not match its address (owner rank ", h->owner_rank,
                                         ", pid ", h->owner_pid, ")")));
  }
  int idx = -1;
  for (uint32_t i = 0; i < h->n_rings; ++i) {
    if (h->ring_peer[i] == self_) idx = static_cast<int>(i);
  }
  if (idx < 0) {
    return fail(InvalidArgument(absl::StrCat(where, ": rank ", peer, " does not list rank ", self_,
                                             " among its local peers")));
  }
  RingCtl* out = RingAt(base, rb, idx);
  int32_t other = out->writer_pid.load();
  if (other != 0 && other != seg_->pid) {
    return fail(
        InvalidArgument(absl::StrCat(where, ": process ", other, " already writes that ring")));
  }
  pidfd = static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
  if (pidfd < 0) {
    int e = errno;
    if (e == ESRCH) {
      return fail(Unavailable(absl::StrCat(where, ": rank ", peer, " (pid ", pid,
                                           ") is not running (or not visible from here)")));
    }
    if (e != ENOSYS) {
      return fail(Unavailable(absl::StrCat(where, ": pidfd_open: ", strerror(e))));
    }
    // Old kernel: liveness falls back to kill(pid, 0).
  }

  // May we read the peer's memory? Read its probe word through its own
  // address and compare with what the shared mapping shows.
  uint32_t cma = 2;
  if (cma_enabled_) {
    uint64_t v = 0;
    struct iovec local = {&v, sizeof v};
    struct iovec remote = {reinterpret_cast<void*>(addr + offsetof(SegHeader, probe)), sizeof v};
    ssize_t r = process_vm_readv(static_cast<pid_t>(pid), &local, 1, &remote, 1, 0);
    if (r == static_cast<ssize_t>(sizeof v) && v == h->probe) cma = 1;
  }
  Prefault(out, kCtlBytes + rb);

  {
    // recv_mu before send_mu: the order of the data path, where a sink
    // called under recv_mu may send.
    Locked lr(&c->recv_mu);
    Locked ls(&c->send_mu);
    c->pid = static_cast<pid_t>(pid);
    c->pidfd = pidfd;
    c->peer_base = base;
    c->peer_size = size;
    c->peer_hdr = h;
    c->out_ctl = out;
    c->out_data = RingData(out);
    c->out_size = rb;
    c->out_seal_key = h->seal_key;
    // The peer's bell must be reachable from here (processes in another
    // network namespace share no abstract sockets) for us to wait on ours.
    bool reachable = false;
    if (BellAddress(parts[4], &c->peer_bell, &c->peer_bell_len)) {
      const int probe = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      reachable = probe >= 0 && connect(probe, reinterpret_cast<const sockaddr*>(&c->peer_bell),
                                        c->peer_bell_len) == 0;
      if (probe >= 0) close(probe);
    }
    if (!reachable) c->peer_bell_len = 0;
    c->tail = c->tail_published = out->tail.load(std::memory_order_acquire);
    c->head_cached = out->head.load(std::memory_order_acquire);
    c->cma_sent = c->cma_acked = out->cma_acked.load(std::memory_order_acquire);
    c->acked_seen.store(c->cma_acked);
    c->rx_head = c->rx_head_published = c->rx_tail_cached =
        c->in_ctl->head.load(std::memory_order_acquire);
    c->rx_cma_seen = c->in_ctl->cma_acked.load(std::memory_order_acquire);
  }
  c->in_ctl->reader_cma.store(cma, std::memory_order_release);
  out->writer_pid.store(static_cast<int32_t>(seg_->pid), std::memory_order_release);
  c->connected.store(true, std::memory_order_release);
  return absl::OkStatus();
}

absl::Status ShmTransport::FinishSetup() {
  if (seg_->linked) {
    shm_unlink(seg_->name.c_str());
    seg_->linked = false;
  }
  std::vector<int> missing;
  for (Conn* c : local_) {
    if (c->in_ctl->writer_pid.load(std::memory_order_acquire) == 0) missing.push_back(c->peer);
  }
  if (!missing.empty()) {
    return Unavailable(absl::StrCat("shm: rank ", self_, ": local rank(s) ",
                                    absl::StrJoin(missing, ", "),
                                    " never attached to its shared-memory segment"));
  }
  return absl::OkStatus();
}

size_t ShmTransport::ring_bytes() const { return seg_->ring_bytes; }

bool ShmTransport::UsesCma(int peer) const {
  Conn* c = ConnFor(peer);
  if (c == nullptr || !cma_enabled_ || !c->connected.load(std::memory_order_acquire)) return false;
  return c->out_ctl->reader_cma.load(std::memory_order_acquire) == 1;
}

// ---------------------------------------------------------------------------
// Sending

namespace {

// Free bytes in c's outbound ring, at least `want` if possible. When fewer
// are free, announces that the writer waits (the reader then wakes it).
uint64_t FreeLockedImpl(uint64_t tail, uint64_t* head_cached, uint64_t size, RingCtl* ctl,
                        uint64_t want) {
  uint64_t free = size - (tail - *head_cached);
  if (free >= want) return free;
  uint64_t h = ctl->head.load(std::memory_order_acquire);
  if (h > tail || tail - h > size) return 0;  // corrupt index: write nothing
  *head_cached = h;
  free = size - (tail - h);
  if (free >= want) return free;
  ctl->writer_waiting.store(1, std::memory_order_relaxed);
  FullFence();
  h = ctl->head.load(std::memory_order_acquire);
  if (h > tail || tail - h > size) return 0;
  *head_cached = h;
  return size - (tail - h);
}

}  // namespace

bool ShmTransport::WriteWholeLocked(Conn* c, const FrameMeta& meta, const void* payload,
                                    size_t len) {
  const uint64_t total = RecordBytes(len);
  if (!c->queue.empty() || total > kWholeWriteMax ||
      FreeLockedImpl(c->tail, &c->head_cached, c->out_size, c->out_ctl, total) < total) {
    return false;
  }
  // The whole record goes in now, one publish.
  WriteRecordPiece(c->out_data, c->out_size, c->tail, MakeRecHdr(kRecWhole, 0, len, meta),
                   static_cast<const char*>(payload), 0, total, c->copier);
  SealRecord(c->out_data, c->out_size, c->out_seal_key, c->tail);
  c->tail += total;
  c->out_ctl->tail.store(c->tail, std::memory_order_release);
  c->tail_published = c->tail;
  RingPeer(c);
  return true;
}

bool ShmTransport::TrySendNow(int peer, const FrameMeta& meta, const void* payload, size_t len) {
  Conn* c = ConnFor(peer);
  if (c == nullptr || (len > 0 && payload == nullptr) || len > kCmaMinBytes ||
      !c->connected.load(std::memory_order_acquire)) {
    return false;  // Send reports what is wrong
  }
  Locked l(&c->send_mu);
  if (c->dead || c->close_write || !WriteWholeLocked(c, meta, payload, len)) return false;
  UpdateOutStateLocked(c);
  return true;
}

FrameHandle ShmTransport::Send(int peer, const FrameMeta& meta, const void* payload, size_t len,
                               SendCallback done) {
  const FrameHandle handle = next_handle_.fetch_add(1, std::memory_order_relaxed);
  Conn* c = ConnFor(peer);
  absl::Status fail;
  if (c == nullptr) {
    fail =
        InvalidArgument(absl::StrCat("shm: rank ", peer, " is not a local peer of rank ", self_));
  } else if (len > 0 && payload == nullptr) {
    fail = InvalidArgument(
        absl::StrCat("shm: send of ", len, " bytes to rank ", peer, " from a null buffer"));
  } else if (len >= kMaxPayload) {
    fail = InvalidArgument(
        absl::StrCat("shm: send of ", len, " bytes to rank ", peer, " is too large"));
  } else if (!c->connected.load(std::memory_order_acquire)) {
    fail = PeerFailure(
        absl::StrCat("rank ", self_, " is not attached to rank ", peer, " over shared memory"));
  }
  if (!fail.ok()) {
    if (done) done(fail);
    return handle;
  }
  Completions completions;
  bool written_now = false;
  {
    Locked l(&c->send_mu);
    if (c->dead || c->close_write) {
      fail = c->dead ? c->death
                     : PeerFailure(absl::StrCat("connection to rank ", peer, " is closing"));
    } else {
      const bool cma = len > kCmaMinBytes && cma_enabled_ &&
                       c->out_ctl->reader_cma.load(std::memory_order_relaxed) == 1;
      if (!cma && WriteWholeLocked(c, meta, payload, len)) {
        written_now = true;
      } else {
        c->queue.emplace_back();
        OutFrame& f = c->queue.back();
        f.handle = handle;
        f.meta = meta;
        f.len = len;
        f.payload = static_cast<const char*>(payload);
        f.cma = cma;
        f.done = std::move(done);
        pending_.fetch_add(1, std::memory_order_relaxed);
        FlushLocked(c, &completions);
      }
      UpdateOutStateLocked(c);
    }
  }
  if (!fail.ok()) {
    if (done) done(fail);
    return handle;
  }
  if (written_now) {
    if (done) done(absl::OkStatus());
    return handle;
  }
  RunCompletions(&completions);
  return handle;
}

void ShmTransport::PublishLocked(Conn* c) {
  if (c->tail == c->tail_published) return;
  c->out_ctl->tail.store(c->tail, std::memory_order_release);
  c->tail_published = c->tail;
  RingPeer(c);
}

void ShmTransport::FlushLocked(Conn* c, Completions* done) {
  c->blocked_space = false;
  if (c->dead) return;
  bool blocked = false;
  while (!c->queue.empty() && !blocked) {
    OutFrame& f = c->queue.front();
    if (f.cma) {
      if (c->cma_sent - c->cma_acked >= kCmaSlots) {
        ReapAcksLocked(c, done);
        if (c->cma_sent - c->cma_acked >= kCmaSlots) break;  // Poll retries on acks
      }
      if (FreeLockedImpl(c->tail, &c->head_cached, c->out_size, c->out_ctl, kRecAlign) <
          kRecAlign) {
        c->blocked_space = blocked = true;
        break;
      }
      f.slot = static_cast<uint32_t>(c->cma_sent % kCmaSlots);
      CmaSlot& s = c->out_ctl->slots[f.slot];
      s.addr.store(reinterpret_cast<uintptr_t>(f.payload), std::memory_order_relaxed);
      s.state.store(kSlotLive, std::memory_order_relaxed);
      const RecHdr h = MakeRecHdr(kRecCma, static_cast<uint16_t>(f.slot), f.len, f.meta);
      RingWrite(c->out_data, c->out_size, c->tail, &h, kRecHdrBytes, c->copier);
      SealRecord(c->out_data, c->out_size, c->out_seal_key, c->tail);
      c->tail += kRecAlign;
      f.written = kRecAlign;
      ++c->cma_sent;
      c->inflight.push_back(std::move(f));
      c->queue.pop_front();
      continue;
    }
    const uint64_t total = RecordBytes(f.len);
    const RecHdr h = MakeRecHdr(kRecStream, 0, f.len, f.meta);
    while (f.written < total) {
      uint64_t free = FreeLockedImpl(c->tail, &c->head_cached, c->out_size, c->out_ctl, kRecAlign);
      if (free < kRecAlign) {
        c->blocked_space = blocked = true;
        break;
      }
      uint64_t n = std::min<uint64_t>({free, total - f.written, kPipeChunkBytes});
      WriteRecordPiece(c->out_data, c->out_size, c->tail, h, f.payload, f.written, n, c->copier);
      // Sealed with its first piece, so the reader starts copying out; it
      // follows the tail from there.
      if (f.written == 0) SealRecord(c->out_data, c->out_size, c->out_seal_key, c->tail);
      c->tail += n;
      f.written += n;
      if (c->tail - c->tail_published >= kPipeChunkBytes) PublishLocked(c);
    }
    if (blocked) break;
    done->emplace_back(std::move(f.done), absl::OkStatus());
    c->queue.pop_front();
    pending_.fetch_sub(1, std::memory_order_relaxed);
  }
  if (c->queue.empty() && c->close_write && !c->close_written) {
    if (FreeLockedImpl(c->tail, &c->head_cached, c->out_size, c->out_ctl, kRecAlign) >= kRecAlign) {
      RecHdr h;
      memset(&h, 0, sizeof h);
      h.kind = kRecClose;
      RingWrite(c->out_data, c->out_size, c->tail, &h, kRecHdrBytes, c->copier);
      SealRecord(c->out_data, c->out_size, c->out_seal_key, c->tail);
      c->tail += kRecAlign;
      c->close_written = true;
    } else {
      c->blocked_space = true;
    }
  }
  PublishLocked(c);
}

int ShmTransport::ReapAcksLocked(Conn* c, Completions* done) {
  if (c->inflight.empty()) return 0;
  uint64_t a = c->out_ctl->cma_acked.load(std::memory_order_acquire);
  if (a > c->cma_sent) a = c->cma_sent;  // never trust more than was sent
  int n = 0;
  while (c->cma_acked < a && !c->inflight.empty()) {
    done->emplace_back(std::move(c->inflight.front().done), absl::OkStatus());
    c->inflight.pop_front();
    pending_.fetch_sub(1, std::memory_order_relaxed);
    ++c->cma_acked;
    ++n;
  }
  c->acked_seen.store(c->cma_acked, std::memory_order_relaxed);
  return n;
}

void ShmTransport::UpdateOutStateLocked(Conn* c) {
  uint32_t s = 0;
  if (!c->dead) {
    bool want_write = !c->queue.empty() || (c->close_write && !c->close_written);
    if (want_write) {
      if (c->blocked_space) {
        s |= kOutSpace;
      } else if (c->inflight.empty()) {
        s |= kOutRetry;  // not blocked on acknowledgements: just try again
      }
    }
    if (!c->inflight.empty()) s |= kOutAcks;
  }
  c->out_state.store(s, std::memory_order_release);
}

bool ShmTransport::OutReady(Conn* c, uint32_t s) {
  if (s & kOutRetry) return true;
  if ((s & kOutSpace) && c->out_ctl->writer_waiting.load(std::memory_order_acquire) == 0) {
    return true;
  }
  if ((s & kOutAcks) && c->out_ctl->cma_acked.load(std::memory_order_acquire) !=
                            c->acked_seen.load(std::memory_order_relaxed)) {
    return true;
  }
  return false;
}

bool ShmTransport::LockSlot(Conn* c, void* slot, uint32_t who) {
  CmaSlot* s = static_cast<CmaSlot*>(slot);
  for (uint64_t i = 0;; ++i) {
    uint32_t e = 0;
    if (s->lock.load(std::memory_order_relaxed) == 0 &&
        s->lock.compare_exchange_weak(e, who, std::memory_order_acquire)) {
      return true;
    }
    CpuRelax();
    if ((i & 255) == 255) sched_yield();
    if ((i & 4095) == 4095 && !PeerAlive(c)) return false;  // never spin on a dead peer
  }
}

void ShmTransport::CancelSlotLocked(Conn* c, OutFrame* f) {
  if (f->slot_cancelled) return;
  CmaSlot& s = c->out_ctl->slots[f->slot];
  bool locked = LockSlot(c, &s, kLockWriter);
  s.state.store(kSlotCancelled, std::memory_order_relaxed);
  if (locked) s.lock.store(0, std::memory_order_release);
  f->slot_cancelled = true;
}

void ShmTransport::AbortSendsLocked(Conn* c, Completions* done) {
  for (OutFrame& f : c->inflight) {
    CancelSlotLocked(c, &f);
    done->emplace_back(std::move(f.done), c->death);
    pending_.fetch_sub(1, std::memory_order_relaxed);
  }
  c->inflight.clear();
  for (OutFrame& f : c->queue) {
    done->emplace_back(std::move(f.done), c->death);
    pending_.fetch_sub(1, std::memory_order_relaxed);
  }
  c->queue.clear();
}

bool ShmTransport::Cancel(int peer, FrameHandle handle) {
  Conn* c = ConnFor(peer);
  if (c == nullptr) return false;
  Locked l(&c->send_mu);
  for (auto it = c->queue.begin(); it != c->queue.end(); ++it) {
    if (it->handle != handle) continue;
    if (it->written == 0) {
      c->queue.erase(it);
      pending_.fetch_sub(1, std::memory_order_relaxed);
      UpdateOutStateLocked(c);
      return true;
    }
    KeepPayload(*it);
    return false;
  }
  for (OutFrame& f : c->inflight) {
    if (f.handle != handle) continue;
    if (!f.owned && !f.slot_cancelled) {
      // The reader takes the slot lock around every piece it reads, so
      // after this swap it reads only from our copy.
      CmaSlot& s = c->out_ctl->slots[f.slot];
      bool locked = LockSlot(c, &s, kLockWriter);
      KeepPayload(f);
      s.addr.store(reinterpret_cast<uintptr_t>(f.payload), std::memory_order_relaxed);
      if (locked) s.lock.store(0, std::memory_order_release);
    }
    return false;
  }
  return false;  // already sent
}

void ShmTransport::CloseWrite(int peer) {
  Conn* c = ConnFor(peer);
  if (c == nullptr || !c->connected.load(std::memory_order_acquire)) return;
  Completions completions;
  {
    Locked l(&c->send_mu);
    c->close_write = true;
    if (!c->dead) FlushLocked(c, &completions);
    UpdateOutStateLocked(c);
  }
  RunCompletions(&completions);
}

// ---------------------------------------------------------------------------
// Receiving

void ShmTransport::PublishHeadLocked(Conn* c) {
  if (c->rx_head == c->rx_head_published) return;
  c->in_ctl->head.store(c->rx_head, std::memory_order_release);
  c->rx_head_published = c->rx_head;
  // Pairs with the writer's fence in FreeLockedImpl: it sees our head, or
  // we see its flag.
  FullFence();
  if (c->in_ctl->writer_waiting.load(std::memory_order_relaxed) != 0 &&
      c->in_ctl->writer_waiting.exchange(0, std::memory_order_acq_rel) != 0) {
    RingPeer(c);
  }
}

int ShmTransport::ReadCmaLocked(Conn* c, uint64_t budget) {
  const uint64_t len = c->rx_len;
  if (c->rx_dst == nullptr) {  // discarded: nothing to read
    c->rx_off = len;
    return kCmaDone;
  }
  CmaSlot* s = &c->in_ctl->slots[c->rx_slot];
  while (c->rx_off < len && budget > 0) {
    uint64_t n = std::min<uint64_t>({len - c->rx_off, kCmaPieceBytes, budget});
    if (!LockSlot(c, s, kLockReader)) {
      NoteLoss(c, c->Died(), /*drain=*/false, /*closed=*/false);
      return kCmaFailed;
    }
    uint32_t state = s->state.load(std::memory_order_relaxed);
    uint64_t addr = s->addr.load(std::memory_order_relaxed);
    if (state != kSlotLive) {
      s->lock.store(0, std::memory_order_release);
      NoteLoss(c,
               PeerFailure(absl::StrCat("rank ", c->peer, " withdrew a ", len,
                                        "-byte message while rank ", self_, " was reading it")),
               /*drain=*/false, /*closed=*/false);
      return kCmaFailed;
    }
    struct iovec local = {c->rx_dst + c->rx_off, n};
    struct iovec remote = {reinterpret_cast<void*>(addr + c->rx_off), n};
    ssize_t r = process_vm_readv(c->pid, &local, 1, &remote, 1, 0);
    int e = errno;
    s->lock.store(0, std::memory_order_release);
    if (r < 0 && e == EINTR) continue;
    if (r <= 0) {
      if (r == 0) e = EFAULT;
      absl::Status why = e == ESRCH
                             ? c->Died()
                             : PeerFailure(absl::StrCat("rank ", self_, ": process_vm_readv of ", n,
                                                        " bytes from rank ", c->peer, " (pid ",
                                                        c->pid, ") failed: ", strerror(e)));
      NoteLoss(c, why, /*drain=*/false, /*closed=*/false);
      return kCmaFailed;
    }
    c->rx_off += static_cast<uint64_t>(r);
    budget -= std::min<uint64_t>(budget, static_cast<uint64_t>(r));
  }
  return c->rx_off == len ? kCmaDone : kCmaMore;
}

int ShmTransport::TakeWhole(
    int peer, uint64_t /*max_payload*/,
    absl::FunctionRef<bool(const FrameMeta&, const void*, uint64_t)> take) {
  Conn* c = ConnFor(peer);
  if (c == nullptr || !c->connected.load(std::memory_order_acquire) ||
      c->loss_flag.load(std::memory_order_acquire) ||
      c->lost_reported.load(std::memory_order_relaxed)) {
    return -1;
  }
  // Nothing there: answer without the lock (the common case while waiting).
  if (!InboundReady(c)) return 0;
  if (!c->recv_mu.TryAcquire()) return -1;
  int result = -1;
  if (c->rx_state == kRxIdle) {
    const uint64_t size = c->in_size;
    if (!SealedAt(c->in_data, size, c->in_seal_key, c->rx_head)) {
      result = 0;
    } else {
      const uint64_t pos = c->rx_head & (size - 1);
      RecHdr h;
      memcpy(&h, c->in_data + pos, kRecHdrBytes);
      if (h.kind == kRecWhole) {
        const uint64_t total = RecordBytes(h.len);
        if (pos + total <= size && take(h.meta, c->in_data + pos + kRecHdrBytes, h.len)) {
          c->rx_head += total;
          PublishHeadLocked(c);
          result = 1;
        }
      }
    }
  }
  c->recv_mu.Release();
  return result;
}

int ShmTransport::ReadRing(Conn* c, bool drain) {
  if (c->rx_state == kRxStopped) return 0;
  const uint64_t size = c->in_size;
  int events = 0;
  uint64_t moved = 0;
  uint64_t cma_budget = drain ? UINT64_MAX : kCmaBudgetBytes;
  int records = 0;
  bool more = false;
  // (The lambdas run with c->recv_mu held, which the analysis cannot see.)
  auto malformed = [&](const std::string& what) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    c->rx_state = kRxStopped;
    NoteLoss(c,
             PeerFailure(absl::StrCat("rank ", c->peer,
                                      " wrote a malformed record into its shared-memory ring (",
                                      what, ")")),
             /*drain=*/false, /*closed=*/false);
  };
  // Bytes the writer's tail says are written past our head. (A sealed
  // record may be taken before the tail that covers it is published.)
  auto available = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> uint64_t {
    if (c->rx_tail_cached <= c->rx_head) {
      c->rx_tail_cached = c->in_ctl->tail.load(std::memory_order_acquire);
      if (c->rx_tail_cached <= c->rx_head) return 0;
    }
    return c->rx_tail_cached - c->rx_head;
  };
  for (;;) {
    if (!drain && (moved >= size || records >= kMaxRecordsPerVisit)) {
      more = true;
      break;
    }
    if (c->rx_state == kRxIdle) {
      if (!SealedAt(c->in_data, size, c->in_seal_key, c->rx_head)) break;
      RecHdr h;
      memcpy(&h, c->in_data + (c->rx_head & (size - 1)), kRecHdrBytes);
      if (h.kind == kRecWhole || h.kind == kRecStream) {
        const uint64_t total = RecordBytes(h.len);
        const uint64_t pos = c->rx_head & (size - 1);
        // A whole record is all there once sealed; a streamed one as far
        // as the tail says.
        if (pos + total <= size && (h.kind == kRecWhole || available() >= total)) {
          // All there and in one piece: the sink takes it in one step.
          sink_->OnWholeFrame(c->peer, h.meta, c->in_data + pos + kRecHdrBytes, h.len);
          c->rx_head += total;
          moved += total;
          ++records;
          ++events;
          if (c->rx_head - c->rx_head_published >= kPipeChunkBytes) PublishHeadLocked(c);
          continue;
        }
        c->rx_meta = h.meta;
        c->rx_len = h.len;
        c->rx_slot = h.slot;
        c->rx_rec_start = c->rx_head;
        c->rx_dst = static_cast<char*>(sink_->OnFrame(c->peer, h.meta, h.len));
        c->rx_state = kRxInline;
        ++records;
      } else if (h.kind == kRecCma) {
        if (h.len == 0 || h.slot != c->rx_cma_seen % kCmaSlots) {
          malformed(absl::StrCat("CMA frame of ", h.len, " bytes in slot ", h.slot));
          break;
        }
        c->rx_meta = h.meta;
        c->rx_len = h.len;
        c->rx_slot = h.slot;
        c->rx_head += kRecAlign;
        moved += kRecAlign;
        c->rx_off = 0;
        c->rx_dst = static_cast<char*>(sink_->OnFrame(c->peer, h.meta, h.len));
        c->rx_state = kRxCma;
        ++records;
      } else if (h.kind == kRecClose) {
        c->rx_head += kRecAlign;
        c->rx_state = kRxStopped;
        NoteLoss(c, PeerFailure(absl::StrCat("rank ", c->peer, " closed its connection")),
                 /*drain=*/false, /*closed=*/true);
        ++events;
        break;
      } else {
        malformed(absl::StrCat("kind ", static_cast<int>(h.kind)));
        break;
      }
    }
    if (c->rx_state == kRxInline) {
      const uint64_t total = RecordBytes(c->rx_len);
      uint64_t consumed = c->rx_head - c->rx_rec_start;
      while (consumed < total) {
        uint64_t avail = available();
        if (avail == 0) break;
        if (avail > size || (avail % kRecAlign) != 0) {
          malformed(absl::StrCat("tail index ", c->rx_tail_cached, " against head ", c->rx_head));
          break;
        }
        uint64_t n = std::min<uint64_t>({avail, total - consumed, kPipeChunkBytes});
        ReadRecordPiece(c->in_data, size, c->rx_head, c->rx_len, c->rx_dst, consumed, n);
        c->rx_head += n;
        consumed += n;
        moved += n;
        if (c->rx_head - c->rx_head_published >= kPipeChunkBytes) PublishHeadLocked(c);
      }
      if (c->rx_state != kRxInline || consumed < total) break;  // malformed, or not written yet
      c->rx_state = kRxIdle;
      sink_->OnPayload(c->peer, c->rx_meta, c->rx_len);
      ++events;
      continue;
    }
    if (c->rx_state == kRxCma) {
      PublishHeadLocked(c);  // the descriptor's ring space is free already
      uint64_t before = c->rx_off;
      int r = ReadCmaLocked(c, cma_budget);
      cma_budget -= std::min(cma_budget, c->rx_off - before);
      if (r == kCmaFailed) {
        c->rx_state = kRxStopped;
        break;
      }
      if (r == kCmaMore) {
        more = true;
        ++events;  // progress
        break;
      }
      ++c->rx_cma_seen;
      c->in_ctl->cma_acked.store(c->rx_cma_seen, std::memory_order_release);
      RingPeer(c);
      c->rx_state = kRxIdle;
      sink_->OnPayload(c->peer, c->rx_meta, c->rx_len);
      ++events;
      if (!drain && cma_budget == 0) {
        more = true;
        break;
      }
      continue;
    }
    break;  // stopped
  }
  // Before the head's release (InboundReady reads them the other way round).
  c->rx_partial.store(c->rx_state == kRxInline, std::memory_order_relaxed);
  c->rx_more.store(more, std::memory_order_relaxed);
  PublishHeadLocked(c);
  if (events == 0 && moved > 0) events = 1;
  return events;
}

// ---------------------------------------------------------------------------
// Failure

bool ShmTransport::PeerAlive(Conn* c) {
  if (c->pidfd >= 0) {
    struct pollfd p = {c->pidfd, POLLIN, 0};
    return poll(&p, 1, 0) == 0;
  }
  return kill(c->pid, 0) == 0 || errno == EPERM;
}

void ShmTransport::NoteLoss(Conn* c, const absl::Status& why, bool drain, bool closed) {
  Locked l(&c->loss_mu);
  if (c->loss_flag.load(std::memory_order_relaxed)) {
    // A close record read while draining explains a remote loss better.
    if (closed && c->loss_drain && !c->loss_closed) {
      c->loss_why = why;
      c->loss_closed = true;
    }
    return;
  }
  c->loss_why = why;
  c->loss_drain = drain;
  c->loss_closed = closed;
  c->loss_flag.store(true, std::memory_order_release);
}

int ShmTransport::HandleLoss(Conn* c) {
  if (c->lost_reported.load(std::memory_order_acquire)) return 0;
  bool drain;
  {
    Locked l(&c->loss_mu);
    drain = c->loss_drain;
  }
  int events = 0;
  if (drain) {
    // Deliver everything that fully arrived before reporting the loss.
    if (!c->recv_mu.TryAcquire()) return 0;  // another thread reads; next pass
    events += ReadRing(c, /*drain=*/true);
    c->recv_mu.Release();
  }
  absl::Status why;
  {
    Locked l(&c->loss_mu);
    why = c->loss_why;
  }
  MarkDead(c, why);
  return events + 1;
}

void ShmTransport::MarkDead(Conn* c, const absl::Status& why) {
  Completions failed;
  {
    Locked l(&c->send_mu);
    if (!c->dead) {
      c->dead = true;
      c->death = why;
    }
    if (c->connected.load(std::memory_order_acquire)) {
      // Frames the peer acknowledged before it went away completed: they
      // must not be reported as failed.
      ReapAcksLocked(c, &failed);
      AbortSendsLocked(c, &failed);
    }
    UpdateOutStateLocked(c);
  }
  {
    Locked l(&c->loss_mu);
    if (!c->loss_flag.load(std::memory_order_relaxed)) {
      c->loss_why = why;
      c->loss_flag.store(true, std::memory_order_release);
    }
  }
  SignalPeerGone(c);
  RunCompletions(&failed);
  if (!c->lost_reported.exchange(true, std::memory_order_acq_rel)) {
    sink_->OnConnectionLost(c->peer, why);
  }
}

void ShmTransport::SignalPeerGone(Conn* c) {
  if (!c->connected.load(std::memory_order_acquire)) return;
  c->in_ctl->reader_gone.store(1, std::memory_order_release);
  c->out_ctl->writer_gone.store(1, std::memory_order_release);
  c->peer_hdr->attention.fetch_add(1, std::memory_order_acq_rel);
  RingPeer(c);
}

void ShmTransport::CheckLiveness() {
  const int64_t now = CoarseNs();
  const uint32_t att = seg_->hdr->attention.load(std::memory_order_acquire);
  const bool flags = att != attention_seen_.load(std::memory_order_relaxed);
  const bool pids = now >= next_liveness_ns_.load(std::memory_order_relaxed);
  if (!flags && !pids) return;
  if (!liveness_mu_.TryAcquire()) return;
  attention_seen_.store(att, std::memory_order_relaxed);
  if (pids) {
    next_liveness_ns_.store(now + int64_t{kLivenessIntervalMs} * 1'000'000,
                            std::memory_order_relaxed);
  }
  std::vector<struct pollfd> fds;
  std::vector<Conn*> who;
  for (Conn* c : local_) {
    if (!c->connected.load(std::memory_order_acquire) ||
        c->loss_flag.load(std::memory_order_acquire)) {
      continue;
    }
    if (c->peer_hdr->dead.load(std::memory_order_acquire) != 0) {
      NoteLoss(
          c, PeerFailure(absl::StrCat("rank ", c->peer, " shut down its shared-memory transport")),
          /*drain=*/true, /*closed=*/false);
    } else if (c->in_ctl->writer_gone.load(std::memory_order_acquire) != 0 ||
               c->out_ctl->reader_gone.load(std::memory_order_acquire) != 0) {
      NoteLoss(c, PeerFailure(absl::StrCat("rank ", c->peer, " closed its connection")),
               /*drain=*/true, /*closed=*/false);
    } else if (pids) {
      if (c->pidfd >= 0) {
        fds.push_back({c->pidfd, POLLIN, 0});
        who.push_back(c);
      } else if (!PeerAlive(c)) {
        NoteLoss(c, c->Died(), /*drain=*/true, /*closed=*/false);
      }
    }
  }
  if (!fds.empty() && poll(fds.data(), fds.size(), 0) > 0) {
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents != 0) NoteLoss(who[i], who[i]->Died(), /*drain=*/true, /*closed=*/false);
    }
  }
  liveness_mu_.Release();
}

void ShmTransport::ShutdownAll() {
  shutdown_.store(true, std::memory_order_release);
  seg_->hdr->dead.store(1, std::memory_order_release);
  for (Conn* c : local_) {
    absl::Status why =
        PeerFailure(absl::StrCat("rank ", self_, " shut down its connection to rank ", c->peer));
    {
      Locked l(&c->send_mu);
      if (!c->dead) {
        c->dead = true;
        c->death = why;
      }
      // Peers must not read our buffers after this returns; the callbacks
      // themselves run from the next Poll.
      if (c->connected.load(std::memory_order_acquire)) {
        for (OutFrame& f : c->inflight) CancelSlotLocked(c, &f);
      }
    }
    NoteLoss(c, why, /*drain=*/false, /*closed=*/false);
    SignalPeerGone(c);
  }
  // A thread of ours asleep in Poll reports the losses now.
  seg_->hdr->attention.fetch_add(1, std::memory_order_acq_rel);
  Ring(seg_->hdr, bell_, bell_len_);
}

void ShmTransport::FailPeer(int peer, const absl::Status& why) {
  Conn* c = ConnFor(peer);
  if (c != nullptr) MarkDead(c, why);
}

// ---------------------------------------------------------------------------
// Progress

int ShmTransport::PollOnce() {
  int events = 0;
  CheckLiveness();
  Completions done;
  for (Conn* c : local_) {
    if (!c->connected.load(std::memory_order_acquire) ||
        c->lost_reported.load(std::memory_order_relaxed)) {
      continue;
    }
    if (c->loss_flag.load(std::memory_order_acquire)) {
      events += HandleLoss(c);
      continue;
    }
    if (InboundReady(c)) {
      if (c->recv_mu.TryAcquire()) {
        events += ReadRing(c, /*drain=*/false);
        c->recv_mu.Release();
      }
    }
    uint32_t s = c->out_state.load(std::memory_order_acquire);
    if (s != 0 && OutReady(c, s) && c->send_mu.TryAcquire()) {
      size_t before = done.size();
      ReapAcksLocked(c, &done);
      FlushLocked(c, &done);
      UpdateOutStateLocked(c);
      c->send_mu.Release();
      events += static_cast<int>(done.size() - before);
    }
    if (!done.empty()) RunCompletions(&done);
    if (c->loss_flag.load(std::memory_order_acquire)) events += HandleLoss(c);
  }
  return events;
}

bool ShmTransport::InboundReady(Conn* c) {
  if (c->rx_more.load(std::memory_order_relaxed)) return true;
  const uint64_t head = c->in_ctl->head.load(std::memory_order_acquire);
  if (c->rx_partial.load(std::memory_order_relaxed)) {
    return c->in_ctl->tail.load(std::memory_order_acquire) != head;
  }
  return SealedAt(c->in_data, c->in_size, c->in_seal_key, head);
}

bool ShmTransport::AnythingReady() {
  return CoarseNs() >= next_liveness_ns_.load(std::memory_order_relaxed) || WorkReady();
}

bool ShmTransport::WorkReady() {
  if (seg_->hdr->attention.load(std::memory_order_acquire) !=
      attention_seen_.load(std::memory_order_relaxed)) {
    return true;
  }
  for (Conn* c : local_) {
    if (!c->connected.load(std::memory_order_acquire) ||
        c->lost_reported.load(std::memory_order_relaxed)) {
      continue;
    }
    if (c->loss_flag.load(std::memory_order_acquire) || InboundReady(c)) return true;
    uint32_t s = c->out_state.load(std::memory_order_acquire);
    if (s != 0 && OutReady(c, s)) return true;
  }
  return false;
}

int ShmTransport::Poll(absl::Duration timeout) {
  int events = PollOnce();
  if (events > 0 || timeout <= absl::ZeroDuration()) return events;
  const int64_t start = MonoNs();
  const int64_t deadline =
      timeout == absl::InfiniteDuration() ? INT64_MAX : start + absl::ToInt64Nanoseconds(timeout);
  // 1. Spin: a reply that comes within microseconds costs no wakeup.
  const int64_t spin = std::max(spin_ns_.load(std::memory_order_relaxed),
                                min_spin_ns_.load(std::memory_order_relaxed));
  // Look often (an arrival waits at most one short pause) and read the
  // clock seldom.
  for (uint32_t i = 0;; ++i) {
    if ((i & 31) == 0) {
      const int64_t now = MonoNs();
      if (now >= deadline) return 0;
      if (now - start >= spin) break;
    }
    CpuRelax();
    // A full PollOnce (which also looks at liveness) now and then; in
    // between only the shared words that say work is waiting.
    if ((i & 31) != 31 && !WorkReady()) continue;
    events = PollOnce();
    if (events > 0) {
      spin_ns_.store(std::min(kMaxSpinNs, spin + spin / 4 + 1000), std::memory_order_relaxed);
      return events;
    }
  }
  spin_ns_.store(std::max(min_spin_ns_.load(std::memory_order_relaxed), spin / 2),
                 std::memory_order_relaxed);
  return SleepUntilReady(deadline);
}

int ShmTransport::PollQuiet(absl::Duration timeout) {
  int events = PollOnce();
  if (events > 0 || timeout <= absl::ZeroDuration()) return events;
  return SleepUntilReady(timeout == absl::InfiniteDuration()
                             ? INT64_MAX
                             : MonoNs() + absl::ToInt64Nanoseconds(timeout));
}

void ShmTransport::Ring(SegHeader* h, const sockaddr_un& bell, socklen_t bell_len) {
  WakeOwner(h);  // its fence also orders the load below
  if (h->ext_sleepers.load(std::memory_order_relaxed) == 0 || bell_tx_ < 0 || bell_len == 0) {
    return;
  }
  // A full socket buffer is a bell already rung; a closed one, an owner gone.
  const char b = 1;
  (void)sendto(bell_tx_, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL,
               reinterpret_cast<const sockaddr*>(&bell), bell_len);
}

void ShmTransport::RingPeer(Conn* c) { Ring(c->peer_hdr, c->peer_bell, c->peer_bell_len); }

int ShmTransport::OpenWakeFd() {
  if (bell_rx_ < 0 || bell_tx_ < 0) return -1;
  for (Conn* c : local_) {
    if (!c->connected.load(std::memory_order_acquire) || c->peer_bell_len == 0) return -1;
  }
  wake_open_ = true;
  return bell_rx_;
}

void ShmTransport::DrainBell() {
  char buf[64];
  while (recv(bell_rx_, buf, sizeof buf, MSG_DONTWAIT) > 0) {
  }
}

bool ShmTransport::ArmWake() {
  if (!wake_open_) return false;
  DrainBell();
  SegHeader* h = seg_->hdr;
  h->ext_sleepers.fetch_add(1, std::memory_order_seq_cst);
  // Pairs with a waker's fence (WakeOwner): it sees us, or we see its work.
  FullFence();
  if (AnythingReady()) {
    h->ext_sleepers.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  return true;
}

void ShmTransport::DisarmWake() {
  seg_->hdr->ext_sleepers.fetch_sub(1, std::memory_order_relaxed);
  DrainBell();
}

int ShmTransport::SleepUntilReady(int64_t deadline) {
  int events = 0;
  // Sleep on our doorbell, in slices so that liveness is still checked.
  SegHeader* h = seg_->hdr;
  for (;;) {
    const int64_t now = MonoNs();
    if (now >= deadline) return 0;
    const int64_t slice =
        std::min<int64_t>(deadline - now, int64_t{kLivenessIntervalMs} * 1'000'000);
    h->sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t v = h->doorbell.load(std::memory_order_acquire);
    FullFence();
    if (!AnythingReady()) FutexWait(&h->doorbell, v, slice);
    h->sleepers.fetch_sub(1, std::memory_order_relaxed);
    events = PollOnce();
    if (events > 0) return events;
  }
}

}  // namespace hcomm
