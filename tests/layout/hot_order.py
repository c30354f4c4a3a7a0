#!/usr/bin/python3.11
"""The paths cmake/hot-functions.order lists sit together at the front of nsbox's and the
supervisor's text (docs/design.md, "Build and tests").

Traces what `make hot-order` traces (scripts/trace-hot-functions --build: `nsbox run`, then
create, sh and rm) and checks, for each of the two programs against its symbols, that
  1. the functions the list names were linked together at the front: from the text's
     first page, in less than twice their size, not spread over the whole text (the link
     honoured the order);
  2. at least 90 % of the functions the paths reach are among them (the list is not stale:
     when it fails, `make hot-order` writes it again from the current code). The bar leaves
     room for what differs by host, not by code: libc's CPU-specific variants (another
     CPU runs another memcpy), a few dozen of ~900.
Usage: tests/layout/hot_order.py BUILD_DIR ORDER_FILE ORDERED(ON|OFF)
"""
import importlib.machinery, importlib.util, os, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
TRACER = os.path.join(HERE, "..", "..", "scripts", "trace-hot-functions")
SHARE = 0.90
PAGE = 4096
SKIP_EXIT_CODE = 77  # CTest's SKIP_RETURN_CODE


def load_tracer():
    loader = importlib.machinery.SourceFileLoader("trace_hot_functions", TRACER)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def demangled(names):
    return subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")


def check(program, listed_names, reached):
    """Prints what it found about one program (the tracer's Program); False if a check failed."""
    name = os.path.basename(program.path)
    sizes = program.sizes
    listed = {a for a, names in program.functions.items() if any(n in listed_names for n in names)}
    if not listed:
        print(f"FAIL: {name}: none of the listed functions is in it")
        return False
    start, end = min(listed), max(a + sizes[a] for a in listed)
    code = sum(sizes[a] for a in listed)
    text_start = min(sizes)
    print(f"{name}: {len(listed)} listed functions, {code} bytes, linked in {end - start} bytes "
          f"from {start:#x} (the text begins at {text_start:#x})")
    # Linked in order they span ~1.2x their size (a name can stand for several local
    # functions, and libc's objects hold several in one section); in the usual order, the
    # whole text.
    if start - text_start >= PAGE or end - start > 2 * code:
        print(f"FAIL: {name}: the listed functions are not together at the front of the text: "
              "the link did not honour the order")
        return False
    if not reached:
        print(f"FAIL: {name}: the traced paths reached none of its functions")
        return False
    outside = [a for a in reached if a not in listed]
    share = 1 - len(outside) / len(reached)
    print(f"{name}: the traced paths reached {len(reached)} functions, {share:.1%} of them listed")
    if share < SHARE:
        print(f"FAIL: {name}: fewer than {SHARE:.0%} of the functions its paths reach are listed; "
              "`make hot-order` writes the list again. Not in it, for example:")
        for n in demangled([program.functions[a][0] for a in outside[:15]]):
            if n:
                print("  " + n[:160])
        return False
    return True


def main():
    build, order_file, ordered = sys.argv[1:4]
    if ordered != "ON":
        # scripts/install-deps installs lld: under `make test` its absence is a failure.
        why = "nsbox is linked without the hot-function order in this build (no ld.lld, or a sanitizer build)"
        if os.environ.get("NSBOX_TEST_PEERS") == "required":
            print(f"FAIL: {why}; scripts/install-deps installs lld")
            return 1
        print(f"SKIP: {why} [doctor: none]")
        return SKIP_EXIT_CODE
    if os.geteuid() != 0:
        print("SKIP: the trace writes into processes that change their user (root only); not root here [doctor: root]")
        return SKIP_EXIT_CODE
    tracer = load_tracer()
    why_not = tracer.can_trace()
    if why_not:
        print(f"SKIP: {why_not} [doctor: none]")
        return SKIP_EXIT_CODE
    with open(order_file) as f:
        listed_names = {line.strip() for line in f if line.strip()}
    programs, reached = tracer.trace_nsbox(build)
    ok = [check(programs[path], listed_names, reached[path]) for path in programs]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
