// Every transport the library can use, by name: the built-in ones (shm,
// tcp) and those of plugins loaded at init, each a table of
// hcomm/hcomm_transport.h. The engine asks the registry for transports by
// name and names none itself.
//
//   Registry& r = Registry::Global();
//   HCOMM_RETURN_IF_ERROR(r.LoadPlugin("/opt/hcomm/lib/hcomm/plugins/libhcomm_uds.so"));
//   const hcomm_transport_v1_t* uds = r.Find("uds");
//
// Plugins stay loaded for the life of the process (their tables must).
//
// THREAD SAFETY: every method may be called from any thread.
#ifndef HCOMM_TRANSPORTS_REGISTRY_H_
#define HCOMM_TRANSPORTS_REGISTRY_H_

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "hcomm/hcomm_transport.h"

namespace hcomm {

class Registry {
 public:
  // The process's registry, with the built-in transports in it.
  static Registry& Global();

  // Adds a table (Provider::Validate checks it first). `origin` says where
  // it came from in messages: "built in", or a plugin's path. The same
  // table again is fine; another one under a taken name is an error naming
  // both origins.
  absl::Status Register(const hcomm_transport_v1_t* table, const std::string& origin);

  // Loads the shared object at `path` and registers the transport it
  // exports. Errors name the path and the reason: it cannot be loaded, it
  // exports no hcomm_transport_plugin, its table is of an ABI version this
  // library does not know, or it is malformed.
  absl::Status LoadPlugin(const std::string& path);

  // The table named `name`, or nullptr.
  const hcomm_transport_v1_t* Find(absl::string_view name) const;
  // The transports tried when the `transports` key is not set, in order:
  // the built-in ones (shared memory first).
  std::vector<std::string> DefaultOrder() const;
  // Every name, built-in ones first, then plugins' in the order loaded,
  // each with where it came from: "shm (built in)".
  std::string Describe() const;

 private:
  struct Entry {
    const hcomm_transport_v1_t* table;
    std::string origin;
  };
  Registry();
  mutable absl::Mutex mu_;
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
  size_t builtins_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace hcomm

#endif  // HCOMM_TRANSPORTS_REGISTRY_H_
