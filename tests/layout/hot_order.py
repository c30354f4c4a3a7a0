#!/usr/bin/python3.11
"""The one-shot path's functions sit together at the front of nsbox's text (docs/decisions.md 172).

Traces `nsbox run -- /bin/true` (scripts/trace-hot-functions) and checks, against the built
binary's symbols, that
  1. the functions cmake/hot-functions.order lists were linked together: they span less
     than a quarter of the text, not all of it (the link honoured the order);
  2. at least 90 % of the functions the run reaches are among them (the list is not stale:
     when it fails, `make hot-order` writes it again from the current code).
Usage: tests/layout/hot_order.py NSBOX ORDER_FILE ORDERED(ON|OFF)
"""
import importlib.machinery, importlib.util, os, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
TRACER = os.path.join(HERE, "..", "..", "scripts", "trace-hot-functions")
SHARE = 0.90


def load_tracer():
    loader = importlib.machinery.SourceFileLoader("trace_hot_functions", TRACER)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def sizes(binary):
    out = subprocess.run(["nm", "-S", "--defined-only", "--no-demangle", binary], capture_output=True, text=True, check=True)
    by_name = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "tTwWi":
            by_name[parts[3]] = (int(parts[0], 16), int(parts[1], 16))
    return by_name


def demangled(names):
    return subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")


def main():
    nsbox, order_file, ordered = sys.argv[1:4]
    if ordered != "ON":
        print("SKIP: nsbox was linked without ld.lld, so without its hot-function order (scripts/install-deps installs lld)")
        return 0
    symbols = sizes(nsbox)
    with open(order_file) as f:
        listed = {symbols[n] for n in (line.strip() for line in f) if n in symbols}
    if not listed:
        print(f"FAIL: none of the functions in {order_file} is in {nsbox}")
        return 1
    start = min(a for a, _ in listed)
    end = max(a + s for a, s in listed)
    text = max(a + s for a, s in symbols.values()) - min(a for a, _ in symbols.values())
    print(f"{len(listed)} listed functions, {sum(s for _, s in listed)} bytes, linked in {end - start} bytes "
          f"from {start:#x}; the text is {text} bytes")
    if end - start > text // 4:
        print(f"FAIL: the listed functions span {end - start} of the text's {text} bytes: the link did not put them together")
        return 1

    tracer = load_tracer()
    by_address = tracer.functions(nsbox)
    reached = tracer.trace([os.path.abspath(nsbox), "run", "--", "/bin/true"], by_address)
    outside = [a for a in reached if not start <= a < end]
    share = 1 - len(outside) / len(reached)
    print(f"`nsbox run -- /bin/true` reached {len(reached)} functions, {share:.1%} of them among the listed")
    if share < SHARE:
        names = [by_address[a][0] for a in outside[:15]]
        print(f"FAIL: fewer than {SHARE:.0%} of the one-shot path's functions are in {order_file}; "
              f"`make hot-order` writes it again. Not in it, for example:")
        for n in demangled(names):
            if n:
                print("  " + n[:160])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
