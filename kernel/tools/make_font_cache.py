"""Build step: matplotlib's font list, made once here rather than in every sandbox.

matplotlib scans the system's fonts the first time a sandbox imports pyplot, into
~/.cache/matplotlib/fontlist-vNNN.json (0.4-0.7 s). The kernel copies the file this
writes (OUT/fontlist-vNNN.json) into a home that has none (nsbox_kernel/font_cache.py):
the fonts are the host's /usr/share/fonts, bound read-only into every sandbox, and a font
that is gone makes matplotlib rescan by itself. Without matplotlib, nothing is written.

  python3 make_font_cache.py OUT_DIR
"""
import os
import sys

out = os.path.abspath(sys.argv[1])
os.makedirs(out, exist_ok=True)
os.environ["MPLCONFIGDIR"] = out
try:
    import matplotlib.font_manager  # noqa: F401  (writes fontlist-vNNN.json into MPLCONFIGDIR)
except Exception as e:  # no matplotlib here: the sandboxes build their own list
    print("make_font_cache: no font list (%s: %s)" % (type(e).__name__, e))
with open(os.path.join(out, ".stamp"), "w") as f:
    f.write("done\n")
