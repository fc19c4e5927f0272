"""Software prefetch for the numba kernels whose time goes to random rows of large matrices.

A GloVe update reads and writes four random rows (``W[i]``, ``W~[j]`` and their AdaGrad
accumulators, 400 bytes each at 100 dimensions); on a 55k-word vocabulary they miss the caches
and the update waits for memory.  The out-of-order core cannot look ahead to the next update's
rows (one update is about a thousand instructions), but the kernel knows them: ``prefetch_row``
asks for them a few updates ahead so that the loads overlap the arithmetic.

``prefetch(address)`` lowers to LLVM's ``llvm.prefetch`` (with write intent, all cache levels),
which a target without a prefetch instruction drops.  Addresses come from ``array.ctypes.data``
inside the kernel; a prefetch never faults, even on a bad address.
"""

from __future__ import annotations

import numba
from llvmlite import binding as llvm
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

# LLVM mangles the intrinsic by the pointer type: typed pointers (LLVM < 15) "p0i8", opaque "p0".
_NAME = "llvm.prefetch.p0" if llvm.llvm_version_info[0] >= 15 else "llvm.prefetch.p0i8"
CACHE_LINE = 64


@intrinsic
def prefetch(typingctx, address):
    """Prefetch the cache line holding byte ``address`` (an integer) for writing."""
    if not isinstance(address, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), _NAME)
        pointer = builder.inttoptr(context.cast(builder, args[0], signature.args[0], types.intp), i8p)
        builder.call(fn, [pointer, i32(1), i32(3), i32(1)])  # write, keep in all levels, data cache
        return context.get_dummy_value()

    return types.void(address), codegen


@numba.njit(inline="always")
def prefetch_row(base, row, row_bytes):
    """Prefetch every cache line of row ``row`` of a C-contiguous matrix at address ``base``."""
    start = base + row * row_bytes
    first = start - start % CACHE_LINE  # rows need not start on a line
    for line in range(first, start + row_bytes, CACHE_LINE):
        prefetch(line)
