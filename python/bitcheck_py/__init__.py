"""bitcheck_py: run Python functions as bitcheck impls (`bitcheck sweep --py-impl module:function`).

Declare what a function implements with the `impl` decorator; bitcheck runs it through the same
layouts, bitwise checks and reports as its own impls:

    import bitcheck_py

    @bitcheck_py.impl(op="matmul", invariant=True, dtypes=("fp32",))
    def matmul(x, w):
        return x @ w.T
"""

OPS = ("matmul", "rmsnorm", "embedding", "lm_head", "logprob", "lm_head_logprob", "add_rmsnorm",
       "rope", "attention", "silu", "gelu_tanh", "gelu_erf", "swiglu", "residual_add", "scale",
       "cast")


def impl(op, invariant=False, dtypes=("fp32",), passes=("forward",), description=""):
    """Marks a function as an impl of bitcheck op `op`.

    invariant: True when the function claims batch invariance (a drift is a failure); False for an
    observation or control (a library default whose drift the report records).
    """
    def mark(function):
        function.__bitcheck__ = {
            "op": op,
            "invariant": bool(invariant),
            "dtypes": list(dtypes),
            "passes": list(passes),
            "description": description or (function.__doc__ or "").strip().split("\n")[0],
        }
        return function
    return mark


def declaration(function):
    """What bitcheck registers for `function`: its decorator's fields, or for an undecorated
    function named after an op, an fp32 forward observation of that op."""
    declared = getattr(function, "__bitcheck__", None)
    if declared is not None:
        return dict(declared)
    if function.__name__ in OPS:
        return {"op": function.__name__, "invariant": False, "dtypes": ["fp32"],
                "passes": ["forward"], "description": "undeclared Python function (observation)"}
    raise ValueError(
        f"{function.__module__}.{function.__name__} has no @bitcheck_py.impl(op=...) declaration "
        f"and its name is not an op ({', '.join(OPS)})")
