"""pyg_edgedot: fused edge dot-product scoring for PyTorch Geometric link prediction."""
from . import _backend

_backend.load()

from .loss import EdgeDotLoss  # noqa: E402
from .metrics import hits_at_k, hits_at_k_shared, mrr  # noqa: E402
from .nn import EdgeDotScore, InnerProductDecoder  # noqa: E402
from .ops.candidates import rank_candidates, score_candidates  # noqa: E402
from .ops.edge_dot import edge_dot  # noqa: E402
from .ops.edge_dot_loss import edge_dot_loss  # noqa: E402
from .ops.negative_sampling import (NegativeSampler, batched_negative_sampling,  # noqa: E402
                                    negative_sampling, structured_negative_sampling,
                                    structured_negative_sampling_feasible)
from .ops.topk import topk_dst  # noqa: E402

backends = _backend.backends

__version__ = "0.1.0"
__all__ = ["edge_dot", "EdgeDotScore", "InnerProductDecoder", "score_candidates",
           "rank_candidates", "mrr", "hits_at_k", "hits_at_k_shared", "backends", "__version__",
           "NegativeSampler", "negative_sampling", "batched_negative_sampling",
           "structured_negative_sampling", "structured_negative_sampling_feasible",
           "edge_dot_loss", "EdgeDotLoss", "topk_dst"]
