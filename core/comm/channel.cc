#include "core/comm/channel.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/clock.h"
#include "core/base/interrupt.h"
#include "core/base/shm_file.h"
#include "core/base/status.h"

namespace hcomm {
namespace channel_internal {

// The start of the segment. Immutable after initialisation except where
// noted. All processes mapping one segment run the same library version
// (checked through magic, version and header_bytes), so the layout of
// pthread_mutex_t and std::atomic is shared.
struct Header {
  std::atomic<uint64_t> magic;  // kMagic, stored last by the creator
  uint32_t version;             // kVersion
  uint32_t header_bytes;        // Channel::kHeaderBytes
  uint64_t capacity;            // ring bytes, a multiple of 8
  uint64_t creator_pid;         // for humans inspecting the segment
  pthread_mutex_t mu;           // process-shared, robust
  // Guarded by mu. Monotonic byte counters into the ring (position =
  // counter % capacity), each changed by one 8-byte store so that a process
  // dying at any point leaves them consistent.
  std::atomic<uint64_t> head;  // first byte of the oldest unread record
  std::atomic<uint64_t> tail;  // end of the newest published record
  // Guarded by mu. Processes sleeping on the futex words below (a process
  // that dies while sleeping leaves its count behind: harmless extra wakes).
  uint32_t data_waiters;
  uint32_t space_waiters;
  // Futex words: bumped under mu, read without it.
  std::atomic<uint32_t> data_seq;   // a record was published
  std::atomic<uint32_t> space_seq;  // a record was removed
};

}  // namespace channel_internal

namespace {

using channel_internal::Header;

constexpr uint64_t kMagic = 0x31484352434d4f43ULL;  // "COMCRCH1" little-endian
constexpr uint32_t kVersion = 1;
// How long Open waits for a creator that is still initialising a segment,
// and the least time Lock allows for the mutex.
constexpr absl::Duration kInitWait = absl::Seconds(1);
constexpr absl::Duration kLockGrace = absl::Seconds(1);

static_assert(sizeof(Header) <= Channel::kHeaderBytes, "header does not fit");
static_assert(Channel::kHeaderBytes % 64 == 0, "ring must stay aligned");
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex word");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared atomics must be lock-free");

std::atomic<void (*)(const char*)> test_hook{nullptr};

void RunHook(const char* point) {
  if (auto* hook = test_hook.load(std::memory_order_acquire)) hook(point);
}

std::string Errno(int err) { return absl::StrCat(strerror(err), " (errno ", err, ")"); }

std::string ShmPath(absl::string_view name) {
  return absl::StrCat("/dev/shm", Channel::ShmName(name));
}

// FutexWaitUntil (core/base/clock.h; not private: the word lives in memory
// shared between processes) for a reader or writer that has let go of the
// channel's lock:
// where a binding looks for Ctrl-C (core/base/interrupt.h), in naps of its
// period, running the check after each, outside the lock.
void SleepUnlocked(std::atomic<uint32_t>* word, uint32_t expected, MonoTime deadline) {
  if (!InterruptCheckSet()) {
    FutexWaitUntil(word, expected, deadline, /*shared=*/true);
    return;
  }
  FutexWaitUntil(word, expected, std::min(deadline, MonoNow() + kInterruptCheckPeriod),
                 /*shared=*/true);
  InterruptNow(MonoNow());
}

void FutexWakeAll(std::atomic<uint32_t>* word) { FutexWake(word, INT_MAX, /*shared=*/true); }

absl::Status ValidateName(absl::string_view name) {
  if (name.empty()) return InvalidArgument("channel name is empty");
  if (name.find('/') != absl::string_view::npos) {
    return InvalidArgument(absl::StrCat("channel name '", name, "' must not contain '/'"));
  }
  if (name.find('\0') != absl::string_view::npos) {
    return InvalidArgument("channel name must not contain a NUL character");
  }
  if (name.size() > Channel::kMaxNameLength) {
    return InvalidArgument(absl::StrCat("channel name of ", name.size(),
                                        " characters is longer than the limit of ",
                                        Channel::kMaxNameLength));
  }
  return absl::OkStatus();
}

// Maps shm_open's errno to an hcomm error about channel `name`.
absl::Status ShmOpenError(int err, absl::string_view name, bool create) {
  std::string what = absl::StrCat("channel '", name, "' (", ShmPath(name), ")");
  switch (err) {
    case EEXIST:
      return InvalidArgument(absl::StrCat(
          what, " already exists; open it with create=0, or remove the file if its creator died"));
    case ENOENT:
      return NoDevice(absl::StrCat("no ", what, " exists; has its creator opened it yet?"));
    case EACCES:
    case EPERM:
      return PermissionDenied(absl::StrCat("not allowed to ", create ? "create " : "open ", what,
                                           ": ", Errno(err)));
    case EMFILE:
    case ENFILE:
    case ENOSPC:
    case ENOMEM:
      return OutOfMem(absl::StrCat("cannot ", create ? "create " : "open ", what, ": ",
                                   Errno(err)));
    default:
      return Internal(absl::StrCat("shm_open of ", what, " failed: ", Errno(err)));
  }
}

// Validates the header of a mapped segment of `size` bytes. `*not_ready` is
// set when the creator has not finished initialising it (worth waiting for).
absl::Status ValidateHeader(const Header* h, uint64_t size, absl::string_view name,
                            bool* not_ready) {
  *not_ready = false;
  std::string what = absl::StrCat("channel '", name, "' (", ShmPath(name), ")");
  uint64_t magic = h->magic.load(std::memory_order_acquire);
  if (magic == 0) {
    *not_ready = true;
    return Unavailable(absl::StrCat(
        what, " exists but was never initialised; its creator may have died while creating it "
              "(remove the file)"));
  }
  if (magic != kMagic) {
    return InvalidArgument(absl::StrCat(what, " is not an hcomm channel (magic 0x",
                                        absl::Hex(magic), ")"));
  }
  if (h->version != kVersion || h->header_bytes != Channel::kHeaderBytes) {
    return InvalidArgument(absl::StrCat(what, " has layout version ", h->version, " (header ",
                                        h->header_bytes, " bytes); this library reads version ",
                                        kVersion, " (header ", Channel::kHeaderBytes, " bytes)"));
  }
  uint64_t cap = h->capacity;
  if (cap % 8 != 0 || cap < Channel::kMinCapacity || cap > Channel::kMaxCapacity ||
      size != Channel::kHeaderBytes + cap) {
    return InvalidArgument(absl::StrCat(what, " is corrupted: its header says capacity ", cap,
                                        " bytes but the segment has ", size, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status InitHeader(Header* h, uint64_t capacity) {
  h->version = kVersion;
  h->header_bytes = Channel::kHeaderBytes;
  h->capacity = capacity;
  h->creator_pid = static_cast<uint64_t>(getpid());
  h->head.store(0, std::memory_order_relaxed);
  h->tail.store(0, std::memory_order_relaxed);
  h->data_waiters = 0;
  h->space_waiters = 0;
  h->data_seq.store(0, std::memory_order_relaxed);
  h->space_seq.store(0, std::memory_order_relaxed);
  pthread_mutexattr_t attr;
  int rc = pthread_mutexattr_init(&attr);
  if (rc == 0) rc = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  if (rc == 0) rc = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  if (rc == 0) rc = pthread_mutex_init(&h->mu, &attr);
  pthread_mutexattr_destroy(&attr);
  if (rc != 0) return Internal(absl::StrCat("pthread_mutex_init failed: ", Errno(rc)));
  h->magic.store(kMagic, std::memory_order_release);
  return absl::OkStatus();
}

}  // namespace

constexpr char Channel::kShmPrefix[];

std::string Channel::ShmName(absl::string_view name) { return absl::StrCat(kShmPrefix, name); }

void Channel::SetHookForTesting(void (*hook)(const char* point)) {
  test_hook.store(hook, std::memory_order_release);
}

absl::StatusOr<std::unique_ptr<Channel>> Channel::Open(absl::string_view name, size_t capacity,
                                                       bool create) {
  HCOMM_RETURN_IF_ERROR(ValidateName(name));
  const std::string shm_name = ShmName(name);
  if (create) {
    if (capacity == 0 || capacity > kMaxCapacity) {
      return InvalidArgument(absl::StrCat("capacity_bytes ", capacity,
                                          " is out of range for new channel '", name, "' (1 .. ",
                                          kMaxCapacity, ")"));
    }
    capacity = std::max(kMinCapacity, (capacity + 7) & ~size_t{7});
    const size_t total = kHeaderBytes + capacity;
    int fd = shm_open(shm_name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return ShmOpenError(errno, name, true);
    // From here on, a failure removes what was created.
    auto fail = [&](absl::Status s, void* map) {
      if (map != nullptr) munmap(map, total);
      shm_unlink(shm_name.c_str());
      close(fd);
      return s;
    };
    std::string what = absl::StrCat("channel '", name, "' (", ShmPath(name), ")");
    if (fchmod(fd, 0600) != 0) {
      return fail(Internal(absl::StrCat("fchmod of ", what, " failed: ", Errno(errno))), nullptr);
    }
    if (ftruncate(fd, static_cast<off_t>(total)) != 0) {
      int err = errno;
      return fail(OutOfMem(absl::StrCat("cannot size ", what, " to ", total, " bytes: ",
                                        Errno(err))),
                  nullptr);
    }
    // Reserve the pages now: on a full tmpfs a later first touch would be
    // SIGBUS instead of an error.
    int rc = posix_fallocate(fd, 0, static_cast<off_t>(total));
    if (rc != 0) {
      return fail(OutOfMem(absl::StrCat("cannot reserve ", total, " bytes of /dev/shm for ", what,
                                        ": ", Errno(rc))),
                  nullptr);
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
      return fail(Internal(absl::StrCat("fstat of ", what, " failed: ", Errno(errno))), nullptr);
    }
    void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
      int err = errno;
      return fail(OutOfMem(absl::StrCat("cannot map ", what, " (", total, " bytes): ",
                                        Errno(err))),
                  nullptr);
    }
    absl::Status s = InitHeader(new (base) Header, capacity);
    if (!s.ok()) return fail(Annotate(s, what), base);
    close(fd);
    return std::unique_ptr<Channel>(new Channel(std::string(name), base, total, true,
                                                static_cast<uint64_t>(st.st_dev),
                                                static_cast<uint64_t>(st.st_ino)));
  }

  // Another user's segment, or one others may write, is refused before it is
  // mapped (core/base/shm_file.h): its header steers every later access.
  struct stat st;
  absl::StatusOr<int> opened = OpenExistingSegment(shm_name, &st);
  if (!opened.ok()) {
    if (CodeOf(opened.status()) == ErrorCode::kNoDevice) return ShmOpenError(ENOENT, name, false);
    return Annotate(opened.status(), absl::StrCat("open channel '", name, "'"));
  }
  const int fd = *opened;
  std::string what = absl::StrCat("channel '", name, "' (", ShmPath(name), ")");
  const MonoTime give_up = MonoNow() + kInitWait;
  while (true) {
    // Again on every try: the owner and mode are those of the file mapped.
    absl::Status checked = CheckSegment(fd, ShmPath(name), &st);
    if (!checked.ok()) {
      close(fd);
      return Annotate(checked, absl::StrCat("open channel '", name, "'"));
    }
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    absl::Status s;
    bool not_ready = false;
    void* base = nullptr;
    if (size == 0) {
      // The creator has not sized it yet.
      not_ready = true;
      s = Unavailable(absl::StrCat(what, " exists but was never initialised; its creator may "
                                         "have died while creating it (remove the file)"));
    } else if (size < kHeaderBytes || size > kHeaderBytes + kMaxCapacity) {
      s = InvalidArgument(absl::StrCat(what, " is not an hcomm channel (", size, " bytes)"));
    } else {
      base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (base == MAP_FAILED) {
        int err = errno;
        close(fd);
        return OutOfMem(absl::StrCat("cannot map ", what, " (", size, " bytes): ", Errno(err)));
      }
      s = ValidateHeader(static_cast<Header*>(base), size, name, &not_ready);
      if (s.ok()) {
        close(fd);
        return std::unique_ptr<Channel>(new Channel(std::string(name), base, size, false,
                                                    static_cast<uint64_t>(st.st_dev),
                                                    static_cast<uint64_t>(st.st_ino)));
      }
      munmap(base, size);
    }
    if (!not_ready || MonoNow() >= give_up) {
      close(fd);
      return s;
    }
    // The creator is between shm_open and the end of InitHeader (a few
    // microseconds, or the time to reserve a large segment).
    absl::SleepFor(absl::Milliseconds(1));
  }
}

Channel::Channel(std::string name, void* base, size_t map_bytes, bool creator, uint64_t dev,
                 uint64_t ino)
    : name_(std::move(name)),
      base_(base),
      map_bytes_(map_bytes),
      header_(static_cast<Header*>(base)),
      ring_(static_cast<unsigned char*>(base) + kHeaderBytes),
      capacity_(static_cast<size_t>(header_->capacity)),
      creator_(creator),
      creator_pid_(creator ? getpid() : 0),
      dev_(dev),
      ino_(ino) {}

Channel::~Channel() { Close().IgnoreError(); }

absl::Status Channel::Close() {
  if (base_ == nullptr) return absl::OkStatus();
  absl::Status status;
  // A fork's child closing the channel its parent made unmaps it only: the
  // parent still uses the name.
  if (creator_ && getpid() == creator_pid_) {
    // Unlink only if the name still refers to our segment (it may have been
    // removed by hand and created anew by someone else).
    const std::string shm_name = ShmName(name_);
    int fd = shm_open(shm_name.c_str(), O_RDONLY | O_CLOEXEC, 0);
    if (fd >= 0) {
      struct stat st;
      bool ours = fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_dev) == dev_ &&
                  static_cast<uint64_t>(st.st_ino) == ino_;
      close(fd);
      if (ours && shm_unlink(shm_name.c_str()) != 0 && errno != ENOENT) {
        status = Internal(absl::StrCat("cannot remove channel '", name_, "' (", ShmPath(name_),
                                       "): ", Errno(errno)));
      }
    }
  }
  if (munmap(base_, map_bytes_) != 0 && status.ok()) {
    status = Internal(absl::StrCat("munmap of channel '", name_, "' failed: ", Errno(errno)));
  }
  base_ = nullptr;
  header_ = nullptr;
  ring_ = nullptr;
  return status;
}

absl::Status Channel::Lock(MonoTime deadline, absl::string_view op) {
  int rc;
  if (deadline == MonoTime::InfiniteFuture()) {
    rc = pthread_mutex_lock(&header_->mu);
  } else {
    // On CLOCK_MONOTONIC as every deadline (pthread_mutex_timedlock's
    // would be the wall clock's).
    const MonoTime lock_deadline = std::max(deadline, MonoNow() + kLockGrace);
    const timespec ts = absl::ToTimespec(lock_deadline.SinceOrigin());
#if defined(__SANITIZE_THREAD__)
    // ThreadSanitizer's runtime (GCC 12) intercepts pthread_mutex_timedlock
    // but not pthread_mutex_clocklock: it is told of this acquisition (the
    // unlock it intercepts).
    __tsan_mutex_pre_lock(&header_->mu, __tsan_mutex_try_lock);
#endif
    rc = pthread_mutex_clocklock(&header_->mu, CLOCK_MONOTONIC, &ts);
#if defined(__SANITIZE_THREAD__)
    __tsan_mutex_post_lock(&header_->mu,
                           rc == 0 || rc == EOWNERDEAD
                               ? __tsan_mutex_try_lock
                               : __tsan_mutex_try_lock | __tsan_mutex_try_lock_failed,
                           0);
#endif
  }
  switch (rc) {
    case 0: return absl::OkStatus();
    case EOWNERDEAD:
      // A process died holding the mutex. The shared state is consistent at
      // every instant (see channel.h), so it only needs marking.
      pthread_mutex_consistent(&header_->mu);
      return absl::OkStatus();
    case ETIMEDOUT:
      return Timeout(absl::StrCat(op, " channel '", name_,
                                  "' timed out waiting for its lock, which another process holds "
                                  "(is that process stopped?)"));
    case ENOTRECOVERABLE:
      return Internal(absl::StrCat("channel '", name_, "' is unusable: its lock is unrecoverable"));
    default:
      return Internal(absl::StrCat(op, " channel '", name_, "': locking failed: ", Errno(rc)));
  }
}

void Channel::Unlock() { pthread_mutex_unlock(&header_->mu); }

absl::Status Channel::CheckState(absl::string_view op, uint64_t* head, uint64_t* tail) {
  *head = header_->head.load(std::memory_order_relaxed);
  *tail = header_->tail.load(std::memory_order_relaxed);
  if (*head > *tail || *tail - *head > capacity_ || *head % 8 != 0 || *tail % 8 != 0) {
    return Internal(absl::StrCat(op, " channel '", name_, "': the channel is corrupted (head ",
                                 *head, ", tail ", *tail, ", capacity ", capacity_, ")"));
  }
  return absl::OkStatus();
}

void Channel::CopyIn(uint64_t pos, const void* src, size_t n) {
  if (n == 0) return;
  const size_t off = static_cast<size_t>(pos % capacity_);
  const size_t first = std::min(n, capacity_ - off);
  memcpy(ring_ + off, src, first);
  if (n > first) memcpy(ring_, static_cast<const unsigned char*>(src) + first, n - first);
}

void Channel::CopyOut(uint64_t pos, void* dst, size_t n) const {
  if (n == 0) return;
  const size_t off = static_cast<size_t>(pos % capacity_);
  const size_t first = std::min(n, capacity_ - off);
  memcpy(dst, ring_ + off, first);
  if (n > first) memcpy(static_cast<unsigned char*>(dst) + first, ring_, n - first);
}

absl::Status Channel::Write(const void* data, size_t n, MonoTime deadline) {
  if (header_ == nullptr) {
    return InvalidArgument(absl::StrCat("write to channel '", name_, "': it is closed"));
  }
  if (data == nullptr && n > 0) {
    return InvalidArgument(absl::StrCat("write to channel '", name_, "': data is null with ", n,
                                        " bytes"));
  }
  if (n > max_message_bytes()) {
    return InvalidArgument(absl::StrCat(
        "write to channel '", name_, "': a message of ", n, " bytes can never fit; the channel ",
        "holds at most ", max_message_bytes(), " bytes per message (capacity ", capacity_,
        " bytes, ", kRecordHeaderBytes, " of them taken by each message's length)"));
  }
  const MonoTime start = MonoNow();
  const uint64_t need = RecordBytes(n);
  const std::string op = "write to";
  HCOMM_RETURN_IF_ERROR(Lock(deadline, op));
  while (true) {
    uint64_t head, tail;
    absl::Status s = CheckState(op, &head, &tail);
    if (!s.ok()) {
      Unlock();
      return s;
    }
    const uint64_t free_bytes = capacity_ - (tail - head);
    if (free_bytes >= need) {
      const uint64_t len = n;
      CopyIn(tail, &len, sizeof(len));
      const size_t half = n / 2;
      CopyIn(tail + kRecordHeaderBytes, data, half);
      RunHook("write");
      CopyIn(tail + kRecordHeaderBytes + half, static_cast<const unsigned char*>(data) + half,
             n - half);
      // Publish: the record becomes visible with this one store.
      header_->tail.store(tail + need, std::memory_order_release);
      header_->data_seq.fetch_add(1, std::memory_order_release);
      const bool wake = header_->data_waiters != 0;
      Unlock();
      if (wake) FutexWakeAll(&header_->data_seq);
      return absl::OkStatus();
    }
    if (MonoNow() >= deadline || Interrupted()) {
      Unlock();
      return Timeout(absl::StrCat(
          "write of ", n, " bytes to channel '", name_, "' ", TimedOutOrInterrupted(), " after ",
          absl::FormatDuration(MonoNow() - start), ": it needs ", need,
          " bytes of ring space and ", free_bytes, " of ", capacity_,
          " bytes are free (no reader has made room)"));
    }
    const uint32_t seq = header_->space_seq.load(std::memory_order_acquire);
    ++header_->space_waiters;
    Unlock();
    SleepUnlocked(&header_->space_seq, seq, deadline);
    HCOMM_RETURN_IF_ERROR(Lock(deadline, op));
    --header_->space_waiters;
  }
}

absl::Status Channel::Read(void* buf, size_t cap, size_t* n, MonoTime deadline) {
  if (header_ == nullptr) {
    return InvalidArgument(absl::StrCat("read from channel '", name_, "': it is closed"));
  }
  if (n == nullptr) {
    return InvalidArgument(absl::StrCat("read from channel '", name_, "': nbytes is null"));
  }
  if (buf == nullptr && cap > 0) {
    return InvalidArgument(absl::StrCat("read from channel '", name_, "': buf is null with cap ",
                                        cap));
  }
  const MonoTime start = MonoNow();
  const std::string op = "read from";
  HCOMM_RETURN_IF_ERROR(Lock(deadline, op));
  while (true) {
    uint64_t head, tail;
    absl::Status s = CheckState(op, &head, &tail);
    if (!s.ok()) {
      Unlock();
      return s;
    }
    const uint64_t used = tail - head;
    if (used > 0) {
      uint64_t len = 0;
      if (used >= kRecordHeaderBytes) CopyOut(head, &len, sizeof(len));
      if (used < kRecordHeaderBytes || len > used - kRecordHeaderBytes ||
          RecordBytes(static_cast<size_t>(len)) > used) {
        Unlock();
        return Internal(absl::StrCat("read from channel '", name_,
                                     "': the channel is corrupted (a record of ", len,
                                     " bytes, but only ", used, " bytes are in the ring)"));
      }
      *n = static_cast<size_t>(len);
      if (len > cap) {
        Unlock();
        return Mismatch(absl::StrCat("read from channel '", name_, "': the next message has ", len,
                                     " bytes but the buffer holds only ", cap,
                                     "; the message stays in the channel"));
      }
      const size_t half = static_cast<size_t>(len) / 2;
      CopyOut(head + kRecordHeaderBytes, buf, half);
      RunHook("read");
      CopyOut(head + kRecordHeaderBytes + half, static_cast<unsigned char*>(buf) + half,
              static_cast<size_t>(len) - half);
      // Remove: the space is reusable from this one store on.
      header_->head.store(head + RecordBytes(static_cast<size_t>(len)),
                          std::memory_order_release);
      header_->space_seq.fetch_add(1, std::memory_order_release);
      const bool wake = header_->space_waiters != 0;
      Unlock();
      if (wake) FutexWakeAll(&header_->space_seq);
      return absl::OkStatus();
    }
    if (MonoNow() >= deadline || Interrupted()) {
      Unlock();
      return Timeout(absl::StrCat("read from channel '", name_, "' ", TimedOutOrInterrupted(),
                                  " after ",
                                  absl::FormatDuration(MonoNow() - start),
                                  ": the channel is empty (no writer sent a message)"));
    }
    const uint32_t seq = header_->data_seq.load(std::memory_order_acquire);
    ++header_->data_waiters;
    Unlock();
    SleepUnlocked(&header_->data_seq, seq, deadline);
    HCOMM_RETURN_IF_ERROR(Lock(deadline, op));
    --header_->data_waiters;
  }
}

}  // namespace hcomm
