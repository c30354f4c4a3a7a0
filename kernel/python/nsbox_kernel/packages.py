"""Python packages in a sandbox (docs/network.md, "Packages").

The user site (PYTHONUSERBASE=/home/user/.local) is made at start and put before the
system's site-packages, so that `pip install` in a cell or in `nsbox sh` lands in the
sandbox's own directory and is importable at once, in this kernel too.

Auto-install: an `import X` written in a cell, for a top-level module nothing provides,
installs X's distribution from the sandbox's source (--pip-index or --wheelhouse, set up
by the host as PIP_INDEX_URL / PIP_FIND_LINKS) and imports it, reporting progress
("installing X") and counting against the cell's deadline. Imports made by libraries
(`try: import optional_dep`) never install anything. Names that differ from their
distribution's are in import_names.json. NSBOX_PACKAGES_ALLOW limits what may be
installed; NSBOX_AUTO_INSTALL is "on", "off", or "no-source" (then the error says how
to give one)."""
import importlib
import importlib.machinery
import json
import os
import re
import site
import sys

PIP_TIMEOUT_S = 900  # the cell's deadline comes first: its interrupt stops pip
_NAMES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "import_names.json")


def ensure_user_site():
    """Makes the user site and puts it before the system's packages on sys.path."""
    path = site.getusersitepackages()
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return
    if path in sys.path:
        return
    at = next((i for i, p in enumerate(sys.path) if p.endswith(("dist-packages", "site-packages"))), len(sys.path))
    sys.path.insert(at, path)


def normalize(distribution):
    return re.sub(r"[-_.]+", "-", distribution).lower()


def _from_a_cell():
    """Whether the import being resolved was written in a cell (not in a library)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith("<frozen importlib") or "importlib" in name or name == __file__):
            return name.startswith("<cell-")
        frame = frame.f_back
    return False


class AutoInstaller:
    """The last finder on sys.meta_path: it only sees what no other finder could find."""

    def __init__(self, mode, allow, progress):
        self.mode = mode
        self.allow = {normalize(d) for d in allow if d}
        self.progress = progress
        self.tried = set()
        try:
            with open(_NAMES_FILE) as f:
                self.names = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
        except (OSError, ValueError):
            self.names = {}

    def find_spec(self, fullname, path=None, target=None):
        if path is not None or "." in fullname or fullname in self.tried or not _from_a_cell():
            return None
        distribution = self.names.get(fullname, fullname)
        if self.mode == "no-source":
            raise ModuleNotFoundError(
                f"No module named '{fullname}' (nsbox installs '{distribution}' on import when the sandbox has a "
                f"package source: create it with --pip-index URL or --wheelhouse DIR)", name=fullname)
        if self.allow and normalize(distribution) not in self.allow:
            raise ModuleNotFoundError(
                f"No module named '{fullname}'; nsbox did not install '{distribution}': it is not in this sandbox's "
                f"--packages-allow ({', '.join(sorted(self.allow))})", name=fullname)
        self.tried.add(fullname)
        self.progress(f"installing {distribution}", None)
        import subprocess  # here, not at the top: every kernel's start would pay for it
        done = subprocess.run(
            [sys.executable or "/usr/bin/python3", "-m", "pip", "install", "--user", "--quiet", "--no-input",
             "--disable-pip-version-check", distribution],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
        if done.returncode != 0:
            reason = (done.stderr or done.stdout).strip().splitlines()
            raise ModuleNotFoundError(
                f"No module named '{fullname}'; installing '{distribution}' failed: {' '.join(reason[-3:])[:600]}",
                name=fullname)
        self.progress(f"installed {distribution}", None)
        ensure_user_site()
        importlib.invalidate_caches()
        return importlib.machinery.PathFinder.find_spec(fullname, None)


def install(progress):
    """progress(step, metric): how the kernel reports progress of the running cell."""
    ensure_user_site()
    mode = os.environ.get("NSBOX_AUTO_INSTALL", "no-source")
    if mode not in ("on", "no-source"):
        return
    allow = os.environ.get("NSBOX_PACKAGES_ALLOW", "").split(",")
    sys.meta_path.append(AutoInstaller(mode, allow, progress))
