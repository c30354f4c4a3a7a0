"""Tests for the limits nsbox_helpers.transport checks before a call leaves the sandbox:
the same numbers and words as the supervisor's (runtime/protocol/frame.cc, tool_bridge.cc),
counted the same way."""
import json
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

from nsbox_helpers import transport  # noqa: E402


def measure(text):
    """runtime/protocol/frame.cc's measure_json, on the kernel's frame for a call."""
    depth = deepest = 0
    values = 1
    in_string = escaped = False
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            values += 1
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
        elif c == ",":
            values += 1
    return deepest, values


def kernel_frame(args):
    return json.dumps({"op": "helper", "name": "run_tool", "args": args, "call": 1})


def nested(levels):
    value = []
    for _ in range(levels - 1):
        value = [value]
    return value


class Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, helper, args):
        self.calls.append((helper, args))
        return {"result": {}, "error": None}


def test_the_helpers_count_as_the_supervisor_does():
    rng = random.Random(33)

    def make(depth):
        kind = rng.randrange(5 if depth < 6 else 3)
        if kind == 0:
            return rng.choice([0, 1.5, None, True, "a,b]{", 'q"[', ""])
        if kind in (1, 2):
            return rng.randrange(100)
        if kind == 3:
            return [make(depth + 1) for _ in range(rng.randrange(4))]
        return {f"k{i},[": make(depth + 1) for i in range(rng.randrange(4))}

    for _ in range(300):
        args = {"tool": "T", "arguments": make(0)}
        depth, values = measure(kernel_frame(args))
        transport.MAX_CALL_DEPTH, transport.MAX_CALL_VALUES = depth, values
        try:
            assert transport.past_limits("run_tool", args) is None
            transport.MAX_CALL_VALUES = values - 1
            assert "values" in transport.past_limits("run_tool", args)
            transport.MAX_CALL_VALUES, transport.MAX_CALL_DEPTH = values, depth - 1
            assert "levels" in transport.past_limits("run_tool", args)
        finally:
            transport.MAX_CALL_DEPTH, transport.MAX_CALL_VALUES = 64, 1 << 16


def test_a_call_past_the_limits_is_answered_in_the_sandbox_naming_the_limit():
    recorder = Recorder()
    transport.install(recorder)
    try:
        wide = transport.call("run_tool", {"tool": "T", "arguments": {"a": [[] for _ in range(70000)]}})
        deep = transport.call("run_tool", {"tool": "T", "arguments": {"a": nested(100)}})
        big = transport.call("run_tool", {"tool": "T", "arguments": {"a": "x" * (5 << 20)}})
        cyclic = []
        cyclic.append(cyclic)
        cycle = transport.call("run_tool", {"tool": "T", "arguments": {"a": cyclic}})
        assert recorder.calls == []  # none was sent
        assert wide == {"result": None, "error": "run_tool: the call holds more than 65536 values (a tool call's limit)"}
        assert deep == {"result": None, "error": "run_tool: the call nests deeper than 64 levels (a tool call's limit)"}
        assert big["error"] == "run_tool: the call is 5.0 MiB, more than the 4 MiB a tool call may send"
        assert "64 levels" in cycle["error"]  # a cycle is infinitely deep
        # At the limits: sent. The frame's own level and the arguments' two leave 61.
        at_depth = {"tool": "T", "arguments": {"a": nested(61)}}
        assert measure(kernel_frame(at_depth))[0] == 64
        assert transport.call("run_tool", at_depth) == {"result": {}, "error": None}
        assert "64 levels" in transport.call("run_tool", {"tool": "T", "arguments": {"a": nested(62)}})["error"]
        # 5 for the envelope, 2 for args, 1 for arguments, and the list's members.
        at_values = {"tool": "T", "arguments": {"a": [0] * ((1 << 16) - 8)}}
        assert measure(kernel_frame(at_values))[1] == 1 << 16
        assert transport.call("run_tool", at_values)["error"] is None
        assert len(recorder.calls) == 2
    finally:
        transport.install(None)
