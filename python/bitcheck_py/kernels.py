"""Kernel provenance in the worker: the CUDA kernels a call launched (name, grid, block, shared
memory per block), from torch.profiler's CUDA activity, sent back with the reply when bitcheck asks
("kernels": true in the call). The profiler's Chrome trace carries each kernel's launch
configuration in its arguments; kernels are listed in launch order (their correlation ids)."""
import contextlib
import json
import os
import tempfile


def launches_of_trace(trace):
    """The kernel events of a Chrome trace (torch.profiler's export) as bitcheck's launches, in
    launch order. Shared memory is the trace's "shared memory" (static and dynamic together)."""
    events = [e for e in trace.get("traceEvents", []) if str(e.get("cat", "")).lower() == "kernel"]
    events.sort(key=lambda e: (e.get("args", {}).get("correlation", 0), e.get("ts", 0)))
    launches = []
    for event in events:
        args = event.get("args", {})
        launches.append({"name": event["name"],
                         "grid": [int(v) for v in args.get("grid", [1, 1, 1])],
                         "block": [int(v) for v in args.get("block", [1, 1, 1])],
                         "shared_bytes": int(args.get("shared memory", 0))})
    return launches


def profiled_trace(profiler):
    """The profiler's Chrome trace as a dict (exported to a temporary file, the profiler's one
    complete export)."""
    handle, path = tempfile.mkstemp(prefix="bitcheck-kernels-", suffix=".json")
    os.close(handle)
    try:
        profiler.export_chrome_trace(path)
        with open(path, encoding="utf-8") as trace:
            return json.load(trace)
    finally:
        os.unlink(path)


@contextlib.contextmanager
def recorded(wanted, reply):
    """Runs the body under torch.profiler when `wanted`, then sets reply["kernels"] to the kernels
    it launched (the body synchronizes the device before it ends)."""
    if not wanted:
        yield
        return
    from torch.profiler import ProfilerActivity, profile  # a GPU call: torch is there
    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        yield
    reply["kernels"] = launches_of_trace(profiled_trace(profiler))
