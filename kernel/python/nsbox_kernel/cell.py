"""Running one cell: like a notebook, the value of the last expression is the cell's
result, unless the cell assigns `output`; the traceback of an error points at the cell's
own lines; a top-level `return` is explained."""
import ast
import os

RETURN_HINT = "a cell cannot return: end it with an expression, or assign the result to `output`"


class Interruptible:
    """True while user code runs: only then does SIGINT raise KeyboardInterrupt."""
    active = False


def _register_source(filename, source):
    import linecache  # only when a traceback needs the cell's lines
    text = source if isinstance(source, str) else source.decode("utf-8", "replace")
    lines = text.splitlines(True)
    linecache.cache[filename] = (len(text), None, lines, filename)


_KERNEL_DIR = os.path.dirname(os.path.abspath(__file__))


def _error(exc, filename, source=None):
    """ename, evalue and a traceback of the user's frames only (the cell's, and what it
    called), not the kernel's."""
    import traceback  # imported on the first error, not at start-up
    if source is not None:
        _register_source(filename, source)
    if isinstance(exc, SyntaxError):
        lines = traceback.format_exception_only(type(exc), exc)
    else:
        te = traceback.TracebackException(type(exc), exc, exc.__traceback__)
        te.stack = traceback.StackSummary.from_list(
            [f for f in te.stack if not os.path.abspath(f.filename).startswith(_KERNEL_DIR)])
        lines = list(te.format())
    return {"ename": type(exc).__name__, "evalue": str(exc), "traceback": "".join(lines)}


def _explain(exc):
    if isinstance(exc, SyntaxError) and exc.msg == "'return' outside function":
        exc.msg = f"'return' outside function: {RETURN_HINT}"
    return exc


def _assigns_output(tree):
    return any(isinstance(node, ast.Name) and node.id == "output" and isinstance(node.ctx, ast.Store)
               for node in ast.walk(tree))


def _spill(text, output_dir, number, limit):
    """The first `limit` characters inline; the whole text in a file when it is longer."""
    if limit is None or len(text) <= limit:
        return text, None
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, f"cell-{number}-results.txt")
    with open(path, "w", encoding="utf-8", errors="backslashreplace") as f:
        f.write(text)
    return text[:limit], path


def run(source, number, namespace, output_dir, results_limit):
    filename = f"<cell-{number}>"
    result = {"status": "ok", "results": None, "error": None}
    try:
        tree = ast.parse(source, filename=filename, mode="exec")
    except SyntaxError as e:
        result.update(status="error", error=_error(_explain(e), filename))
        return result
    except ValueError as e:  # null bytes in the source
        result.update(status="error", error={"ename": "SyntaxError", "evalue": str(e), "traceback": f"SyntaxError: {e}\n"})
        return result
    sets_output = _assigns_output(tree)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    value = None
    try:
        body = compile(tree, filename, "exec")  # `return` at top level is caught here
        tail = compile(ast.Expression(last.value), filename, "eval") if last is not None else None
    except SyntaxError as e:
        result.update(status="error", error=_error(_explain(e), filename))
        return result
    try:
        Interruptible.active = True
        try:
            exec(body, namespace)
            if tail is not None:
                value = eval(tail, namespace)
        finally:
            Interruptible.active = False
    except KeyboardInterrupt as e:
        result.update(status="interrupted", error=_error(e, filename, source))
        return result
    except BaseException as e:  # SystemExit included: a cell never ends the kernel
        result.update(status="error", error=_error(e, filename, source))
        return result
    text = None
    if sets_output and "output" in namespace:
        out = namespace["output"]
        text = out if isinstance(out, str) else repr(out)
    elif value is not None:
        text = repr(value)
    if text is not None:
        result["results"], path = _spill(text, output_dir, number, results_limit)
        if path:
            result["results_file_path"] = path
    return result
