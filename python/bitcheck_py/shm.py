"""The CPU path of a call: bitcheck copies the call's tensors into one POSIX shared-memory buffer
(`call["shm"]`, each tensor at its "offset"); here they are numpy views of it, and results written
into the output views are copied back by bitcheck after the reply."""
import mmap

from .calls import NUMPY_DTYPES, np  # np is None without numpy (the GPU path needs torch only)

_buffer = {"name": None, "size": 0, "map": None}


def shared_buffer(name, size):
    if _buffer["name"] != name or _buffer["size"] != size:
        if _buffer["map"] is not None:
            _buffer["map"].close()
        with open("/dev/shm/" + name.lstrip("/"), "r+b") as file:
            _buffer["map"] = mmap.mmap(file.fileno(), size)
        _buffer["name"], _buffer["size"] = name, size
    return _buffer["map"]


def holds(name):
    """Whether this worker has the buffer `name` mapped (bitcheck then unlinks the name)."""
    return _buffer["name"] == name and _buffer["map"] is not None


def view(buffer, offset, dtype, shape):
    """A numpy view of `shape` elements of bitcheck dtype `dtype` at `offset` of `buffer`."""
    shape = tuple(shape)
    count = int(np.prod(shape)) if shape else 1
    return np.frombuffer(buffer, dtype=NUMPY_DTYPES[dtype], count=count,
                         offset=offset).reshape(shape)


def views(call):
    """[(tensor description, numpy view)] of a CPU call, in the op's declared order."""
    buffer = shared_buffer(call["shm"], call["shm_bytes"])
    return [(tensor, view(buffer, tensor["offset"], tensor["dtype"], tensor["shape"]))
            for tensor in call["tensors"]]
