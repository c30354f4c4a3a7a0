"""The kernel's main loop: announce readiness, then run each cell the supervisor sends, in
the main thread (so that SIGINT lands in it), one at a time, in one persistent namespace."""
import builtins
import importlib
import os
import signal
import sys

from . import cell, display, font_cache, packages
from .channel import Channel
from .helpers import Helpers


def _no_input(prompt=""):
    raise EOFError("input() is not available: a cell runs without stdin; "
                   "put the data in the code or in a file under /mnt/files")


def _on_sigint(signum, frame):
    # The watchdog's interrupt: a KeyboardInterrupt in the cell, nothing between cells.
    if cell.Interruptible.active:
        raise KeyboardInterrupt


def prepare(preload=""):
    """The kernel's set-up before serve(), for every kernel: matplotlib's font list into
    a home that has none, our figure backend (matplotlib reads it at import), then a warm
    pool's data stack (`--preload`, comma-separated). A module that fails is said on
    stderr (the first cell's) and the others still load."""
    font_cache.seed()
    os.environ.setdefault("MPLBACKEND", "module://nsbox_kernel.mpl_backend")
    for name in filter(None, preload.split(",")):
        try:
            importlib.import_module(name)
        except Exception as e:
            print(f"nsbox: preload of {name} failed: {type(e).__name__}: {e}", file=sys.stderr)


def _reseed():
    """A claimed sandbox's random state is its own: the kernel may have been made long
    before, or (merging) with a layout equal to its neighbours'. Only what is imported
    has a state: a module imported later seeds itself from the OS (importing `random`
    here only to seed it cost every zygote kernel six modules)."""
    random = sys.modules.get("random")
    if random is not None:
        random.seed()
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()  # from the OS's entropy, as at import


def _configure(request):
    """A warm pool's claim: the creator's environment, and fresh random state. Never
    fatal: a value the interpreter refuses (a NUL) is left out and said."""
    env = request.get("env")
    for k, v in (env.items() if isinstance(env, dict) else ()):
        try:
            os.environ[str(k)] = str(v)
        except (ValueError, OSError) as e:
            print(f"nsbox: environment variable {k} not set: {e}", file=sys.stderr)
    try:
        _reseed()
    except Exception as e:
        print(f"nsbox: random state not reseeded: {e}", file=sys.stderr)


def serve(fd):
    """After prepare(): reports ready, then runs cells until the supervisor goes."""
    channel = Channel(fd)
    running = {"cell": 0}
    namespace = {"__name__": "__main__", "__doc__": None, "__builtins__": builtins}
    helpers = Helpers(channel, lambda: running["cell"])
    helpers.install(namespace)
    packages.install(helpers.set_progress)
    builtins.input = _no_input
    sys.argv = [""]
    signal.signal(signal.SIGINT, _on_sigint)
    channel.send({"event": "ready", "pid": os.getpid(), "python": sys.version.split()[0]})

    executed = 0
    while True:
        request = channel.next_request()
        if request is None:
            return 0  # the supervisor is gone
        if request.get("op") == "configure":
            _configure(request)
            continue
        if request.get("op") != "execute":
            continue
        number = request["cell"]
        running["cell"] = number
        if "code" in request:
            source = request["code"]
        else:
            import base64  # only for code that is not UTF-8
            source = base64.b64decode(request.get("code_b64", ""))
        output_dir = request.get("output_dir", "/mnt/files/.nsbox/output")
        executed += 1
        display.begin_cell(output_dir, number)
        result = cell.run(source, number, namespace, output_dir, request.get("results_limit"))
        try:
            result["display"] = display.end_cell()
        except Exception as e:
            result["display"] = []
            print(f"nsbox: could not save the figures: {e}", file=sys.stderr)
        result["execution_count"] = executed
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        channel.send(dict(result, event="result", cell=number))
