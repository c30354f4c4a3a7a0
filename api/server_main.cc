// nsbox-server: the HTTP API of nsbox (docs/api.md). `nsbox serve` execs it with its own
// arguments, so its pid, signals, ready line and exit status are the server's.
//
//   nsbox-server [--root DIR] [FLAGS]: `nsbox serve`'s flags, declared once in
//                cli/serve_flags.cc (what `nsbox serve --help` lists) and read here by
//                the CLI's reader (cli/args.h); --json is taken and ignored, as by every
//                command (the ready line is JSON)
//   stdout: one JSON line once it serves, {"url", "socket", "token_file"} (null for what
//           is not served); nothing after
//   stderr: its log (timestamped lines; isolation/sys/log.h)
//   exit:   0 after SIGTERM or SIGINT (requests in flight get 10 s; a sharded server
//           drains first: api/cluster_routes.cc); 1 when it cannot start, 2 for bad
//           arguments, with the error on stderr
//   <data>/api/server.pid: its pid while it serves (`nsbox drain` signals it)
#include <unistd.h>

#include <cstring>
#include <iostream>

#include "api/access.h"
#include "api/api_service.h"
#include "api/http_server.h"
#include "cli/serve_flags.h"
#include "isolation/sys/files.h"
#include "isolation/sys/log.h"
#include "mounts/volume_image.h"
#include "kernel/zygote_keeper/kernel_zygote_process.h"

namespace {

using nsbox::ErrorCode;
using nsbox::Result;
using nsbox::api::Json;

struct ServeArgs {
  std::optional<std::string> root;
  std::optional<std::string> socket, listen, token_file, public_url, max_upload, tools_config, snapshot_dir, snapshot_store;
  std::optional<std::string> warm, preload;
  nsbox::api::ClusterFlags cluster;
  bool allow_remote = false;
  bool memory_merge = false;
  // Kernels forked from a zygote (docs/kernel-zygote.md): by default where the host allows
  // it; --kernel-zygote insists (the server does not start without one), --no-... never.
  std::optional<bool> kernel_zygote;
};

nsbox::Error usage_error(const std::string& word) {
  return nsbox::make_error(ErrorCode::kInvalidArgument, "nsbox serve: unknown flag or missing value: " + word,
                           nsbox::cli::serve_synopsis());
}

// By the flags of `nsbox serve` (cli/serve_flags.cc); a flag given twice: the last one.
Result<ServeArgs> parse_args(int argc, char** argv) {
  auto read = nsbox::cli::read_args(std::vector<std::string>(argv + 1, argv + argc), nsbox::cli::flag_spec(nsbox::cli::serve_flags()));
  if (!read) return nsbox::fail(usage_error(read.error().word));
  const nsbox::cli::ParsedArgs& p = *read;
  if (!p.positionals.empty()) return nsbox::fail(usage_error(p.positionals.front()));
  if (p.has_command) return nsbox::fail(usage_error("--"));
  auto value = [&](const char* flag) { return p.values.count(flag) ? std::optional<std::string>(p.value(flag)) : std::nullopt; };
  ServeArgs a;
  a.root = value("root");
  a.socket = value("socket");
  a.listen = value("listen");
  a.token_file = value("token-file");
  a.public_url = value("public-url");
  a.max_upload = value("max-upload");
  a.tools_config = value("tools-config");
  a.snapshot_dir = value("snapshot-dir");
  a.snapshot_store = value("snapshot-store");
  a.warm = value("warm");
  a.preload = value("preload");
  a.cluster = {.shard = value("shard"), .peers = value("peers"), .peer_token_file = value("peer-token-file"),
               .capacity = value("capacity"), .drain_grace = value("drain-grace"), .snapshot_store = a.snapshot_store.has_value()};
  a.allow_remote = p.has("allow-remote");
  a.memory_merge = p.has("memory-merge");
  if (p.has("kernel-zygote") && p.has("no-kernel-zygote"))
    return nsbox::fail(nsbox::make_error(ErrorCode::kInvalidArgument,
                                         "nsbox serve: --kernel-zygote and --no-kernel-zygote contradict each other",
                                         "give one of them (or neither: the zygote where the host allows it)"));
  if (p.has("kernel-zygote") || p.has("no-kernel-zygote")) a.kernel_zygote = p.has("kernel-zygote");
  return a;
}

int fail_start(const nsbox::Error& e) {
  nsbox::log::error(e.message + (e.hint.empty() ? "" : " (" + e.hint + ")"));
  return e.code == ErrorCode::kInvalidArgument ? 2 : 1;
}

Json nullable(const std::string& s) { return s.empty() ? Json(nullptr) : Json(s); }

}  // namespace

int main(int argc, char** argv) {
  nsbox::log::set_program("nsbox-server");
  auto args = parse_args(argc, argv);
  if (!args) return fail_start(args.error());
  if (args->tools_config) {
    // The sandboxes this server makes get the file's tools (docs/tools.md): checked now,
    // so that a wrong file stops the server rather than every create.
    if (auto file = nsbox::load_tools_config_file(*args->tools_config); !file) return fail_start(file.error());
    ::setenv("NSBOX_TOOLS_CONFIG", args->tools_config->c_str(), 1);
  }
  auto pool = nsbox::api::WarmPoolConfig::parse(args->warm.value_or(""), args->preload);
  if (!pool) return fail_start(pool.error());
  pool->memory_merge = args->memory_merge;
  auto cluster = nsbox::api::ClusterConfig::parse(args->cluster);
  if (!cluster) return fail_start(cluster.error());
  auto runtime = nsbox::Runtime::open({args->root, args->snapshot_dir, args->snapshot_store, cluster->shard()});
  if (!runtime) return fail_start(runtime.error());
  const auto& root = runtime->store().root();
  if (auto made = runtime->store().ensure_dirs(); !made) return fail_start(made.error());
  // Before any other thread: it sets the umask around its socket's bind (then starts its
  // keeper thread, which only forks and execs the zygote).
  std::unique_ptr<nsbox::KernelZygoteProcess> zygote;
  if (!args->kernel_zygote.value_or(true)) {
    nsbox::log::info("kernels start through each sandbox's init: --no-kernel-zygote");
  } else {
    bool insisted = args->kernel_zygote.has_value();
    auto started = [&]() -> Result<std::unique_ptr<nsbox::KernelZygoteProcess>> {
      NSBOX_CHECK(nsbox::KernelZygoteProcess::usable());
      return nsbox::KernelZygoteProcess::start(runtime->layout(), root.run_dir);
    }();
    if (started) {
      zygote = std::move(*started);
      runtime->use_kernel_zygote(zygote->socket_path());
    } else if (insisted) {
      return fail_start(std::move(started.error()).with_hint("serve without --kernel-zygote (kernels are then started by each sandbox's init)"));
    } else {
      nsbox::log::info("kernels start through each sandbox's init: " + started.error().message);
    }
  }
  std::string api_dir = root.data_dir + "/api";
  if (auto made = nsbox::files::ensure_private_dir(api_dir); !made) return fail_start(made.error());

  nsbox::api::ListenOptions listen;
  if (args->listen) {
    auto parsed = nsbox::api::parse_listen(*args->listen, args->allow_remote);
    if (!parsed) return fail_start(parsed.error());
    listen = *parsed;
  }
  if (args->socket) listen.socket_path = *args->socket;
  else if (!args->listen) listen.socket_path = root.run_dir + "/api.sock";

  nsbox::api::ApiConfig config;
  if (args->max_upload) {
    auto size = nsbox::volume_image::parse_size(*args->max_upload);
    if (!size) return fail_start(size.error());
    config.max_upload_bytes = *size;
  }
  std::string token_file = args->token_file.value_or(api_dir + "/token");
  auto token = nsbox::api::load_or_make_secret(token_file, nsbox::api::random_token);
  if (!token) return fail_start(token.error());
  auto key = nsbox::api::load_or_make_secret(api_dir + "/signing.key", nsbox::api::random_key);
  if (!key) return fail_start(key.error());
  // The shards of a set sign links with one key, derived from the token they share, so
  // that each checks any shard's links before relaying them (docs/api.md, "Download links").
  if (cluster->sharded() && !cluster->peer_token().empty()) *key = nsbox::links::shard_set_link_key(cluster->peer_token());

  nsbox::api::ApiService service(std::move(*runtime), nsbox::api::BearerToken(*token), nsbox::api::LinkSigner(*key),
                                 nsbox::api::SessionStore(api_dir + "/sessions", cluster->shard()), config);
  auto server = nsbox::api::HttpServer::bind(service, listen);
  if (!server) return fail_start(server.error());
  // The ready line's URL, and by default the base of download links.
  std::string url;
  if (!listen.tcp_host.empty()) {
    std::string host = listen.tcp_host.find(':') != std::string::npos ? "[" + listen.tcp_host + "]" : listen.tcp_host;
    url = "http://" + host + ":" + std::to_string((*server)->tcp_port());
  }
  service.set_public_url(args->public_url.value_or(url));
  if (args->public_url) service.set_port_domain(nsbox::api::url_domain(*args->public_url));
  service.set_kernel_zygote(zygote.get());
  service.set_cluster(std::move(*cluster), [s = server->get()] { s->stop(); });
  std::string pid_file = api_dir + "/server.pid";
  if (auto written = nsbox::files::atomic_write(pid_file, std::to_string(::getpid()) + "\n"); !written) return fail_start(written.error());
  // After the bind (a second server on the same socket has stopped by now) and after the
  // public URL (members get their download links' base from it).
  service.start_pool(std::move(*pool));
  std::string ready = Json{{"url", nullable(url)}, {"socket", nullable(listen.socket_path)}, {"token_file", token_file}}.dump() + "\n";
  if (!nsbox::files::write_all(STDOUT_FILENO, ready, "stdout")) return 1;
  nsbox::log::info("serving" + (url.empty() ? "" : " on " + url) + (listen.socket_path.empty() ? "" : " and " + listen.socket_path));
  auto served = (*server)->run();
  service.stop_pool();  // the free members go; claimed sandboxes stay
  if (auto text = nsbox::files::read_file(pid_file, 64); text && *text == std::to_string(::getpid()) + "\n") ::unlink(pid_file.c_str());
  zygote.reset();  // the kernels it forked live on with their sandboxes
  nsbox::log::info("stopped");
  // Workers still waiting on a sandbox (bounded above) end with the process.
  std::cout.flush();
  ::_exit(served && !service.drain_failed() ? 0 : 1);
}
