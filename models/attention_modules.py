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


class EncoderLayer(nn.Module):
    """A pre-norm transformer encoder layer (not in the seed text): seed 001's
    encoder self-attention with seed 000's fused Wqkv heads and key padding
    mask, then a GELU MLP, each with a residual connection."""

    def __init__(self, hidden_size: int, num_heads: int):
        super().__init__()
        assert hidden_size % num_heads == 0
        self.nh = num_heads
        self.ln1 = nn.LayerNorm(hidden_size)
        self.Wqkv = nn.Linear(hidden_size, hidden_size * 3)
        self.Wo = nn.Linear(hidden_size, hidden_size)
        self.ln2 = nn.LayerNorm(hidden_size)
        self.fc1 = nn.Linear(hidden_size, hidden_size * 4)
        self.fc2 = nn.Linear(hidden_size * 4, hidden_size)

    def forward(self, x: Tensor, mask: BoolTensor):
        B, S, C = x.shape
        q, k, v = self.Wqkv(self.ln1(x)).reshape(B, S, 3, self.nh, C // self.nh).permute(2, 0, 3, 1, 4).unbind(dim=0)
        attn = q @ k.transpose(-2, -1) / math.sqrt(C // self.nh)
        attn = attn.masked_fill(mask.view(B, 1, 1, S), float('-inf'))
        attn = attn.softmax(dim=-1)
        x = x + self.Wo((attn @ v).transpose(1, 2).reshape(B, S, C))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class EncoderStack(nn.Module):
    """num_layers EncoderLayers in sequence, sharing the padding mask."""

    def __init__(self, hidden_size: int, num_heads: int, num_layers: int):
        super().__init__()
        self.layers = nn.ModuleList([EncoderLayer(hidden_size, num_heads) for _ in range(num_layers)])

    def forward(self, x: Tensor, mask: BoolTensor):
        for layer in self.layers:
            x = layer(x, mask)
        return x


# ---------------------------------------------------------------------------
# Attention as real exports spell it (issue 13): PyTorch's own modules and
# re-implementations of T5-, LLaMA-, GPT-2- and Whisper-style attention and
# an einsum spelling. Not from a seed; each is written the way its original
# code base writes it, so that the ONNX graphs carry their export patterns
# (no scaling, scales folded into q and k, position biases, no-op Casts
# around Softmax, grouped KV heads by expand + reshape, Gemm projections,
# masks built at run time, softmax weights returned as an output).
# ---------------------------------------------------------------------------


class TorchMHAWeights(nn.Module):
    """nn.MultiheadAttention self-attention over x (B, S, C), batch first,
    with a key padding mask (B, S) and an attention mask (S, S), both bool
    (True = masked). With need_weights it also returns the attention weights
    averaged over the heads (B, S, S), as PyTorch does by default; without,
    the attention mask is given as a float (additive) mask instead."""

    def __init__(self, embed_dim: int, num_heads: int, need_weights: bool):
        super().__init__()
        self.need_weights = need_weights
        self.mha = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)

    def forward(self, x: Tensor, key_padding_mask: BoolTensor, attn_mask: Tensor):
        y, w = self.mha(x, x, x, key_padding_mask=key_padding_mask, attn_mask=attn_mask,
                        need_weights=self.need_weights)
        if self.need_weights:
            return y, w
        return y


class TorchMHAUnbatched(nn.Module):
    """nn.MultiheadAttention on unbatched (2-D) inputs: queries x (T, C)
    attend to a memory (S, C) with a key padding mask (S,) bool, True =
    padding. PyTorch adds the batch dim of 1 itself."""

    def __init__(self, embed_dim: int, num_heads: int):
        super().__init__()
        self.mha = nn.MultiheadAttention(embed_dim, num_heads)

    def forward(self, x: Tensor, memory: Tensor, key_padding_mask: BoolTensor):
        y, _ = self.mha(x, memory, memory, key_padding_mask=key_padding_mask, need_weights=False)
        return y


class TorchEncoderLayer(nn.Module):
    """nn.TransformerEncoderLayer in PyTorch's default sequence-first layout
    on x (S, B, C) with a src_key_padding_mask (B, S) bool, True = padding,
    in the one-layer nn.TransformerEncoder PyTorch users build. (With
    batch_first=True, torch 1.13 runs eval-mode layers through its fused
    fast path, aten::_transformer_encoder_layer_fwd, which has no ONNX
    export.)"""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout=0.1)
        self.enc = nn.TransformerEncoder(layer, num_layers=1, enable_nested_tensor=False)

    def forward(self, x: Tensor, src_key_padding_mask: BoolTensor):
        return self.enc(x, src_key_padding_mask=src_key_padding_mask)


class TorchDecoderLayer(nn.Module):
    """nn.TransformerDecoderLayer(batch_first=True): masked self-attention
    over tgt (B, T, C) with the float causal mask of
    nn.Transformer.generate_square_subsequent_mask (built at run time) and a
    tgt_key_padding_mask, then cross-attention to memory (B, S, C) with a
    memory_key_padding_mask (masks bool, True = padding)."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int):
        super().__init__()
        self.dec = nn.TransformerDecoderLayer(d_model, nhead, dim_feedforward, dropout=0.1, batch_first=True)

    def forward(self, tgt: Tensor, memory: Tensor, tgt_key_padding_mask: BoolTensor,
                memory_key_padding_mask: BoolTensor):
        T = tgt.shape[1]
        causal = torch.triu(torch.full((T, T), float('-inf')), diagonal=1)
        return self.dec(tgt, memory, tgt_mask=causal, tgt_key_padding_mask=tgt_key_padding_mask,
                        memory_key_padding_mask=memory_key_padding_mask)


class T5Attention(nn.Module):
    """T5's self-attention (Hugging Face transformers' T5Attention, encoder
    side): q, k, v, o projections without bias, no 1/sqrt(d) scaling, a
    learned relative position bias (bidirectional buckets, computed from the
    sequence length at run time) with the key padding mask folded into it,
    and the softmax in float (`scores.float()` ... `.type_as(scores)`).

    mask: (B, S) int64, 1 = keep, 0 = padding."""

    def __init__(self, d_model: int, n_heads: int, d_kv: int, num_buckets: int = 32, max_distance: int = 128):
        super().__init__()
        self.n_heads, self.d_kv = n_heads, d_kv
        self.num_buckets, self.max_distance = num_buckets, max_distance
        inner = n_heads * d_kv
        self.q = nn.Linear(d_model, inner, bias=False)
        self.k = nn.Linear(d_model, inner, bias=False)
        self.v = nn.Linear(d_model, inner, bias=False)
        self.o = nn.Linear(inner, d_model, bias=False)
        self.relative_attention_bias = nn.Embedding(num_buckets, n_heads)

    @staticmethod
    def _relative_position_bucket(relative_position, num_buckets, max_distance):
        # bidirectional, as in transformers' T5Attention
        relative_buckets = 0
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
        max_exact = num_buckets // 2
        is_small = relative_position < max_exact
        relative_position_if_large = max_exact + (
            torch.log(relative_position.float() / max_exact)
            / math.log(max_distance / max_exact)
            * (num_buckets - max_exact)
        ).to(torch.long)
        relative_position_if_large = torch.min(
            relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1))
        relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
        return relative_buckets

    def compute_bias(self, query_length: int, key_length: int):
        context_position = torch.arange(query_length, dtype=torch.long)[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long)[None, :]
        relative_position = memory_position - context_position
        buckets = self._relative_position_bucket(relative_position, self.num_buckets, self.max_distance)
        values = self.relative_attention_bias(buckets)  # (q, k, H)
        return values.permute([2, 0, 1]).unsqueeze(0)  # (1, H, q, k)

    def forward(self, x: Tensor, mask: Tensor):
        B, S = x.shape[:2]

        def shape(t):
            return t.view(B, -1, self.n_heads, self.d_kv).transpose(1, 2)

        q, k, v = shape(self.q(x)), shape(self.k(x)), shape(self.v(x))
        scores = torch.matmul(q, k.transpose(3, 2))
        ext = (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        position_bias = self.compute_bias(S, S) + ext
        scores += position_bias
        attn_weights = F.softmax(scores.float(), dim=-1).type_as(scores)
        y = torch.matmul(attn_weights, v).transpose(1, 2).contiguous().view(B, -1, self.n_heads * self.d_kv)
        return self.o(y)


class T5LayerNorm(nn.Module):
    """transformers' T5LayerNorm: RMS norm, no mean, no bias."""

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model) + 0.1 * torch.randn(d_model))
        self.eps = eps

    def forward(self, x: Tensor):
        variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


class T5EncoderStack(nn.Module):
    """transformers' T5Stack as an encoder of n_layers T5Blocks: the first
    layer's attention computes the relative position bias plus the padding
    mask once (T5Attention with has_relative_attention_bias) and every layer
    reuses that sum (position_bias passed down the stack); T5LayerNorm
    before each sublayer, ReLU feed-forward (T5DenseActDense), residual
    sums, the final layer norm.

    mask: (B, S) int64, 1 = keep, 0 = padding."""

    def __init__(self, d_model: int, n_heads: int, d_kv: int, d_ff: int, n_layers: int = 2):
        super().__init__()
        self.attn = nn.ModuleList([T5Attention(d_model, n_heads, d_kv) for _ in range(n_layers)])
        self.ln_attn = nn.ModuleList([T5LayerNorm(d_model) for _ in range(n_layers)])
        self.ln_ff = nn.ModuleList([T5LayerNorm(d_model) for _ in range(n_layers)])
        self.wi = nn.ModuleList([nn.Linear(d_model, d_ff, bias=False) for _ in range(n_layers)])
        self.wo = nn.ModuleList([nn.Linear(d_ff, d_model, bias=False) for _ in range(n_layers)])
        self.final_ln = T5LayerNorm(d_model)

    def forward(self, x: Tensor, mask: Tensor):
        B, S = x.shape[:2]
        ext = (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        position_bias = self.attn[0].compute_bias(S, S) + ext  # computed once, as T5Stack passes it down
        for i, attn in enumerate(self.attn):
            h = self.ln_attn[i](x)

            def shape(t):
                return t.view(B, -1, attn.n_heads, attn.d_kv).transpose(1, 2)

            q, k, v = shape(attn.q(h)), shape(attn.k(h)), shape(attn.v(h))
            scores = torch.matmul(q, k.transpose(3, 2)) + position_bias
            w = F.softmax(scores.float(), dim=-1).type_as(scores)
            y = torch.matmul(w, v).transpose(1, 2).contiguous().view(B, -1, attn.n_heads * attn.d_kv)
            x = x + attn.o(y)
            x = x + self.wo[i](F.relu(self.wi[i](self.ln_ff[i](x))))
        return self.final_ln(x)


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size) + 0.1 * torch.randn(hidden_size))
        self.eps = eps

    def forward(self, x: Tensor):
        variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return self.weight * x.to(torch.float32)


def _rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def _repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """transformers' repeat_kv: (B, Hkv, S, D) -> (B, Hkv*n_rep, S, D)."""
    b, hkv, s, d = x.shape
    if n_rep == 1:
        return x
    x = x[:, :, None, :, :].expand(b, hkv, n_rep, s, d)
    return x.reshape(b, hkv * n_rep, s, d)


class LlamaAttentionBlock(nn.Module):
    """A LLaMA-style decoder block as transformers' LlamaDecoderLayer spells
    it at opset 17 (no RMSNormalization or RotaryEmbedding op): RMSNorm in
    primitive ops, rotary embedding by position_ids (cos/sin and
    rotate_half), grouped-query attention (4 query heads on 2 KV heads,
    repeat_kv by expand + reshape) over a KV cache, the causal mask built at
    run time as an additive float mask (finfo.min above the diagonal offset
    by the cache length), softmax in float32 and `.to(q.dtype)` after it,
    output projection, residuals and a SwiGLU MLP.

    Inputs x (B, S, C), position_ids (B, S) int64, past_key and past_value
    (B, Hkv, P, D); outputs y, present_key, present_value."""

    def __init__(self, hidden: int = 64, heads: int = 4, kv_heads: int = 2, inter: int = 128):
        super().__init__()
        self.h, self.hkv, self.d = heads, kv_heads, hidden // heads
        self.ln1, self.ln2 = LlamaRMSNorm(hidden), LlamaRMSNorm(hidden)
        self.q_proj = nn.Linear(hidden, heads * self.d, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.d, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.d, bias=False)
        self.o_proj = nn.Linear(heads * self.d, hidden, bias=False)
        self.gate = nn.Linear(hidden, inter, bias=False)
        self.up = nn.Linear(hidden, inter, bias=False)
        self.down = nn.Linear(inter, hidden, bias=False)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, self.d, 2, dtype=torch.float32) / self.d))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def rotary(self, position_ids):
        freqs = position_ids[:, :, None].float() * self.inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos()[:, None], emb.sin()[:, None]  # (B, 1, S, D)

    def forward(self, x: Tensor, position_ids: Tensor, past_key: Tensor, past_value: Tensor):
        B, S, _ = x.shape
        h = self.ln1(x)
        q = self.q_proj(h).view(B, S, self.h, self.d).transpose(1, 2)
        k = self.k_proj(h).view(B, S, self.hkv, self.d).transpose(1, 2)
        v = self.v_proj(h).view(B, S, self.hkv, self.d).transpose(1, 2)
        cos, sin = self.rotary(position_ids)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        k = torch.cat([past_key, k], dim=2)
        v = torch.cat([past_value, v], dim=2)
        present_key, present_value = k, v
        kr, vr = _repeat_kv(k, self.h // self.hkv), _repeat_kv(v, self.h // self.hkv)
        T = kr.shape[2]
        scores = torch.matmul(q, kr.transpose(2, 3)) / math.sqrt(self.d)
        causal = torch.full((S, T), torch.finfo(x.dtype).min).triu(T - S + 1)
        scores = scores + causal[None, None, :, :]
        w = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        y = torch.matmul(w, vr).transpose(1, 2).reshape(B, S, self.h * self.d)
        x = x + self.o_proj(y)
        h = self.ln2(x)
        x = x + self.down(F.silu(self.gate(h)) * self.up(h))
        return x, present_key, present_value


class LlamaBlockPrefill(LlamaAttentionBlock):
    """LlamaAttentionBlock on a prompt with no cache before it: inputs x
    (B, S, C) and position_ids (B, S), output y only (the block's present
    key and value are dropped), the past an empty (B, Hkv, 0, D) tensor
    made inside the graph. The benchmark's LLaMA-style prefill."""

    def forward(self, x: Tensor, position_ids: Tensor):
        past = x.new_zeros((x.shape[0], self.hkv, 0, self.d))
        y, _, _ = super().forward(x, position_ids, past, past)
        return y


class LlamaPaddedAttention(nn.Module):
    """LLaMA-style self-attention over a left-padded batch, as transformers'
    LlamaAttention (eager) runs it in batched generation: an int64
    `attention_mask` (B, S), 1 = keep, gives the positions
    (cumsum - 1, padding at 1, as generate() computes position_ids) for the
    rotary embedding and the 4-D additive mask built as
    _prepare_4d_causal_attention_mask does: the causal mask of finfo.min
    above the diagonal (_make_causal_mask), then masked_fill of the padded
    keys with finfo.min (to_4d), values {0, finfo.min}, added to the
    scores. Grouped-query attention (4 query heads on 2 KV heads, repeat_kv),
    softmax in float32 and `.to(q.dtype)`, output projection.

    With left padding a query row whose every causally visible key is
    padding sees finfo.min on every key: its softmax is uniform over all S
    keys, so its output is the mean of V's rows (finite, as transformers
    computes it).

    combine="add" builds the mask as transformers 4.30-4.35 did
    (_prepare_decoder_attention_mask): the padding expanded to 0/finfo.min
    (_expand_mask: (1 - mask) masked_fill'ed with finfo.min) ADDED to the
    causal mask, so a key both hides is finfo.min twice, -inf; such a row
    is uniform over the keys that are finfo.min alone."""

    def __init__(self, hidden: int = 64, heads: int = 4, kv_heads: int = 2, combine: str = "masked_fill"):
        super().__init__()
        assert combine in ("masked_fill", "add")
        self.combine = combine
        self.h, self.hkv, self.d = heads, kv_heads, hidden // heads
        self.q_proj = nn.Linear(hidden, heads * self.d, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.d, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.d, bias=False)
        self.o_proj = nn.Linear(heads * self.d, hidden, bias=False)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, self.d, 2, dtype=torch.float32) / self.d))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def _project(self, x: Tensor, cos: Tensor, sin: Tensor):
        """Q, and K and V repeated over the query heads (repeat_kv), the
        rotary embedding (cos, sin) applied to Q and K."""
        B, S, _ = x.shape
        q = self.q_proj(x).view(B, S, self.h, self.d).transpose(1, 2)
        k = self.k_proj(x).view(B, S, self.hkv, self.d).transpose(1, 2)
        v = self.v_proj(x).view(B, S, self.hkv, self.d).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        return q, _repeat_kv(k, self.h // self.hkv), _repeat_kv(v, self.h // self.hkv)

    def _attend(self, q: Tensor, kr: Tensor, vr: Tensor, mask: Tensor):
        """softmax(Q·Kᵀ/√d + mask) in float32, `.to(q.dtype)`, times V, the
        heads merged and projected."""
        B, _, S, _ = q.shape
        scores = torch.matmul(q, kr.transpose(2, 3)) / math.sqrt(self.d) + mask
        w = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        y = torch.matmul(w, vr).transpose(1, 2).reshape(B, S, self.h * self.d)
        return self.o_proj(y)

    def forward(self, x: Tensor, attention_mask: Tensor):
        B, S, _ = x.shape
        position_ids = attention_mask.long().cumsum(-1) - 1
        position_ids = position_ids.masked_fill(attention_mask == 0, 1)
        freqs = position_ids[:, :, None].float() * self.inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        q, kr, vr = self._project(x, emb.cos()[:, None], emb.sin()[:, None])
        fill = torch.finfo(x.dtype).min
        causal = torch.full((S, S), fill).triu(1)
        padding = attention_mask[:, None, None, :] == 0
        if self.combine == "add":
            inverted = 1.0 - attention_mask[:, None, None, :].to(x.dtype)
            expanded = inverted.masked_fill(inverted.to(torch.bool), fill)
            mask = expanded + causal[None, None, :, :]
        else:
            mask = causal[None, None, :, :].masked_fill(padding, fill)
        return self._attend(q, kr, vr, mask)


class LlamaUpdateCausalMask(LlamaPaddedAttention):
    """LLaMA-style attention with transformers 4.44's mask (LlamaModel.
    _update_causal_mask, _prepare_4d_causal_attention_mask_with_cache_position,
    eager, no KV cache): cache_position = arange(S); the causal mask is
    full(min) → triu(1) → times (arange(S) > cache_position[:, None]),
    expanded to [B, 1, S, S] and cloned; the padding is written into it by a
    slice assignment, causal_mask[..., :L] = causal_mask[..., :L].masked_fill(
    (causal_mask[..., :L] + attention_mask[:, None, None, :]) == 0, min),
    which PyTorch exports as a ScatterND over every position. The rotary
    positions are cache_position; int64 attention_mask, 1 = keep, LEFT
    padding (a padded row's first queries see only padding: uniform)."""

    def forward(self, x: Tensor, attention_mask: Tensor):
        B, S, _ = x.shape
        cache_position = torch.arange(S)
        freqs = cache_position[None, :, None].float() * self.inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        q, kr, vr = self._project(x, emb.cos()[:, None], emb.sin()[:, None])
        min_dtype = torch.finfo(x.dtype).min
        target = attention_mask.shape[-1]
        causal_mask = torch.full((S, target), fill_value=min_dtype, dtype=x.dtype)
        causal_mask = torch.triu(causal_mask, diagonal=1)
        causal_mask = causal_mask * (torch.arange(target) > cache_position.reshape(-1, 1))
        causal_mask = causal_mask[None, None, :, :].expand(B, 1, -1, -1).clone()
        L = attention_mask.shape[-1]
        padding_mask = (causal_mask[:, :, :, :L] + attention_mask[:, None, None, :]) == 0
        causal_mask[:, :, :, :L] = causal_mask[:, :, :, :L].masked_fill(padding_mask, min_dtype)
        return self._attend(q, kr, vr, causal_mask[:, :, :, : kr.shape[-2]])


class MistralSlidingWindowAttention(LlamaPaddedAttention):
    """Mistral-style self-attention with a sliding window, as transformers'
    MistralAttention (eager, 4.36) runs a prompt without padding
    (attention_mask None): _prepare_4d_causal_attention_mask(None, ...,
    sliding_window=W) builds the causal mask of finfo.min above the
    diagonal (full, arange comparison, masked_fill with 0) and fills
    finfo.min again below the window (1 - triu(ones, diagonal=1 - W), as
    _make_causal_mask does with its sliding window), so query i sees keys
    i - W < j <= i; the mask [1, 1, S, S] is expanded over the batch and
    added to the scores. LLaMA's projections, rotary embedding (positions
    arange(S)), grouped-query attention and float32 softmax. Every row
    keeps a key (its own), and the mask depends on the length alone."""

    def __init__(self, hidden: int = 64, heads: int = 4, kv_heads: int = 2, window: int = 4):
        super().__init__(hidden, heads, kv_heads)
        self.window = window

    def forward(self, x: Tensor):
        B, S, _ = x.shape
        freqs = torch.arange(S, dtype=torch.float32)[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        q, kr, vr = self._project(x, emb.cos()[None, None], emb.sin()[None, None])
        fill = torch.finfo(x.dtype).min
        mask = torch.full((S, S), fill)
        cond = torch.arange(S)
        mask.masked_fill_(cond < (cond + 1).view(S, 1), 0)
        context = 1 - torch.triu(torch.ones_like(mask, dtype=torch.int), diagonal=1 - self.window)
        mask.masked_fill_(context.bool(), fill)
        return self._attend(q, kr, vr, mask[None, None, :, :].expand(B, 1, S, S))


class GptOssAttention(LlamaPaddedAttention):
    """gpt-oss's attention with its sinks, as transformers' GptOssAttention
    (eager_attention_forward, 4.55) runs a prompt without padding: Q, K and
    V Linears with biases, the rotary embedding (plain, positions
    arange(S); gpt-oss scales its frequencies with YaRN, which only changes
    the cos and sin tables), grouped-query attention (repeat_kv), the
    scores times head_dim^-0.5 plus the causal finfo.min mask, then one
    learned logit a head (sinks, [H]) joined to every row of the scores
    (reshape(1, -1, 1, 1).expand(B, -1, Sq, -1), cat on the last axis),
    the row maximum taken off, the softmax over the Sk + 1 logits and the
    sink's column dropped (probs[..., :-1]): the sink takes part of each
    row's weight and gives nothing back. Then · V, heads merged, o_proj."""

    def __init__(self, hidden: int = 64, heads: int = 4, kv_heads: int = 2):
        super().__init__(hidden, heads, kv_heads)
        self.q_proj = nn.Linear(hidden, heads * self.d, bias=True)
        self.k_proj = nn.Linear(hidden, kv_heads * self.d, bias=True)
        self.v_proj = nn.Linear(hidden, kv_heads * self.d, bias=True)
        self.o_proj = nn.Linear(heads * self.d, hidden, bias=True)
        # trained values rather than zeros: a head whose sink takes most of
        # the weight, one that takes little
        self.sinks = nn.Parameter(torch.linspace(-2.0, 3.0, heads))

    def forward(self, x: Tensor):
        B, S, _ = x.shape
        freqs = torch.arange(S, dtype=torch.float32)[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        q, kr, vr = self._project(x, emb.cos()[None, None], emb.sin()[None, None])
        causal = torch.full((S, S), torch.finfo(x.dtype).min).triu(1)
        attn_weights = torch.matmul(q, kr.transpose(2, 3)) * self.d ** -0.5
        attn_weights = attn_weights + causal[None, None, :, :]
        sinks = self.sinks.reshape(1, -1, 1, 1).expand(q.shape[0], -1, q.shape[-2], -1)
        combined_logits = torch.cat([attn_weights, sinks], dim=-1)
        combined_logits = combined_logits - combined_logits.max(dim=-1, keepdim=True).values
        probs = F.softmax(combined_logits, dim=-1, dtype=combined_logits.dtype)
        scores = probs[..., :-1]
        y = torch.matmul(scores, vr).transpose(1, 2).reshape(B, S, self.h * self.d)
        return self.o_proj(y)


class GPT2Conv1D(nn.Module):
    """transformers' Conv1D: a Linear with a (in, out) weight, applied as
    addmm on the 2-D view (exports as Gemm)."""

    def __init__(self, nf: int, nx: int):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.randn(nf) * 0.02)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class GPT2Attention(nn.Module):
    """GPT-2's attention (the original transformers GPT2Attention): fused
    c_attn Conv1D, K split into heads already transposed (permute(0, 2, 3,
    1)), scores / sqrt(head size), the causal mask as a registered uint8
    `bias` buffer (1, 1, n_ctx, n_ctx) sliced to the length and applied with
    torch.where and a -1e4 `masked_bias`, then the padding mask added as
    (1 - mask) * -10000, softmax, c_proj.

    attention_mask: (B, S) float, 1 = keep, 0 = padding."""

    def __init__(self, n_embd: int, n_head: int, n_ctx: int):
        super().__init__()
        self.n_head, self.split_size = n_head, n_embd
        self.register_buffer("bias", torch.tril(torch.ones((n_ctx, n_ctx), dtype=torch.uint8)).view(1, 1, n_ctx, n_ctx))
        self.register_buffer("masked_bias", torch.tensor(-1e4))
        self.c_attn = GPT2Conv1D(3 * n_embd, n_embd)
        self.c_proj = GPT2Conv1D(n_embd, n_embd)

    def split_heads(self, x, k=False):
        new_x_shape = x.size()[:-1] + (self.n_head, x.size(-1) // self.n_head)
        x = x.view(*new_x_shape)
        if k:
            return x.permute(0, 2, 3, 1)  # (batch, head, head_features, seq_length)
        return x.permute(0, 2, 1, 3)  # (batch, head, seq_length, head_features)

    def merge_heads(self, x):
        x = x.permute(0, 2, 1, 3).contiguous()
        new_x_shape = x.size()[:-2] + (x.size(-2) * x.size(-1),)
        return x.view(*new_x_shape)

    def _attn(self, q, k, v, attention_mask):
        w = torch.matmul(q, k)
        w = w / (float(v.size(-1)) ** 0.5)
        nd, ns = w.size(-2), w.size(-1)
        mask = self.bias[:, :, ns - nd: ns, :ns]
        w = torch.where(mask.bool(), w, self.masked_bias.to(w.dtype))
        w = w + attention_mask
        w = nn.Softmax(dim=-1)(w)
        return torch.matmul(w, v)

    def forward(self, x: Tensor, attention_mask: Tensor):
        query, key, value = self.c_attn(x).split(self.split_size, dim=2)
        query = self.split_heads(query)
        key = self.split_heads(key, k=True)
        value = self.split_heads(value)
        ext = (1.0 - attention_mask[:, None, None, :]) * -10000.0
        a = self._attn(query, key, value, ext)
        return self.c_proj(self.merge_heads(a))


class NewGELU(nn.Module):
    """transformers' NewGELUActivation (GPT-2's `gelu_new`): the tanh
    approximation of GELU, written out as the original code base does."""

    def forward(self, input: Tensor) -> Tensor:
        return 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))


class GPT2MLP(nn.Module):
    """transformers' GPT2MLP: Conv1D c_fc to the inner width, gelu_new,
    Conv1D c_proj back (dropout: identity in eval)."""

    def __init__(self, intermediate_size: int, n_embd: int):
        super().__init__()
        self.c_fc = GPT2Conv1D(intermediate_size, n_embd)
        self.c_proj = GPT2Conv1D(n_embd, intermediate_size)
        self.act = NewGELU()

    def forward(self, hidden_states):
        return self.c_proj(self.act(self.c_fc(hidden_states)))


class GPT2Block(nn.Module):
    """transformers' GPT2Block: pre-norm ln_1 -> GPT2Attention -> residual,
    ln_2 -> GPT2MLP (inner width 4·n_embd unless n_inner) -> residual.

    attention_mask: (B, S) float, 1 = keep, 0 = padding, as GPT2Attention
    takes it."""

    def __init__(self, n_embd: int, n_head: int, n_ctx: int, n_inner: int = None):
        super().__init__()
        inner_dim = n_inner if n_inner is not None else 4 * n_embd
        self.ln_1 = nn.LayerNorm(n_embd, eps=1e-5)
        self.attn = GPT2Attention(n_embd, n_head, n_ctx)
        self.ln_2 = nn.LayerNorm(n_embd, eps=1e-5)
        self.mlp = GPT2MLP(inner_dim, n_embd)
        with torch.no_grad():
            # Trained weights, not the initialization: LayerNorms that are
            # not the identity, and c_fc outputs of a few units, as GPT-2's
            # reach (so gelu_new's tanh saturates on both sides).
            for ln in (self.ln_1, self.ln_2):
                ln.weight.uniform_(0.5, 1.5)
                ln.bias.uniform_(-0.5, 0.5)
            self.mlp.c_fc.weight.normal_(0.0, 2.0 / math.sqrt(n_embd))

    def forward(self, x: Tensor, attention_mask: Tensor):
        residual = x
        hidden_states = self.attn(self.ln_1(x), attention_mask)
        hidden_states = hidden_states + residual
        residual = hidden_states
        feed_forward_hidden_states = self.mlp(self.ln_2(hidden_states))
        return residual + feed_forward_hidden_states


class WhisperAttention(nn.Module):
    """Whisper's MultiHeadAttention (openai/whisper model.py) in a decoder:
    q and k each scaled by head_dim^-0.25 before their product (the scale
    folded into both), a causal -inf mask buffer (n_ctx, n_ctx) sliced to
    the length and added, `qk.float()` before the softmax and `.to(q.dtype)`
    after it."""

    def __init__(self, n_state: int, n_head: int, n_ctx: int):
        super().__init__()
        self.n_head = n_head
        self.query = nn.Linear(n_state, n_state)
        self.key = nn.Linear(n_state, n_state, bias=False)
        self.value = nn.Linear(n_state, n_state)
        self.out = nn.Linear(n_state, n_state)
        self.register_buffer("mask", torch.empty(n_ctx, n_ctx).fill_(-float('inf')).triu_(1), persistent=False)

    def forward(self, x: Tensor):
        q, k, v = self.query(x), self.key(x), self.value(x)
        n_batch, n_ctx, n_state = q.shape
        scale = (n_state // self.n_head) ** -0.25
        q = q.view(*q.shape[:2], self.n_head, -1).permute(0, 2, 1, 3) * scale
        k = k.view(*k.shape[:2], self.n_head, -1).permute(0, 2, 3, 1) * scale
        v = v.view(*v.shape[:2], self.n_head, -1).permute(0, 2, 1, 3)
        qk = q @ k
        qk = qk + self.mask[:n_ctx, :n_ctx]
        qk = qk.float()
        w = F.softmax(qk, dim=-1).to(q.dtype)
        return self.out((w @ v).permute(0, 2, 1, 3).flatten(start_dim=2))


class EinsumAttention(nn.Module):
    """Multi-head self-attention written with torch.einsum on the (B, S, H,
    D) head layout, as several code bases do: scores
    einsum("bqhd,bkhd->bhqk") scaled after, a key padding mask (B, S) bool
    (True = padding) by masked_fill, output einsum("bhqk,bkhd->bqhd")."""

    def __init__(self, hidden_size: int, num_heads: int):
        super().__init__()
        self.nh, self.hs = num_heads, hidden_size // num_heads
        self.Wqkv = nn.Linear(hidden_size, hidden_size * 3)
        self.Wo = nn.Linear(hidden_size, hidden_size)

    def forward(self, x: Tensor, mask: BoolTensor):
        B, S, C = x.shape
        q, k, v = self.Wqkv(x).view(B, S, 3, self.nh, self.hs).unbind(dim=2)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * self.hs ** -0.5
        scores = scores.masked_fill(mask[:, None, None, :], float('-inf'))
        w = scores.softmax(dim=-1)
        y = torch.einsum("bhqk,bkhd->bqhd", w, v).reshape(B, S, C)
        return self.Wo(y)


class EinsumAttentionBHQD(nn.Module):
    """Cross-attention with einsum on the (B, H, S, D) layout:
    einsum("bhqd,bhkd->bhqk") and einsum("bhqk,bhkd->bhqd"), no mask."""

    def __init__(self, hidden_size: int, num_heads: int):
        super().__init__()
        self.nh, self.hs = num_heads, hidden_size // num_heads
        self.Wq = nn.Linear(hidden_size, hidden_size)
        self.Wkv = nn.Linear(hidden_size, hidden_size * 2)
        self.Wo = nn.Linear(hidden_size, hidden_size)

    def forward(self, x: Tensor, enc: Tensor):
        B, T, C = x.shape
        S = enc.shape[1]
        q = self.Wq(x).view(B, T, self.nh, self.hs).transpose(1, 2)
        k, v = self.Wkv(enc).view(B, S, 2, self.nh, self.hs).permute(2, 0, 3, 1, 4).unbind(dim=0)
        w = (torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(self.hs)).softmax(dim=-1)
        return self.Wo(torch.einsum("bhqk,bhkd->bhqd", w, v).transpose(1, 2).reshape(B, T, C))


class EinsumAttentionSwapped(EinsumAttention):
    """EinsumAttention's projections with each einsum's operands in the
    other order, on the (B, H, S, D) layout: the scores as
    einsum("bhkd,bhqd->bhqk", k, q) and the output as
    einsum("bhkd,bhqk->bhqd", v, w), the weights second; a key padding
    mask (B, S) bool (True = padding) by masked_fill."""

    def forward(self, x: Tensor, mask: BoolTensor):
        B, S, C = x.shape
        q, k, v = self.Wqkv(x).view(B, S, 3, self.nh, self.hs).permute(2, 0, 3, 1, 4).unbind(dim=0)
        scores = torch.einsum("bhkd,bhqd->bhqk", k, q) / math.sqrt(self.hs)
        w = scores.masked_fill(mask[:, None, None, :], float('-inf')).softmax(dim=-1)
        return self.Wo(torch.einsum("bhkd,bhqk->bhqd", v, w).transpose(1, 2).reshape(B, S, C))


class DallePytorchAttention(nn.Module):
    """DALLE-pytorch's Attention with stable=True (lucidrains' code; its
    rearranges written as view/transpose): q scaled, einsum scores, the
    key padding mask and the causal mask each by masked_fill with
    -finfo.max, then stable_softmax: t / alpha, minus its row maximum
    (amax(dim=-1, keepdim=True).detach()), times alpha, softmax; einsum
    with v. mask: bool (B, S), True = keep."""

    def __init__(self, hidden_size: int, num_heads: int, alpha: float = 32 ** 2):
        super().__init__()
        self.nh, self.hs = num_heads, hidden_size // num_heads
        self.scale, self.alpha = self.hs ** -0.5, alpha
        self.to_qkv = nn.Linear(hidden_size, hidden_size * 3, bias=False)
        self.to_out = nn.Linear(hidden_size, hidden_size)

    def forward(self, x: Tensor, mask: BoolTensor):
        B, S, C = x.shape
        q, k, v = (t.view(B, S, self.nh, self.hs).transpose(1, 2) for t in self.to_qkv(x).chunk(3, dim=-1))
        q = q * self.scale
        dots = torch.einsum("b h i d, b h j d -> b h i j", q, k)
        mask_value = -torch.finfo(dots.dtype).max
        dots = dots.masked_fill(~mask[:, None, None, :], mask_value)
        i, j = dots.shape[-2:]
        causal = torch.ones(i, j).triu_(j - i + 1).bool()
        dots = dots.masked_fill(causal, mask_value)
        t = dots / self.alpha
        t = t - torch.amax(t, dim=-1, keepdim=True).detach()
        attn = (t * self.alpha).softmax(dim=-1)
        out = torch.einsum("b h i j, b h j d -> b h i d", attn, v)
        return self.to_out(out.transpose(1, 2).reshape(B, S, C))


class MPTAttention(nn.Module):
    """MPT's attention (MosaicML llm-foundry: MultiheadAttention with
    attn_impl='torch', scaled_multihead_dot_product_attention; its
    rearranges written as view/permute): a fused Wqkv, q·kᵀ·softmax_scale,
    the ALiBi bias (build_alibi_bias: a buffer [1, H, 1, max_seq_len] of
    slope·(j - max_seq_len + 1), its last s_k columns) added, then
    masked_fill of the padded keys and of the future (~tril(ones)) with
    finfo.min, softmax, · v, out_proj. key_padding_mask: bool (B, S),
    True = keep."""

    def __init__(self, hidden_size: int, num_heads: int, max_seq_len: int, alibi_bias_max: int = 8):
        super().__init__()
        self.nh, self.hs = num_heads, hidden_size // num_heads
        self.softmax_scale = 1 / math.sqrt(self.hs)
        self.Wqkv = nn.Linear(hidden_size, 3 * hidden_size)
        self.out_proj = nn.Linear(hidden_size, hidden_size)
        alibi = torch.arange(1 - max_seq_len, 1, dtype=torch.int32).view(1, 1, 1, max_seq_len)
        n2 = 2 ** math.ceil(math.log2(num_heads))
        m = torch.arange(1, n2 + 1, dtype=torch.float32).mul(alibi_bias_max / n2)
        slopes = 1.0 / torch.pow(2, m)
        if n2 != num_heads:
            slopes = torch.concat([slopes[1::2], slopes[::2]])[:num_heads]
        self.register_buffer("attn_bias", alibi * slopes.view(1, num_heads, 1, 1))

    def forward(self, x: Tensor, key_padding_mask: BoolTensor):
        B, S, C = x.shape
        q, k, v = self.Wqkv(x).chunk(3, dim=2)
        q = q.view(B, S, self.nh, self.hs).permute(0, 2, 1, 3)
        k = k.view(B, S, self.nh, self.hs).permute(0, 2, 3, 1)  # rearrange 'b s (h d) -> b h d s'
        v = v.view(B, S, self.nh, self.hs).permute(0, 2, 1, 3)
        s_q, s_k = q.size(-2), k.size(-1)
        attn_weight = q.matmul(k) * self.softmax_scale
        attn_weight = attn_weight + self.attn_bias[:, :, :, -s_k:]
        min_val = torch.finfo(q.dtype).min
        attn_weight = attn_weight.masked_fill(~key_padding_mask.view((B, 1, 1, s_k)), min_val)
        s = max(s_q, s_k)
        causal_mask = attn_weight.new_ones(s, s, dtype=torch.float16).tril().to(torch.bool)
        causal_mask = ~causal_mask[-s_q:, -s_k:]
        attn_weight = attn_weight.masked_fill(causal_mask.view(1, 1, s_q, s_k), min_val)
        attn_weight = torch.softmax(attn_weight, dim=-1)
        out = attn_weight.matmul(v).permute(0, 2, 1, 3).reshape(B, S, C)
        return self.out_proj(out)


class OPTAttention(nn.Module):
    """transformers' OPTAttention (4.30, decoder self-attention) with the
    mask OPTDecoder builds (_prepare_decoder_attention_mask: the finfo.min
    causal mask of _make_causal_mask plus _expand_mask's padding, both
    [B, 1, T, T]): q_proj(x)·scaling, heads in the batch, bmm, the scores
    viewed as (B, H, T, T) plus the mask, then torch.max(scores,
    finfo.min) (a score both masks hide is -inf, raised back to finfo.min,
    so a query row that sees no key gets uniform weights), viewed back,
    softmax, bmm with v, out_proj. attention_mask: int64, 1 = keep."""

    def __init__(self, hidden_size: int, num_heads: int):
        super().__init__()
        self.nh, self.hs = num_heads, hidden_size // num_heads
        self.scaling = self.hs ** -0.5
        self.k_proj = nn.Linear(hidden_size, hidden_size)
        self.v_proj = nn.Linear(hidden_size, hidden_size)
        self.q_proj = nn.Linear(hidden_size, hidden_size)
        self.out_proj = nn.Linear(hidden_size, hidden_size)

    def forward(self, x: Tensor, attention_mask: Tensor):
        B, T, C = x.shape
        dtype = x.dtype
        mn = torch.finfo(dtype).min
        causal = torch.full((T, T), mn)
        cond = torch.arange(T)
        causal = causal.masked_fill(cond < (cond + 1).view(T, 1), 0)[None, None, :, :].expand(B, 1, T, T)
        inverted = 1.0 - attention_mask[:, None, None, :].expand(B, 1, T, T).to(dtype)
        mask = inverted.masked_fill(inverted.to(torch.bool), mn) + causal

        def shape(t):
            return t.view(B, T, self.nh, self.hs).transpose(1, 2).reshape(B * self.nh, T, self.hs)

        q = shape(self.q_proj(x) * self.scaling)
        k, v = shape(self.k_proj(x)), shape(self.v_proj(x))
        w = torch.bmm(q, k.transpose(1, 2))
        w = w.view(B, self.nh, T, T) + mask
        w = torch.max(w, torch.tensor(mn))
        w = nn.functional.softmax(w.view(B * self.nh, T, T), dim=-1)
        out = torch.bmm(w, v).view(B, self.nh, T, self.hs).transpose(1, 2).reshape(B, T, C)
        return self.out_proj(out)


class Gemma2SoftcapAttention(nn.Module):
    """Gemma 2's eager attention (transformers' Gemma2Attention, without
    rotary embedding and padding): the scores q·kᵀ·scaling soft-capped as
    tanh(s / cap)·cap (attn_logit_softcapping), the causal mask added
    (finfo.min above the diagonal), softmax in float32, · v."""

    def __init__(self, hidden_size: int, num_heads: int, softcap: float = 50.0):
        super().__init__()
        self.nh, self.hs = num_heads, hidden_size // num_heads
        self.softcap = softcap
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, x: Tensor):
        B, S, C = x.shape
        q, k, v = (p(x).view(B, S, self.nh, self.hs).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        w = torch.matmul(q, k.transpose(2, 3)) * self.hs ** -0.5
        w = torch.tanh(w / self.softcap) * self.softcap
        causal = torch.full((S, S), torch.finfo(x.dtype).min).triu(1)
        w = nn.functional.softmax(w + causal, dim=-1, dtype=torch.float32).to(q.dtype)
        return self.o_proj(torch.matmul(w, v).transpose(1, 2).reshape(B, S, C))


class TemperatureAttention(nn.Module):
    """Multi-head self-attention whose scores are divided by a learned
    temperature per head, clamped away from zero, as the from-scratch
    Transformers' ScaledDotProductAttention(temperature) does when the
    temperature is a parameter per head: (q @ kᵀ) / temperature.clamp(min=1e-2)
    with temperature [H, 1, 1], then masked_fill of the padded keys with -inf,
    softmax and · v. Packed qkv as timm's (reshape, permute, index)."""

    def __init__(self, hidden_size: int, num_heads: int):
        super().__init__()
        self.nh, self.hs = num_heads, hidden_size // num_heads
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size)
        self.temperature = nn.Parameter(torch.full((num_heads, 1, 1), self.hs ** 0.5))
        with torch.no_grad():  # trained values rather than the init's: one a head
            self.temperature.mul_(torch.linspace(0.5, 2.0, num_heads).view(num_heads, 1, 1))
        self.proj = nn.Linear(hidden_size, hidden_size)

    def forward(self, x: Tensor, mask: Tensor):
        B, S, C = x.shape
        qkv = self.qkv(x).reshape(B, S, 3, self.nh, self.hs).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q @ k.transpose(-2, -1)) / self.temperature.clamp(min=1e-2)
        attn = attn.masked_fill(mask[:, None, None, :] == 0, float("-inf"))
        attn = attn.softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(B, S, C))


class SamRelPosAttention(nn.Module):
    """segment_anything's image-encoder Attention with use_rel_pos (the
    same as transformers' SamVisionAttention and, with its own names,
    VitDetAttention): x is (B, h, w, C) patches; q, k, v split from one
    qkv Linear as (B·heads, h·w, d); the scores (q · scale) @ kᵀ get a
    relative-position term by the key's grid row plus one by its column,
    add_decomposed_rel_pos: rel_h = einsum("bhwc,hkc->bhwk", q, Rh) and
    rel_w = einsum("bhwc,wkc->bhwk", q, Rw), Rh and Rw gathered from the
    learned tables by q - k + size - 1, added to the scores viewed as
    (B·heads, h, w, h, w) and viewed back; softmax, · v, heads merged.
    The tables are random (trained values rather than the init's zeros)."""

    def __init__(self, hidden_size: int, num_heads: int, input_size: tuple):
        super().__init__()
        self.nh, self.hs = num_heads, hidden_size // num_heads
        self.scale = self.hs ** -0.5
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size)
        self.proj = nn.Linear(hidden_size, hidden_size)
        self.rel_pos_h = nn.Parameter(0.3 * torch.randn(2 * input_size[0] - 1, self.hs))
        self.rel_pos_w = nn.Parameter(0.3 * torch.randn(2 * input_size[1] - 1, self.hs))

    @staticmethod
    def get_rel_pos(q_size: int, k_size: int, rel_pos: Tensor) -> Tensor:
        q_coords = torch.arange(q_size)[:, None] * max(k_size / q_size, 1.0)
        k_coords = torch.arange(k_size)[None, :] * max(q_size / k_size, 1.0)
        relative_coords = (q_coords - k_coords) + (k_size - 1) * max(q_size / k_size, 1.0)
        return rel_pos[relative_coords.long()]

    def forward(self, x: Tensor):
        B, h, w, _ = x.shape
        qkv = self.qkv(x).reshape(B, h * w, 3, self.nh, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.reshape(3, B * self.nh, h * w, -1).unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        Rh = self.get_rel_pos(h, h, self.rel_pos_h)
        Rw = self.get_rel_pos(w, w, self.rel_pos_w)
        r_q = q.reshape(B * self.nh, h, w, self.hs)
        rel_h = torch.einsum("bhwc,hkc->bhwk", r_q, Rh)
        rel_w = torch.einsum("bhwc,wkc->bhwk", r_q, Rw)
        attn = (attn.view(B * self.nh, h, w, h, w) + rel_h[:, :, :, :, None] + rel_w[:, :, :, None, :]).view(B * self.nh, h * w, h * w)
        attn = attn.softmax(dim=-1)
        x = (attn @ v).view(B, self.nh, h, w, -1).permute(0, 2, 3, 1, 4).reshape(B, h, w, -1)
        return self.proj(x)


class SamVisionAttention(SamRelPosAttention):
    """transformers' SamVisionAttention, SAM's image-encoder attention as
    transformers writes it: get_decomposed_rel_pos returns the sum
    rel_h[:, :, :, :, None] + rel_w[:, :, :, None, :] (the whole
    (B·heads, h, w, h, w) grid), reshape_as the scores, added to them; the
    softmax in float32, .to(query.dtype). The same weights and tables as
    SamRelPosAttention."""

    def forward(self, x: Tensor):
        B, h, w, _ = x.shape
        qkv = self.qkv(x).reshape(B, h * w, 3, self.nh, -1).permute(2, 0, 3, 1, 4)
        query, key, value = qkv.reshape(3, B * self.nh, h * w, -1).unbind(0)
        attn_weights = (query * self.scale) @ key.transpose(-2, -1)
        rel_h = torch.einsum("bhwc,hkc->bhwk", query.reshape(B * self.nh, h, w, self.hs), self.get_rel_pos(h, h, self.rel_pos_h))
        rel_w = torch.einsum("bhwc,wkc->bhwk", query.reshape(B * self.nh, h, w, self.hs), self.get_rel_pos(w, w, self.rel_pos_w))
        decomposed_rel_pos = rel_h[:, :, :, :, None] + rel_w[:, :, :, None, :]
        attn_weights = attn_weights + decomposed_rel_pos.reshape_as(attn_weights)
        attn_weights = nn.functional.softmax(attn_weights, dtype=torch.float32, dim=-1).to(query.dtype)
        out = (attn_weights @ value).reshape(B, self.nh, h, w, -1).permute(0, 2, 3, 1, 4).reshape(B, h, w, -1)
        return self.proj(out)


class BertStyleProjections(nn.Module):
    """The query, key and value Linears of transformers' BERT-style
    self-attention (BertSelfAttention and the models that copy it), each
    hidden_size wide, with num_heads heads: the subclasses' forward."""

    def __init__(self, hidden_size: int, num_heads: int):
        super().__init__()
        self.nh, self.hs = num_heads, hidden_size // num_heads
        self.query = nn.Linear(hidden_size, hidden_size)
        self.key = nn.Linear(hidden_size, hidden_size)
        self.value = nn.Linear(hidden_size, hidden_size)


class LayoutLMv3SelfAttention(BertStyleProjections):
    """transformers' LayoutLMv3SelfAttention (document AI: LayoutLMv3): q / sqrt(d)
    times kᵀ, plus (rel_pos + rel_2d_pos) / sqrt(d) (the 1-D and 2-D relative
    position biases the encoder computes once and passes to every layer),
    plus the extended attention mask (1 - mask) · finfo.min, then CogView's
    PB-relax softmax: the scores / 32, minus their row maximum
    (amax(dim=-1).unsqueeze(-1)), times 32, softmax; · v, heads merged."""

    def transpose_for_scores(self, x: Tensor) -> Tensor:
        return x.view(x.size()[:-1] + (self.nh, self.hs)).permute(0, 2, 1, 3)

    @staticmethod
    def cogview_attention(attention_scores: Tensor, alpha: int = 32) -> Tensor:
        scaled_attention_scores = attention_scores / alpha
        max_value = scaled_attention_scores.amax(dim=(-1)).unsqueeze(-1)
        new_attention_scores = (scaled_attention_scores - max_value) * alpha
        return nn.Softmax(dim=-1)(new_attention_scores)

    def forward(self, x: Tensor, attention_mask: Tensor, rel_pos: Tensor, rel_2d_pos: Tensor):
        query_layer = self.transpose_for_scores(self.query(x))
        key_layer = self.transpose_for_scores(self.key(x))
        value_layer = self.transpose_for_scores(self.value(x))
        attention_scores = torch.matmul(query_layer / math.sqrt(self.hs), key_layer.transpose(-1, -2))
        attention_scores += (rel_pos + rel_2d_pos) / math.sqrt(self.hs)
        extended = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        attention_scores = attention_scores + extended
        attention_probs = self.cogview_attention(attention_scores)
        context_layer = torch.matmul(attention_probs, value_layer).permute(0, 2, 1, 3).contiguous()
        return context_layer.view(context_layer.size()[:-2] + (self.nh * self.hs,))


class MViTv2Attention(nn.Module):
    """timm's MultiScaleAttention (MViTv2) at a stage whose keys and values
    are not pooled, with rel_pos_type "spatial" and no class token: q, k, v
    split from one qkv Linear, scores (q · scale) @ kᵀ, then
    cal_rel_pos_type: einsums of q with tables gathered by relative row and
    column (the distances scaled when the query and key grids differ), added
    by a slice assignment, attn[:, :, 0:, 0:] = (attn[:, :, 0:, 0:].view(B,
    heads, h, w, h, w) + rel_h.unsqueeze(-1) + rel_w.unsqueeze(-2)).view(...)
    (Expand, ScatterND); softmax, · v, heads merged, proj."""

    def __init__(self, hidden_size: int, num_heads: int, grid: tuple):
        super().__init__()
        self.nh, self.hs, self.grid = num_heads, hidden_size // num_heads, grid
        self.scale = self.hs ** -0.5
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size)
        self.proj = nn.Linear(hidden_size, hidden_size)
        size = max(grid)
        self.rel_pos_h = nn.Parameter(0.3 * torch.randn(2 * size - 1, self.hs))
        self.rel_pos_w = nn.Parameter(0.3 * torch.randn(2 * size - 1, self.hs))

    # timm's get_rel_pos: the same distances as segment_anything's.
    get_rel_pos = staticmethod(SamRelPosAttention.get_rel_pos)

    def forward(self, x: Tensor):
        B, N, _ = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.nh, -1).permute(2, 0, 3, 1, 4).unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        q_h, q_w = self.grid
        k_h, k_w = self.grid
        Rh = self.get_rel_pos(q_h, k_h, self.rel_pos_h)
        Rw = self.get_rel_pos(q_w, k_w, self.rel_pos_w)
        r_q = q.reshape(B, self.nh, q_h, q_w, self.hs)
        rel_h = torch.einsum("byhwc,hkc->byhwk", r_q, Rh)
        rel_w = torch.einsum("byhwc,wkc->byhwk", r_q, Rw)
        attn[:, :, 0:, 0:] = (
            attn[:, :, 0:, 0:].view(B, -1, q_h, q_w, k_h, k_w) + rel_h.unsqueeze(-1) + rel_w.unsqueeze(-2)
        ).view(B, -1, q_h * q_w, k_h * k_w)
        attn = attn.softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(B, N, -1))


class TalkingHeadsAttention(nn.Module):
    """x-transformers' Attention with talking heads before the softmax
    (Shazeer et al., "Talking-Heads Attention"), as its early versions
    wrote it (its rearranges as view/transpose): the scaled scores of the
    heads mixed by einsum("b h i j, h k -> b k i j") with a learned
    [H, H] matrix. The fused attention computes each head's softmax from
    its own scores: the model runs node by node, and `attnrun inspect`
    says so."""

    def __init__(self, hidden_size: int, num_heads: int):
        super().__init__()
        self.nh, self.hs = num_heads, hidden_size // num_heads
        self.to_q = nn.Linear(hidden_size, hidden_size, bias=False)
        self.to_k = nn.Linear(hidden_size, hidden_size, bias=False)
        self.to_v = nn.Linear(hidden_size, hidden_size, bias=False)
        self.pre_softmax_proj = nn.Parameter(torch.randn(num_heads, num_heads))
        self.to_out = nn.Linear(hidden_size, hidden_size)

    def forward(self, x: Tensor):
        B, S, C = x.shape
        q, k, v = (p(x).view(B, S, self.nh, self.hs).transpose(1, 2) for p in (self.to_q, self.to_k, self.to_v))
        dots = torch.einsum("b h i d, b h j d -> b h i j", q, k) * self.hs ** -0.5
        dots = torch.einsum("b h i j, h k -> b k i j", dots, self.pre_softmax_proj)
        attn = dots.softmax(dim=-1)
        out = torch.einsum("b h i j, b h j d -> b h i d", attn, v)
        return self.to_out(out.transpose(1, 2).reshape(B, S, C))


class HeadMaskAttention(BertStyleProjections):
    """transformers' BertSelfAttention exported with its head_mask input:
    attention_probs * head_mask after the softmax, head_mask (H,) viewed
    as (1, H, 1, 1) as BertModel.get_head_mask does (1.0 keeps a head, 0.0
    prunes it). A factor a head on the weights is one on V: the fusion
    reads V times it."""

    def forward(self, x: Tensor, head_mask: Tensor):
        B, S, C = x.shape
        q, k, v = (p(x).view(B, S, self.nh, self.hs).permute(0, 2, 1, 3) for p in (self.query, self.key, self.value))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.hs)
        probs = nn.functional.softmax(scores, dim=-1)
        probs = probs * head_mask.view(1, -1, 1, 1)
        return torch.matmul(probs, v).permute(0, 2, 1, 3).reshape(B, S, C)


class PostSoftmaxKeyMaskAttention(nn.Module):
    """Multi-head self-attention that masks the padded keys after the
    softmax instead of before it: softmax(q·kᵀ/√d) * keep[:, None, None, :]
    (float, 1 = keep), not renormalized, then · v, as some code bases write
    their padding mask. A factor a key on the weights is one on V's rows:
    the fusion reads V times it. With query=True the mask multiplies the
    query rows instead (keep[:, None, :, None]: a factor a query, which
    scales output rows, not V): that model runs node by node, and `attnrun
    inspect` names the Mul."""

    def __init__(self, hidden_size: int, num_heads: int, query: bool = False):
        super().__init__()
        self.nh, self.hs, self.query = num_heads, hidden_size // num_heads, query
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size)
        self.out = nn.Linear(hidden_size, hidden_size)

    def forward(self, x: Tensor, keep: Tensor):
        B, S, C = x.shape
        q, k, v = self.qkv(x).reshape(B, S, 3, self.nh, self.hs).permute(2, 0, 3, 1, 4)
        probs = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(self.hs), dim=-1)
        if self.query:
            probs = probs * keep[:, None, :, None]
        else:
            probs = probs * keep[:, None, None, :]
        return self.out((probs @ v).transpose(1, 2).reshape(B, S, C))


class Float64SoftmaxAttention(nn.Module):
    """Multi-head self-attention whose softmax runs in float64
    (softmax(scores.double()).float()): the Casts to and from float64 keep
    attnrun's float32 fused attention out, and `attnrun inspect` says so."""

    def __init__(self, hidden_size: int, num_heads: int):
        super().__init__()
        self.nh, self.hs = num_heads, hidden_size // num_heads
        self.Wqkv = nn.Linear(hidden_size, hidden_size * 3)
        self.Wo = nn.Linear(hidden_size, hidden_size)

    def forward(self, x: Tensor):
        B, S, C = x.shape
        q, k, v = self.Wqkv(x).view(B, S, 3, self.nh, self.hs).permute(2, 0, 3, 1, 4).unbind(dim=0)
        w = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(self.hs)).double(), dim=-1).float()
        return self.Wo((w @ v).transpose(1, 2).reshape(B, S, C))


class DiffusersSpatialAttention(nn.Module):
    """The spatial self-attention block of diffusion UNets and VAEs, as
    diffusers' `Attention(query_dim=C, heads, dim_head, norm_num_groups=G,
    residual_connection=True, upcast_softmax=True)` computes it with its
    classic `AttnProcessor`: (B, C, H, W) viewed as (B, H·W, C), GroupNorm
    over the channels (on the transposed view), Linear to_q/to_k/to_v,
    heads folded into the batch (head_to_batch_dim), scores by
    `torch.baddbmm(empty, q, kᵀ, beta=0, alpha=dim_head^-0.5)`, softmax in
    float32, bmm with v, heads back (batch_to_head_dim), to_out Linear
    (dropout: identity in eval), back to (B, C, H, W), residual, divided by
    rescale_output_factor."""

    def __init__(self, channels: int, heads: int, dim_head: int, groups: int,
                 rescale_output_factor: float = 1.0):
        super().__init__()
        inner = heads * dim_head
        self.heads = heads
        self.scale = dim_head ** -0.5
        self.rescale_output_factor = rescale_output_factor
        self.group_norm = nn.GroupNorm(num_channels=channels, num_groups=groups, eps=1e-6, affine=True)
        self.to_q = nn.Linear(channels, inner)
        self.to_k = nn.Linear(channels, inner)
        self.to_v = nn.Linear(channels, inner)
        self.to_out = nn.ModuleList([nn.Linear(inner, channels), nn.Dropout(0.0)])
        with torch.no_grad():  # a trained GroupNorm is not the identity
            self.group_norm.weight.uniform_(0.5, 1.5)
            self.group_norm.bias.uniform_(-0.5, 0.5)

    def head_to_batch_dim(self, tensor):
        head_size = self.heads
        batch_size, seq_len, dim = tensor.shape
        tensor = tensor.reshape(batch_size, seq_len, head_size, dim // head_size)
        tensor = tensor.permute(0, 2, 1, 3)
        return tensor.reshape(batch_size * head_size, seq_len, dim // head_size)

    def batch_to_head_dim(self, tensor):
        head_size = self.heads
        batch_size, seq_len, dim = tensor.shape
        tensor = tensor.reshape(batch_size // head_size, head_size, seq_len, dim)
        return tensor.permute(0, 2, 1, 3).reshape(batch_size // head_size, seq_len, dim * head_size)

    def get_attention_scores(self, query, key):
        dtype = query.dtype
        baddbmm_input = torch.empty(query.shape[0], query.shape[1], key.shape[1], dtype=query.dtype)
        attention_scores = torch.baddbmm(baddbmm_input, query, key.transpose(-1, -2), beta=0, alpha=self.scale)
        attention_scores = attention_scores.float()  # upcast_softmax
        attention_probs = attention_scores.softmax(dim=-1)
        return attention_probs.to(dtype)

    def forward(self, hidden_states: Tensor):
        residual = hidden_states
        batch_size, channel, height, width = hidden_states.shape
        hidden_states = hidden_states.view(batch_size, channel, height * width).transpose(1, 2)
        hidden_states = self.group_norm(hidden_states.transpose(1, 2)).transpose(1, 2)
        query = self.to_q(hidden_states)
        key = self.to_k(hidden_states)
        value = self.to_v(hidden_states)
        query = self.head_to_batch_dim(query)
        key = self.head_to_batch_dim(key)
        value = self.head_to_batch_dim(value)
        attention_probs = self.get_attention_scores(query, key)
        hidden_states = torch.bmm(attention_probs, value)
        hidden_states = self.batch_to_head_dim(hidden_states)
        hidden_states = self.to_out[0](hidden_states)
        hidden_states = self.to_out[1](hidden_states)
        hidden_states = hidden_states.transpose(-1, -2).reshape(batch_size, channel, height, width)
        hidden_states = hidden_states + residual
        return hidden_states / self.rescale_output_factor


class TimmViTAttention(nn.Module):
    """timm's vision transformer Attention (vision_transformer.py, the
    non-fused path): a qkv Linear reshaped (B, N, 3, H, D) and permuted to
    (3, B, H, N, D). Recent timm unbinds it and scales q first
    (`q, k, v = qkv.unbind(0); q = q * self.scale`); older timm indexes it
    and scales the scores (`q, k, v = qkv[0], qkv[1], qkv[2]`,
    `attn = (q @ k.transpose(-2, -1)) * self.scale`): indexed=True."""

    def __init__(self, dim: int, num_heads: int, indexed: bool = False):
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.indexed = indexed

    def forward(self, x: Tensor):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        if self.indexed:
            q, k, v = qkv[0], qkv[1], qkv[2]
            attn = (q @ k.transpose(-2, -1)) * self.scale
        else:
            q, k, v = qkv.unbind(0)
            q = q * self.scale
            attn = q @ k.transpose(-2, -1)
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class EspnetRelPosAttention(nn.Module):
    """ESPnet's LegacyRelPositionMultiHeadedAttention (the Conformer
    encoder's self-attention; `zero_triu=False`, so no rel_shift), called as
    the encoder layer calls it, self_attn(x, x, x, pos_emb, mask):
    (matrix_ac + matrix_bd) / sqrt(d_k) with learned pos_bias_u/v, then
    forward_attention: masked_fill(mask, finfo.min), softmax, and
    masked_fill(mask, 0.0) again on the weights. mask: (B, 1, T) bool,
    True = a valid frame."""

    def __init__(self, n_head: int, n_feat: int):
        super().__init__()
        self.d_k = n_feat // n_head
        self.h = n_head
        self.linear_q = nn.Linear(n_feat, n_feat)
        self.linear_k = nn.Linear(n_feat, n_feat)
        self.linear_v = nn.Linear(n_feat, n_feat)
        self.linear_out = nn.Linear(n_feat, n_feat)
        self.linear_pos = nn.Linear(n_feat, n_feat, bias=False)
        self.pos_bias_u = nn.Parameter(torch.randn(self.h, self.d_k) * 0.1)
        self.pos_bias_v = nn.Parameter(torch.randn(self.h, self.d_k) * 0.1)

    def forward_qkv(self, query, key, value):
        n_batch = query.size(0)
        q = self.linear_q(query).view(n_batch, -1, self.h, self.d_k)
        k = self.linear_k(key).view(n_batch, -1, self.h, self.d_k)
        v = self.linear_v(value).view(n_batch, -1, self.h, self.d_k)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def forward_attention(self, value, scores, mask):
        n_batch = value.size(0)
        mask = mask.unsqueeze(1).eq(0)  # (batch, 1, *, time2)
        min_value = torch.finfo(scores.dtype).min
        scores = scores.masked_fill(mask, min_value)
        attn = torch.softmax(scores, dim=-1).masked_fill(mask, 0.0)
        x = torch.matmul(attn, value)
        x = x.transpose(1, 2).contiguous().view(n_batch, -1, self.h * self.d_k)
        return self.linear_out(x)

    def forward(self, x: Tensor, pos_emb: Tensor, mask: BoolTensor):
        q, k, v = self.forward_qkv(x, x, x)
        q = q.transpose(1, 2)  # (batch, time1, head, d_k)
        n_batch_pos = pos_emb.size(0)
        p = self.linear_pos(pos_emb).view(n_batch_pos, -1, self.h, self.d_k)
        p = p.transpose(1, 2)  # (batch, head, time1, d_k)
        q_with_bias_u = (q + self.pos_bias_u).transpose(1, 2)
        q_with_bias_v = (q + self.pos_bias_v).transpose(1, 2)
        matrix_ac = torch.matmul(q_with_bias_u, k.transpose(-2, -1))
        matrix_bd = torch.matmul(q_with_bias_v, p.transpose(-2, -1))
        scores = (matrix_ac + matrix_bd) / math.sqrt(self.d_k)
        return self.forward_attention(v, scores, mask)


class FalconMultiQueryAttention(nn.Module):
    """Multi-query attention as Falcon-7B computes it: one fused projection
    to H query heads and one shared key and value head, taken with index
    lists (`fused[:, :, [-2]]`, which keep the head axis) and broadcast in
    the products (no repeat), a causal mask by masked_fill(-inf)."""

    def __init__(self, dim: int, num_heads: int):
        super().__init__()
        self.h = num_heads
        self.d = dim // num_heads
        self.query_key_value = nn.Linear(dim, dim + 2 * self.d, bias=False)
        self.dense = nn.Linear(dim, dim, bias=False)

    def forward(self, x: Tensor):
        B, S, C = x.shape
        fused = self.query_key_value(x).view(B, S, self.h + 2, self.d)
        q = fused[:, :, :-2].transpose(1, 2)   # (B, H, S, D)
        k = fused[:, :, [-2]].transpose(1, 2)  # (B, 1, S, D)
        v = fused[:, :, [-1]].transpose(1, 2)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.d)
        causal = torch.ones(S, S, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(causal, float("-inf"))
        attn = F.softmax(scores, dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(B, S, C)
        return self.dense(out)


def swin_relative_position_index(window_size):
    """Swin's pair-wise relative position index (Wh·Ww, Wh·Ww) of the tokens
    of a window: the row of each pair's offset in the relative position
    table (microsoft/Swin-Transformer, shared by V1 and V2)."""
    coords_h = torch.arange(window_size[0])
    coords_w = torch.arange(window_size[1])
    coords = torch.stack(torch.meshgrid([coords_h, coords_w]))  # 2, Wh, Ww
    coords_flatten = torch.flatten(coords, 1)  # 2, Wh*Ww
    relative_coords = coords_flatten[:, :, None] - coords_flatten[:, None, :]  # 2, Wh*Ww, Wh*Ww
    relative_coords = relative_coords.permute(1, 2, 0).contiguous()  # Wh*Ww, Wh*Ww, 2
    relative_coords[:, :, 0] += window_size[0] - 1  # shift to start from 0
    relative_coords[:, :, 1] += window_size[1] - 1
    relative_coords[:, :, 0] *= 2 * window_size[1] - 1
    return relative_coords.sum(-1)  # Wh*Ww, Wh*Ww


def swin_position_bias(table, index, window_size):
    """Swin's relative position bias, (nH, Wh*Ww, Wh*Ww): the table's rows
    picked by the relative position index, heads first."""
    n = window_size[0] * window_size[1]
    bias = table[index.view(-1)].view(n, n, -1)  # Wh*Ww,Wh*Ww,nH
    return bias.permute(2, 0, 1).contiguous()  # nH, Wh*Ww, Wh*Ww


def swin_masked_attend(m, attn, mask, v, B_, N, C):
    """The end of Swin's (and Swin V2's) WindowAttention.forward: the
    window mask added through a (B_/nW, nW) view of the scores, the
    softmax, the product with v and the output projection of module m."""
    nW = mask.shape[0]
    attn = attn.view(B_ // nW, nW, m.num_heads, N, N) + mask.unsqueeze(1).unsqueeze(0)
    attn = attn.view(-1, m.num_heads, N, N)
    attn = m.softmax(attn)
    x = (attn @ v).transpose(1, 2).reshape(B_, N, C)
    return m.proj(x)


class SwinWindowAttention(nn.Module):
    """Swin Transformer's WindowAttention (microsoft/Swin-Transformer
    models/swin_transformer.py): multi-head self-attention inside each
    window of N = Wh·Ww tokens, with a learned relative position bias
    (a table indexed by a registered relative_position_index buffer, which
    the export folds into an [H, N, N] constant) and the shifted-window
    mask (nW, N, N) of 0 / -100 added through a 5-D view of the scores
    (B_ // nW, nW, H, N, N), then viewed back to (B_, H, N, N). Dropout is
    left out (eval)."""

    def __init__(self, dim, window_size, num_heads, qkv_bias=True, qk_scale=None):
        super().__init__()
        self.dim = dim
        self.window_size = window_size  # Wh, Ww
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = qk_scale or head_dim ** -0.5

        # define a parameter table of relative position bias
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * window_size[0] - 1) * (2 * window_size[1] - 1), num_heads))  # 2*Wh-1 * 2*Ww-1, nH

        # get pair-wise relative position index for each token inside the window
        self.register_buffer("relative_position_index", swin_relative_position_index(window_size))

        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        nn.init.trunc_normal_(self.relative_position_bias_table, std=.02)
        with torch.no_grad():  # a trained bias is larger than the init's
            self.relative_position_bias_table.normal_(0, 0.5)
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x, mask):
        """
        Args:
            x: input features with shape of (num_windows*B, N, C)
            mask: (0/-100) mask with shape of (num_windows, Wh*Ww, Wh*Ww)
        """
        B_, N, C = x.shape
        qkv = self.qkv(x).reshape(B_, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # make torchscript happy (cannot use tensor as tuple)

        q = q * self.scale
        attn = (q @ k.transpose(-2, -1))

        relative_position_bias = swin_position_bias(self.relative_position_bias_table, self.relative_position_index, self.window_size)
        return swin_masked_attend(self, attn + relative_position_bias.unsqueeze(0), mask, v, B_, N, C)


class SwinV2WindowAttention(nn.Module):
    """Swin Transformer V2's WindowAttention (microsoft/Swin-Transformer
    models/swin_transformer_v2.py): cosine attention inside each window,
    F.normalize(q) · F.normalize(k)ᵀ times a learned per-head logit scale
    (exp of a clamped [H, 1, 1] parameter), plus a continuous relative
    position bias (16·sigmoid of a 2-layer MLP over a log-spaced coordinate
    table, indexed by a buffer) and the shifted-window mask added through a
    5-D view of the scores, as in V1. q and v have biases, k none (the qkv
    bias is cat(q_bias, zeros, v_bias)). Dropout is left out (eval); no
    pretrained window size."""

    def __init__(self, dim, window_size, num_heads):
        super().__init__()
        self.dim = dim
        self.window_size = window_size  # Wh, Ww
        self.num_heads = num_heads
        self.logit_scale = nn.Parameter(torch.log(10 * torch.ones((num_heads, 1, 1))))
        self.cpb_mlp = nn.Sequential(nn.Linear(2, 512, bias=True), nn.ReLU(inplace=True),
                                     nn.Linear(512, num_heads, bias=False))
        relative_coords_h = torch.arange(-(self.window_size[0] - 1), self.window_size[0], dtype=torch.float32)
        relative_coords_w = torch.arange(-(self.window_size[1] - 1), self.window_size[1], dtype=torch.float32)
        relative_coords_table = torch.stack(
            torch.meshgrid([relative_coords_h, relative_coords_w])).permute(1, 2, 0).contiguous().unsqueeze(0)
        relative_coords_table[:, :, :, 0] /= (self.window_size[0] - 1)
        relative_coords_table[:, :, :, 1] /= (self.window_size[1] - 1)
        relative_coords_table *= 8  # normalize to -8, 8
        relative_coords_table = torch.sign(relative_coords_table) * torch.log2(
            torch.abs(relative_coords_table) + 1.0) / math.log2(8)
        self.register_buffer("relative_coords_table", relative_coords_table)
        self.register_buffer("relative_position_index", swin_relative_position_index(window_size))
        self.qkv = nn.Linear(dim, dim * 3, bias=False)
        self.q_bias = nn.Parameter(torch.zeros(dim))
        self.v_bias = nn.Parameter(torch.zeros(dim))
        self.proj = nn.Linear(dim, dim)
        self.softmax = nn.Softmax(dim=-1)
        with torch.no_grad():  # trained values rather than the init's
            self.q_bias.normal_(0, 0.5)
            self.v_bias.normal_(0, 0.5)
            # per head; the last above the clamp at log(100)
            self.logit_scale.copy_(torch.linspace(1.0, 5.0, num_heads).view(num_heads, 1, 1))

    def forward(self, x, mask):
        """
        Args:
            x: input features with shape of (num_windows*B, N, C)
            mask: (0/-100) mask with shape of (num_windows, Wh*Ww, Wh*Ww)
        """
        B_, N, C = x.shape
        qkv_bias = torch.cat((self.q_bias, torch.zeros_like(self.v_bias, requires_grad=False), self.v_bias))
        qkv = F.linear(input=x, weight=self.qkv.weight, bias=qkv_bias)
        qkv = qkv.reshape(B_, N, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # make torchscript happy (cannot use tensor as tuple)

        # cosine attention
        attn = (F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1))
        logit_scale = torch.clamp(self.logit_scale, max=torch.log(torch.tensor(1. / 0.01))).exp()
        attn = attn * logit_scale

        relative_position_bias_table = self.cpb_mlp(self.relative_coords_table).view(-1, self.num_heads)
        relative_position_bias = swin_position_bias(relative_position_bias_table, self.relative_position_index, self.window_size)
        relative_position_bias = 16 * torch.sigmoid(relative_position_bias)
        return swin_masked_attend(self, attn + relative_position_bias.unsqueeze(0), mask, v, B_, N, C)


def bloom_build_alibi_tensor(attention_mask, num_heads, dtype):
    """transformers' build_alibi_tensor (models/bloom/modeling_bloom.py):
    the ALiBi bias (B·num_heads, 1, S) from the key positions
    cumsum(attention_mask) - 1, for a power of two number of heads."""
    batch_size, seq_length = attention_mask.shape
    closest_power_of_2 = 2 ** math.floor(math.log2(num_heads))
    assert closest_power_of_2 == num_heads, "this copy keeps to a power of two heads"
    base = torch.tensor(2 ** (-(2 ** -(math.log2(closest_power_of_2) - 3))), dtype=torch.float32)
    powers = torch.arange(1, 1 + closest_power_of_2, dtype=torch.int32)
    slopes = torch.pow(base, powers)
    arange_tensor = ((attention_mask.cumsum(dim=-1) - 1) * attention_mask)[:, None, :]
    alibi = slopes[..., None] * arange_tensor
    return alibi.reshape(batch_size * num_heads, 1, seq_length).to(dtype)


class BloomAttention(nn.Module):
    """BLOOM's attention (transformers' BloomAttention with
    build_alibi_tensor and _prepare_4d_causal_attention_mask, eager, no KV
    cache): the heads folded into the batch, the ALiBi bias (B·H, 1, S)
    from cumsum(attention_mask) added by baddbmm(alibi, q, k, beta=1,
    alpha=1/sqrt(d)) on (B·H, S, D) x (B·H, D, S), the scores viewed as
    (B, H, S, S) and masked_fill'ed with finfo(float32).min where the key
    is in the future or padding, softmax in float32, viewed back to
    (B·H, S, S) and bmm'ed with V, then merged back to (B, S, H·D) and the
    dense projection. Dropout is left out (eval)."""

    def __init__(self, hidden_size, n_head):
        super().__init__()
        self.num_heads = n_head
        self.head_dim = hidden_size // n_head
        self.inv_norm_factor = 1.0 / math.sqrt(self.head_dim)
        self.beta = 1.0
        self.query_key_value = nn.Linear(hidden_size, 3 * hidden_size, bias=True)
        self.dense = nn.Linear(hidden_size, hidden_size)

    def _split_heads(self, fused_qkv):
        batch_size, seq_length, three_times_hidden_size = fused_qkv.shape
        fused_qkv = fused_qkv.view(batch_size, seq_length, self.num_heads, 3, self.head_dim)
        return fused_qkv[..., 0, :], fused_qkv[..., 1, :], fused_qkv[..., 2, :]

    def _merge_heads(self, x):
        batch_size_and_num_heads, seq_length, _ = x.shape
        batch_size = batch_size_and_num_heads // self.num_heads
        x = x.view(batch_size, self.num_heads, seq_length, self.head_dim)
        x = x.permute(0, 2, 1, 3)
        return x.reshape(batch_size, seq_length, self.num_heads * self.head_dim)

    def forward(self, hidden_states, attention_mask):
        batch_size, q_length, _ = hidden_states.shape
        alibi = bloom_build_alibi_tensor(attention_mask, self.num_heads, hidden_states.dtype)
        # _prepare_4d_causal_attention_mask as BLOOM reads it: True = hidden
        causal = torch.triu(torch.ones(q_length, q_length, dtype=torch.bool), diagonal=1)
        causal_mask = causal[None, None, :, :] | (attention_mask[:, None, None, :] == 0)

        fused_qkv = self.query_key_value(hidden_states)
        query_layer, key_layer, value_layer = self._split_heads(fused_qkv)
        query_layer = query_layer.transpose(1, 2).reshape(batch_size * self.num_heads, q_length, self.head_dim)
        key_layer = key_layer.permute(0, 2, 3, 1).reshape(batch_size * self.num_heads, self.head_dim, q_length)
        value_layer = value_layer.transpose(1, 2).reshape(batch_size * self.num_heads, q_length, self.head_dim)

        matmul_result = alibi.baddbmm(batch1=query_layer, batch2=key_layer, beta=self.beta, alpha=self.inv_norm_factor)
        attention_scores = matmul_result.view(batch_size, self.num_heads, q_length, q_length)
        input_dtype = attention_scores.dtype
        attn_weights = torch.masked_fill(attention_scores, causal_mask, torch.finfo(attention_scores.dtype).min)
        attention_probs = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(input_dtype)
        attention_probs_reshaped = attention_probs.view(batch_size * self.num_heads, q_length, q_length)
        context_layer = torch.bmm(attention_probs_reshaped, value_layer)
        context_layer = self._merge_heads(context_layer)
        return self.dense(context_layer)


class BartAttention(nn.Module):
    """transformers' BartAttention (eager; Marian, mBART, Pegasus, M2M100 and
    the HF Whisper/Speech2Text attentions share it), encoder self-attention:
    q_proj(x) * scaling, heads folded into the batch (bsz·H, T, D), bmm,
    the scores viewed as (bsz, H, T, S) to add the [bsz, 1, T, S] mask of
    _expand_mask ((1 - mask) masked_fill'ed with finfo.min) and viewed back,
    softmax, bmm with v. attention_mask: (bsz, S) int64, 1 = keep."""

    def __init__(self, embed_dim: int, num_heads: int):
        super().__init__()
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def _shape(self, tensor: Tensor, seq_len: int, bsz: int):
        return tensor.view(bsz, seq_len, self.num_heads, self.head_dim).transpose(1, 2).contiguous()

    @staticmethod
    def _expand_mask(mask: Tensor, dtype: torch.dtype, tgt_len: int):
        bsz, src_len = mask.size()
        expanded = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)
        inverted = 1.0 - expanded
        return inverted.masked_fill(inverted.to(torch.bool), torch.finfo(dtype).min)

    def _scores(self, hidden_states: Tensor):
        """The projections with the heads folded into the batch, and q·kᵀ
        (bsz·H, T, S): bsz, tgt_len, src_len, the scores and v."""
        bsz, tgt_len, _ = hidden_states.size()
        query_states = self.q_proj(hidden_states) * self.scaling
        key_states = self._shape(self.k_proj(hidden_states), -1, bsz)
        value_states = self._shape(self.v_proj(hidden_states), -1, bsz)
        proj_shape = (bsz * self.num_heads, -1, self.head_dim)
        query_states = self._shape(query_states, tgt_len, bsz).view(*proj_shape)
        key_states = key_states.reshape(*proj_shape)
        value_states = value_states.reshape(*proj_shape)
        src_len = key_states.size(1)
        attn_weights = torch.bmm(query_states, key_states.transpose(1, 2))
        return bsz, tgt_len, src_len, attn_weights, value_states

    def _add_mask(self, attn_weights: Tensor, mask: Tensor, bsz: int, tgt_len: int, src_len: int):
        """attn_weights + mask through a (bsz, H, T, S) view, viewed back."""
        attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len) + mask
        return attn_weights.view(bsz * self.num_heads, tgt_len, src_len)

    def _attend(self, attn_weights: Tensor, value_states: Tensor, bsz: int, tgt_len: int):
        """softmax, · v, the heads merged, out_proj."""
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_output = torch.bmm(attn_weights, value_states)
        attn_output = attn_output.view(bsz, self.num_heads, tgt_len, self.head_dim)
        attn_output = attn_output.transpose(1, 2)
        attn_output = attn_output.reshape(bsz, tgt_len, self.embed_dim)
        return self.out_proj(attn_output)

    def forward(self, hidden_states: Tensor, attention_mask: Tensor):
        bsz, tgt_len, src_len, attn_weights, value_states = self._scores(hidden_states)
        mask = self._expand_mask(attention_mask, attn_weights.dtype, tgt_len)
        attn_weights = self._add_mask(attn_weights, mask, bsz, tgt_len, src_len)
        return self._attend(attn_weights, value_states, bsz, tgt_len)


class ClipTextAttention(BartAttention):
    """transformers' CLIPAttention as CLIPTextTransformer runs it (the text
    encoder of CLIP and of Stable Diffusion): BartAttention's projections
    and head folding, with two masks added through their own views of the
    scores: the causal mask of _build_causal_attention_mask (finfo.min
    above the diagonal: empty().fill_(min).triu_(1), [bsz, 1, T, T]), then
    the padding mask of _expand_mask. attention_mask: (bsz, T) int64,
    1 = keep."""

    @staticmethod
    def _build_causal_attention_mask(bsz, seq_len, dtype):
        mask = torch.empty(bsz, seq_len, seq_len, dtype=dtype)
        mask.fill_(torch.finfo(dtype).min)
        mask.triu_(1)  # zero out the lower diagonal
        return mask.unsqueeze(1)  # expand mask

    def forward(self, hidden_states: Tensor, attention_mask: Tensor):
        bsz, tgt_len, src_len, attn_weights, value_states = self._scores(hidden_states)
        causal_attention_mask = self._build_causal_attention_mask(bsz, tgt_len, attn_weights.dtype)
        attn_weights = self._add_mask(attn_weights, causal_attention_mask, bsz, tgt_len, src_len)
        mask = self._expand_mask(attention_mask, attn_weights.dtype, tgt_len)
        attn_weights = self._add_mask(attn_weights, mask, bsz, tgt_len, src_len)
        return self._attend(attn_weights, value_states, bsz, tgt_len)


class HFBertLayer(nn.Module):
    """transformers' BertLayer (eager attention, 4.3x; RoBERTa, ELECTRA and
    the sentence-transformers encoders share it) with the extended
    attention mask BertModel builds: (1 - mask[:, None, None, :]) times
    finfo.min, added to the scores. BertSelfAttention: query, key and value
    Linears, heads split by view and permute, q·kᵀ / sqrt(d), + mask,
    softmax, · v, heads merged; BertSelfOutput: dense, LayerNorm(h + x);
    BertIntermediate: dense, GELU (erf); BertOutput: dense, LayerNorm(h +
    a). attention_mask: (bsz, seq) int64, 1 = keep."""

    def __init__(self, hidden: int, num_heads: int, intermediate: int):
        super().__init__()
        self.num_attention_heads = num_heads
        self.attention_head_size = hidden // num_heads
        self.all_head_size = hidden
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.attn_dense = nn.Linear(hidden, hidden)
        self.attn_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.output_dense = nn.Linear(intermediate, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=1e-12)

    def transpose_for_scores(self, x: Tensor) -> Tensor:
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        x = x.view(new_x_shape)
        return x.permute(0, 2, 1, 3)

    @staticmethod
    def extended_attention_mask(attention_mask: Tensor, dtype: torch.dtype) -> Tensor:
        extended = attention_mask[:, None, None, :].to(dtype=dtype)
        return (1.0 - extended) * torch.finfo(dtype).min

    def self_attention(self, hidden_states: Tensor, attention_mask: Tensor) -> Tensor:
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        attention_scores = attention_scores + attention_mask
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
        context_layer = torch.matmul(attention_probs, value_layer)
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        new_context_layer_shape = context_layer.size()[:-2] + (self.all_head_size,)
        return context_layer.view(new_context_layer_shape)

    def forward(self, hidden_states: Tensor, attention_mask: Tensor):
        mask = self.extended_attention_mask(attention_mask, hidden_states.dtype)
        context = self.self_attention(hidden_states, mask)
        attention_output = self.attn_norm(self.attn_dense(context) + hidden_states)
        intermediate = nn.functional.gelu(self.intermediate(attention_output))
        return self.output_norm(self.output_dense(intermediate) + attention_output)


class DistilBertAttention(nn.Module):
    """transformers' DistilBERT MultiHeadSelfAttention (eager): q_lin(x) /
    sqrt(d), heads split by view and transpose, q·kᵀ, masked_fill of the
    padded keys ((mask == 0) viewed as (bs, 1, 1, S) and expanded to the
    scores) with finfo.min, softmax, · v, heads merged, out_lin. mask:
    (bs, seq) int64, 1 = keep."""

    def __init__(self, dim: int, n_heads: int):
        super().__init__()
        self.dim, self.n_heads = dim, n_heads
        self.q_lin = nn.Linear(dim, dim)
        self.k_lin = nn.Linear(dim, dim)
        self.v_lin = nn.Linear(dim, dim)
        self.out_lin = nn.Linear(dim, dim)

    def forward(self, x: Tensor, mask: Tensor):
        bs, q_length, dim = x.size()
        k_length = x.size(1)
        dim_per_head = self.dim // self.n_heads
        mask_reshp = (bs, 1, 1, k_length)

        def shape(t: Tensor) -> Tensor:
            return t.view(bs, -1, self.n_heads, dim_per_head).transpose(1, 2)

        def unshape(t: Tensor) -> Tensor:
            return t.transpose(1, 2).contiguous().view(bs, -1, self.n_heads * dim_per_head)

        q = shape(self.q_lin(x))
        k = shape(self.k_lin(x))
        v = shape(self.v_lin(x))
        q = q / math.sqrt(dim_per_head)
        scores = torch.matmul(q, k.transpose(2, 3))
        mask = (mask == 0).view(mask_reshp).expand_as(scores)
        scores = scores.masked_fill(mask, torch.tensor(torch.finfo(scores.dtype).min))
        weights = nn.functional.softmax(scores, dim=-1)
        context = unshape(torch.matmul(weights, v))
        return self.out_lin(context)
