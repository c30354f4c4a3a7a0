"""A manifest's host sources (LocalFile, LocalDir, GitRepo), read on the caller's side.

The server never reads the caller's disk (docs/semantics.md, "Manifests"): this module
checks every source before the sandbox is made — confined to the working directory or an
extra path grant, no symlink anywhere, only regular files and directories, bounded — and
clones repositories into a private temporary directory (hooks off, no system or global
git config), then streams the files into the new sandbox through its fs API.
"""
from __future__ import annotations

import base64
import os
import posixpath
import re
import shutil
import stat
import subprocess
import tempfile
from typing import Any, List, Mapping, Optional, Sequence, Tuple

from .entries import Dir, GitRepo, LocalDir, LocalFile
from .entry_base import _mode_of
from .errors import (GitCloneError, GitMissingInImageError, GitSubpathError, InvalidManifestPathError,
                     LocalDirReadError, LocalFileReadError)

MAX_MEMBERS = 100_000
MAX_DEPTH = 64
GIT_TIMEOUT_S = 300
_COMMIT = re.compile(r"^[0-9a-f]{7,40}$")


def source_entries(entries: Mapping[str, Any], prefix: str = "") -> List[Tuple[str, Any]]:
    """(workspace-relative path, entry) of every LocalFile, LocalDir and GitRepo."""
    out: List[Tuple[str, Any]] = []
    for key, entry in entries.items():
        rel = prefix + key.strip("/")
        if isinstance(entry, (LocalFile, LocalDir, GitRepo)):
            out.append((posixpath.normpath(rel), entry))
        elif isinstance(entry, Dir):
            out.extend(source_entries(entry.children, rel + "/"))
    return out


class _Item:
    """One thing to make: a directory (``source`` None), or a file read from ``source``
    ((root, path below it), opened again without following a link when copied)."""

    def __init__(self, dest: str, source: Optional[Tuple[str, str]], mode: int) -> None:
        self.dest = dest
        self.source = source
        self.mode = mode


class LocalSources:
    """Checked sources: what to make, and where each file comes from."""

    def __init__(self) -> None:
        self.items: List[_Item] = []
        self._scratch: Optional[str] = None

    # -- checking ----------------------------------------------------------------

    @classmethod
    def prepare(cls, entries: Mapping[str, Any], root: str, base: Optional[str] = None,
                grants: Sequence[str] = (), only_ephemeral: bool = False) -> "LocalSources":
        """The sources of ``entries``, to be made under ``root`` (the manifest's)."""
        base = os.path.abspath(base or os.getcwd())
        sources = cls()
        try:
            for rel, entry in source_entries(entries):
                if only_ephemeral and not entry.ephemeral:
                    continue
                sources._add(posixpath.join(root, rel), entry, base, grants)
        except BaseException:
            sources.close()
            raise
        return sources

    def _add(self, dest: str, entry: Any, base: str, grants: Sequence[str]) -> None:
        if isinstance(entry, GitRepo):
            tree = self._clone(entry, base, grants)
            self._walk_dir(tree, dest, entry, skip_git=True, error=LocalDirReadError)
            return
        where = self._confined(entry.src, base, grants, entry)
        error = LocalFileReadError if isinstance(entry, LocalFile) else LocalDirReadError
        fd = self._open_nofollow(where, error, entry.src)
        st = os.fstat(fd)
        if isinstance(entry, LocalFile):
            os.close(fd)
            if not stat.S_ISREG(st.st_mode):
                raise LocalFileReadError(src=entry.src, reason="not_a_file", message="local_file %s is not a regular file" % entry.src)
            self.items.append(_Item(dest, where, _mode(entry, 0o755)))
            return
        if not stat.S_ISDIR(st.st_mode):
            os.close(fd)
            raise LocalDirReadError(src=entry.src, reason="not_a_directory", message="local_dir %s is not a directory" % entry.src)
        self._walk_fd(fd, where, dest, entry, skip_git=False, error=LocalDirReadError)

    @staticmethod
    def _confined(src: str, base: str, grants: Sequence[str], entry: Any) -> Tuple[str, str]:
        """(root, path below it): the source lexically inside the base or a grant."""
        error = LocalFileReadError if isinstance(entry, LocalFile) else LocalDirReadError
        if any(part == ".." for part in src.replace("\\", "/").split("/")):
            raise error(src=src, reason="path_escape", message="%s must not use `..`" % src)
        path = posixpath.normpath(src if src.startswith("/") else posixpath.join(base, src))
        for root in [base] + [posixpath.normpath(str(g)) for g in grants]:
            if path == root or path.startswith(root.rstrip("/") + "/"):
                return root, posixpath.relpath(path, root)
        raise error(src=src, reason="outside_base_dir",
                    message="%s is outside %s and no extra path grant covers it" % (path, base))

    @staticmethod
    def _open_nofollow(where: Tuple[str, str], error: Any, shown: str) -> int:
        """Opens root/below without following a symlink below the root's real path."""
        root, below = where
        fd = os.open(os.path.realpath(root), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        parts = [p for p in below.split("/") if p not in ("", ".")]
        try:
            for i, part in enumerate(parts):
                last = i == len(parts) - 1
                try:
                    nxt = os.open(part, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK |
                                  (0 if last else os.O_DIRECTORY), dir_fd=fd)
                except OSError as e:
                    if e.errno in (40, 20):  # ELOOP, ENOTDIR: a symlink on the way
                        raise error(src=shown, reason="symlink_not_supported",
                                    message="%s passes through a symlink, which is not supported" % shown, cause=e) from e
                    raise error(src=shown, reason="unreadable", message="%s: %s" % (shown, e.strerror), cause=e) from e
                os.close(fd)
                fd = nxt
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _walk_dir(self, path: str, dest: str, entry: Any, *, skip_git: bool, error: Any) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        self._walk_fd(fd, (path, "."), dest, entry, skip_git=skip_git, error=error)

    def _walk_fd(self, top: int, source: Tuple[str, str], dest: str, entry: Any, *, skip_git: bool, error: Any) -> None:
        """Every member of the directory open at ``top`` (``source`` = (root, below)). One
        directory is open at a time: those still to visit wait as paths, each opened again
        from the root without following a link when its turn comes."""
        root = source[0]
        shown = posixpath.join(root, source[1])
        self.items.append(_Item(dest, None, _mode(entry, 0o755)))
        stack = [(posixpath.normpath(source[1]), dest, 0)]
        first = True
        while stack:
            below, into, depth = stack.pop()
            where = posixpath.join(root, below)
            fd = top if first else self._open_nofollow((root, below), error, where)
            first = False
            try:
                if depth > MAX_DEPTH:
                    raise error(src=where, reason="too_deep", message="%s is nested more than %d levels" % (where, MAX_DEPTH))
                for name in sorted(os.listdir(fd)):
                    if skip_git and depth == 0 and name == ".git":
                        continue
                    if len(self.items) >= MAX_MEMBERS:
                        raise error(src=shown, reason="too_many_members",
                                    message="%s holds more than %d files and directories" % (shown, MAX_MEMBERS))
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    child, target = where + "/" + name, into + "/" + name
                    child_below = name if below == "." else below + "/" + name
                    if stat.S_ISLNK(st.st_mode):
                        raise error(src=child, reason="symlink_not_supported",
                                    message="%s is a symlink, which is not supported" % child)
                    if stat.S_ISDIR(st.st_mode):
                        self.items.append(_Item(target, None, 0o755))
                        stack.append((child_below, target, depth + 1))
                    elif stat.S_ISREG(st.st_mode):
                        self.items.append(_Item(target, (root, child_below), st.st_mode & 0o777))
                    else:
                        raise error(src=child, reason="special_file",
                                    message="%s is not a regular file or directory (a FIFO, socket or device)" % child)
            finally:
                os.close(fd)

    def _clone(self, entry: GitRepo, base: str, grants: Sequence[str]) -> str:
        git = shutil.which("git", path="/usr/bin:/bin:/usr/local/bin")
        if git is None:
            raise GitMissingInImageError()
        url = entry.url()
        if url.startswith("file://"):
            url = url[len("file://"):]
        if "://" not in url:
            # A repository on this machine is a source like a LocalDir's: inside the base
            # or a grant, no symlink on the way.
            where = self._confined(url, base, grants, LocalDir("."))
            os.close(self._open_nofollow(where, LocalDirReadError, url))
            url = posixpath.join(os.path.realpath(where[0]), where[1])
        url, auth = _split_userinfo(url)
        if url.startswith("-") or (entry.ref or "").startswith("-"):
            raise GitCloneError(url=url, ref=entry.ref, stderr="an argument starting with '-' is refused")
        if self._scratch is None:
            self._scratch = tempfile.mkdtemp(prefix="nsbox-git-")
        dest = os.path.join(self._scratch, str(len(os.listdir(self._scratch))))
        env = {"PATH": "/usr/bin:/bin", "HOME": self._scratch, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
               "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "/bin/false", "GIT_SSH_COMMAND": "ssh -oBatchMode=yes",
               "LC_ALL": "C"}
        if auth:  # never on git's command line, nor in the clone's config
            env.update({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader",
                        "GIT_CONFIG_VALUE_0": "Authorization: Basic " + auth})
        base_args = [git, "-c", "core.hooksPath=" + os.devnull, "-c", "protocol.file.allow=always",
                     "-c", "advice.detachedHead=false"]

        def run(args: List[str], cwd: Optional[str] = None) -> str:
            try:
                p = subprocess.run(base_args + args, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                                   timeout=GIT_TIMEOUT_S, check=False)
            except subprocess.TimeoutExpired as e:
                raise GitCloneError(url=url, ref=entry.ref, stderr="timed out after %d s" % GIT_TIMEOUT_S) from e
            if p.returncode != 0:
                raise GitCloneError(url=url, ref=entry.ref, stderr=_redact(p.stderr.decode("utf-8", "replace")))
            return p.stdout.decode("utf-8", "replace")

        if entry.ref and _COMMIT.match(entry.ref):
            run(["clone", "--quiet", "--no-checkout", "--", url, dest])
            sha = run(["rev-parse", "--verify", "--quiet", "--end-of-options", entry.ref + "^{commit}"], cwd=dest).strip()
            run(["checkout", "--quiet", "--detach", sha], cwd=dest)
        else:
            run(["clone", "--quiet", "--no-tags", "--depth", "1"] + (["--branch", entry.ref] if entry.ref else [])
                + ["--", url, dest])
        if not entry.subpath or entry.subpath.strip("/") in ("", "."):
            return dest
        sub = posixpath.normpath(entry.subpath.strip("/"))
        if sub.startswith("..") or sub.startswith("/"):
            raise InvalidManifestPathError(rel=entry.subpath, reason="escape_root")
        tree = os.path.join(dest, sub)
        if not os.path.isdir(tree) or os.path.islink(tree):
            raise GitSubpathError(url=url, subpath=entry.subpath)
        return tree

    # -- writing -----------------------------------------------------------------

    def write(self, sandbox: Any) -> None:
        """Makes every item in the sandbox through its fs API, as the sandbox user."""
        for item in self.items:
            if item.source is None:
                sandbox.fs.mkdir(item.dest, parents=True)
                continue
            # Opened again the same way: a link that appeared since the check refuses it.
            fd = self._open_nofollow(item.source, LocalDirReadError, posixpath.join(*item.source))
            with os.fdopen(fd, "rb", closefd=True) as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    raise LocalDirReadError(src=posixpath.join(*item.source), reason="changed",
                                            message="%s changed while copied" % posixpath.join(*item.source))
                sandbox.fs.write(item.dest, f, mode=item.mode)

    def close(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None


def _split_userinfo(url: str) -> Tuple[str, str]:
    """(the URL without user:password@, base64 of "user:password" or "")."""
    m = re.match(r"^([a-z][a-z0-9+.-]*://)([^/@]*)@(.*)$", url)
    if not m:
        return url, ""
    return m.group(1) + m.group(3), base64.b64encode(m.group(2).encode("utf-8")).decode("ascii")


def _redact(text: str) -> str:
    return re.sub(r"([a-z][a-z0-9+.-]*://)[^/@\s]*@", r"\1***@", text)


def _mode(entry: Any, default: int) -> int:
    m = _mode_of(getattr(entry, "permissions", None))
    return default if m is None else m
