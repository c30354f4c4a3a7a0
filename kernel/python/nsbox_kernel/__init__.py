"""nsbox's kernel, the Python half: runs cells for the supervisor (kernel/nsbox_kernel.cc
starts the interpreter and calls serve()). docs/protocol.md has the messages."""
from .server import serve

__all__ = ["serve"]
