#include "c_api/forks.h"

#include <pthread.h>

#include <vector>

namespace hcomm_c {

namespace {

// A plain pthread mutex: it is held across fork() (so that the child never
// finds it held by a thread it does not have) and released on both sides by
// the thread that forked.
pthread_mutex_t kept_mu = PTHREAD_MUTEX_INITIALIZER;
std::vector<const void*>* kept = nullptr;  // guarded by kept_mu

void BeforeFork() { pthread_mutex_lock(&kept_mu); }
void AfterFork() { pthread_mutex_unlock(&kept_mu); }  // in parent and child

// Registered while the library is loaded, before any handle exists.
[[maybe_unused]] const int registered = pthread_atfork(BeforeFork, AfterFork, AfterFork);

}  // namespace

void Keep(const void* p) {
  pthread_mutex_lock(&kept_mu);
  struct Unlock {
    ~Unlock() { pthread_mutex_unlock(&kept_mu); }
  } unlock;  // also when the list cannot grow (bad_alloc)
  if (kept == nullptr) kept = new std::vector<const void*>();
  kept->push_back(p);
}

}  // namespace hcomm_c
