// A named FIFO of messages in host shared memory, for processes on one
// machine that do not share a communicator (hcomm_channel_* in the C API).
//
//   // Parameter server:
//   HCOMM_ASSIGN_OR_RETURN(std::unique_ptr<Channel> ch,
//                          Channel::Open("weights", 64 << 20, /*create=*/true));
//   HCOMM_RETURN_IF_ERROR(ch->Write(buf, n, MonoNow() + absl::Seconds(5)));
//   // Worker:
//   HCOMM_ASSIGN_OR_RETURN(auto ch, Channel::Open("weights", 0, /*create=*/false));
//   size_t got = 0;
//   HCOMM_RETURN_IF_ERROR(ch->Read(buf, cap, &got, MonoNow() + absl::Seconds(5)));
//
// Layout. The segment is the POSIX shared-memory object "/hcomm-ch-<name>"
// (the file /dev/shm/hcomm-ch-<name>, mode 0600): a header of kHeaderBytes,
// then a byte ring of `capacity` bytes (a multiple of 8). A message is a
// record [uint64 length][payload][padding to a multiple of 8] that may wrap
// around the end of the ring; it takes RecordBytes(length) of the ring. The
// header holds two monotonic byte counters, `head` (first unread record) and
// `tail` (end of the last published record); used = tail - head.
//
// Locking. One process-shared, robust pthread mutex guards head, tail and
// the ring. A writer copies its whole record beyond `tail` while holding the
// mutex and only then advances `tail` (one 8-byte store), so a record is
// visible only when complete. A reader copies a record out and only then
// advances `head`. Hence the shared state is consistent at every instant:
// when a process dies holding the mutex, the next locker gets EOWNERDEAD,
// marks the mutex consistent and carries on; a half-written record is simply
// overwritten later and a half-read one stays in the channel.
//
// Waiting. Two futex words count "data published" and "space freed". A
// waiter reads the counter under the mutex, releases it and sleeps in
// FUTEX_WAIT until the counter moves or its deadline passes; the other side
// bumps the counter under the mutex and wakes every sleeper (so a waiter that
// gives up or dies can never swallow a wakeup meant for another).
//
// Ordering and delivery: records are appended and removed under the mutex,
// so each message is delivered to exactly one reader, and messages of one
// writer arrive in the order they were written. Writers waiting for room are
// not queued: a large message may wait while smaller ones keep fitting.
//
// THREAD SAFETY: Write and Read may be called from several threads (and
// processes) at once. Close and the destructor must not run concurrently
// with any other call on the same object.
#ifndef HCOMM_CORE_COMM_CHANNEL_H_
#define HCOMM_CORE_COMM_CHANNEL_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/base/clock.h"

namespace hcomm {

namespace channel_internal {
struct Header;
}  // namespace channel_internal

class Channel {
 public:
  // Longest channel name (the shared-memory name adds kShmPrefix).
  static constexpr size_t kMaxNameLength = 200;
  // Largest ring a creator may ask for.
  static constexpr size_t kMaxCapacity = size_t{1} << 30;
  // Smallest ring (a smaller request is rounded up to it).
  static constexpr size_t kMinCapacity = 16;
  // Bytes of the length prefix of every record.
  static constexpr size_t kRecordHeaderBytes = 8;
  // Bytes before the ring in the segment.
  static constexpr size_t kHeaderBytes = 512;
  // Prefix of the POSIX shared-memory name.
  static constexpr char kShmPrefix[] = "/hcomm-ch-";

  // Creates (create = true) or opens (create = false) the channel `name`.
  //
  // Creating: `capacity` must be in [1, kMaxCapacity]; it is rounded up to a
  // multiple of 8 (and to at least kMinCapacity). The memory is reserved now
  // (posix_fallocate), so a full /dev/shm is an error here rather than a
  // crash later. The name must not exist yet.
  // Opening: `capacity` is ignored (the header has it). The segment file is
  // opened without following a symbolic link and checked on that descriptor
  // before it is mapped (OpenExistingSegment, core/base/shm_file.h): a
  // regular file owned by this process's effective uid that neither group
  // nor others may write. The header is then validated; a segment whose
  // creator is still initialising it is waited for up to about 1 s.
  //
  // Errors: INVALID_ARGUMENT (name empty, containing '/' or NUL, longer than
  // kMaxNameLength; capacity out of range when creating; the name already
  // exists when creating; the segment is not a valid hcomm channel, or is a
  // symbolic link or not a regular file), NO_DEVICE (opening a name that
  // does not exist), PERMISSION_DENIED (the segment belongs to another user,
  // or group or others may write it; the message names the path, its owner
  // uid and mode), OUT_OF_MEM (/dev/shm full, mmap
  // failed), UNAVAILABLE (the segment exists but was never initialised),
  // INTERNAL (other system errors).
  static absl::StatusOr<std::unique_ptr<Channel>> Open(absl::string_view name, size_t capacity,
                                                       bool create);

  // Closes (see Close) and ignores the status.
  ~Channel();

  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // Appends one message of `n` bytes (n may be 0; data may then be null).
  // Blocks while the ring lacks room, until `deadline`. Waiting for the
  // mutex (held only while another call copies a message) is allowed at
  // least 1 s even when the deadline is sooner, so that a deadline in the
  // past still makes one real attempt.
  // Errors: INVALID_ARGUMENT (n > max_message_bytes(), data null with n > 0,
  // closed channel), TIMEOUT (names the channel, the bytes needed and the
  // bytes free), INTERNAL (the shared state is corrupted).
  absl::Status Write(const void* data, size_t n, MonoTime deadline);

  // Removes the next message into buf (capacity `cap` bytes) and sets *n to
  // its size. Blocks while the channel is empty, until `deadline` (the mutex
  // rule of Write applies). If the message is larger than cap it stays in
  // the channel, *n is set to its size and the result is MISMATCH.
  // Errors: INVALID_ARGUMENT (n null, buf null with cap > 0, closed
  // channel), TIMEOUT (names the channel), MISMATCH, INTERNAL (corrupted).
  absl::Status Read(void* buf, size_t cap, size_t* n, MonoTime deadline);

  // Unmaps the segment; the creator also unlinks its name (processes that
  // have it open keep working until they close; a later Open of the name
  // fails or creates a new channel), but not from the child of a fork made
  // after it opened the channel: there it only unmaps. Idempotent. The
  // object can then only be destroyed. Errors: INTERNAL (munmap or
  // shm_unlink failed; the object is closed anyway).
  absl::Status Close();

  const std::string& name() const { return name_; }
  // Size of the ring in bytes.
  size_t capacity() const { return capacity_; }
  // Largest message that can ever fit: capacity() - kRecordHeaderBytes.
  size_t max_message_bytes() const { return capacity_ - kRecordHeaderBytes; }
  bool is_creator() const { return creator_; }

  // Bytes of ring a message of `n` bytes takes: 8 + n rounded up to 8.
  static size_t RecordBytes(size_t n) { return kRecordHeaderBytes + ((n + 7) & ~size_t{7}); }
  // The shared-memory name of channel `name`: "/hcomm-ch-<name>".
  static std::string ShmName(absl::string_view name);

  // TEST ONLY. When set, called with "write" while Write holds the mutex
  // after copying the length and half the payload of its record (before it
  // is published), and with "read" while Read holds the mutex after copying
  // half the payload out (before the record is removed). Tests use it to
  // kill a process at the worst moment. Process-wide; nullptr clears it.
  static void SetHookForTesting(void (*hook)(const char* point));

 private:
  Channel(std::string name, void* base, size_t map_bytes, bool creator, uint64_t dev,
          uint64_t ino);

  // Takes the mutex by max(deadline, now + 1 s); recovers it from a dead
  // owner. On success the caller must call Unlock().
  absl::Status Lock(MonoTime deadline, absl::string_view op);
  void Unlock();
  // Checks head/tail under the mutex; INTERNAL if they are impossible.
  absl::Status CheckState(absl::string_view op, uint64_t* head, uint64_t* tail);
  // Copies between the ring (at byte counter `pos`) and plain memory.
  void CopyIn(uint64_t pos, const void* src, size_t n);
  void CopyOut(uint64_t pos, void* dst, size_t n) const;

  // The fields below are private to this object. Everything in the mapping
  // except the immutable header fields is guarded by the process-shared
  // mutex in *header_ (a pthread mutex, so ABSL_GUARDED_BY cannot express
  // it); the two futex words are atomics read without it.
  const std::string name_;
  void* base_;                        // the mapping; nullptr once closed
  size_t map_bytes_;
  channel_internal::Header* header_;  // == base_; nullptr once closed
  unsigned char* ring_;               // base_ + kHeaderBytes
  size_t capacity_;
  const bool creator_;
  const pid_t creator_pid_;  // the process that created it; 0 for an opener
  // Identity of the segment, so that the creator unlinks only its own.
  const uint64_t dev_;
  const uint64_t ino_;
};

}  // namespace hcomm

#endif  // HCOMM_CORE_COMM_CHANNEL_H_
