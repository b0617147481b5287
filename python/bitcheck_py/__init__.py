"""bitcheck_py: run Python functions as bitcheck impls (`bitcheck sweep --py-impl module:function`).

Declare what a function implements with the `impl` decorator; bitcheck runs it through the same
layouts, bitwise checks and reports as its own impls:

    import bitcheck_py

    @bitcheck_py.impl(op="matmul", invariant=True, dtypes=("fp32",))
    def matmul(x, w):
        return x @ w.T

backend="cpu" (the default): the function gets numpy arrays (bf16 as float32). backend="cuda":
torch tensors on the GPU, over bitcheck's own device buffers (CUDA IPC + DLPack, no copies).
"""

BACKENDS = ("cpu", "cuda")


def impl(op, invariant=False, dtypes=("fp32",), passes=("forward",), description="",
         backend="cpu", library_default=False):
    """Marks a function as an impl of bitcheck op `op`.

    invariant: True when the function claims batch invariance (a drift is a failure); False for a
    control, which must drift (the harness reports a control that passes as lost sight).
    library_default: True for a library's own call (F.linear, SDPA): an observation, neither a
    claim nor a control; the report says whether it drifted on this GPU.
    backend: "cpu" (numpy arrays) or "cuda" (torch tensors on the GPU).
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if invariant and library_default:
        raise ValueError("an impl is either invariant or a library default, not both")

    def mark(function):
        function.__bitcheck__ = {
            "op": op,
            "invariant": bool(invariant),
            "library_default": bool(library_default),
            "backend": backend,
            "dtypes": list(dtypes),
            "passes": list(passes),
            "description": description or (function.__doc__ or "").strip().split("\n")[0],
        }
        return function
    return mark


def declaration(function, ops=()):
    """What bitcheck registers for `function`: its decorator's fields, or for an undecorated
    function named after one of `ops` (the ops of the bitcheck that asks, which sends them), an
    fp32 forward observation of that op on the CPU."""
    declared = getattr(function, "__bitcheck__", None)
    if declared is not None:
        return dict(declared)
    if function.__name__ in ops:
        return {"op": function.__name__, "invariant": False, "library_default": True,
                "backend": "cpu", "dtypes": ["fp32"], "passes": ["forward"],
                "description": "undeclared Python function (observation)"}
    raise ValueError(
        f"{function.__module__}.{function.__name__} has no @bitcheck_py.impl(op=...) declaration "
        f"and its name is not an op ({', '.join(ops)})")
