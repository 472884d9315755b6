"""PyTorch reference attention modules for attnrun.

Each class reproduces a module from the seed documents in /work/shared/seeds
(see models/README.md). forward() bodies are kept as written in the seeds;
only obvious typos were fixed and debugging print() calls were dropped:

  * seed 002: the ``print(...)`` lines inside forward() were removed.
  * seed 004: ``tovlaues`` -> ``tovalues``, ``contigous`` -> ``contiguous``,
    ``torch.nn.fuctional`` -> ``torch.nn.functional``.

Modules whose names collide across seeds are prefixed with the seed number
(``S000MultiHeadAttention`` ...). Modules marked "not in the seed text" are
extra variants that the seeds describe only in prose (seed 001) or that are
useful companions (a logical-or variant of seed 000's causal mask).
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import BoolTensor, Tensor


# ---------------------------------------------------------------------------
# seed 000 (benjaminwarner.dev, "tinkering with attention")
# ---------------------------------------------------------------------------


class SingleHeadAttention(nn.Module):
    def __init__(self,
        hidden_size: int,
        bias: bool = True,
    ):
        super().__init__()
        self.Wqkv = nn.Linear(hidden_size, (hidden_size//4)*3, bias=bias)
        self.Wo = nn.Linear(hidden_size//4, hidden_size, bias=bias)

    def forward(self, x:Tensor):
        B, S, C = x.shape

        q, k, v = self.Wqkv(x).reshape(B, S, 3, C//4).unbind(dim=2)

        attn = q @ k.transpose(-2, -1)
        attn = attn / math.sqrt(k.size(-1))

        attn = attn.softmax(dim=-1)

        x = attn @ v

        return self.Wo(x)


class S000MultiHeadAttention(nn.Module):
    """seed 000 MultiHeadAttention."""

    def __init__(self,
        hidden_size: int,
        num_heads: int,
        bias: bool = True,
    ):
        super().__init__()
        assert hidden_size % num_heads == 0
        self.nh = num_heads
        self.Wqkv = nn.Linear(hidden_size, hidden_size * 3, bias=bias)
        self.Wo = nn.Linear(hidden_size, hidden_size, bias=bias)

    def forward(self, x: Tensor):
        B, S, C = x.shape

        x = self.Wqkv(x).reshape(B, S, 3, self.nh, C//self.nh)
        q, k, v = x.transpose(3, 1).unbind(dim=2)

        attn = q @ k.transpose(-2, -1)
        attn = attn / math.sqrt(k.size(-1))

        attn = attn.softmax(dim=-1)

        x = attn @ v

        return self.Wo(x.transpose(1, 2).reshape(B, S, C))


class CausalAttention(nn.Module):
    """seed 000 CausalAttention.

    ``mask`` is a (B, S) BoolTensor, True = padding (masked out).
    ``causal_mask + mask`` adds two bool tensors; PyTorch means logical or,
    and the ONNX export is an ``Add`` on tensor(bool).
    """

    def __init__(self,
        hidden_size: int,
        num_heads: int,
        context_size: int,
        attn_drop: float = 0.1,
        out_drop: float = 0.1,
        bias: bool = True,
    ):
        super().__init__()
        assert hidden_size % num_heads == 0
        self.nh = num_heads
        self.Wqkv = nn.Linear(hidden_size, hidden_size * 3, bias=bias)
        self.Wo = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.out_drop = nn.Dropout(out_drop)
        self.register_buffer('causal_mask',
            torch.triu(torch.ones([context_size, context_size],
                       dtype=torch.bool), diagonal=1)
                .view(1, 1, context_size, context_size))

    def forward(self, x: Tensor, mask: BoolTensor):
        B, S, C = x.shape

        x = self.Wqkv(x).reshape(B, S, 3, self.nh, C//self.nh)
        q, k, v = x.transpose(3, 1).unbind(dim=2)

        attn = q @ k.transpose(-2, -1)
        attn = attn / math.sqrt(k.size(-1))

        combined_mask = self.causal_mask[:, :, :S, :S] + mask.view(B, 1, 1, S)
        attn = attn.masked_fill(combined_mask, float('-inf'))

        attn = attn.softmax(dim=-1)
        attn = self.attn_drop(attn)

        x = attn @ v

        x = x.transpose(1, 2).reshape(B, S, C)
        return self.out_drop(self.Wo(x))


class CausalAttentionOr(CausalAttention):
    """Not in the seed text: CausalAttention with ``|`` instead of ``+``.

    Same weights and same meaning as CausalAttention; exports ``Or`` instead
    of a bool ``Add``, so ONNX Runtime accepts it (useful as a peer baseline).
    """

    def forward(self, x: Tensor, mask: BoolTensor):
        B, S, C = x.shape

        x = self.Wqkv(x).reshape(B, S, 3, self.nh, C//self.nh)
        q, k, v = x.transpose(3, 1).unbind(dim=2)

        attn = q @ k.transpose(-2, -1)
        attn = attn / math.sqrt(k.size(-1))

        combined_mask = self.causal_mask[:, :, :S, :S] | mask.view(B, 1, 1, S)
        attn = attn.masked_fill(combined_mask, float('-inf'))

        attn = attn.softmax(dim=-1)
        attn = self.attn_drop(attn)

        x = attn @ v

        x = x.transpose(1, 2).reshape(B, S, C)
        return self.out_drop(self.Wo(x))


# ---------------------------------------------------------------------------
# seed 002 (self-attention notebook, V1 .. Final, MultiHeadAttention)
# ---------------------------------------------------------------------------


class SelfAttention_V1(nn.Module):

    def __init__(self, hidden_dim:int=728) -> None:
        super(SelfAttention_V1, self).__init__()
        self.hidden_dim = hidden_dim

        self.query_proj = nn.Linear(hidden_dim, hidden_dim)
        self.key_proj = nn.Linear(hidden_dim, hidden_dim)
        self.value_proj = nn.Linear(hidden_dim, hidden_dim)

    def forward(self, X:torch.tensor):
        # x shape: (batch_size, seq_len, hidden_dim)
        batch_size, seq_len, hidden_dim = X.size()
        # QKV shape: (batch_size, seq_len, hidden_dim)
        Q = self.query_proj(X)
        K = self.key_proj(X)
        V = self.value_proj(X)

        # (batch_size, seq_len, seq_len)
        attention_value = torch.matmul(Q, K.transpose(-1,-2))
        attention_weight = torch.softmax(attention_value/math.sqrt(hidden_dim), dim=-1)

        output = torch.matmul(attention_weight, V)

        return output


class SelfAttention_V2(nn.Module):

    def __init__(self, hidden_dim:int=728) -> None:
        super(SelfAttention_V2, self).__init__()
        self.hidden_dim = hidden_dim

        self.qkv_proj = nn.Linear(hidden_dim, hidden_dim*3)

    def forward(self, X:torch.tensor):
        # x shape: (batch_size, seq_len, hidden_dim)
        batch_size, seq_len, hidden_dim = X.size()
        # QKV shape: (batch_size, seq_len, hidden_dim)
        QKV = self.qkv_proj(X)
        Q, K, V = torch.split(QKV, self.hidden_dim, -1)

        # (batch_size, seq_len, seq_len)
        attention_value = torch.matmul(Q, K.transpose(-1,-2))
        attention_weight = torch.softmax(attention_value/math.sqrt(hidden_dim), dim=-1)

        output = torch.matmul(attention_weight, V)

        return output


class SelfAttention_V3(nn.Module):
    """attention_mask: (B, S, S) integer tensor, 0 = masked (filled with -1e20)."""

    def __init__(self, dim, drop_out_rate:float=0.1) -> None:
        super(SelfAttention_V3, self).__init__()
        self.dim = dim

        self.proj = nn.Linear(dim, dim * 3)
        self.dropout = nn.Dropout(drop_out_rate)
        self.output_proj = nn.Linear(dim, dim)


    def forward(self, X, attention_mask):
        # X: batch, seq, dim
        QKV = self.proj(X)
        Q, K, V = torch.split(QKV, self.dim, dim=-1)
        attention_weight = Q @ K.transpose(-1,-2) / math.sqrt(self.dim)

        if attention_mask is not None:
            attention_weight = attention_weight.masked_fill(attention_mask==0, float('-1e20'))

        attention_weight = torch.softmax(attention_weight, dim=-1)
        attention_weight = self.dropout(attention_weight)

        output = attention_weight @ V

        output = self.output_proj(output)
        return output


class SelfAttention_Final(nn.Module):
    """attention_mask: (B, S) integer tensor, 0 = padding (filled with -inf)."""

    def __init__(self, dim:int, drop_out_rate:float=0.1) -> None:
        super(SelfAttention_Final, self).__init__()

        self.dim = dim
        self.query_proj = nn.Linear(dim, dim)
        self.key_proj = nn.Linear(dim, dim)
        self.value_proj = nn.Linear(dim, dim)
        self.attention_dropout = nn.Dropout(drop_out_rate)
        self.output_proj = nn.Linear(dim, dim)

    def forward(self, X:torch.tensor, attention_mask:torch.tensor):

        assert X.shape[:-1] == attention_mask.shape

        Q = self.query_proj(X)
        K = self.key_proj(X)
        V = self.value_proj(X)

        attention_score = Q @ K.transpose(-1,-2) / math.sqrt(self.dim)


        if attention_mask is not None:
            attention_mask = attention_mask.unsqueeze(1).repeat(1,X.shape[1],1)
            attention_score = torch.masked_fill(attention_score, attention_mask==0, -float('inf'))

        attention_weight = torch.softmax(attention_score, dim=-1)

        attention_weight = self.attention_dropout(attention_weight)

        output = attention_weight @ V
        output = self.output_proj(output)

        return output


class S002MultiHeadAttention(nn.Module):
    """seed 002 MultiHeadAttention(query, key, value, attention_mask).

    Seed quirks kept: the scores are scaled by sqrt(num_head) (not the head
    size), key/value are reshaped with the *query's* sequence length (so all
    three must have the same length), and attention_mask (0 = masked) must
    broadcast against (B, H, S, S); the export feeds it as (B, 1, S, S).
    """

    def __init__(self, dim:int, num_head:int, attention_dropout_rate:float=0.1) -> None:
        super(S002MultiHeadAttention, self).__init__()

        assert dim % num_head == 0
        self.dim = dim
        self.num_head = num_head
        self.dim_head = dim // num_head

        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.o_proj = nn.Linear(dim, dim)

        self.attention_dropout = nn.Dropout(attention_dropout_rate)


    def forward(self, query, key, value, attention_mask):

        # assert query.shape == key.shape == value.shape
        bs, sl, hs = query.shape

        Q = self.q_proj(query)
        K = self.k_proj(key)
        V = self.v_proj(value)

        # (b, s, d) => (b, n, s, d/n)
        Q_heads = torch.reshape(Q, (bs, sl, self.num_head, self.dim_head)).transpose(1,2)
        K_heads = torch.reshape(K, (bs, sl, self.num_head, self.dim_head)).transpose(1,2)
        V_heads = torch.reshape(V, (bs, sl, self.num_head, self.dim_head)).transpose(1,2)


        # (b, n, s, s)
        attention_score = Q_heads @ K_heads.transpose(-1,-2) / math.sqrt(self.num_head)

        if attention_mask is not None:
            attention_score = attention_score.masked_fill(attention_mask==0, float('-inf'))

        attention_weight = torch.softmax(attention_score, dim=-1)
        attention_weight = self.attention_dropout(attention_weight)

        # (b, n, s, d/n)
        output = attention_weight @ V_heads
         # (b, s, n, d/n)
        output = output.transpose(1,2)
        output = torch.reshape(output, (bs,sl,-1))

        output = self.o_proj(output)
        return output


# ---------------------------------------------------------------------------
# seed 003 (StatQuest "Attention in Transformers"), 2-D (seq, d_model) inputs
# ---------------------------------------------------------------------------


class S003SelfAttention(nn.Module):
    def __init__(self,
                 d_model=2, # dimensionality of embeddings
                 row_dim=0, # keeps track of the row index
                 col_dim=1  # keeps track of the column index
                 ):

        super().__init__()

        # initialize weight matrices for Q,K,V:
        self.W_q = nn.Linear(
            in_features=d_model,  # embedding dimensions
            out_features=d_model, # embedding dimensions
            bias=False            # no intercept ("bias")
        )

        self.W_k = nn.Linear(
            in_features=d_model,
            out_features=d_model,
            bias=False
        )

        self.W_v = nn.Linear(
            in_features=d_model,
            out_features=d_model,
            bias=False
        )

        self.row_dim = row_dim
        self.col_dim = col_dim

    def forward(self, token_encodings):
        # token_encodings = word embeddings + positional encodings
        # calculate Q and V:
        q = self.W_q(token_encodings)
        k = self.W_k(token_encodings)
        v = self.W_v(token_encodings)

        # calculate attention:
        sims = torch.matmul(
            q, k.transpose(dim0=self.row_dim, dim1=self.col_dim)
        )

        scaled_sims = sims / torch.tensor(k.size(self.col_dim)**0.5)
        attention_percents = F.softmax(scaled_sims, dim=self.col_dim)
        attention_scores = torch.matmul(attention_percents, v)

        return attention_scores


class MaskedSelfAttention(nn.Module):
    def __init__(self,
                 d_model=2, # dimensionality of embeddings
                 row_dim=0, # keeps track of the row index
                 col_dim=1  # keeps track of the column index
                 ):

        super().__init__()

        # initialize weight matrices for Q,K,V:
        self.W_q = nn.Linear(
            in_features=d_model,  # embedding dimensions
            out_features=d_model, # embedding dimensions
            bias=False            # no intercept ("bias")
        )

        self.W_k = nn.Linear(
            in_features=d_model,
            out_features=d_model,
            bias=False
        )

        self.W_v = nn.Linear(
            in_features=d_model,
            out_features=d_model,
            bias=False
        )

        self.row_dim = row_dim
        self.col_dim = col_dim

    def forward(self, token_encodings, mask=None):
        # Q, K, V:
        q = self.W_q(token_encodings)
        k = self.W_k(token_encodings)
        v = self.W_v(token_encodings)


        # calculate attention:
        sims = torch.matmul(
            q, k.transpose(dim0=self.row_dim, dim1=self.col_dim)
        )

        scaled_sims = sims / torch.tensor(k.size(self.col_dim)**0.5)

        # apply the mask:
        if mask is not None:
            scaled_sims = scaled_sims.masked_fill(mask, value=-1e9)

        attention_percents = F.softmax(scaled_sims, dim=self.col_dim)
        attention_scores = torch.matmul(attention_percents, v)

        return attention_scores


class Attention(nn.Module):
    def __init__(self,
                 d_model=2, # dimensionality of embeddings
                 row_dim=0, # keeps track of the row index
                 col_dim=1  # keeps track of the column index
                 ):

        super().__init__()

        # initialize weight matrices for Q,K,V:
        self.W_q = nn.Linear(
            in_features=d_model,  # embedding dimensions
            out_features=d_model, # embedding dimensions
            bias=False            # no intercept ("bias")
        )

        self.W_k = nn.Linear(
            in_features=d_model,
            out_features=d_model,
            bias=False
        )

        self.W_v = nn.Linear(
            in_features=d_model,
            out_features=d_model,
            bias=False
        )

        self.row_dim = row_dim
        self.col_dim = col_dim

    def forward(self,
                encodings_for_q,
                encodings_for_k,
                encodings_for_v,
                mask=None):
        # we've modified the forward pass to accept
        # different encodings to pass to Q, K, and V
        # Q, K, V:
        q = self.W_q(encodings_for_q)
        k = self.W_k(encodings_for_k)
        v = self.W_v(encodings_for_v)


        # calculate attention:
        sims = torch.matmul(
            q, k.transpose(dim0=self.row_dim, dim1=self.col_dim)
        )

        scaled_sims = sims / torch.tensor(k.size(self.col_dim)**0.5)

        # apply the mask:
        if mask is not None:
            scaled_sims = scaled_sims.masked_fill(mask, value=-1e9)

        attention_percents = F.softmax(scaled_sims, dim=self.col_dim)
        attention_scores = torch.matmul(attention_percents, v)

        return attention_scores


class S003MultiHeadAttention(nn.Module):
    """seed 003 MultiHeadAttention: a ModuleList of Attention heads + concat."""

    def __init__(self,
                 d_model=2,
                 row_dim=0,
                 col_dim=1,
                 num_heads=1):

        super().__init__()

        # attention heads:
        self.heads = nn.ModuleList(
            [
                Attention(d_model, row_dim, col_dim)
                for _ in range(num_heads)
            ]
        )

        self.col_dim = col_dim

    def forward(self,
                encodings_for_q,
                encodings_for_k,
                encodings_for_v):

        # compute attention across all heads:
        attn_outputs = torch.cat(
            [
                head(encodings_for_q, encodings_for_k, encodings_for_v)
                for head in self.heads
            ], dim=self.col_dim
        )

        return attn_outputs


# ---------------------------------------------------------------------------
# seed 004 (Peter Bloem, "Transformers from scratch" notes)
# ---------------------------------------------------------------------------


class ParamFreeSelfAttention(nn.Module):
    """seed 004 basic self-attention: y = softmax(x xᵀ) x, no parameters.

    x feeds both operands of the first bmm (through a Transpose) and the
    second bmm as well.
    """

    def forward(self, x):
        raw_weights = torch.bmm(x, x.transpose(1,2))
        weights = F.softmax(raw_weights, dim=2)
        y = torch.bmm(weights, x)
        return y


class S004SelfAttention(nn.Module):
    """seed 004 multi-head SelfAttention, heads folded into the batch (bmm).

    The seed's constructor takes ``mask`` but its forward() never uses it, so
    mask=False and mask=True export the same graph. ``mask=True`` here adds
    the causal masking of the seed's reference (peterbloem.nl: ``mask_(dot,
    maskval=float('-inf'), mask_diagonal=False)``), written with
    masked_fill + triu instead of in-place index assignment so that it
    exports; that path is *not in the seed text*.
    """

    def __init__(self, k, heads=4, mask=False):

        super().__init__()

        assert k % heads == 0

        self.k, self.heads = k, heads
        self.mask = mask

        # These compute the queries, keys and values for all
        # heads
        self.tokeys = nn.Linear(k, k, bias=False)
        self.toqueries = nn.Linear(k, k, bias=False)
        self.tovalues = nn.Linear(k, k, bias=False)

        # This will be applied after the multi-head self-attention operation
        self.unifyheads = nn.Linear(k, k)

    def forward(self, x):
        b, t, k = x.size()
        h = self.heads

        queries = self.toqueries(x)
        keys = self.tokeys(x)
        values = self.tovalues(x)

        s = k // h

        keys = keys.view(b, t, h, s)
        queries = queries.view(b, t, h, s)
        values = values.view(b, t, h, s)

        # - fold heads into the batch dimension
        keys = keys.transpose(1, 2).contiguous().view(b * h, t, s)
        queries = queries.transpose(1, 2).contiguous().view(b * h, t, s)
        values = values.transpose(1, 2).contiguous().view(b * h, t, s)

        # Get dot products of queries and keys, and scale
        dot = torch.bmm(queries, keys.transpose(1, 2))
        # -- dot has size (b*h, t, s) containing raw weights

        # scale the dot product
        dot = dot / (k ** (1/2))

        if self.mask:  # not in the seed text (see class docstring)
            future = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=1)
            dot = dot.masked_fill(future, float('-inf'))

        # normalize
        dot = F.softmax(dot, dim=2)
        # - dot now contains row-wise normalized weights

        # apply the self attention to the values
        out = torch.bmm(dot, values).view(b, h, t, s)

        # swap h, t back, unify heads
        out = out.transpose(1, 2).contiguous().view(b, t, s * h)

        return self.unifyheads(out)


# ---------------------------------------------------------------------------
# seed 001 (notes only): encoder-decoder (cross) attention, masked decoder
# self-attention. Written for attnrun in the style of seed 000.
# ---------------------------------------------------------------------------


class CrossAttention(nn.Module):
    """Decoder queries (B, T, C) attend to encoder keys/values (B, S, C).

    enc_mask: optional (B, S) BoolTensor, True = encoder padding (masked).
    """

    def __init__(self, hidden_size: int, num_heads: int, bias: bool = True):
        super().__init__()
        assert hidden_size % num_heads == 0
        self.nh = num_heads
        self.Wq = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.Wkv = nn.Linear(hidden_size, hidden_size * 2, bias=bias)
        self.Wo = nn.Linear(hidden_size, hidden_size, bias=bias)

    def forward(self, x: Tensor, enc: Tensor, enc_mask: BoolTensor = None):
        B, T, C = x.shape
        S = enc.shape[1]
        hs = C // self.nh

        # (B, NH, T, HS)
        q = self.Wq(x).reshape(B, T, self.nh, hs).transpose(1, 2)
        # (B, NH, S, HS) each
        k, v = self.Wkv(enc).reshape(B, S, 2, self.nh, hs).permute(2, 0, 3, 1, 4).unbind(dim=0)

        # (B, NH, T, S)
        attn = q @ k.transpose(-2, -1) / math.sqrt(hs)
        if enc_mask is not None:
            attn = attn.masked_fill(enc_mask.view(B, 1, 1, S), float('-inf'))
        attn = attn.softmax(dim=-1)

        # (B, NH, T, HS) -> (B, T, C)
        y = (attn @ v).transpose(1, 2).reshape(B, T, C)
        return self.Wo(y)


class DecoderSelfAttention(nn.Module):
    """Masked (causal) decoder self-attention without a fixed context size:
    the causal mask is built from the sequence length at run time (Trilu)."""

    def __init__(self, hidden_size: int, num_heads: int, bias: bool = True):
        super().__init__()
        assert hidden_size % num_heads == 0
        self.nh = num_heads
        self.Wqkv = nn.Linear(hidden_size, hidden_size * 3, bias=bias)
        self.Wo = nn.Linear(hidden_size, hidden_size, bias=bias)

    def forward(self, x: Tensor):
        B, T, C = x.shape
        q, k, v = self.Wqkv(x).reshape(B, T, 3, self.nh, C // self.nh).permute(2, 0, 3, 1, 4).unbind(dim=0)

        attn = q @ k.transpose(-2, -1) / math.sqrt(C // self.nh)
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(diagonal=1)
        attn = attn.masked_fill(causal, float('-inf'))
        attn = attn.softmax(dim=-1)

        y = (attn @ v).transpose(1, 2).reshape(B, T, C)
        return self.Wo(y)


# ---------------------------------------------------------------------------
# PyTorch's own nn.MultiheadAttention with add_bias_kv / add_zero_attn
# (issue 12): not from a seed; they take PyTorch's slow path, which appends
# a learned key/value row (bias_k, bias_v) or a zero row to the keys and
# values and pads the key padding mask by one column (F.pad -> ONNX Pad).
# ---------------------------------------------------------------------------


class TorchMultiheadAttention(nn.Module):
    """nn.MultiheadAttention self-attention over x (B, S, C), batch first,
    with a key padding mask (B, S) BoolTensor, True = padding."""

    def __init__(self, embed_dim: int, num_heads: int, add_bias_kv: bool = False, add_zero_attn: bool = False):
        super().__init__()
        self.mha = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True,
                                         add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn)
        if add_bias_kv:
            # nn.MultiheadAttention initializes bias_k/bias_v with xavier_normal_;
            # they are parameters like any other weight.
            assert self.mha.bias_k is not None and self.mha.bias_v is not None

    def forward(self, x: Tensor, key_padding_mask: BoolTensor):
        y, _ = self.mha(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        return y
