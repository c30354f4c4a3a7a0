// nsbox: the command line. `nsbox help` lists the commands (cli/command_table.cc);
// docs/cli.md says what each does.
#include "cli/commands.h"

int main(int argc, char** argv) { return nsbox::cli::run_command_line(argc, argv); }
