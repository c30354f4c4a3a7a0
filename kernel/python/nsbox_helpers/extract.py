"""smart_file_extract: text out of a file, inside the sandbox (an untrusted PDF is never
parsed on the host). PDF through poppler's pdftotext; text-like files read as UTF-8.
Other kinds need a remote extractor, which nsbox does not provide: the error says so."""
import os
import subprocess

MAX_BYTES = 64 << 20
TIMEOUT_S = 120
TEXT_SUFFIXES = {".txt", ".md", ".csv", ".tsv", ".json", ".jsonl", ".log", ".xml", ".html", ".htm", ".yaml", ".yml",
                 ".py", ".js", ".ts", ".sql", ".ini", ".cfg", ".toml", ".rst", ""}


def extract_text(path):
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
    return None, (f"smart_file_extract: cannot extract text from {suffix} files in the sandbox (PDF, text, CSV and JSON "
                  f"only); other kinds need a remote extractor")
