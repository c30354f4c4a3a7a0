"""nsbox's kernel, the Python half: runs cells for the supervisor (kernel/kernel_main.cc
starts the interpreter, calls prepare() with a warm pool's preload list, then serve()).
docs/protocol.md has the messages."""
from .server import prepare, serve

__all__ = ["prepare", "serve"]
