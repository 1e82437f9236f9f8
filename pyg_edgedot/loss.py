"""``EdgeDotLoss``: a PyG-style module around :func:`pyg_edgedot.edge_dot_loss`."""
from typing import Optional, Tuple, Union

import torch
from torch import Tensor

from . import _checks
from .ops.edge_dot_loss import NumNodes, edge_dot_loss
from .ops.negative_sampling import NegativeSampler


class EdgeDotLoss(torch.nn.Module):
    r"""The link-prediction loss of inner-product scores over positive edges and sampled
    negatives, fused: :func:`pyg_edgedot.edge_dot_loss` as a module, the training-side
    companion of :class:`~pyg_edgedot.EdgeDotScore`.

    .. code-block:: python

        criterion = EdgeDotLoss(num_negatives=4, sampler=NegativeSampler(train_edge_index, N))
        loss = criterion(z, edge_label_index)   # BCE over E positives and 4 E negatives
        loss.backward()

    Args:
        num_negatives (int): ``K``, negatives per positive.
        negatives (str): ``"structured"`` (keep the positive's source) or ``"uniform"``.
        loss (str): ``"bce"`` or ``"bpr"``.
        reduction (str): ``"mean"`` or ``"sum"``.
        sampler (NegativeSampler, optional): the graph whose edges are never drawn as
            negatives; not a buffer (``.to()`` does not move it: build it on the features'
            device).
        num_nodes (int or Tuple[int, int], optional): without a sampler, draw from the first
            ``N_src`` / ``N_dst`` rows only.

    Shapes:
        - **x**: :math:`(N, D)`, or a pair :math:`((N_{src}, D), (N_{dst}, D))`.
        - **edge_label_index**: :math:`(2, E)` positive edges, int64 or int32.
        - **seed** (optional): an ``int`` or a 0-dim int64 tensor; default drawn from torch's
          CPU generator (see :func:`~pyg_edgedot.edge_dot_loss`).
        - **output**: :math:`()`, the loss, in the dtype of ``x``.
    """

    def __init__(self, num_negatives: int = 1, negatives: str = "structured",
                 loss: str = "bce", reduction: str = "mean",
                 sampler: Optional[NegativeSampler] = None,
                 num_nodes: Optional[NumNodes] = None) -> None:
        super().__init__()
        _checks.check_loss_options("EdgeDotLoss", num_negatives, negatives=negatives,
                                   loss=loss, reduction=reduction)
        self.num_negatives, self.negatives = num_negatives, negatives
        self.loss, self.reduction = loss, reduction
        _checks.check_sampler("EdgeDotLoss", sampler)
        self.sampler, self.num_nodes = sampler, num_nodes
        if sampler is not None:
            # built once here, not inside a compiled forward
            if negatives == "structured":
                sampler._source_rows()
            sampler._directed.adj_index()

    def forward(self, x: Union[Tensor, Tuple[Tensor, Tensor]], edge_label_index: Tensor,
                seed: Optional[Union[int, Tensor]] = None) -> Tensor:
        x_src, x_dst = _checks.feature_pair("EdgeDotLoss", x,
                                            "a Tensor or a pair (x_src, x_dst)")
        return edge_dot_loss(x_src, x_dst, edge_label_index, num_negatives=self.num_negatives,
                             negatives=self.negatives, loss=self.loss,
                             reduction=self.reduction, sampler=self.sampler,
                             num_nodes=self.num_nodes, seed=seed)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(num_negatives={self.num_negatives}, "
                f"negatives={self.negatives!r}, loss={self.loss!r}, "
                f"reduction={self.reduction!r}, sampler={self.sampler!r})")
