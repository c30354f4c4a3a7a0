"""nsbox's kernel, the Python half: runs cells for the supervisor (kernel/kernel_main.cc
starts the interpreter, calls preload() for a warm pool's kernels, then serve()).
docs/protocol.md has the messages."""
from .server import preload, serve

__all__ = ["preload", "serve"]
