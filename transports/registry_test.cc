// The registry: the built-in transports through their tables, and plugins
// that load, that cannot, and that must be refused (each error naming the
// plugin's path and the reason).
#include "transports/registry.h"

#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/base/status.h"
#include "gtest/gtest.h"
#include "transports/provider.h"
#include "transports/shm/shm_protocol.h"
#include "transports/tcp/tcp_protocol.h"

namespace hcomm {
namespace {

std::string Runfile(const std::string& path) {
  const char* dir = getenv("TEST_SRCDIR");
  const char* ws = getenv("TEST_WORKSPACE");
  return absl::StrCat(dir != nullptr ? dir : ".", "/", ws != nullptr ? ws : "hcomm", "/", path);
}

TEST(RegistryTest, TheBuiltInTransportsComeFirstSharedMemoryFirst) {
  Registry& r = Registry::Global();
  EXPECT_EQ(r.Find("shm"), ShmTransportTable());
  EXPECT_EQ(r.Find("tcp"), TcpTransportTable());
  EXPECT_EQ(r.Find("ibverbs"), nullptr);
  EXPECT_EQ(r.DefaultOrder(), (std::vector<std::string>{"shm", "tcp"}));
  EXPECT_TRUE(absl::StartsWith(r.Describe(), "shm (built in), tcp (built in)")) << r.Describe();
}

TEST(RegistryTest, TheBuiltInTablesAreCompleteVersionOneTables) {
  for (const hcomm_transport_v1_t* t : {ShmTransportTable(), TcpTransportTable()}) {
    EXPECT_TRUE(Provider::Validate(t).ok()) << Provider::Validate(t);
    EXPECT_EQ(t->abi_version, 1u);
    EXPECT_EQ(t->struct_size, sizeof(hcomm_transport_v1_t));
    // The optional functions too: the built-ins' fast paths go through them.
    EXPECT_NE(t->try_send_now, nullptr);
    EXPECT_NE(t->take_whole, nullptr);
    EXPECT_NE(t->watch_fd, nullptr);
  }
}

TEST(RegistryTest, AMissingPluginIsNamedWithTheLoadersReason) {
  absl::Status s = Registry::Global().LoadPlugin("/nonexistent/libhcomm_gone.so");
  EXPECT_EQ(CodeOf(s), ErrorCode::kNoDevice) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "plugin /nonexistent/libhcomm_gone.so cannot be "
                                             "loaded: /nonexistent/libhcomm_gone.so: cannot open"))
      << s;
}

TEST(RegistryTest, ASharedObjectWithoutTheEntryPointIsNoPlugin) {
  const std::string path = Runfile("transports/testdata/libplugin_no_entry.so");
  absl::Status s = Registry::Global().LoadPlugin(path);
  EXPECT_EQ(CodeOf(s), ErrorCode::kNoDevice) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), absl::StrCat("plugin ", path,
                                                          " exports no hcomm_transport_plugin")))
      << s;
}

TEST(RegistryTest, APluginOfAnUnknownAbiVersionIsRefusedNamingBoth) {
  const std::string path = Runfile("transports/testdata/libplugin_future_abi.so");
  absl::Status s = Registry::Global().LoadPlugin(path);
  EXPECT_EQ(CodeOf(s), ErrorCode::kNotSupported) << s;
  EXPECT_TRUE(absl::StrContains(
      s.message(), absl::StrCat("plugin ", path, ": its table is of transport ABI version 2; "
                                                 "this library knows version 1")))
      << s;
  EXPECT_EQ(Registry::Global().Find("future"), nullptr);
}

TEST(RegistryTest, ATableMissingARequiredFunctionIsRefusedNamingIt) {
  const std::string path = Runfile("transports/testdata/libplugin_null_send.so");
  absl::Status s = Registry::Global().LoadPlugin(path);
  EXPECT_EQ(CodeOf(s), ErrorCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "transport 'nullsend' leaves the required function "
                                             "'send' NULL"))
      << s;
  EXPECT_EQ(Registry::Global().Find("nullsend"), nullptr);
}

TEST(RegistryTest, ThePluginExampleLoadsOnceUnderItsName) {
  const std::string path = Runfile("examples/plugin/libhcomm_uds.so");
  Registry& r = Registry::Global();
  ASSERT_TRUE(r.LoadPlugin(path).ok()) << r.LoadPlugin(path);
  const hcomm_transport_v1_t* uds = r.Find("uds");
  ASSERT_NE(uds, nullptr);
  EXPECT_TRUE(Provider::Validate(uds).ok());
  // Loading it again changes nothing; the default order stays built-in.
  EXPECT_TRUE(r.LoadPlugin(path).ok());
  EXPECT_EQ(r.Find("uds"), uds);
  EXPECT_EQ(r.DefaultOrder(), (std::vector<std::string>{"shm", "tcp"}));
  EXPECT_TRUE(absl::StrContains(r.Describe(), absl::StrCat("uds (plugin ", path, ")")))
      << r.Describe();
}

TEST(RegistryTest, ASecondTransportOfATakenNameIsRefusedNamingBoth) {
  hcomm_transport_v1_t impostor = *TcpTransportTable();
  absl::Status s = Registry::Global().Register(&impostor, "plugin /x/libtcp2.so");
  EXPECT_EQ(CodeOf(s), ErrorCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(
      s.message(), "transport 'tcp' of plugin /x/libtcp2.so is registered already (built in)"))
      << s;
}

TEST(ProviderTest, TablesAreCheckedBeforeAnythingIsCalled) {
  EXPECT_FALSE(Provider::Validate(nullptr).ok());
  hcomm_transport_v1_t t = *TcpTransportTable();
  t.struct_size = 16;
  EXPECT_TRUE(absl::StrContains(Provider::Validate(&t).message(), "shorter than")) << Provider::Validate(&t);
  t = *TcpTransportTable();
  t.name = "TCP!";
  EXPECT_TRUE(absl::StrContains(Provider::Validate(&t).message(), "is not 1-31 of [a-z0-9_]"));
  // A table that ends after the required functions is a whole version 1
  // table: its optional functions count as absent.
  t = *TcpTransportTable();
  t.struct_size = offsetof(hcomm_transport_v1_t, eager_bytes);
  EXPECT_TRUE(Provider::Validate(&t).ok()) << Provider::Validate(&t);
}

}  // namespace
}  // namespace hcomm
