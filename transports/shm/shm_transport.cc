// The shared-memory transport (shm_transport.h): setup, attaching to
// peers, and the segment's life. Sending is in shm_send.cc, receiving in
// shm_receive.cc, polling and failures in shm_progress.cc.
#include "transports/shm/shm_layout.h"
#include "core/base/clock.h"

namespace hcomm {

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
  // Peers read this process by CMA only where it is enabled here (and
  // there): only then lower the ptrace protection that Yama would otherwise
  // apply to their process_vm_readv, and before any peer can probe us.
  if (t->cma_enabled_) AllowPtraceOnce();
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

absl::Status ShmTransport::Connect(int peer, const std::string& peer_address, MonoTime deadline) {
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
  // The peer's segment is checked on the descriptor that is mapped: another
  // user's file, or one others may write, is refused (core/base/shm_file.h).
  int fd = -1;
  struct stat st;
  for (;;) {
    absl::StatusOr<int> opened = OpenExistingSegment(parts[4], &st);
    if (opened.ok()) {
      fd = *opened;
      break;
    }
    if (CodeOf(opened.status()) != ErrorCode::kNoDevice) {
      return Annotate(opened.status(), where);
    }
    if (MonoNow() >= deadline) {
      return Timeout(absl::StrCat(where, ": segment /dev/shm", parts[4],
                                  " did not appear before the deadline"));
    }
    usleep(1000);  // setup only: the peer has not created its segment yet
  }
  if (st.st_size < static_cast<off_t>(kHeaderBytes)) {
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

bool ShmTransport::LoweredPtraceProtection() {
  return PtraceAllowedFor().load(std::memory_order_relaxed) == getpid();
}

bool ShmTransport::UsesCma(int peer) const {
  Conn* c = ConnFor(peer);
  if (c == nullptr || !cma_enabled_ || !c->connected.load(std::memory_order_acquire)) return false;
  return c->out_ctl->reader_cma.load(std::memory_order_acquire) == 1;
}

}  // namespace hcomm
