"""smart_file_extract: text out of a file. PDF through poppler's pdftotext and text-like
files read as UTF-8, both here inside the sandbox (an untrusted PDF is never parsed on
the host). Other kinds (images, office documents) go to the tool bridge's extractor when
one is configured (a remote's extract_tool, or DIR/smart_file_extract): the file's bytes
travel with the call, up to REMOTE_MAX_BYTES; without one the error says what to set."""
import base64
import mimetypes
import os
import subprocess

MAX_BYTES = 64 << 20
TIMEOUT_S = 120
REMOTE_MAX_BYTES = 2 << 20  # base64 of it stays under the bridge socket's 4 MiB frames
TEXT_SUFFIXES = {".txt", ".md", ".csv", ".tsv", ".json", ".jsonl", ".log", ".xml", ".html", ".htm", ".yaml", ".yml",
                 ".py", ".js", ".ts", ".sql", ".ini", ".cfg", ".toml", ".rst", ""}


def extract_text(path, call):
    """call(helper, args) -> (result, error): how the tool bridge is asked."""
    try:
        path = os.fspath(path)
        size = os.path.getsize(path)
    except (OSError, TypeError) as e:
        return None, f"smart_file_extract: {e}"
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".pdf":
        try:
            done = subprocess.run(["pdftotext", "-layout", "-enc", "UTF-8", path, "-"], capture_output=True,
                                  timeout=TIMEOUT_S)
        except FileNotFoundError:
            return None, "smart_file_extract: pdftotext is not installed on this host (Debian: poppler-utils)"
        except subprocess.TimeoutExpired:
            return None, f"smart_file_extract: pdftotext took more than {TIMEOUT_S} s on {path}"
        if done.returncode != 0:
            return None, f"smart_file_extract: pdftotext failed on {path}: {done.stderr.decode(errors='replace').strip()[-500:]}"
        return done.stdout.decode("utf-8", errors="replace"), None
    if suffix in TEXT_SUFFIXES:
        if size > MAX_BYTES:
            return None, f"smart_file_extract: {path} is larger than {MAX_BYTES >> 20} MiB"
        with open(path, "rb") as f:
            return f.read(MAX_BYTES).decode("utf-8", errors="replace"), None
    return _through_bridge(path, size, suffix, call)


def _through_bridge(path, size, suffix, call):
    if size > REMOTE_MAX_BYTES:
        return None, (f"smart_file_extract: {path} is {size} bytes; a {suffix} file goes to the tool bridge's extractor, "
                      f"which takes at most {REMOTE_MAX_BYTES >> 20} MiB")
    with open(path, "rb") as f:
        content = f.read(REMOTE_MAX_BYTES)
    text, error = call("smart_file_extract", {
        "name": os.path.basename(path), "mime_type": mimetypes.guess_type(path)[0] or "application/octet-stream",
        "size": len(content), "content_base64": base64.b64encode(content).decode("ascii")})
    if error is not None:
        return None, error
    if isinstance(text, dict):  # an extractor may answer {"text": ...}
        for key in ("text", "extracted_text", "content"):
            if isinstance(text.get(key), str):
                return text[key], None
    if not isinstance(text, str):
        return None, f"smart_file_extract: the extractor answered {type(text).__name__}, not text"
    return text, None
