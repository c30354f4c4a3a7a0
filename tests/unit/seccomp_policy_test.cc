#include <linux/audit.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include <catch2/catch.hpp>
#include <filesystem>

#include "isolation/seccomp_policy.h"
#include "isolation/sys/files.h"

using namespace nsbox;

TEST_CASE("the seccomp policy compiles, and the cached program is the compiled one") {
  auto program = seccomp::compile();
  REQUIRE(program);
  CHECK(program->code.size() > 50);
  char tmpl[] = "/tmp/nsbox-test-XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  auto first = seccomp::compile_cached(dir);
  auto second = seccomp::compile_cached(dir);  // read back from disk
  REQUIRE(first);
  REQUIRE(second);
  CHECK(second->code.size() == program->code.size());
  CHECK(std::memcmp(second->code.data(), program->code.data(), program->code.size() * sizeof(sock_filter)) == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("dangerous syscalls are not on the allowlist") {
  const auto& allowed = seccomp::allowed_syscalls();
  for (const char* name : {"mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "ptrace", "keyctl", "bpf",
                           "open_by_handle_at", "name_to_handle_at", "init_module", "kexec_load", "perf_event_open",
                           "userfaultfd", "io_uring_setup", "clone3", "process_vm_readv", "fsopen", "move_mount"})
    CHECK(std::find_if(allowed.begin(), allowed.end(), [&](const char* a) { return std::string(a) == name; }) == allowed.end());
}

TEST_CASE("a killed syscall is named with its ABI") {
  CHECK(seccomp::describe_syscall(AUDIT_ARCH_I386, 20) == "getpid (i386 ABI, number 20)");
  CHECK(seccomp::describe_syscall(AUDIT_ARCH_X86_64, 0x40000000 | 39) == "getpid (x32 ABI, number 1073741863)");
}

TEST_CASE("a cached program that others could have written is not trusted") {
  char tmpl[] = "/tmp/nsbox-test-XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  auto good = seccomp::compile_cached(dir);
  REQUIRE(good);
  // Replace the cache with "allow everything", writable by all: it must be ignored.
  std::string cached;
  for (const auto& e : std::filesystem::directory_iterator(dir)) cached = e.path();
  REQUIRE_FALSE(cached.empty());
  sock_filter allow_all{0x06, 0, 0, 0x7fff0000};
  REQUIRE(nsbox::files::write_file(cached, std::string_view(reinterpret_cast<char*>(&allow_all), sizeof allow_all)));
  REQUIRE(::truncate(cached.c_str(), sizeof allow_all) == 0);
  REQUIRE(::chmod(cached.c_str(), 0666) == 0);
  auto again = seccomp::compile_cached(dir);
  REQUIRE(again);
  CHECK(again->code.size() == good->code.size());
  std::filesystem::remove_all(dir);
}
