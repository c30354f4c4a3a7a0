"""A kernel forked by the kernel zygote (kernel/zygote/zygote_main.cc, docs/kernel-zygote.md):
it is already the sandbox's (namespaces, user, cgroup, seccomp filter) when child() runs.
What an exec'd kernel gets at its start comes now, from its supervisor, read by this
kernel after the fork: the environment and the preload list. The zygote never held them."""
import gc
import json
import os
import site
import sys

from . import server


def _add_user_site():
    """The user's site-packages (pip install --user into the home), placed as an exec'd
    kernel's start would have: before the system's. The zygote started without it (its
    home would have been the host's); a kernel is uid = euid, so it is enabled."""
    site.USER_BASE = None
    site.USER_SITE = None
    site.ENABLE_USER_SITE = True
    path = site.getusersitepackages()
    if not site.ENABLE_USER_SITE or not os.path.isdir(path) or path in sys.path:
        return
    system = [i for i, p in enumerate(sys.path) if p.endswith(("site-packages", "dist-packages"))]
    at = system[0] if system else len(sys.path)
    rest = sys.path[at:]
    del sys.path[at:]
    site.addsitedir(path)
    sys.path.extend(p for p in rest if p not in sys.path)
    site.execusercustomize()  # as an exec'd kernel's start runs a user site's usercustomize


def child(config_bytes):
    """`config_bytes`: the supervisor's record, read by the C++ half before the filter."""
    gc.enable()  # the zygote's objects stay frozen out of its collections (kernel/zygote/zygote_main.cc)
    config = json.loads(config_bytes)
    os.environ.clear()
    for key, value in config.get("env", {}).items():
        # What an exec'd kernel's environment would hold: execve passes C strings, so a
        # value ends at its first NUL; a name it could not pass is left out.
        value = value.split("\0", 1)[0]
        try:
            os.environ[key] = value
        except ValueError:  # a NUL or '=' in the name
            pass
    # The sandbox's workspace root, where init starts an exec'd kernel (the C++ half made
    # the child's working directory /home/user, the default).
    cwd = config.get("cwd")
    if cwd:
        os.chdir(cwd)
    server._reseed()  # what the zygote imported with a random state is every child's
    _add_user_site()
    server.prepare(config.get("preload", ""))
    return server.serve(3)
