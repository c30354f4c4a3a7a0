// A complete program on nsbox's client library, as docs/embedding.md shows it: built
// against an installed nsbox (pkg-config nsbox) by tests/embedding/build-and-run.
//
//   g++ example.cc $(pkg-config --cflags --libs nsbox) -static -o example && ./example [ROOT]
#include <cstdio>

#include "runtime/client/runtime.h"

int main(int argc, char** argv) {
  nsbox::RuntimeOptions options;
  if (argc > 1) options.root = argv[1];  // else NSBOX_ROOT, or the default state dirs
  auto runtime = nsbox::Runtime::open(options);
  if (!runtime) return std::fprintf(stderr, "open: %s\n", runtime.error().message.c_str()), 1;

  nsbox::CreateOptions create;
  create.spec.size = nsbox::SizeTier::kStandard;
  create.spec.name = "embedded";
  auto sandbox = runtime->create(create);
  if (!sandbox) return std::fprintf(stderr, "create: %s\n", sandbox.error().message.c_str()), 1;
  const std::string id = sandbox->record.id;

  // Cells keep their state: the second sees the first's variable.
  nsbox::CellOptions first;
  first.code = "total = sum(range(10))";
  nsbox::CellOptions second;
  second.code = "total * 2";
  auto a = runtime->execute(id, first);
  auto b = runtime->execute(id, second);
  std::printf("cell: %s %s\n", b ? b->status.c_str() : "failed", b ? b->raw.value("results", "").c_str() : "");

  // A command, its output as it comes.
  nsbox::CommandRequest command;
  command.argv = {"/bin/sh", "-c", "echo hello from $(hostname)"};
  auto r = runtime->exec(id, command, [](bool, std::string_view bytes) { std::fwrite(bytes.data(), 1, bytes.size(), stdout); });
  std::printf("exit: %d\n", r ? r->exit_code : -1);

  auto removed = runtime->remove(id);
  return a && b && r && removed ? 0 : 1;
}
