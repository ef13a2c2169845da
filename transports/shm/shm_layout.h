// The shared-memory transport's shared layout and the helpers its files
// share (transports/shm/shm_*.cc): segment and ring headers, records and
// their seals, doorbells. Internal to transports/shm; see shm_transport.h.
#ifndef HCOMM_TRANSPORTS_SHM_SHM_LAYOUT_H_
#define HCOMM_TRANSPORTS_SHM_SHM_LAYOUT_H_

#include <errno.h>
#include <fcntl.h>
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
#include "core/base/clock.h"
#include "core/base/fence.h"
#include "algorithms/kernels/shared_copy.h"
#include "core/base/shm_file.h"
#include "core/base/spin.h"
#include "core/base/status.h"
#include "transports/shm/shm_transport.h"

namespace hcomm {
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif


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
// certain, put a second line's ownership before every seal and made small
// exchanges slower; measured: docs/performance.md, "shm: sealed records".)
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
inline void RingWrite(char* data, uint64_t size, uint64_t pos, const void* src, uint64_t n,
               SharedCopier& copier) {
  uint64_t off = pos & (size - 1);
  uint64_t first = std::min(n, size - off);
  copier.Copy(data + off, src, first);
  if (first < n) copier.Copy(data, static_cast<const char*>(src) + first, n - first);
}

inline void RingRead(const char* data, uint64_t size, uint64_t pos, void* dst, uint64_t n) {
  uint64_t off = pos & (size - 1);
  uint64_t first = std::min(n, size - off);
  memcpy(dst, data + off, first);
  if (first < n) memcpy(static_cast<char*>(dst) + first, data, n - first);
}

// Writes bytes [a, a+n) of the record (header, payload, padding) at ring
// position pos.
inline void WriteRecordPiece(char* data, uint64_t size, uint64_t pos, const RecHdr& h, const char* payload,
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
inline void ReadRecordPiece(const char* data, uint64_t size, uint64_t pos, uint64_t len, char* dst,
                     uint64_t a, uint64_t n) {
  if (dst == nullptr) return;
  const uint64_t end = a + n;
  uint64_t p0 = std::max(a, kRecHdrBytes);
  uint64_t p1 = std::min(end, kRecHdrBytes + len);
  if (p1 > p0) RingRead(data, size, pos + (p0 - a), dst + (p0 - kRecHdrBytes), p1 - p0);
}

// The Dekker-style handshakes between a publisher and a sleeper below
// fence fully on both sides (FullFence, core/base/fence.h).
inline void WakeOwner(SegHeader* h) {
  // Pairs with the fence a sleeper runs between announcing itself and
  // checking for work: either it sees what we published, or we see it.
  FullFence();
  if (h->sleepers.load(std::memory_order_relaxed) == 0) return;
  h->doorbell.fetch_add(1, std::memory_order_release);
  FutexWake(&h->doorbell, INT_MAX, /*shared=*/true);
}

// The process (pid) that last lowered its ptrace protection: a forked
// child has not, whatever its parent did.
inline std::atomic<pid_t>& PtraceAllowedFor() {
  static std::atomic<pid_t> pid{0};
  return pid;
}

// Lets any process of this user ptrace this one: Yama (if present) would
// otherwise refuse peers' process_vm_readv. Only where CMA is enabled
// (CmaAllowedByEnv), as it lowers a protection for the whole process.
inline void AllowPtraceOnce() {
  std::atomic<pid_t>& done_for = PtraceAllowedFor();
  pid_t me = getpid();
  if (done_for.load(std::memory_order_relaxed) == me) return;
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);  // EINVAL without Yama: fine
  done_for.store(me, std::memory_order_relaxed);
}

// Single-copy CMA is opt-in (HCOMM_SHM_CMA=1): on the 2-vCPU VMs this
// library is measured on, the pipelined copy through the ring moved 256 KiB
// to 16 MiB faster than process_vm_readv, whose page pinning is expensive
// there (measured: docs/performance.md, "shm: CMA opt-in").
inline bool CmaAllowedByEnv() {
  const char* v = getenv("HCOMM_SHM_CMA");
  if (v == nullptr) return false;
  std::string s(v);
  return s == "1" || s == "true" || s == "on" || s == "yes";
}

// The abstract Unix socket (no file) that a segment's owner may wait on,
// named after the segment.
inline bool BellAddress(const std::string& segment_name, sockaddr_un* a, socklen_t* len) {
  const std::string name = absl::StrCat("hcomm-bell", segment_name);
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  if (name.size() + 1 > sizeof a->sun_path) return false;
  memcpy(a->sun_path + 1, name.data(), name.size());  // sun_path[0] == 0: abstract
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return true;
}

inline std::string SegmentName(const std::string& job_key, int self) {
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

inline uint64_t RandomWord() {
  uint64_t x = static_cast<uint64_t>(MonoNs()) ^ (static_cast<uint64_t>(getpid()) << 32) ^
               reinterpret_cast<uintptr_t>(&x);
  return Mix64(x) | 1;
}

inline void Prefault(void* base, size_t len) {
  if (madvise(base, len, MADV_POPULATE_WRITE) == 0) return;
  // Older kernels: touch every page (the segment's space is reserved, so
  // this cannot SIGBUS).
  volatile char* p = static_cast<volatile char*>(base);
  for (size_t off = 0; off < len; off += 4096) p[off] = p[off];
}


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

enum RxState { kRxIdle = 0, kRxInline = 1, kRxCma = 2, kRxStopped = 3 };
enum OutStateBits : uint32_t { kOutRetry = 1, kOutSpace = 2, kOutAcks = 4 };
enum CmaResult { kCmaDone, kCmaMore, kCmaFailed };

inline absl::Status ShmTransport::Conn::Died() const {
  return PeerFailure(absl::StrCat("rank ", peer, " (pid ", pid, ") died"));
}


using Completions = std::vector<std::pair<SendCallback, absl::Status>>;

inline void RunCompletions(Completions* done) {
  for (auto& [cb, st] : *done) {
    if (cb) cb(st);
  }
  done->clear();
}

}  // namespace hcomm

#endif  // HCOMM_TRANSPORTS_SHM_SHM_LAYOUT_H_
