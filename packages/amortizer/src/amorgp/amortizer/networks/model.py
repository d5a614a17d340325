"""The amortization network g(D, S) -> (theta_S, sigma^2) of Bitzer et al. (2023).

Shapes (padded batch contract, ``docs/architecture.md`` §3.2): ``B`` datasets, ``N`` points,
``D`` input dimensions, ``L`` addends per dimension, ``P`` parameter slots,
``H`` dataset-encoder width, ``K`` kernel-token width.

Dataset encoder (the paper's nine steps)::

    X (B,N,D), y (B,N) -> per-dimension sequences (x_j^(i), y_j)   (B,D,N,2)
      -> element-wise linear                                        (B,D,N,H)
      -> shared Transformer over points within each dimension       (B,D,N,H)
      -> masked mean over dimensions                                (B,N,H)
      -> Transformer over points                                    (B,N,H)
      -> concatenate back to every dimension, linear 2H -> H        (B,D,N,H)
      -> shared Transformer over points within each dimension       (B,D,N,H)
      -> masked mean over points                                    (B,D,H)
      -> Transformer over dimensions                                h (B,D,H)

Kernel encoder-decoder::

    symbols (B,D,L) -> embedding (one-hot times a matrix)           (B,D,L,K)
      -> Kernel-Encoder-Blocks with context h_i                     (B,D,L,K)
      -> masked mean over symbols, Transformer over dimensions      v (B,D,K)
      -> Kernel-Encoder-Blocks with context [h_i, v_i]              (B,D,L,K)

Heads: one MLP per base symbol (all tokens at once) -> raw ``(B,D,L,P)`` ->
``positive(raw, kind)`` of kernel-grammar per slot; the noise head reads the
masked means of ``v`` and ``h`` -> ``sigma^2 (B,)``.

Output parameterisation: each head's last bias starts at
``positive_inverse(prior mean)`` of its slot, so an untrained network predicts
the prior means, and the head output is a correction in softplus space, which
is log space for values well below 1 (lengthscales, noise), so relative errors
are learned at the same rate on every scale.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from amorgp.amortizer.networks.config import NetworkConfig
from amorgp.amortizer.networks.layers import (
    KernelEncoderBlock,
    TransformerStack,
    dense_mask,
    masked_mean,
    zero_padded,
)
from amorgp.amortizer.networks.network import AmortizationNetwork, DatasetEncoding, Prediction
from amorgp.amortizer.networks.period_tokens import (
    GATE_SCALE,
    N_FEATURES,
    learned_gate,
    period_features,
    strongest_periods,
)
from amorgp.amortizer.networks.registry import build_model
from amorgp.amortizer.networks.relevance_tokens import N_FEATURES as RELEVANCE_FEATURES
from amorgp.amortizer.networks.relevance_tokens import long_positive, neighbour_relevance
from amorgp.kernel_grammar import (
    FLOORS,
    NOISE,
    ParamKind,
    Vocabulary,
    positive,
    positive_inverse,
)
from amorgp.lazy_kernels import PARAM_KINDS, PaddedBatch, slot_table

__all__ = [
    "AmortizedGP",
    "DatasetEncoder",
    "KernelEncoderDecoder",
    "NoiseHead",
    "Prediction",
    "SymbolHeads",
    "build_model",
    "count_parameters",
]


class DatasetEncoder(nn.Module):
    """The paper's nine-step dataset encoder: ``(X, y) -> h (B, D, H)``.

    See the module docstring for the steps and shapes.
    """

    def __init__(
        self, width: int, n_heads: int, ff_mult: int, blocks: tuple[int, int, int, int]
    ) -> None:
        super().__init__()
        self.embed = nn.Linear(2, width)
        self.within_dims = TransformerStack(blocks[0], width, n_heads, ff_mult)
        self.across_points = TransformerStack(blocks[1], width, n_heads, ff_mult)
        self.merge = nn.Linear(2 * width, width)
        self.within_dims_2 = TransformerStack(blocks[2], width, n_heads, ff_mult)
        self.across_dims = TransformerStack(blocks[3], width, n_heads, ff_mult)

    def forward(self, X: Tensor, y: Tensor, point_mask: Tensor, dim_mask: Tensor) -> Tensor:
        """``X (B,N,D)``, ``y (B,N)``, masks -> dimension embeddings ``h (B,D,H)`` (0 on padded dims).

        On the CPU the present (dataset, dimension) pairs are packed into one batch of
        point sequences before the point-wise stages, so padded dimensions cost nothing
        (the paper prior's ``d ~ Geometric(0.25)`` clipped to 8 pads about 60 % of a
        batch's dimensions).  On other devices the padded layout is used (no host
        synchronisation).  Both give the same result: the encoder is padding invariant.
        A CPU batch without any padding (one dataset at inference) runs without masks.
        """
        if X.device.type == "cpu":
            if dense_mask(point_mask) is None and dense_mask(dim_mask) is None:
                return self._forward_dense(X, y)
            return self._forward_packed(X, y, point_mask, dim_mask)
        return self._forward_padded(X, y, point_mask, dim_mask)

    def _forward_padded(self, X: Tensor, y: Tensor, point_mask: Tensor, dim_mask: Tensor) -> Tensor:
        B, N, D = X.shape
        present = point_mask[:, :, None] & dim_mask[:, None, :]
        x = torch.where(present, X, torch.zeros((), dtype=X.dtype, device=X.device))
        yy = torch.where(point_mask, y, torch.zeros((), dtype=y.dtype, device=y.device))
        pairs = torch.stack(
            [x.transpose(1, 2), yy[:, None, :].expand(B, D, N)], dim=-1
        )  # (B,D,N,2)
        pts = point_mask[:, None, :].expand(B, D, N)
        e = self.within_dims(self.embed(pairs), pts)  # (B,D,N,H)
        dims = dim_mask[:, :, None].expand(B, D, N)
        g = self.across_points(masked_mean(e, dims, dim=1), point_mask)  # (B,N,H)
        c = torch.cat([e, g[:, None].expand_as(e)], dim=-1)
        c = self.within_dims_2(self.merge(c), pts)  # (B,D,N,H)
        hd = masked_mean(c, pts, dim=2)  # (B,D,H)
        return self.across_dims(hd, dim_mask)

    def _forward_dense(self, X: Tensor, y: Tensor) -> Tensor:
        """The encoder of batches without padding (the masked paths' result, fewer ops)."""
        B, N, D = X.shape
        pairs = torch.stack([X.transpose(1, 2), y[:, None, :].expand(B, D, N)], dim=-1)
        e = self.within_dims(self.embed(pairs), None)  # (B,D,N,H)
        g = self.across_points(e.mean(1), None)  # (B,N,H)
        c = self.within_dims_2(self.merge(torch.cat([e, g[:, None].expand_as(e)], dim=-1)), None)
        return self.across_dims(c.mean(2), None)  # (B,D,H)

    def _forward_packed(self, X: Tensor, y: Tensor, point_mask: Tensor, dim_mask: Tensor) -> Tensor:
        B, N, D = X.shape
        bi, di = dim_mask.nonzero(as_tuple=True)  # the M present (dataset, dimension) pairs
        pts = point_mask[bi]  # (M,N)
        zero = torch.zeros((), dtype=X.dtype, device=X.device)
        xs = torch.where(pts, X[bi, :, di], zero)
        ys = torch.where(pts, y[bi], zero)
        e = self.within_dims(self.embed(torch.stack([xs, ys], dim=-1)), pts)  # (M,N,H)
        count = dim_mask.sum(1).clamp_min(1).to(e.dtype)  # (B,)
        mean_e = e.new_zeros(B, N, e.shape[-1]).index_add(0, bi, e) / count[:, None, None]
        g = self.across_points(mean_e, point_mask)  # (B,N,H)
        c = self.within_dims_2(self.merge(torch.cat([e, g[bi]], dim=-1)), pts)  # (M,N,H)
        hd = e.new_zeros(B, D, e.shape[-1]).index_put((bi, di), masked_mean(c, pts, dim=1))
        return self.across_dims(hd, dim_mask)


class KernelEncoderDecoder(nn.Module):
    """Kernel encoder-decoder: symbol tokens with dataset context -> output tokens.

    Returns the output tokens ``(B, D, L, K)`` and the dimension kernel embeddings
    ``v (B, D, K)``.
    """

    def __init__(
        self,
        n_symbols: int,
        width: int,
        data_width: int,
        n_heads: int,
        ff_mult: int,
        blocks: tuple[int, int, int],
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(n_symbols + 1, width, padding_idx=0)
        self.encoder = nn.ModuleList(
            KernelEncoderBlock(width, data_width, n_heads, ff_mult) for _ in range(blocks[0])
        )
        self.across_dims = TransformerStack(blocks[1], width, n_heads, ff_mult)
        self.decoder = nn.ModuleList(
            KernelEncoderBlock(width, data_width + width, n_heads, ff_mult)
            for _ in range(blocks[2])
        )

    def forward(
        self,
        symbols: Tensor,
        symbol_mask: Tensor,
        h: Tensor,
        dim_mask: Tensor,
        token_bias: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """``token_bias (B, D, K)``, if given, is added to the embedding of every symbol of
        its dimension (the period tokens)."""
        symbol_mask_or_none, dim_mask_or_none = dense_mask(symbol_mask), dense_mask(dim_mask)
        t = self.embed(symbols)
        if token_bias is not None:
            t = t + token_bias[:, :, None, :]
        t = zero_padded(t, symbol_mask_or_none)
        for block in self.encoder:
            t = block(t, h, symbol_mask_or_none)
        v = self.across_dims(
            masked_mean(t, symbol_mask_or_none, dim=2), dim_mask_or_none
        )  # (B,D,K)
        ctx = torch.cat([h, v], dim=-1)
        for block in self.decoder:
            t = block(t, ctx, symbol_mask_or_none)
        return t, v


class SymbolHeads(nn.Module):
    """One two-layer MLP per base symbol, evaluated for all tokens at once.

    For a token ``t (K,)`` with symbol id ``s``:
    ``raw = W2[s]^T gelu(W1[s]^T t + b1[s]) + b2[s]`` and
    ``theta_j = positive(raw_j, kind(s, j))`` (the vocabulary's slot table,
    :meth:`amorgp.lazy_kernels.SlotTable.constrain`; 1.0 in unused slots).  The first layer of every symbol is one
    matmul ``(T, K) @ (K, V * Hh)`` followed by a gather of the token's symbol block; the
    second gathers its ``(Hh, P)`` weights per token (no loop over symbols).

    With ``anchored=True`` (period tokens) a period slot is the geometric blend
    ``anchor^g own^(1 - g)`` of the anchor and the head's own period, by the gate ``g`` of
    the anchor's dimension
    (:mod:`amorgp.amortizer.networks.period_tokens`).  With ``long=True`` (relevance tokens) a lengthscale
    slot is :func:`~amorgp.amortizer.networks.relevance_tokens.long_positive` of its raw
    value (the usual transform up to its knee, exponential beyond).
    """

    def __init__(
        self,
        vocab: Vocabulary,
        width: int,
        hidden: int,
        anchored: bool = False,
        long: bool = False,
    ) -> None:
        super().__init__()
        V, P = len(vocab), vocab.max_params
        self.vocabulary = vocab
        self.anchored = anchored
        self.long = long
        self.n_symbols, self.hidden, self.n_slots = V, hidden, P
        self.w1 = nn.Parameter(torch.randn(width, V * hidden) / width**0.5)
        self.b1 = nn.Parameter(torch.zeros(V, hidden))
        self.w2 = nn.Parameter(torch.randn(V, hidden, P) * (0.01 / hidden**0.5))
        bias = slot_table(vocab).raw_prior_mean().to(torch.float32)
        self.b2 = nn.Parameter(bias[1:].clone())

    def forward(
        self,
        tokens: Tensor,
        symbols: Tensor,
        symbol_mask: Tensor,
        anchor: Tensor | None = None,
        gate: Tensor | None = None,
    ) -> Tensor:
        """``tokens (B,D,L,K)``, ``symbols (B,D,L)`` -> positive parameters ``(B,D,L,P)``;
        ``anchor (B, D)`` the period anchors (NaN: none) and ``gate (B, D)`` their gates,
        for an anchored head."""
        lead = symbols.shape
        t = tokens.reshape(-1, tokens.shape[-1])
        ids = symbols.reshape(-1).long()
        idx = (ids - 1).clamp_min(0)  # padding tokens use symbol 0's head; overwritten below
        a = (t @ self.w1).reshape(-1, self.n_symbols, self.hidden)
        a = torch.gather(a, 1, idx[:, None, None].expand(-1, 1, self.hidden)).squeeze(1)
        a = nn.functional.gelu(a + self.b1[idx])
        raw = torch.einsum("th,thp->tp", a, self.w2[idx]) + self.b2[idx]
        table = slot_table(self.vocabulary, raw.device)
        raw = raw.reshape(*lead, self.n_slots)
        params = table.constrain(raw, symbols, symbol_mask)
        ids = torch.where(symbol_mask, symbols, 0).long()
        if self.long:
            kind = PARAM_KINDS.index(ParamKind.LENGTHSCALE)
            is_ls = (table.kind[ids] == kind) & table.used[ids] & symbol_mask[..., None]
            floor = FLOORS[ParamKind.LENGTHSCALE]
            params = torch.where(is_ls, long_positive(raw, floor).to(params.dtype), params)
        if not self.anchored or anchor is None or gate is None:
            return params
        is_period = (table.kind[ids] == PARAM_KINDS.index(ParamKind.PERIOD)) & table.used[ids]
        a = anchor.to(params.dtype)[:, :, None, None]
        g = torch.where(torch.isfinite(a), gate.to(params.dtype)[:, :, None, None], 0.0)
        log_anchor = torch.where(torch.isfinite(a), a, 1.0).log()  # (B, D, 1, 1)
        own = params.clamp_min(FLOORS[ParamKind.PERIOD]).log()
        blended = torch.exp(g * log_anchor + (1.0 - g) * own)
        return torch.where(is_period & symbol_mask[..., None], blended, params)


def _zero_linear(n_in: int, n_out: int) -> nn.Linear:
    """A linear layer that starts at zero (a new input that changes nothing yet)."""
    layer = nn.Linear(n_in, n_out)
    nn.init.zeros_(layer.weight)
    nn.init.zeros_(layer.bias)
    return layer


class NoiseHead(nn.Module):
    """MLP ``[global kernel emb, global dataset emb] -> sigma^2 = positive(raw, noise)``."""

    def __init__(self, in_width: int, hidden: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(in_width, hidden), nn.GELU(), nn.Linear(hidden, 1))
        last = self.mlp[-1]
        assert isinstance(last, nn.Linear)
        with torch.no_grad():
            last.weight.mul_(0.01)
            last.bias.fill_(float(positive_inverse(NOISE.prior.mean, NOISE.kind)))

    def forward(self, features: Tensor) -> Tensor:
        """``features (B, C)`` -> ``(B,)`` noise variances."""
        return positive(self.mlp(features).squeeze(-1), NOISE.kind)


class AmortizedGP(AmortizationNetwork):
    """The structured-kernel amortization network (Bitzer et al. 2023, §3.1).

    Args:
        config: architecture (``config.model == "structured"``).

    Call with a padded batch (:meth:`AmortizationNetwork.forward`); returns a
    :class:`Prediction`.  :meth:`encode_dataset` runs the dataset encoder,
    :meth:`decode` the kernel encoder-decoder and the heads.
    """

    def __init__(self, config: NetworkConfig) -> None:
        super().__init__()
        self.check_config(config)
        self.config = config
        self.vocabulary = config.vocabulary
        c = config
        self.dataset_encoder = DatasetEncoder(c.d_data, c.n_heads, c.ff_mult, c.data_blocks)
        self.kernel_encoder = KernelEncoderDecoder(
            len(c.vocabulary), c.d_kernel, c.d_data, c.n_heads, c.ff_mult, c.kernel_blocks
        )
        self.heads = SymbolHeads(
            c.vocabulary, c.d_kernel, c.head_hidden, c.period_tokens, c.relevance_tokens
        )
        self.noise_head = NoiseHead(c.d_kernel + c.d_data, c.noise_hidden)
        self.period_proj: nn.Linear | None = None
        self.relevance_proj: nn.Linear | None = None
        self.gate_proj: nn.Linear | None = None
        if c.period_tokens:
            self.period_proj = _zero_linear(N_FEATURES, c.d_kernel)
        if c.learned_gate:  # the gate's correction from the dimension and its peak
            self.gate_proj = _zero_linear(c.d_data + N_FEATURES, 1)
        if c.relevance_tokens:
            self.relevance_proj = _zero_linear(RELEVANCE_FEATURES, c.d_kernel)

    def encode_dataset(self, batch: PaddedBatch) -> DatasetEncoding:
        """Dimension embeddings ``h (B, D, H)`` of the datasets (network dtype), with the
        period tokens' peaks where the network reads them."""
        dtype = self.heads.w1.dtype
        X, y = batch.X.to(dtype), batch.y.to(dtype)
        h = self.dataset_encoder(X, y, batch.point_mask, batch.dim_mask)
        periods = relevance = None
        # the features from the inputs as given, in float64 also under autocast (bf16
        # training on a GPU)
        with torch.autocast(batch.X.device.type, enabled=False):
            if self.period_proj is not None:
                found = strongest_periods(batch.X, batch.y, batch.point_mask, batch.dim_mask)
                periods = torch.stack(found, -1)
            if self.relevance_proj is not None:
                relevance = neighbour_relevance(batch.X, batch.y, batch.point_mask, batch.dim_mask)
        return DatasetEncoding(h, batch.dim_mask, periods, relevance)

    def decode(self, encoding: DatasetEncoding, symbols: Tensor, symbol_mask: Tensor) -> Prediction:
        """Kernel encoder-decoder, symbol heads and noise head for ``symbols (B, D, L)``."""
        h, dim_mask = encoding.h, encoding.dim_mask
        bias = anchor = gate = None
        if self.period_proj is not None:
            if encoding.periods is None:
                raise ValueError("this network reads period tokens: encode with encode_dataset")
            period, power, fap = encoding.periods.unbind(-1)
            feats = period_features(period, power, fap)
            read = feats.to(h.dtype)
            bias = self.period_proj(read)
            anchor, gate = period, feats[..., 3]
            if self.gate_proj is not None:
                inputs = torch.cat([h, read], -1)
                correction = GATE_SCALE * self.gate_proj(inputs)[..., 0]
                gate = learned_gate(period, power, fap, correction)
        if self.relevance_proj is not None:
            if encoding.relevance is None:
                raise ValueError("this network reads relevance tokens: encode with encode_dataset")
            more = self.relevance_proj(encoding.relevance.to(h.dtype))
            bias = more if bias is None else bias + more
        tokens, v = self.kernel_encoder(symbols, symbol_mask, h, dim_mask, bias)
        params = self.heads(tokens, symbols, symbol_mask, anchor, gate)
        dims = dense_mask(dim_mask)
        features = torch.cat([masked_mean(v, dims, 1), masked_mean(h, dims, 1)], dim=-1)
        return Prediction(params=params, noise=self.noise_head(features))


def count_parameters(model: nn.Module) -> int:
    """Number of trainable scalars of ``model``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
