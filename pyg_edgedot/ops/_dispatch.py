"""How the public functions call their differentiable ops."""
import torch


def call(op, differentiable, *args):
    """``op(*args)`` where ``differentiable`` are the op's inputs that can need a gradient.

    An op whose autograd is registered from Python (``torch.library.register_autograd``)
    enters a Python function at the Autograd key on every call, which, when no gradient can
    flow, only re-dispatches below that key (on the CPU at E = 16, ``edge_dot``'s forward
    took 33-35 µs per call through it, 24 below it). Without a gradient to track, this enters
    below the Autograd key directly; inside a ``torch.compile`` graph the op is called as is
    (the tracer records it the same either way)."""
    if (torch.is_grad_enabled() and any(t.requires_grad for t in differentiable)) \
            or torch.compiler.is_compiling():
        return op(*args)
    with torch._C._AutoDispatchBelowAutograd():
        return op(*args)
