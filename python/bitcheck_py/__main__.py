"""The worker bitcheck starts (`python3 -m bitcheck_py worker`): length-prefixed JSON requests on
stdin, one reply each on stdout. Anything the user's code prints goes to stderr, never into the
channel. Requests: describe (the function's declaration; the request names bitcheck's ops), call
(one invocation: shared memory on the CPU, CUDA IPC handles on the GPU; with "kernels" the reply
lists the kernels it launched), bench (time the function on device tensors), close (IPC handles
bitcheck is about to free)."""
import importlib
import json
import os
import platform
import struct
import sys
import traceback

from . import calls
from . import cuda_ipc
from . import declaration
from . import kernels
from . import shm


def read_message(stream):
    header = stream.read(4)
    if len(header) < 4:
        return None
    (length,) = struct.unpack("<I", header)
    return json.loads(stream.read(length).decode("utf-8"))


def write_message(stream, message):
    payload = json.dumps(message).encode("utf-8")
    stream.write(struct.pack("<I", len(payload)))
    stream.write(payload)
    stream.flush()


_functions = {}
_package_dir = os.path.dirname(os.path.abspath(__file__))


def user_traceback(error):
    """The traceback without this package's own frames: what the user's code did."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__)
              if not os.path.abspath(frame.filename).startswith(_package_dir + os.sep)]
    return ("Traceback (most recent call last):\n" + "".join(traceback.format_list(frames)) +
            "".join(traceback.format_exception_only(type(error), error)))


def interpreter_hint(error):
    """For an import that failed: which interpreter ran the worker and how to choose another. A
    version manager's shim or a system python3 first on PATH often lacks what the impl needs."""
    chosen = os.environ.get("BITCHECK_PYTHON")
    how = (f"chosen by BITCHECK_PYTHON={chosen}" if chosen
           else "the first python3 on PATH, as BITCHECK_PYTHON is unset")
    missing = error.name or "what the impl needs"
    return (f"\nbitcheck's Python worker ran {sys.executable} (Python {platform.python_version()}, "
            f"{how}), which cannot import {missing}: set BITCHECK_PYTHON to an interpreter that "
            f"can (e.g. BITCHECK_PYTHON=/path/to/venv/bin/python3)")


def error_text(error):
    """A failed request's text: the user's traceback, and for an import the interpreter."""
    text = user_traceback(error)
    return text + interpreter_hint(error) if isinstance(error, ImportError) else text


def resolve(module_function):
    if module_function not in _functions:
        module_name, _, function_name = module_function.partition(":")
        module = importlib.import_module(module_name)
        function = getattr(module, function_name, None)
        if function is None or not callable(function):
            raise ValueError(f"module {module_name} ({module.__file__}) has no function {function_name}")
        _functions[module_function] = function
    return _functions[module_function]


def handle(request):
    if request["type"] == "close":
        cuda_ipc.close(request["device"])
        return {"ok": True}
    function = resolve(request["function"])
    if request["type"] == "describe":
        return dict(declaration(function, request.get("ops", ())), ok=True)
    if request["type"] == "call":
        reply = {"ok": True}
        if "device" in request:
            with kernels.recorded(request.get("kernels", False), reply):
                cuda_ipc.run_call(function, request)
        else:
            calls.run(function, request, shm.views(request), calls.NumpyArrays())
        return reply
    if request["type"] == "bench":
        return cuda_ipc.bench(function, request)
    raise ValueError(f"unknown request type {request['type']!r}")


def poisons_the_context(error):
    """A CUDA error that leaves this process's context unusable (an illegal address, a trap): the
    worker exits after its reply and bitcheck starts a fresh one for the next request."""
    text = str(error)
    return "CUDA error" in text and ("illegal" in text or "unspecified launch failure" in text
                                     or "device-side assert" in text or "misaligned" in text)


def main():
    if sys.argv[1:] != ["worker"]:
        sys.stderr.write("usage: python3 -m bitcheck_py worker (started by bitcheck --py-impl)\n")
        return 2
    channel_in = sys.stdin.buffer
    channel_out = sys.stdout.buffer
    sys.stdout = sys.stderr  # print() in user code must not corrupt the channel
    while True:
        request = read_message(channel_in)
        if request is None:
            return 0
        poisoned = False
        try:
            reply = handle(request)
        except calls.ResultError as error:
            reply = {"ok": False, "error": str(error)}
        except cuda_ipc.CaptureError as error:  # the graph layout is skipped with this text
            reply = {"ok": False, "error": str(error), "capture_failed": True}
        except Exception as error:  # the case becomes `error` with this traceback
            reply = {"ok": False, "error": error_text(error)}
            poisoned = poisons_the_context(error)
        if "shm" in request and shm.holds(request["shm"]):
            reply["shm_mapped"] = True  # bitcheck may unlink its name: this mapping stays
        write_message(channel_out, reply)
        if poisoned:
            return 3


if __name__ == "__main__":
    sys.exit(main())
