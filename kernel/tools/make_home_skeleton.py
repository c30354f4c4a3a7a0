"""Build step: what every new home volume holds from its first instant (like /etc/skel).

A sandbox's kernel made these at its start in every fresh home: the user site
(~/.local/lib/pythonX.Y/site-packages, before the system's packages on sys.path, so
that pip's --user installs are importable at once: nsbox_kernel/packages.py) and
matplotlib's font list (~/.cache/matplotlib/fontlist-vNNN.json, from the build's list:
nsbox_kernel/font_cache.py). That was six directories and a file on ext4 per sandbox.
The home volume's template is now formatted with this tree in it (mkfs.ext4 -d, owned
by the sandbox's user: runtime/core/volume_skeleton.cc), so a new home is a copy with them
already there; the kernel only checks. A home made before keeps getting them from the
kernel as before.

  python3 make_home_skeleton.py FONT_CACHE_DIR OUT_DIR
"""
import os
import shutil
import sys
import sysconfig

fonts, out = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
shutil.rmtree(out, ignore_errors=True)
os.makedirs(out, mode=0o755)
# The user site as the sandbox's interpreter computes it with PYTHONUSERBASE=/home/user/.local.
user_site = sysconfig.get_path("purelib", "posix_user", vars={"userbase": "/home/user/.local"})
os.makedirs(os.path.join(out, os.path.relpath(user_site, "/home/user")), mode=0o755)
cache = os.path.join(out, ".cache", "matplotlib")
for name in sorted(os.listdir(fonts)):
    if name.startswith("fontlist-") and name.endswith(".json"):
        os.makedirs(cache, mode=0o755, exist_ok=True)
        shutil.copyfile(os.path.join(fonts, name), os.path.join(cache, name))
for dirpath, dirnames, filenames in os.walk(out):
    os.chmod(dirpath, 0o755)
    for f in filenames:
        os.chmod(os.path.join(dirpath, f), 0o644)
with open(os.path.join(os.path.dirname(out), ".home-skeleton.stamp"), "w") as f:
    f.write("done\n")
