"""pyg_edgedot: fused edge dot-product scoring for PyTorch Geometric link prediction."""
from . import _ops

_ops.load()

from .functional import edge_dot  # noqa: E402
from .nn import EdgeDotScore  # noqa: E402

backends = _ops.backends

__version__ = "0.1.0"
__all__ = ["edge_dot", "EdgeDotScore", "backends", "__version__"]
