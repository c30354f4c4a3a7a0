#include "cli/serve_flags.h"

namespace nsbox::cli {

constinit const FlagHelp kSnapshotDir{"snapshot-dir", "DIR", "where snapshots are kept (default <data dir>/snapshots)"};
constinit const FlagHelp kSnapshotStore{"snapshot-store", "URL",
                                        "keep snapshots in a bucket instead: s3://BUCKET[/PREFIX] (r2://, gs://, azblob://); its "
                                        "credentials and endpoint from the environment, as a mount's"};

const std::vector<FlagHelp>& serve_flags() {
  static const std::vector<FlagHelp> flags = {
      {"socket", "PATH", "a unix socket (default: <run dir>/api.sock, mode 0600)"},
      {"listen", "ADDR:PORT", "a TCP address too (127.0.0.1:0 takes a free port)"},
      {"allow-remote", nullptr, "allow a --listen address that is not loopback"},
      {"token-file", "PATH", "the bearer token's file (made if missing)"},
      {"public-url", "URL", "the base of signed download links; its host, when a name, is the domain of ports: {P}-{ID}.HOST reaches port P of sandbox ID"},
      {"max-upload", "SIZE", "the largest upload (default 100M)"},
      {"tools-config", "FILE", "the tools (and keys) of the sandboxes it makes: a 0600 JSON file (docs/tools.md)"},
      kSnapshotDir,
      kSnapshotStore,
      {"warm", "SIZE=N[,SIZE=N...]", "keep N ready sandboxes of each size; creates they can serve claim one (docs/semantics.md, \"Warm pool\")"},
      {"preload", "MOD,MOD...|none", "what the warm sandboxes' kernels import before they are ready (default numpy,pandas,matplotlib)"},
      {"memory-merge", nullptr, "offer the warm kernels' preloaded heap to KSM (off by default: docs/design.md, \"Memory merging\")"},
      {"kernel-zygote", nullptr, "fork kernels from a preinitialised interpreter, or do not start (the default where the host allows it: root, Linux >= 6.9; docs/kernel-zygote.md)"},
      {"no-kernel-zygote", nullptr, "start each sandbox's kernel through its init (an interpreter started per sandbox)"},
      {"shard", "NAME", "this server's shard among several ([a-z0-9]{1,16}): ids become sbx-NAME-...; needs --snapshot-store (docs/scale-out.md)"},
      {"peers", "TEMPLATE|S=URL,...", "the other servers: http://nsbox-{shard}.nsbox-peers:8080, or a list; requests for their sandboxes are relayed"},
      {"peer-token-file", "PATH", "the token servers send each other (0600; made if missing)"},
      {"capacity", "N", "at most N sandboxes here: /readyz says 503 when full (unless a warm one is ready)"},
      {"drain-grace", "SECONDS", "how long a drain (SIGTERM on a sharded server) lets cells and commands finish (default 900)"}};
  return flags;
}

std::string serve_synopsis() {
  std::string out = "nsbox serve";
  for (const auto& f : serve_flags()) out += std::string(" [--") + f.name + (f.value ? std::string(" ") + f.value : "") + "]";
  return out;
}

}  // namespace nsbox::cli
