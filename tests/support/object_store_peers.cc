#include "tests/support/object_store_peers.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

extern char** environ;

namespace nsbox::test {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

constexpr auto kStartTimeout = 20s;
constexpr auto kStopTimeout = 5s;
constexpr auto kReapTimeout = 10s;

fs::path node_modules() { return fs::path(NSBOX_SOURCE_DIR) / "tests" / "peers" / "node_modules"; }

// The packages' "bin" entries, run with node directly so no shell or npx is involved.
fs::path s3rver_script() { return node_modules() / "s3rver" / "bin" / "s3rver.js"; }
fs::path azurite_blob_script() { return node_modules() / "azurite" / "dist" / "src" / "blob" / "main.js"; }

// Resolved before fork: the child may only make async-signal-safe calls (tests use threads).
std::string find_node() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) continue;
    std::string candidate = dir + "/node";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

void require_installed(std::string_view peer) {
  if (!peers_installed())
    FAIL(peer << ": " << node_modules().string() << " lacks s3rver or azurite; run scripts/install-deps");
  if (find_node().empty()) FAIL(peer << ": no `node` in PATH; run scripts/install-deps");
}

// The test's environment, less what would change how a peer behaves: an inherited
// NODE_OPTIONS (--inspect, a preload), AZURITE_ACCOUNTS (replaces devstoreaccount1), and
// AWS_CA_BUNDLE (this machine points it at a proxy's CA, which the peers do not use).
std::vector<std::string> peer_environment(const std::vector<std::string>& extra) {
  static constexpr std::string_view dropped[] = {"NODE_OPTIONS=", "AZURITE_ACCOUNTS=", "AWS_CA_BUNDLE="};
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string_view kv(*e);
    bool drop = false;
    for (auto prefix : dropped) drop = drop || kv.starts_with(prefix);
    if (!drop) env.emplace_back(kv);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Whether something on 127.0.0.1:port answers an HTTP request with a status line. Any
// status counts: Azurite answers `GET /` with an error, which still means it serves.
bool http_answers(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  timeval one_second{.tv_sec = 1, .tv_usec = 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &one_second, sizeof one_second);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &one_second, sizeof one_second);
  sockaddr_in addr{.sin_family = AF_INET, .sin_port = htons(static_cast<uint16_t>(port)), .sin_addr = {}};
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = false;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    constexpr std::string_view request = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    char reply[16] = {};
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size()))
      ok = ::recv(fd, reply, sizeof reply - 1, MSG_WAITALL) >= 7 && std::string_view(reply).starts_with("HTTP/1.");
  }
  ::close(fd);
  return ok;
}

std::string how_it_ended(const siginfo_t& info) {
  if (info.si_code == CLD_EXITED) return "exited with status " + std::to_string(info.si_status);
  return "was killed by signal " + std::to_string(info.si_status);
}

// The port in the first line of `log` that contains `marker` (which ends just before it).
int port_after(const std::string& log, std::string_view marker) {
  auto at = log.find(marker);
  if (at == std::string::npos) return 0;
  const char* begin = log.data() + at + marker.size();
  int port = 0;
  auto [end, ec] = std::from_chars(begin, log.data() + log.size(), port);
  // Digits still arriving: wait for the line to end.
  if (ec != std::errc() || end == log.data() + log.size()) return 0;
  return port;
}

}  // namespace

bool peers_installed() {
  return fs::is_regular_file(s3rver_script()) && fs::is_regular_file(azurite_blob_script());
}

// One peer's node process, its temp dir (/tmp/nsbox-test-NAME-XXXXXX, so the suite's leak
// check sees one left behind) with data/ and peer.log, and their cleanup.
class PeerProcess {
 public:
  explicit PeerProcess(std::string name) : name_(std::move(name)) {
    std::string tmpl = "/tmp/nsbox-test-" + name_ + "-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) FAIL(name_ << ": mkdtemp(" << tmpl << "): " << std::strerror(errno));
    dir_ = tmpl;
    data_dir_ = dir_ + "/data";
    std::error_code ec;
    if (!fs::create_directory(data_dir_, ec)) {
      fs::remove_all(dir_, ec);  // no destructor runs for a failed constructor
      FAIL(name_ << ": mkdir " << data_dir_ << " failed");
    }
  }
  ~PeerProcess() {
    stop();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  const std::string& data_dir() const { return data_dir_; }
  std::string log_path() const { return dir_ + "/peer.log"; }
  std::string log() const { return read_file(log_path()); }
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !reaped_; }

  // node SCRIPT ARGS... with `extra_env` (K=V), output to peer.log.
  void start(const fs::path& script, const std::vector<std::string>& args, const std::vector<std::string>& extra_env);
  // The port it says it listens on, once it answers HTTP there; fails the test with its
  // output if it exits or stays silent for kStartTimeout.
  int wait_until_serving(std::string_view marker);
  void stop();
  void kill_now();

 private:
  bool exited_within(Clock::duration timeout);
  void kill_group_and_reap();
  // Stops it and FAILs (which throws) with its output.
  void fail_start(const std::string& why);

  std::string name_, dir_, data_dir_;
  pid_t pid_ = -1;
  bool reaped_ = false;
};

void PeerProcess::start(const fs::path& script, const std::vector<std::string>& args,
                        const std::vector<std::string>& extra_env) {
  std::vector<std::string> argv = {find_node(), script.string()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::string> env = peer_environment(extra_env);
  auto argv_c = c_strings(argv);
  auto env_c = c_strings(env);
  int log_fd = ::open(log_path().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) FAIL(name_ << ": open " << log_path() << ": " << std::strerror(errno));
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) {
    ::close(log_fd);
    FAIL(name_ << ": open /dev/null: " << std::strerror(errno));
  }
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    // The parent may have died between fork and prctl; then nobody would kill us.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(126);
    if (::dup2(null_fd, 0) < 0 || ::dup2(log_fd, 1) < 0 || ::dup2(log_fd, 2) < 0 || ::chdir(dir_.c_str()) != 0)
      ::_exit(126);
    // An fd the test opened without O_CLOEXEC (a lock, a pipe end) must not live on in the peer.
    ::close_range(3, ~0U, 0);
    ::execve(argv_c[0], argv_c.data(), env_c.data());
    constexpr std::string_view exec_failed = "execve(node) failed\n";  // into peer.log
    (void)!::write(2, exec_failed.data(), exec_failed.size());
    ::_exit(127);
  }
  int fork_errno = errno;
  ::close(log_fd);
  ::close(null_fd);
  if (pid < 0) FAIL(name_ << ": fork: " << std::strerror(fork_errno));
  // Also here, so that a stop() right after start() already reaches the whole group.
  ::setpgid(pid, pid);
  pid_ = pid;
}

int PeerProcess::wait_until_serving(std::string_view marker) {
  auto deadline = Clock::now() + kStartTimeout;
  int port = 0;
  while (Clock::now() < deadline) {
    siginfo_t info{};
    if (::waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid_) {
      fail_start(how_it_ended(info) + " before serving");
      return 0;
    }
    if (port == 0) port = port_after(log(), marker);
    if (port != 0 && http_answers(port)) return port;
    std::this_thread::sleep_for(20ms);
  }
  fail_start(port == 0 ? "printed no port within 20 s"
                       : "did not answer HTTP on port " + std::to_string(port) + " within 20 s");
  return 0;
}

void PeerProcess::fail_start(const std::string& why) {
  // Stopped first so the log is complete; the owner's destructor removes the dir.
  stop();
  FAIL(name_ << " (pid " << pid_ << ") " << why << "; its output (" << log_path() << "):\n" << log());
}

// Waits for the exit without reaping, so the pid and process group stay ours to signal.
bool PeerProcess::exited_within(Clock::duration timeout) {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    siginfo_t info{};
    int rc = ::waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT);
    if (rc == 0 && info.si_pid == pid_) return true;
    if (rc != 0 && errno == ECHILD) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
}

// Kills whatever is left of its group, then reaps it. The leader is not reaped before the
// group kill, so the group id cannot have been reused by an unrelated process.
void PeerProcess::kill_group_and_reap() {
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
  if (!exited_within(kReapTimeout)) {
    std::cerr << name_ << " (pid " << pid_ << ") survived SIGKILL for 10 s; left unreaped\n";
    return;
  }
  ::waitpid(pid_, nullptr, 0);
  reaped_ = true;
}

void PeerProcess::stop() {
  if (!running()) return;
  ::kill(-pid_, SIGTERM);
  // A test may have frozen it with SIGSTOP; the SIGTERM waits until it runs again.
  ::kill(-pid_, SIGCONT);
  exited_within(kStopTimeout);  // past the timeout, SIGKILL below ends it
  kill_group_and_reap();
}

void PeerProcess::kill_now() {
  if (running()) kill_group_and_reap();
}

// ---- S3rverPeer ----

S3rverPeer::S3rverPeer(const std::vector<std::string>& buckets, const std::string& service_endpoint) {
  require_installed("s3rver");
  process_ = std::make_unique<PeerProcess>("s3rver");
  std::vector<std::string> args = {"-d", process_->data_dir(), "-a", "127.0.0.1", "-p", "0"};
  for (const auto& bucket : buckets) args.insert(args.end(), {"--configure-bucket", bucket});
  if (!service_endpoint.empty()) args.insert(args.end(), {"--service-endpoint", service_endpoint});
  // ListObjectsV2's continuation token is DES-encrypted, which OpenSSL 3 has only in its
  // legacy provider: without it, every truncated listing is an InternalError (Node >= 17).
  process_->start(s3rver_script(), args, {"NODE_OPTIONS=--openssl-legacy-provider"});
  // Printed once listening; -p 0 means the kernel chose the port.
  port_ = process_->wait_until_serving("S3rver listening on 127.0.0.1:");
}

S3rverPeer::~S3rverPeer() = default;

std::string S3rverPeer::endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
pid_t S3rverPeer::pid() const { return process_->pid(); }
bool S3rverPeer::running() const { return process_->running(); }
const std::string& S3rverPeer::data_dir() const { return process_->data_dir(); }
std::string S3rverPeer::log() const { return process_->log(); }
void S3rverPeer::stop() { process_->stop(); }
void S3rverPeer::kill_now() { process_->kill_now(); }

// ---- AzuritePeer ----

AzuritePeer::AzuritePeer() {
  require_installed("azurite");
  process_ = std::make_unique<PeerProcess>("azurite");
  // --disableTelemetry: on by default, it posts to applicationinsights.azure.com.
  // --skipApiVersionCheck: a client newer than this Azurite would otherwise get 400.
  // -s: no access log; errors still reach peer.log.
  process_->start(azurite_blob_script(),
                  {"--blobHost", "127.0.0.1", "--blobPort", "0", "-l", process_->data_dir(), "--disableTelemetry", "-s",
                   "--skipApiVersionCheck"},
                  {});
  port_ = process_->wait_until_serving("Azurite Blob service successfully listens on http://127.0.0.1:");
}

AzuritePeer::~AzuritePeer() = default;

std::string AzuritePeer::endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
pid_t AzuritePeer::pid() const { return process_->pid(); }
bool AzuritePeer::running() const { return process_->running(); }
const std::string& AzuritePeer::data_dir() const { return process_->data_dir(); }
std::string AzuritePeer::log() const { return process_->log(); }
void AzuritePeer::stop() { process_->stop(); }
void AzuritePeer::kill_now() { process_->kill_now(); }

ProcessResult s3_boto(const S3rverPeer& peer, const std::string& code, const std::string& stdin_data) {
  std::string program =
      "import boto3, sys, hashlib\n"
      "s3 = boto3.client('s3', endpoint_url='" + peer.endpoint() + "', aws_access_key_id='S3RVER',"
      " aws_secret_access_key='S3RVER', region_name='us-east-1')\n" + code;
  // AWS_CA_BUNDLE, set machine-wide on some hosts, is no use for http:// and can break it.
  ProcessOptions options{.stdin_data = stdin_data, .stdin_is_null = stdin_data.empty(), .timeout_s = 120,
                         .extra_env = {"AWS_CA_BUNDLE="}};
  return run_process({"/usr/bin/python3.11", "-c", program}, options);
}

std::vector<std::string> s3_credentials_env(const S3rverPeer& peer, const std::string& secret) {
  return {"AWS_ACCESS_KEY_ID=S3RVER", "AWS_SECRET_ACCESS_KEY=" + secret, "S3_ENDPOINT_URL=" + peer.endpoint(),
          "AWS_REGION=us-east-1"};
}

}  // namespace nsbox::test
