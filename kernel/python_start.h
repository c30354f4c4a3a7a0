// The embedded interpreter as every kernel has it (kernel/kernel_main.cc, and the zygote's
// kernels, kernel/zygote/zygote_main.cc): sys.executable is the real /usr/bin/python3.11, so
// subprocess, multiprocessing and `python -m pip` work; stdio unbuffered, so print() and
// C-level writes to fd 1/2 keep their order; argv [""]; site imported.
#pragma once

#include <optional>

namespace nsbox::kernel {

// nullopt once the interpreter runs; otherwise the exit code to end with (the reason is on
// stderr). `fixed_hash_seed`: str hashes the same in every process (merging kernels).
// `user_site`: ~/.local's site-packages on sys.path (an exec'd kernel's home is the
// sandbox's; the zygote's would be the host's: kernel/zygote/zygote_main.cc).
std::optional<int> start_python(bool fixed_hash_seed, bool user_site = true);

}  // namespace nsbox::kernel
