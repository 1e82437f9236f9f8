"""PyG-style modules around :func:`pyg_edgedot.edge_dot`: ``EdgeDotScore`` and
``InnerProductDecoder``."""
from typing import Any, Dict, Mapping, Optional, Tuple, Union

import torch
from torch import Tensor
from torch.nn import Parameter

from . import _checks
from .ops.edge_dot import edge_dot

PairTensor = Tuple[Tensor, Tensor]
EdgeType = Tuple[str, str, str]


class EdgeDotScore(torch.nn.Module):
    r"""Scores edges by the inner product of their endpoint embeddings.

    .. math::
        \mathrm{score}_e = \sigma\Big(\sum_k \mathbf{x}^{src}_{s_e,k}\,
        \mathbf{x}^{dst}_{d_e,k}\Big)

    with :math:`\sigma` the sigmoid if ``sigmoid=True`` and the identity otherwise. A
    drop-in for ``(z[src] * z[dst]).sum(-1)``: same scores and gradients, computed by one
    fused kernel in O(E) memory. Its third positional argument is ``edge_type``; for PyG's
    decoder contract (``GAE(encoder, decoder)``, ``decoder(z, edge_index, sigmoid)``) use
    :class:`InnerProductDecoder`.

    With ``num_relations=R`` and ``channels=D`` the module holds learnable relation vectors
    ``rel`` of shape ``[R, D]`` and scores DistMult-style,
    :math:`\sum_k x^{src}_{s_e,k}\, r_{t_e,k}\, x^{dst}_{d_e,k}` with :math:`t_e` the
    edge's type, fused in one kernel with gradients for the features and for ``rel``.

    Heterogeneous graphs: pass ``x_dict`` and ``edge_label_index_dict`` (as produced by
    ``to_hetero`` models and ``HeteroData``) to get a dict of scores keyed by edge type
    ``(src_type, relation, dst_type)``; each entry scores ``x_dict[src_type]`` against
    ``x_dict[dst_type]``.

    Args:
        sigmoid (bool): return probabilities instead of logits. Keep the default
            (logits) for training with ``BCEWithLogitsLoss``. ``forward(..., sigmoid=)``
            overrides it for one call.
        num_relations (int, optional): number of relation vectors; needs ``channels``.
        channels (int, optional): their dimension ``D`` (the embedding size).

    Shapes:
        - **x**: node features :math:`(N, D)`, or a pair :math:`((N_{src}, D),
          (N_{dst}, D))` for bipartite and heterogeneous graphs, e.g.
          ``(x_dict['user'], x_dict['movie'])``, or a dict ``{node_type: (N_t, D)}``.
        - **edge_label_index**: :math:`(2, E)` int64 or int32; row 0 indexes the source
          nodes, row 1 the destination nodes. A dict ``{edge_type: (2, E_t)}`` with a dict
          ``x``.
        - **edge_type** (with relations only): :math:`(E,)` int64 or int32, or one ``int``
          for every edge; optional when ``num_relations == 1``. With dict inputs, a dict
          ``{edge_type: (E_t,) tensor or int}``.
        - **output**: :math:`(E,)` in the dtype of ``x``, or a dict of them.
    """

    def __init__(self, sigmoid: bool = False, num_relations: Optional[int] = None,
                 channels: Optional[int] = None) -> None:
        super().__init__()
        self.sigmoid = sigmoid
        size = _checks.relation_size("EdgeDotScore", num_relations, channels)
        if size is not None:
            self.num_relations, self.channels = size
            self.rel = Parameter(torch.empty(self.num_relations, self.channels))
        else:
            self.num_relations = self.channels = None
            self.register_parameter("rel", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform relation vectors, as PyG's ``DistMult`` initializes its own."""
        if self.rel is not None:
            torch.nn.init.xavier_uniform_(self.rel)

    def _score(self, x_src: Tensor, x_dst: Tensor, edge_label_index: Tensor,
               edge_type: Any) -> Tensor:
        if self.rel is None:
            _checks.check_no_edge_type("EdgeDotScore", edge_type)
            return edge_dot(x_src, x_dst, edge_label_index)
        rel = self.rel if self.rel.dtype == x_src.dtype else self.rel.to(x_src.dtype)
        if edge_type is not None and not isinstance(edge_type, Tensor):
            edge_type = _checks.relation_id("EdgeDotScore", edge_type, self.num_relations)
            return edge_dot(x_src, x_dst, edge_label_index, rel[edge_type])
        return edge_dot(x_src, x_dst, edge_label_index, rel, edge_type)

    def forward(self, x: Union[Tensor, PairTensor, Mapping[str, Tensor]],
                edge_label_index: Union[Tensor, Mapping[EdgeType, Tensor]],
                edge_type: Any = None, *,
                sigmoid: Optional[bool] = None) -> Union[Tensor, Dict[EdgeType, Tensor]]:
        """Scores (or, with ``sigmoid``, probabilities); ``sigmoid=None`` keeps the
        module's setting, ``True`` / ``False`` overrides it for this call."""
        _checks.check_edge_type_not_sigmoid("EdgeDotScore", edge_type)
        sigmoid = self.sigmoid if sigmoid is None else sigmoid
        if isinstance(x, Mapping):
            return self._forward_dict(x, edge_label_index, edge_type, sigmoid)
        x_src, x_dst = _checks.feature_pair(
            "EdgeDotScore", x, "a Tensor, a pair (x_src, x_dst) or a dict of node features")
        _checks.check_not_mapping("EdgeDotScore", edge_label_index)
        out = self._score(x_src, x_dst, edge_label_index, edge_type)
        return out.sigmoid() if sigmoid else out

    def _forward_dict(self, x_dict: Mapping[str, Tensor], edge_label_index_dict: Any,
                      edge_type_dict: Any, sigmoid: bool) -> Dict[EdgeType, Tensor]:
        _checks.check_hetero_inputs("EdgeDotScore", x_dict, edge_label_index_dict,
                                    edge_type_dict)
        out = {}
        for key, index in edge_label_index_dict.items():
            src_type, _, dst_type = key
            types = None if edge_type_dict is None else edge_type_dict.get(key)
            score = self._score(x_dict[src_type], x_dict[dst_type], index, types)
            out[key] = score.sigmoid() if sigmoid else score
        return out

    def __repr__(self) -> str:
        extra = (f", num_relations={self.num_relations}, channels={self.channels}"
                 if self.rel is not None else "")
        return f"{self.__class__.__name__}(sigmoid={self.sigmoid}{extra})"


class InnerProductDecoder(torch.nn.Module):
    r"""PyG's :class:`torch_geometric.nn.models.InnerProductDecoder`, with the edge scores
    computed by the fused :func:`pyg_edgedot.edge_dot`: the decoder ``GAE``, ``VGAE``,
    ``ARGA`` and ``ARGVA`` take as ``decoder=``, with the same methods, defaults and values.

    .. math::
        \sigma\left(\mathbf{Z}\mathbf{Z}^{\top}\right)

    :meth:`forward` scores the edges of ``edge_index``, ``(z[src] * z[dst]).sum(-1)`` in one
    fused kernel and O(E) memory; :meth:`forward_all` is the dense ``[N, N]`` matrix
    ``z @ z.t()``, a matmul, as in PyG (nothing to fuse there).
    """

    def forward(self, z: Tensor, edge_index: Tensor, sigmoid: bool = True) -> Tensor:
        r"""Scores of the edges in ``edge_index``.

        Args:
            z (Tensor): node embeddings :math:`(N, D)`.
            edge_index (Tensor): :math:`(2, E)` int64 or int32, or PyG's ``EdgeIndex``.
            sigmoid (bool): apply the logistic sigmoid (default ``True``, as in PyG).

        Returns:
            Tensor: :math:`(E,)` in the dtype of ``z``.
        """
        _checks.check_feature_tensor("InnerProductDecoder", "z", z)
        value = edge_dot(z, z, edge_index)
        return torch.sigmoid(value) if sigmoid else value

    def forward_all(self, z: Tensor, sigmoid: bool = True) -> Tensor:
        r"""The dense :math:`(N, N)` score matrix ``z @ z.t()`` (memory O(N^2)).

        Args:
            z (Tensor): node embeddings :math:`(N, D)`.
            sigmoid (bool): apply the logistic sigmoid (default ``True``, as in PyG).
        """
        adj = torch.matmul(z, z.t())
        return torch.sigmoid(adj) if sigmoid else adj
