#include "transports/registry.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"
#include "core/base/status.h"
#include "transports/provider.h"
#include "transports/shm/shm_protocol.h"
#include "transports/tcp/tcp_protocol.h"

namespace hcomm {

namespace {
constexpr char kBuiltIn[] = "built in";
}  // namespace

Registry::Registry() {
  // In the order a job tries them by default: shared memory within a
  // host, TCP to the rest.
  for (const hcomm_transport_v1_t* t : {ShmTransportTable(), TcpTransportTable()}) {
    Register(t, kBuiltIn).IgnoreError();  // checked by registry_test
  }
  absl::MutexLock l(&mu_);
  builtins_ = entries_.size();
}

Registry& Registry::Global() {
  static Registry* r = new Registry();
  return *r;
}

absl::Status Registry::Register(const hcomm_transport_v1_t* table, const std::string& origin) {
  HCOMM_RETURN_IF_ERROR(Provider::Validate(table));
  absl::MutexLock l(&mu_);
  for (const Entry& e : entries_) {
    if (e.table == table) return absl::OkStatus();
    if (absl::string_view(e.table->name) == table->name) {
      return InvalidArgument(absl::StrCat("transport '", table->name, "' of ", origin,
                                          " is registered already (", e.origin, ")"));
    }
  }
  entries_.push_back({table, origin});
  return absl::OkStatus();
}

absl::Status Registry::LoadPlugin(const std::string& path) {
  const std::string what = absl::StrCat("plugin ", path);
  // RTLD_LOCAL: two plugins may use the same names inside. Never closed:
  // the table lives as long as the process.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return NoDevice(absl::StrCat(what, " cannot be loaded: ", why != nullptr ? why : "dlopen failed"));
  }
  dlerror();
  void* entry = dlsym(handle, HCOMM_TRANSPORT_PLUGIN_SYMBOL);
  if (entry == nullptr) {
    return NoDevice(absl::StrCat(what, " exports no ", HCOMM_TRANSPORT_PLUGIN_SYMBOL,
                                 " (see hcomm/hcomm_transport.h)"));
  }
  const hcomm_transport_v1_t* table = reinterpret_cast<hcomm_transport_plugin_fn>(entry)();
  absl::Status valid = Provider::Validate(table);
  if (!valid.ok()) return MakeError(CodeOf(valid), absl::StrCat(what, ": ", valid.message()));
  absl::Status added = Register(table, what);
  if (!added.ok()) return MakeError(CodeOf(added), added.message());
  return absl::OkStatus();
}

const hcomm_transport_v1_t* Registry::Find(absl::string_view name) const {
  absl::MutexLock l(&mu_);
  for (const Entry& e : entries_) {
    if (name == e.table->name) return e.table;
  }
  return nullptr;
}

std::vector<std::string> Registry::DefaultOrder() const {
  absl::MutexLock l(&mu_);
  std::vector<std::string> out;
  for (size_t i = 0; i < builtins_; ++i) out.push_back(entries_[i].table->name);
  return out;
}

std::string Registry::Describe() const {
  absl::MutexLock l(&mu_);
  std::string out;
  for (const Entry& e : entries_) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", e.table->name, " (", e.origin, ")");
  }
  return out;
}

}  // namespace hcomm
