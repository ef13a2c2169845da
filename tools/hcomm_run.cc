// hcomm_run: the launcher. Starts one node's ranks of a program, gives each
// the environment that hcomm_comm_init() reads, prefixes every line the
// ranks print with "[rank R] " (unless --tag-output=0), and stops the whole
// job on this node as soon as one of its ranks fails.
//
// Example (one host; options and usage: hcomm_run_options.h):
//   hcomm_run -n 4 --timeout 600 -- ./allreduce_app --size 1M
// Two hosts, 2 ranks each (RANK 0..3), torchrun's flag names; run on each
// host with its --node-rank and the same HCOMM_JOB_TOKEN exported:
//   hcomm_run --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --master-port 29500 -n 2 -- ./app
//   hcomm_run --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 --master-port 29500 -n 2 -- ./app
// The same job from a hostfile, one command for every host (each launcher
// finds its own line; slots may differ from host to host):
//   printf '10.0.0.1 slots=2\n10.0.0.2 slots=2\n' > hosts
//   hcomm_run --hostfile hosts --master-port 29500 -- ./app
//
// What each rank gets (RANK, WORLD_SIZE, LOCAL_RANK, ..., HCOMM_JOB_TOKEN,
// HCOMM_JOB_KEY, OMP_NUM_THREADS) and why the key is per launch on one node
// but derived from the token on several: hcomm_run_env.h. Rank 0 names the
// job's /dev/shm segments "hcomm-<key>-..." with HCOMM_JOB_KEY. The
// launchers of different nodes do not talk to each other: a failing rank
// stops its own node's job, and the other nodes' ranks then see a peer
// failure (or their --timeout) and end in turn.
//
// The ranks unlink their /dev/shm segments once every local rank has
// attached, so a job stopped during init would leave them behind: after
// every rank has ended, however it ended, the launcher removes whatever
// /dev/shm still holds under the job's key. (Nodes that share one /dev/shm,
// such as network namespaces of one machine, share that key too: the first
// launcher to finish removes the names of all of them, which is harmless
// once the job's communicators are set up.)
//
// Every rank runs in its own process group, with stdin from /dev/null and
// stdout/stderr on pipes that the launcher polls; the launcher writes whole
// lines only, so lines of different ranks never interleave.
//
// Exit status: 0 when every rank exits 0; the first failing rank's exit
// status, or 128+signal when it was killed by a signal; 124 on --timeout;
// 128+signal when the launcher itself got SIGINT/SIGTERM; 2 on bad usage.
// Stopping means: SIGTERM (or the forwarded signal) to every rank's process
// group, SIGKILL after a 3 s grace, then reading what is left on the pipes.
// If the launcher itself dies, even by SIGKILL, the kernel sends every rank
// (not the ranks' own children) SIGKILL (PR_SET_PDEATHSIG), so no rank runs
// on as an orphan.
//
// C++17 and POSIX (Linux: pipe2, getrandom, prctl, sigabbrev_np), and
// OpenSSL's HMAC for the multi-node key; single threaded, so the forked
// children only call exec-safe functions.

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "tools/hcomm_run_env.h"
#include "tools/hcomm_run_options.h"

extern char** environ;

namespace hcomm_run {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitTimeout = 124;
constexpr int kExitExecFailed = 127;
constexpr std::chrono::seconds kKillGrace(3);
// After the last rank has been reaped, how long to keep reading pipes that a
// leftover grandchild may still hold open.
constexpr std::chrono::seconds kDrainGrace(2);
// A partial line longer than this is printed (with a newline) rather than
// buffered further.
constexpr size_t kMaxLineBytes = 1 << 20;
// Output waiting for a slow reader of the launcher's stdout or stderr: past
// this the ranks' pipes are not read (they then block on their own writes)
// until it drains. The launcher itself never blocks on its output.
constexpr size_t kMaxQueuedBytes = 4 << 20;
constexpr size_t kReadChunk = 64 * 1024;
constexpr char kShmDir[] = "/dev/shm";

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------
// Small helpers.

// Writes all of `data` to `fd`, retrying on EINTR/EAGAIN. Errors (e.g. a
// closed stdout) drop the output; SIGPIPE is ignored by the launcher.
void WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        pollfd p = {fd, POLLOUT, 0};
        poll(&p, 1, -1);
        continue;
      }
      return;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

void WriteAll(int fd, const std::string& s) { WriteAll(fd, s.data(), s.size()); }

// Launcher messages: one write per message so they stay whole lines.
void Message(const std::string& text) { WriteAll(STDERR_FILENO, "hcomm_run: " + text + "\n"); }

int UsageError(const std::string& text) {
  WriteAll(STDERR_FILENO, "hcomm_run: " + text + "\n" + kUsage);
  return kExitUsage;
}

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  if (abbrev != nullptr) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(sig);
}

std::string FormatSeconds(double s) {
  char buf[64];
  snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}

// Removes every entry of /dev/shm named "hcomm-<key>-..." (ring segments,
// their "-probe" files, "-c<ctx>" collective segments) and nothing else.
// unlinkat() on the directory's fd removes a symbolic link itself, never
// what it points to.
void RemoveJobSegments(const std::string& key) {
  const std::string prefix = "hcomm-" + key + "-";
  DIR* dir = opendir(kShmDir);
  if (dir == nullptr) {
    if (errno != ENOENT) Message(std::string("cannot read ") + kShmDir + ": " + strerror(errno));
    return;
  }
  while (const dirent* e = readdir(dir)) {
    if (strncmp(e->d_name, prefix.c_str(), prefix.size()) != 0) continue;
    if (unlinkat(dirfd(dir), e->d_name, 0) != 0 && errno != ENOENT) {
      Message(std::string("cannot remove ") + kShmDir + "/" + e->d_name + ": " + strerror(errno));
    }
  }
  closedir(dir);
}

// Makes sure 0, 1 and 2 are open, so that pipe fds never land on them.
void EnsureStdFds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
      int null_fd = open("/dev/null", O_RDWR);
      if (null_fd >= 0 && null_fd != fd) {
        dup2(null_fd, fd);
        close(null_fd);
      }
    }
  }
}

// Two pipes per rank plus a few: raise the soft fd limit if needed.
bool EnsureFdLimit(int nranks) {
  rlim_t needed = static_cast<rlim_t>(2 * nranks + 32);
  rlimit lim;
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return true;
  if (lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur >= needed) return true;
  if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < needed) return false;
  lim.rlim_cur = needed;
  return setrlimit(RLIMIT_NOFILE, &lim) == 0;
}

// ---------------------------------------------------------------------------
// Signals: handlers only write the signal number to a self-pipe.

int g_signal_pipe[2] = {-1, -1};

void OnSignal(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  ssize_t ignored = write(g_signal_pipe[1], &b, 1);
  (void)ignored;
  errno = saved;
}

bool InstallSignalHandlers() {
  if (pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return false;
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) {
    if (sigaction(sig, &sa, nullptr) != 0) return false;
  }
  signal(SIGPIPE, SIG_IGN);
  return true;
}

// ---------------------------------------------------------------------------
// The job.

struct Stream {
  int fd = -1;  // Read end of the pipe; -1 once EOF was seen.
  int rank = 0;
  int out_fd = STDOUT_FILENO;
  std::string partial;  // Bytes after the last newline.
};

struct Rank {
  pid_t pid = -1;
  bool running = false;
};

// Output for one of the launcher's own stdout and stderr, written as the
// fd takes it (see Job::Run): never more than PIPE_BUF bytes per write, and
// cut at a line's end where one fits, so that a pipe takes each write whole
// and lines stay whole where stdout and stderr are one pipe.
struct OutQueue {
  int fd;
  std::string data;
  size_t done = 0;  // bytes of `data` already written
  bool dead = false;  // the reader is gone: output is dropped

  size_t size() const { return data.size() - done; }
  // Writes what the fd takes now without blocking (POLLOUT was seen).
  void WriteSome();
  // Blocks until it is all written, a signal arrives on `signal_fd`, or
  // `limit` (if given) has passed.
  void Flush(int signal_fd, std::optional<Clock::time_point> limit);
};

void OutQueue::WriteSome() {
  while (size() > 0 && !dead) {
    pollfd p = {fd, POLLOUT, 0};
    if (poll(&p, 1, 0) <= 0 || !(p.revents & POLLOUT)) {
      if (p.revents & (POLLERR | POLLNVAL)) dead = true;
      return;
    }
    size_t n = std::min<size_t>(size(), PIPE_BUF);
    if (n < size()) {
      size_t nl = data.rfind('\n', done + n - 1);
      if (nl != std::string::npos && nl >= done) n = nl + 1 - done;
    }
    ssize_t w = write(fd, data.data() + done, n);
    if (w < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      dead = true;  // a closed stdout, say: SIGPIPE is ignored
      return;
    }
    done += static_cast<size_t>(w);
  }
  if (size() == 0 || dead) {
    data.clear();
    done = 0;
  } else if (done > (1 << 20)) {
    data.erase(0, done);
    done = 0;
  }
}

void OutQueue::Flush(int signal_fd, std::optional<Clock::time_point> limit) {
  while (size() > 0 && !dead) {
    int wait_ms = -1;
    if (limit) {
      const Clock::time_point now = Clock::now();
      if (now >= *limit) return;
      wait_ms = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(*limit - now).count() + 1);
    }
    pollfd p[2] = {{fd, POLLOUT, 0}, {signal_fd, POLLIN, 0}};
    int ready = poll(p, signal_fd >= 0 ? 2 : 1, wait_ms);
    if (ready < 0 && errno != EINTR) return;
    if (signal_fd >= 0 && (p[1].revents & POLLIN)) {
      // Ctrl-C (or any signal but SIGCHLD): give the rest up.
      unsigned char sigs[64];
      ssize_t n;
      bool other = false;
      while ((n = read(signal_fd, sigs, sizeof sigs)) > 0) {
        for (ssize_t k = 0; k < n; ++k) other = other || sigs[k] != SIGCHLD;
      }
      if (other) return;
    }
    if (p[0].revents & (POLLOUT | POLLERR | POLLHUP | POLLNVAL)) WriteSome();
    if (p[0].revents & (POLLERR | POLLNVAL)) return;
  }
}

class Job {
 public:
  explicit Job(Options opts) : opts_(std::move(opts)) {}

  // Starts all ranks, then runs until they are done. Returns the exit status.
  int Run();

 private:
  int RunJob();
  bool StartRanks(const std::vector<std::string>& base_env, const JobIdentity& id);
  void ReadStream(Stream& s);
  void EmitLines(Stream& s, bool eof);
  void Reap();
  void BeginStop(int sig);
  void SignalAll(int sig);
  int RunningCount() const;
  // Local rank `local` as the job numbers it: RANK (the node's first + local).
  std::string RankName(int local) const { return std::to_string(opts_.GlobalRank(local)); }
  // A launcher message (one line), queued like the ranks' output.
  void Say(const std::string& text) { err_.data += "hcomm_run: " + text + "\n"; }
  OutQueue& QueueFor(int fd) { return fd == STDERR_FILENO ? err_ : out_; }

  OutQueue out_{STDOUT_FILENO};
  OutQueue err_{STDERR_FILENO};
  Options opts_;
  std::vector<Rank> ranks_;
  std::vector<Stream> streams_;
  bool stopping_ = false;
  bool killed_ = false;
  bool signalled_ = false;  // stopped by SIGINT, SIGTERM, SIGHUP or --timeout
  std::optional<int> exit_code_;  // Set by the first failure/timeout/signal.
  Clock::time_point kill_deadline_;
};

int Job::RunningCount() const {
  return static_cast<int>(std::count_if(ranks_.begin(), ranks_.end(),
                                        [](const Rank& r) { return r.running; }));
}

bool Job::StartRanks(const std::vector<std::string>& base_env, const JobIdentity& id) {
  const int n = opts_.nranks;
  const pid_t launcher_pid = getpid();
  std::vector<char*> argv;
  for (const std::string& a : opts_.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) {
    Say(std::string("cannot open /dev/null: ") + strerror(errno));
    return false;
  }
  // Binding: the CPUs we may use, in order; rank r gets the (r mod
  // count)-th. By default only where the ranks outnumber those CPUs: the
  // kernel then left 3 of 4 ranks on one of 2 CPUs for whole runs here, and
  // a 4-rank TCP allreduce of 1 MiB took 1.5-1.9 ms against 0.8-1.0 with
  // the ranks spread two and two. With CPUs to spare, the kernel may use
  // them all.
  std::vector<int> cpus;
  if (opts_.bind != Options::Bind::kNone) {
    cpu_set_t mine;
    CPU_ZERO(&mine);
    if (sched_getaffinity(0, sizeof mine, &mine) == 0) {
      for (int c = 0; c < CPU_SETSIZE; ++c) {
        if (CPU_ISSET(c, &mine)) cpus.push_back(c);
      }
    }
    if (opts_.bind == Options::Bind::kAuto && n <= static_cast<int>(cpus.size())) cpus.clear();
  }
  ranks_.resize(n);
  for (int r = 0; r < n; ++r) {
    cpu_set_t bind;
    CPU_ZERO(&bind);
    if (!cpus.empty()) CPU_SET(cpus[r % cpus.size()], &bind);
    const std::vector<std::string> env = RankEnvironment(base_env, opts_, id, r);
    std::vector<char*> envp;
    for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    std::string exec_error_prefix =
        "hcomm_run: rank " + RankName(r) + ": cannot execute '" + opts_.argv[0] + "': ";

    int out_pipe[2], err_pipe[2];
    if (pipe2(out_pipe, O_CLOEXEC) != 0) {
      Say(std::string("pipe: ") + strerror(errno));
      close(null_fd);
      return false;
    }
    if (pipe2(err_pipe, O_CLOEXEC) != 0) {
      Say(std::string("pipe: ") + strerror(errno));
      close(out_pipe[0]);
      close(out_pipe[1]);
      close(null_fd);
      return false;
    }
    // Signals stay blocked across fork(), so that the child never runs the
    // launcher's handlers (which write to the launcher's self-pipe) before
    // it has reset them.
    sigset_t all, saved_mask;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &saved_mask);
    pid_t pid = fork();
    if (pid != 0) sigprocmask(SIG_SETMASK, &saved_mask, nullptr);
    if (pid < 0) {
      Say(std::string("fork: ") + strerror(errno));
      for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) close(fd);
      close(null_fd);
      return false;
    }
    if (pid == 0) {
      // Child: SIGKILL when the launcher dies, so that a killed launcher
      // leaves no orphaned rank. The kernel sends it when the thread that
      // forked exits; that is the launcher's only thread, the main thread,
      // which lives as long as the launcher. A launcher that died before
      // prctl() sends nothing: then we have been re-parented, so go now.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher_pid) _exit(kExitFailure);
      // Own process group, default signal dispositions, then an
      // empty signal mask; pipes as stdout/stderr (dup2() clears O_CLOEXEC
      // on the targets).
      setpgid(0, 0);
      struct sigaction dfl = {};
      dfl.sa_handler = SIG_DFL;
      sigemptyset(&dfl.sa_mask);
      for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGPIPE}) sigaction(sig, &dfl, nullptr);
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      dup2(null_fd, STDIN_FILENO);
      dup2(out_pipe[1], STDOUT_FILENO);
      dup2(err_pipe[1], STDERR_FILENO);
      if (!cpus.empty()) sched_setaffinity(0, sizeof bind, &bind);
      execve(opts_.program_path.c_str(), argv.data(), envp.data());
      if (errno == ENOEXEC) {
        // A script without "#!": run by /bin/sh, as execvp() and shells do.
        std::vector<char*> sh_argv = {const_cast<char*>("/bin/sh"),
                                      const_cast<char*>(opts_.program_path.c_str())};
        sh_argv.insert(sh_argv.end(), argv.begin() + 1, argv.end());
        execve("/bin/sh", sh_argv.data(), envp.data());
        errno = ENOEXEC;
      }
      std::string msg = exec_error_prefix + strerror(errno) + "\n";
      ssize_t ignored = write(STDERR_FILENO, msg.data(), msg.size());
      (void)ignored;
      _exit(kExitExecFailed);
    }
    setpgid(pid, pid);  // Also in the parent, so kill(-pid) works at once.
    close(out_pipe[1]);
    close(err_pipe[1]);
    fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
    fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
    ranks_[r].pid = pid;
    ranks_[r].running = true;
    streams_.push_back(Stream{out_pipe[0], r, STDOUT_FILENO, {}});
    streams_.push_back(Stream{err_pipe[0], r, STDERR_FILENO, {}});
  }
  close(null_fd);
  return true;
}

// Prints every complete line of `s.partial` with the rank prefix, in one
// write. At EOF (or when the partial line grows too long) the rest is
// printed too, with a newline added.
void Job::EmitLines(Stream& s, bool eof) {
  const std::string prefix = opts_.tag_output ? "[rank " + RankName(s.rank) + "] " : "";
  std::string out;
  size_t start = 0;
  while (true) {
    size_t nl = s.partial.find('\n', start);
    if (nl == std::string::npos) break;
    out += prefix;
    out.append(s.partial, start, nl + 1 - start);
    start = nl + 1;
  }
  s.partial.erase(0, start);
  if (!s.partial.empty() && (eof || s.partial.size() >= kMaxLineBytes)) {
    out += prefix;
    out += s.partial;
    out += '\n';
    s.partial.clear();
  }
  if (!out.empty()) QueueFor(s.out_fd).data += out;
}

void Job::ReadStream(Stream& s) {
  char buf[kReadChunk];
  // Bounded number of reads per wakeup so one chatty rank cannot starve the
  // others or the timers.
  for (int i = 0; i < 16 && s.fd >= 0; ++i) {
    ssize_t n = read(s.fd, buf, sizeof(buf));
    if (n > 0) {
      s.partial.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    // EOF or a read error: the stream is finished.
    close(s.fd);
    s.fd = -1;
  }
  EmitLines(s, s.fd < 0);
}

void Job::SignalAll(int sig) {
  // The whole process group, so that children of the rank go too. Groups of
  // ranks that already exited may still hold their leftover children.
  for (const Rank& r : ranks_) {
    if (r.pid > 0) kill(-r.pid, sig);
  }
}

void Job::BeginStop(int sig) {
  if (stopping_) return;
  stopping_ = true;
  kill_deadline_ = Clock::now() + kKillGrace;
  SignalAll(sig);
}

void Job::Reap() {
  while (true) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) return;
    for (size_t r = 0; r < ranks_.size(); ++r) {
      if (ranks_[r].pid != pid || !ranks_[r].running) continue;
      ranks_[r].running = false;
      // Print what the rank wrote before it ended ahead of any verdict.
      for (Stream& s : streams_) {
        if (s.rank == static_cast<int>(r) && s.fd >= 0) ReadStream(s);
      }
      bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (ok || stopping_) break;  // Exits after the stop began are expected.
      if (WIFEXITED(status)) {
        Say("rank " + RankName(static_cast<int>(r)) + " exited with status " +
                std::to_string(WEXITSTATUS(status)));
        exit_code_ = WEXITSTATUS(status);
      } else if (WIFSIGNALED(status)) {
        Say("rank " + RankName(static_cast<int>(r)) + " was killed by signal " +
                SignalName(WTERMSIG(status)) + (WCOREDUMP(status) ? " (core dumped)" : ""));
        exit_code_ = 128 + WTERMSIG(status);
      } else {
        Say("rank " + RankName(static_cast<int>(r)) + " ended with wait status " +
                std::to_string(status));
        exit_code_ = kExitFailure;
      }
      if (RunningCount() > 0) {
        Say("stopping the other " + std::to_string(RunningCount()) + " rank(s)");
      }
      BeginStop(SIGTERM);
      break;
    }
  }
}

int Job::Run() {
  const int code = RunJob();
  // What a slow reader has not taken yet: all of it after the job ended by
  // itself; a job stopped by a signal or --timeout gives it kDrainGrace;
  // another signal gives it up.
  std::optional<Clock::time_point> limit;
  if (signalled_) limit = Clock::now() + kDrainGrace;
  out_.Flush(g_signal_pipe[0], limit);
  err_.Flush(g_signal_pipe[0], limit);
  return code;
}

int Job::RunJob() {
  // Environment shared by all ranks: the launcher's, minus what we set and
  // what the library would prefer over it.
  const std::vector<std::string> base_env = BaseEnvironment(environ);
  std::string error;
  const std::optional<JobIdentity> id = MakeJobIdentity(opts_, &error);
  if (!id) {
    Say(error);
    return kExitFailure;
  }

  if (!EnsureFdLimit(opts_.nranks)) {
    Say("the open-file limit is too low for " + std::to_string(opts_.nranks) +
            " ranks (need " + std::to_string(2 * opts_.nranks + 32) + "); raise ulimit -n");
    return kExitFailure;
  }
  if (!InstallSignalHandlers()) {
    Say(std::string("cannot install signal handlers: ") + strerror(errno));
    return kExitFailure;
  }

  const Clock::time_point start = Clock::now();
  if (!StartRanks(base_env, *id)) {
    exit_code_ = kExitFailure;
    BeginStop(SIGTERM);
  }
  std::optional<Clock::time_point> job_deadline;
  if (opts_.timeout_s) {
    job_deadline = start + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(*opts_.timeout_s));
  }
  std::optional<Clock::time_point> drain_deadline;

  std::vector<pollfd> fds;
  std::vector<Stream*> fd_streams;
  while (true) {
    Reap();
    const Clock::time_point now = Clock::now();
    if (RunningCount() == 0 && !drain_deadline) drain_deadline = now + kDrainGrace;
    bool any_open = std::any_of(streams_.begin(), streams_.end(),
                                [](const Stream& s) { return s.fd >= 0; });
    if (RunningCount() == 0 && (!any_open || now >= *drain_deadline)) break;

    if (!stopping_ && job_deadline && now >= *job_deadline) {
      std::string running;
      for (size_t r = 0; r < ranks_.size(); ++r) {
        if (!ranks_[r].running) continue;
        if (!running.empty()) running += ",";
        running += RankName(static_cast<int>(r));
      }
      Say("timeout after " + FormatSeconds(*opts_.timeout_s) +
              " s; ranks still running: " + running);
      exit_code_ = kExitTimeout;
      signalled_ = true;
      BeginStop(SIGTERM);
    }
    if (stopping_ && !killed_ && now >= kill_deadline_) {
      if (RunningCount() > 0) {
        Say("sending SIGKILL to " + std::to_string(RunningCount()) +
                " rank(s) still running after " + std::to_string(kKillGrace.count()) + " s");
      }
      killed_ = true;
      SignalAll(SIGKILL);
    }

    // Sleep until output, a signal, or the next deadline (at most 1 s).
    Clock::time_point wake = now + std::chrono::seconds(1);
    if (!stopping_ && job_deadline) wake = std::min(wake, *job_deadline);
    if (stopping_ && !killed_) wake = std::min(wake, kill_deadline_);
    if (drain_deadline) wake = std::min(wake, *drain_deadline);
    auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count() + 1;

    // The signal pipe, our own stdout/stderr while output waits for them,
    // and the ranks' pipes unless too much output waits already.
    fds.clear();
    fd_streams.clear();
    fds.push_back({g_signal_pipe[0], POLLIN, 0});
    fd_streams.push_back(nullptr);
    OutQueue* queues[2] = {&out_, &err_};
    size_t queued = 0;
    for (OutQueue* q : queues) {
      if (q->size() == 0 || q->dead) continue;
      queued += q->size();
      fds.push_back({q->fd, POLLOUT, 0});
      fd_streams.push_back(nullptr);
    }
    const size_t first_stream = fds.size();
    for (Stream& s : streams_) {
      if (s.fd < 0 || queued >= kMaxQueuedBytes) continue;
      fds.push_back({s.fd, POLLIN, 0});
      fd_streams.push_back(&s);
    }
    int ready = poll(fds.data(), fds.size(), static_cast<int>(std::max<long long>(0, wait_ms)));
    if (ready < 0) {
      if (errno == EINTR) continue;
      Say(std::string("poll: ") + strerror(errno));
      exit_code_ = exit_code_.value_or(kExitFailure);
      BeginStop(SIGTERM);
      continue;
    }
    if (fds[0].revents & POLLIN) {
      unsigned char sigs[64];
      ssize_t n;
      while ((n = read(g_signal_pipe[0], sigs, sizeof(sigs))) > 0) {
        for (ssize_t k = 0; k < n; ++k) {
          int sig = sigs[k];
          if (sig == SIGCHLD) continue;  // Reap() runs every iteration.
          if (stopping_) {
            // A second signal while stopping: no more grace.
            if (!killed_) {
              Say("got " + SignalName(sig) + " again; sending SIGKILL to all ranks");
              killed_ = true;
              SignalAll(SIGKILL);
            }
            continue;
          }
          Say("got " + SignalName(sig) + "; forwarding it to all ranks and stopping the job");
          exit_code_ = 128 + sig;
          signalled_ = true;
          BeginStop(sig);
        }
      }
    }
    for (size_t k = 1; k < first_stream; ++k) {
      if (fds[k].revents == 0) continue;
      for (OutQueue* q : queues) {
        if (q->fd == fds[k].fd) q->WriteSome();
      }
    }
    for (size_t k = first_stream; k < fds.size(); ++k) {
      if (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) ReadStream(*fd_streams[k]);
    }
  }
  // A stopped job leaves nothing behind, not even leftover grandchildren
  // that ignored SIGTERM and kept a pipe open.
  if (stopping_ && !killed_) SignalAll(SIGKILL);
  // Whatever is still buffered (pipes held open past the drain grace).
  for (Stream& s : streams_) {
    EmitLines(s, /*eof=*/true);
    if (s.fd >= 0) close(s.fd);
  }
  // Every rank has been reaped, so none is still creating segments.
  RemoveJobSegments(id->job_key);
  return exit_code_.value_or(0);
}

}  // namespace
}  // namespace hcomm_run

int main(int argc, char** argv) {
  hcomm_run::EnsureStdFds();
  hcomm_run::Options opts;
  std::string error;
  switch (hcomm_run::ParseArgs(argc, argv, &opts, &error)) {
    case hcomm_run::ParseResult::kOk:
      break;
    case hcomm_run::ParseResult::kHelp:
      hcomm_run::WriteAll(STDOUT_FILENO, hcomm_run::kUsage);
      return 0;
    case hcomm_run::ParseResult::kUsageError:
      return hcomm_run::UsageError(error);
  }
  hcomm_run::Job job(std::move(opts));
  return job.Run();
}
