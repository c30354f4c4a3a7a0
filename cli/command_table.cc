#include "cli/command_table.h"

#include <algorithm>

#include "cli/serve_flags.h"

namespace nsbox::cli {
namespace {

const FlagHelp kSize{"size", "SIZE", "standard (1 vCPU, 1 GiB; the default), medium (2, 2 GiB), large (4, 4 GiB), xlarge (8, 8 GiB)"};
const FlagHelp kNet{"net", "MODE",
                    "none (the default: loopback only), allow=HOST[,*.DOMAIN,HOST:PORT...] (only those, through a proxy "
                    "on the host side), internet (NAT; private ranges refused) or host (the host's network: not isolation)"};
const FlagHelp kNetAllowPrivate{"net-allow-private", "HOST[,HOST...]",
                                "hosts of the allowlist that may resolve to private or loopback addresses"};
const FlagHelp kEnv{"env", "K=V", "an environment variable (repeatable); values are never written to disk"};
const FlagHelp kRunAs{"as", "USER", "run it as one of the sandbox's users (nsbox create --user) instead of user"};
const FlagHelp kTools{"tools", "BACKEND", "what answers run_composio_tool: composio (COMPOSIO_API_KEY), dir, replay or callback (docs/tools.md)"};
const FlagHelp kToolsDir{"tools-dir", "DIR", "tools as executables DIR/SLUG, run on the host (JSON arguments in, JSON result out)"};
const FlagHelp kToolsConfig{"tools-config", "FILE", "tool settings and keys from a JSON file of yours, mode 0600 (or NSBOX_TOOLS_CONFIG)"};
const FlagHelp kUserId{"user-id", "ID", "the user whose connected accounts the composio remote uses (default: default)"};
const FlagHelp kTimeout{"timeout", "SECONDS", "the deadline (default 180); past it the command is killed, a cell interrupted"};
const FlagHelp kRaw{"raw", nullptr,
                    "pass the sandbox's control sequences to this terminal as they are (by default they are shown escaped, "
                    "\\x1b..., when stdout is a terminal)"};

}  // namespace

const std::vector<CommandHelp>& command_table() {
  static const std::vector<CommandHelp> table = {
      {"create", "[FLAGS]", "start a sandbox, print its id",
       {kSize,
        {"name", "NAME", "a name to use instead of the id (1-63 of a-z 0-9 - _ .)", "name"},
        kNet,
        kNetAllowPrivate,
        {"pip-index", "URL", "a package index (PEP 503) for pip and auto-install, reached through the proxy (its host is allowed)"},
        {"wheelhouse", "DIR", "a directory of wheels bound read-only: pip and auto-install work offline"},
        {"packages-allow", "DIST[,DIST...]", "the distributions an import in a cell may install (default: any from the sources)"},
        {"auto-install", "on|off", "install a missing module's package when a cell imports it (default on, with a source)"},
        kEnv,
        {"volume", "NAME", "a named files volume at /mnt/files (made if new; outlives the sandbox, shareable)", "volume"},
        {"files-quota", "SIZE", "the files volume's quota (default 10G, less on a small disk)", "files_quota"},
        {"home-size", "SIZE", "/home/user's volume, kept across stop and start (default: 1G per GiB of the size's memory)",
         "home_size"},
        {"from-snapshot", "ID|NAME", "restore /home/user (and /mnt/files if it holds them) from a snapshot first", "from_snapshot"},
        {"lazy-kernel", nullptr, "start the Python kernel at the first cell, not with the sandbox (for commands-only use)",
         "lazy_kernel"},
        {"ttl", "SECONDS", "remove the sandbox SECONDS after it starts (its supervisor keeps the time, with or without a server)",
         "ttl_s"},
        {"workspace-root", "DIR",
         "where commands, cells and the manifest start (default /home/user); e.g. /workspace: a directory of the home volume shown there",
         "workspace_root"},
        {"image", "IMAGE", "an OCI image's tree as the root, under a writable layer of the sandbox's own (nsbox image pull adds images)",
         "image"},
        kSnapshotDir,
        kSnapshotStore,
        {"mount", "URL:PATH[:rw][:staging_bytes=SIZE]",
         "a bucket at PATH: s3://B[/P], r2://B, gs://B, azblob://ACCOUNT/CONTAINER (repeatable); writes staged on the host "
         "up to SIZE (default 10G)"},
        {"manifest", "FILE",
         "the workspace's entries, environment and mounts from a JSON manifest (docs/semantics.md, \"Manifests\"); "
         "a list of mounts may be given more than once"},
        {"local-grant", "DIR", "a directory the manifest's local_file, local_dir and git_repo may read besides its own (repeatable)"},
        {"user", "NAME[:UID]",
         "an account of the sandbox's besides user, with a host id of its own (repeatable; uid 1001 and up unless given); "
         "commands run as it with --as"},
        kTools,
        kToolsDir,
        kToolsConfig,
        {"tools-replay", "FILE", "answer tool calls from a recording (offline, deterministic)"},
        {"tools-record", "FILE", "append each tool call and its answer to FILE (JSON lines)"},
        kUserId,
        {"llm-url", "URL", "an OpenAI-compatible API for invoke_llm (key: NSBOX_LLM_API_KEY or OPENAI_API_KEY)"},
        {"llm-model", "MODEL", "the model invoke_llm asks by default"}},
       cmd_create},
      {"ls", "[--all]", "list sandboxes",
       {{"all", nullptr, "also the free members of `nsbox serve --warm`'s pools (POOL column: the server that made them)"}}, cmd_ls},
      {"inspect", "ID [--state]", "show one sandbox",
       {{"state", nullptr, "what resuming it needs, as JSON without a secret: definition, newest snapshot, fingerprint"}},
       cmd_inspect},
      {"exec", "ID (-c CODE | -f FILE | -)", "run a cell of Python in the sandbox's kernel (its state persists)",
       {{"c", "CODE", "the cell's code"},
        {"f", "FILE", "the cell's code from a file (- reads stdin)"},
        kTimeout,
        {"output-limit", "BYTES", "output kept inline per stream (default 64 KiB; the rest goes to a file)"},
        kRaw},
       cmd_exec, true,
       "exit status: 0 ok, 1 error in the cell, 124 timeout, 130 interrupted, 137 killed; 125 nsbox failed.\n"
       "For a command rather than Python: nsbox sh ID -- CMD"},
      {"interrupt", "ID", "interrupt the running cell (its state is kept)", {}, cmd_interrupt},
      {"restart", "ID", "a fresh Python interpreter (the state is lost)", {}, cmd_restart},
      {"sh", "ID [FLAGS] -- CMD...", "run a command in a sandbox (one argument: a bash command line)",
       {kTimeout, kEnv, kRunAs, {"tty", nullptr, "interactively, on a terminal of the sandbox (raw mode, window size; no deadline)"}, kRaw},
       cmd_sh, true, "exit status: the command's; 124 past the deadline; 125 nsbox failed."},
      {"run", "[FLAGS] -- CMD...", "one-shot: create a sandbox, run the command, remove it",
       {kSize, {"net", "MODE", "none (the default) or host; allow= and internet need nsbox create"}, kTimeout, kEnv, kRaw},
       cmd_run, true, "exit status: the command's; 124 past the deadline; 125 nsbox failed."},
      {"stop", "ID...", "end every process (the kernel's state is lost); files, /home/user and mounts stay", {}, cmd_stop},
      {"start", "ID [--env K=V...] [--tools-config FILE]",
       "start a stopped sandbox again: same id, size, network and mounts, a fresh kernel",
       {{"env", "K=V", "an environment variable: every one the sandbox was created with must be given again (repeatable)"},
        kToolsConfig,
        {"from-snapshot", "ID|NAME", "replace /home/user (and /mnt/files if it holds them) with a snapshot's first"},
        kSnapshotDir,
        kSnapshotStore},
       cmd_start, false,
       "Mount credentials and tool keys come from this command's environment, as at create."},
      {"resume", "STATE [--manifest TRUSTED] [--env K=V...]",
       "bring back the sandbox of a state (`inspect ID --state`): reattach, start, or recreate from its snapshot",
       {{"manifest", "FILE", "the trusted manifest: its mounts (with credentials) must match the state's exactly"},
        {"local-grant", "DIR", "a directory the manifest's local sources may read besides its own (repeatable)"},
        {"env", "K=V", "an environment variable: every one the sandbox was created with must be given (repeatable)"},
        kToolsConfig,
        kSnapshotDir,
        kSnapshotStore},
       cmd_resume, false,
       "A running sandbox is reattached as it is. A stopped or dead one is started; its snapshot is restored first unless "
       "the workspace's fingerprint is still the snapshot's. A gone one is made again (a new id) from its snapshot, with "
       "the trusted manifest's mounts and ephemeral entries. Mount credentials come only from the trusted manifest or this "
       "command's environment, never from the state."},
      {"snapshot", "(create ID [--name N] [--include-files] | ls | rm ID|NAME...)",
       "snapshots of /home/user (and /mnt/files): never a bucket mount, never a secret",
       {{"name", "NAME", "create: a name to use instead of the snapshot's id"},
        {"include-files", nullptr, "create: /mnt/files too"},
        kSnapshotDir,
        kSnapshotStore},
       cmd_snapshot, false,
       "Restore with `nsbox create --from-snapshot ID` or `nsbox start ID --from-snapshot SNAPSHOT`."},
      {"pty", "ID (start [--cols N --rows N] -- CMD | write SID CHARS | read SID | resize SID | kill SID|--all)",
       "terminal sessions an agent types into: the session id, then what it printed in each window",
       {{"cols", "N", "start, resize: the terminal's width (default 80)"},
        {"rows", "N", "start, resize: its height (default 24)"},
        {"yield-ms", "N", "write, read: how long to collect output (default 250, at most 30000)"},
        {"all", nullptr, "kill: every session of the sandbox"},
        kRaw},
       cmd_pty, false,
       "CHARS are raw bytes: $'ls\n', $'\x03' for Ctrl-C. --json: {output, exit_code} (exit_code null while it runs)."},
      {"spawn", "ID [--cwd DIR] [--env K=V] [--as USER] [--tty] -- CMD...", "start a process that outlives this command, print its pid",
       {{"cwd", "DIR", "its working directory (default: the workspace root)"},
        kEnv,
        kRunAs,
        {"tty", nullptr, "on a terminal of the sandbox (one output stream)"}},
       cmd_spawn, false,
       "One argument with a space is a bash command line. The pid names it for ps, logs and kill; its status stays until "
       "`nsbox kill ID PID` removes it."},
      {"ps", "ID", "the sandbox's processes started with spawn: pid, status, exit code, command", {}, cmd_ps},
      {"logs", "ID PID [--follow] [--offset N] [--stderr-offset N]", "a process's output, from byte offsets",
       {{"follow", nullptr, "wait for more until the process ended; exit status then its own"},
        {"offset", "N", "the byte of stdout (a tty's output) to start from (default 0)"},
        {"stderr-offset", "N", "the byte of stderr to start from (default 0)"}},
       cmd_logs, false, "--json: its status and the offsets to go on from (the output itself is not in it)."},
      {"kill", "ID PID [SIGNAL]", "send a process a signal (TERM, KILL, INT, HUP, USR1... or a number), or remove it",
       {}, cmd_kill, false,
       "With SIGNAL, its process group gets it and its status stays. Without, it is killed (SIGKILL) if it runs and removed."},
      {"resize", "ID --size SIZE", "change a running sandbox's size (processes and state stay)", {kSize}, cmd_resize},
      {"net", "ID --allow HOST[,...]", "replace the allowlist of a --net allow= sandbox, live",
       {{"allow", "HOST[,*.DOMAIN,HOST:PORT...]", "the new allowlist (\"\" allows nothing)"},
        {"allow-private", "HOST[,HOST...]", "hosts of it that may resolve to private or loopback addresses"}},
       cmd_net},
      {"ttl", "ID SECONDS", "remove the running sandbox SECONDS from now (its time to live, extended or set)", {}, cmd_ttl},
      {"port", "ID [PORT]", "reach the sandbox's 127.0.0.1:PORT from this host through a loopback forward; without PORT, list them",
       {{"listen", "HOST:PORT", "where the forward listens (default 127.0.0.1:0, a free port); a loopback address"},
        {"close", nullptr, "stop forwarding PORT (connections already made go on)"}},
       cmd_port, false,
       "Prints HOST:PORT to connect to. Any local process of this host may connect to it: no token is asked. The forwards "
       "end when the sandbox stops."},
      {"workspace", "ID (export FILE|- | import FILE|-)",
       "the workspace root as one tar archive: export it (running, stopped or dead), or replace a running sandbox's with one",
       {},
       cmd_workspace, false,
       "Links stay links; bucket mounts and ephemeral entries are left out; an import refuses absolute names, '..', links "
       "out of the root and devices before anything changes."},
      {"files", "ID (upload LOCAL [REMOTE] | ls [PATH] | download REMOTE [LOCAL] | rm PATH...)",
       "the sandbox's /mnt/files, from the host",
       {{"limit", "N", "ls: entries per page (default 1000, at most 100000)"},
        {"cursor", "CURSOR", "ls: the page after the one that printed it"},
        {"max-size", "SIZE", "upload: the largest file (default 100M); download: the largest (default 10G)"},
        {"force", nullptr, "download: replace a local file"},
        {"r", nullptr, "rm: directories and what they hold"},
        {"b64", nullptr, "REMOTE and PATH are base64 of the name's bytes (ls --json's name_b64)"}},
       cmd_files, false,
       "Paths are relative to /mnt/files; REMOTE ending in / means into that directory."},
      {"volume", "(ls | rm NAME...)", "named files volumes", {}, cmd_volume},
      {"image", "(pull SOURCE [--name NAME]... | ls | inspect IMAGE | rm IMAGE...)", "OCI images: pulled, verified, stored once",
       {{"name", "NAME", "pull: a name for the image besides those its source records (repeatable)"}},
       cmd_image, false,
       "SOURCE: oci:DIR[:REF] (or a directory), oci-archive:FILE[:REF], docker-archive:FILE[:NAME]. IMAGE: a name, an id "
       "(12 or more hex digits) or a sha256: digest."},
      {"rm", "ID... [--keep-files]", "stop and delete sandboxes",
       {{"keep-files", nullptr, "keep the files volume, as a named volume called by the sandbox's id"}}, cmd_rm},
      {"tools", "(ls | schema)", "the tool bridge's catalogue, and the workbench tools' definitions for a model",
       {kTools, kToolsDir, kToolsConfig, kUserId,
        {"toolkit", "T", "ls: only this toolkit's tools"},
        {"search", "Q", "ls: only tools whose name or description holds Q"},
        {"format", "F", "schema: openai (the default) or anthropic"}},
       cmd_tools, false, "ls takes the same tool flags as create, and the key from COMPOSIO_API_KEY."},
      {"workbench", "ID --tool NAME --input JSON", "one call of a hosted workbench tool, answered by the sandbox",
       {{"tool", "NAME", "COMPOSIO_REMOTE_WORKBENCH (a cell) or COMPOSIO_REMOTE_BASH_TOOL (a bash command)"},
        {"input", "JSON", "the tool's input, e.g. {\"code_to_execute\": \"1+1\"}"}},
       cmd_workbench, false, "Prints the hosted answer {\"data\", \"error\", \"successful\"}; exit status 1 when not successful."},
      {"doctor", "", "check this host, and say how to fix what is missing", {}, cmd_doctor},
      {"serve", "[FLAGS]", "the HTTP API for SDKs and agent frameworks (docs/api.md)", serve_flags(),
       cmd_serve, false,
       "Prints one JSON line when ready: {\"url\", \"socket\", \"token_file\"}; stops at SIGTERM (a sharded server drains first)."},
      {"drain", "[--timeout SECONDS]", "stop this root's nsbox serve: a sharded one drains its sandboxes to snapshots first",
       {{"timeout", "SECONDS", "how long to wait for the server to end (default 3600)"}},
       cmd_drain, false, "For a pod's preStop hook. Exit status 0 once the server has ended."},
  };
  return table;
}

const CommandHelp* find_command(std::string_view name) {
  if (name == "list") name = "ls";
  if (name == "exec-command") name = "sh";
  for (const auto& c : command_table())
    if (name == c.name) return &c;
  return nullptr;
}

FlagSpec CommandHelp::spec() const { return flag_spec(flags); }

namespace {

std::string flag_word(const FlagHelp& f) {
  std::string w = (std::string_view(f.name).size() == 1 ? "-" : "--") + std::string(f.name);
  if (f.value) w += " " + std::string(f.value);
  return w;
}

}  // namespace

std::string CommandHelp::usage() const {
  std::string out = std::string("usage: nsbox ") + name + (*synopsis ? " " : "") + synopsis + "\n\n" + summary + "\n";
  if (!flags.empty()) {
    size_t width = 0;
    for (const auto& f : flags) width = std::max(width, flag_word(f).size());
    out += "\n";
    for (const auto& f : flags) {
      std::string w = flag_word(f);
      out += "  " + w + std::string(width - w.size() + 2, ' ') + f.help + "\n";
    }
  }
  if (notes) out += "\n" + std::string(notes) + "\n";
  out += "\nEvery command takes --json (one JSON document on stdout) and --root DIR (all state under DIR).\n";
  return out;
}

std::string general_help() {
  std::string out = "nsbox: local sandboxes for agent code\n\nusage: nsbox [--root DIR] [--json] COMMAND [ARGS]\n\n";
  size_t width = 0;
  for (const auto& c : command_table()) width = std::max(width, std::string_view(c.name).size());
  for (const auto& c : command_table())
    out += "  " + std::string(c.name) + std::string(width - std::string_view(c.name).size() + 2, ' ') + c.summary + "\n";
  out += "\nID is a sandbox id (sbx-...) or name. `nsbox COMMAND --help` lists a command's flags.\n"
         "--json prints one JSON document; errors go to stderr (as JSON with --json) with a stable code.\n";
  return out;
}

}  // namespace nsbox::cli
