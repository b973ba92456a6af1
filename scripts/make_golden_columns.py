#!/usr/bin/env python3
"""Writes the feature-spec golden fixture for tests/test_golden_columns.c: dtrain's columns
models (wide_deep, deepfm, dcn_v2) against PyTorch in float64.

    python3 scripts/make_golden_columns.py tests/fixtures/golden_columns.bin

Needs PyTorch and NumPy (Debian: python3-torch, python3-numpy; the script runs with torch 1.13).
If the python3 that runs this script lacks torch (a pyenv shim, say), it re-runs itself once
with /usr/bin/python3.

Everything below is written from the semantics the spec format promises (docs/FEATURES.md,
include/dtrain/model_spec.h, TensorFlow's canned estimators, the DeepFM paper and TF
Recommenders' DCN-v2), not from dtrain's C code: the transform of raw text cells into numeric
values and categorical ids, and each model's logits, loss and gradients.

The columns (one spec, every model uses each of them, directly or through another):
    age    numeric, default 30, normalizer (x - 40) / 12
    hours  numeric, default 0, normalizer (x - 5) / 20
    age_b  bucketized age (the raw value) at [25, 35, 50]: 4 buckets, bisect-right
    color  vocabulary_list [red, green, blue, black]: an unknown token is dropped
    tags   identity, 6 buckets, separator '|' (empty pieces dropped), out of range dropped
    tagw   weighted tags, weights from key "tw" split the same way, paired value by value
    store  identity, 6 buckets, out of range dropped
A transformed row: the numeric columns' values in column order (dense), and each categorical
column's ids tagged with its slot (categorical columns numbered in column order) as
slot << 48 | id, in slot order, each with its weight (1 unless weighted).

The models. x0 is the concatenation of dnn_feature_columns in order: a numeric column's value;
an embedding's rows combined per example (sum: sum_j w_j e_j; mean: divided by sum_j w_j;
sqrtn: divided by sqrt(sum_j w_j^2); no ids: zeros); an indicator's multi-hot vector of summed
weights; a shared embedding one such block per listed column, all from one table.
    linear part   logits = linear/bias + sum over numeric columns x * (its row of
                  linear/numeric/kernel, rows in list order) + sum over categorical columns
                  sum_j w_j linear/<col>/weights[id_j]   (LinearClassifier, sum combiner)
    dnn part      x0 -> Dense(relu) per hidden unit count -> dnn/logits Dense(N)
    wide_deep     linear + dnn (DNNLinearCombinedClassifier)
    deepfm        fields = the deep inputs, all K wide (a numeric column: x times its
                  (1, K) table's row); logits = first order (the linear part over the fields'
                  columns) + 1/2 sum_k ((sum_f v_fk)^2 - sum_f v_fk^2) + MLP(x0)
    dcn_v2        x_{l+1} = x0 * (x_l W_l^T + b_l) + x_l, W_l (D, D); low rank
                  x_l W_l^T = (x_l V_l^T) U_l^T with U_l (D, R), V_l (R, D) (cross.h);
                  stacked: the MLP reads x_L; parallel: the MLP reads x0 and
                  cross/logits/kernel (D, N) maps x_L into the logits, which add up.
    heads         binary: sigmoid cross-entropy; multiclass:N: softmax cross-entropy; the
                  loss is the mean over the batch.
Dense kernels are (IN, OUT) as Keras's; tables (rows, dim).

Parameters: tensor t of model m (in the order this script lists them), element i:
    h = (i * 2654435761 + 12345 * (100 m + t + 1)) mod 2^32; h ^= h >> 16;
    h = (h * 0x45D9F3B) mod 2^32; h ^= h >> 16
    value = float32(scale * (h / 2^32 - 0.5))     (make_golden.py's formula_param)
scale: 2 sqrt(6 / (fan_in + fan_out)) for kernels, 0.2 for biases, 1.0 for embedding tables,
0.8 for linear tables. The values are stored in the fixture as float32, so the test reads
them rather than recomputing them. The script checks that no ReLU input lies within 1e-3 of
0, where float32 and float64 could take different sides.

Fixture format, little-endian, no padding; str = u32 length n, then n bytes:
    8 bytes "DTGOLDCL" | u32 version = 1 | u32 models
    per model:
        str name | str spec (the JSON the test parses with dt_features_parse)
        u32 B | u32 keys | keys x str key | B x keys x str cell ("" = missing)
        u32 n_dense | u32 n_slots | B x n_dense f32 dense values |
        B x (u32 nnz | nnz x (i64 entry | f32 weight))
        B x i32 labels | u32 N | B x N f64 logits | f64 mean loss
        u32 tensors | per tensor: str name | u32 kind (0 dense variable, 1 table) |
            u32 rows | u32 cols | rows x cols f32 values | rows x cols f64 gradient |
            kind 1: u32 n | n x i64 ids of the rows the batch reads, ascending
    u32 CRC32C (Castagnoli) of every byte before it
"""
import bisect
import json
import math
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# make_golden brings the weights' formula, the CRC, and the re-run under /usr/bin/python3 when
# this python3 lacks torch.
from make_golden import crc32c, formula_param  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

COLUMNS = [
    {"name": "age", "type": "numeric", "default_value": 30,
     "normalizer": {"mean": 40, "std": 12}},
    {"name": "hours", "type": "numeric", "default_value": 0,
     "normalizer": {"mean": 5, "std": 20}},
    {"name": "age_b", "type": "bucketized", "source": "age", "boundaries": [25, 35, 50]},
    {"name": "color", "type": "vocabulary_list", "vocabulary": ["red", "green", "blue", "black"]},
    {"name": "tags", "type": "identity", "num_buckets": 6, "separator": "|",
     "default_value": -1},
    {"name": "tagw", "type": "weighted", "categorical": "tags", "weight_key": "tw"},
    {"name": "store", "type": "identity", "num_buckets": 6, "default_value": -1},
]
KEYS = ["y", "age", "hours", "color", "tags", "tw", "store"]
# B = 6 rows of raw cells (the label's filled in per model); "" is a missing cell.
ROWS = [
    {"age": "23", "hours": "40", "color": "red", "tags": "1|3|3", "tw": "0.5|2|1.5", "store": "2"},
    {"age": "", "hours": "12.5", "color": "purple", "tags": "4", "tw": "3", "store": "4"},
    {"age": "61", "hours": "", "color": "blue", "tags": "", "tw": "", "store": "2"},
    {"age": "35", "hours": "-3", "color": "", "tags": "0||5|9", "tw": "1|0.25|2", "store": "7"},
    {"age": "47", "hours": "8", "color": "green", "tags": "2|1", "tw": "0.75|1", "store": "0"},
    {"age": "50", "hours": "1", "color": "black", "tags": "1|5|1", "tw": "1|1|0.5", "store": "5"},
]
B = len(ROWS)

DEEP = [
    "hours", "age",
    {"embedding": "color", "dimension": 3, "combiner": "sqrtn"},
    {"embedding": "tags", "dimension": 2, "combiner": "mean"},
    {"embedding": "tagw", "dimension": 3, "combiner": "sum"},
    {"indicator": "age_b"}, {"indicator": "tagw"},
    {"shared_embedding": ["tags", "store"], "dimension": 2, "combiner": "sqrtn"},
]
LINEAR = ["age", "age_b", "color", "tagw", "store", "hours"]
DEEPFM_FIELDS = [
    "age",
    {"embedding": "color", "dimension": 3},
    "hours",
    {"embedding": "tags", "dimension": 3, "combiner": "sum"},
    {"embedding": "tagw", "dimension": 3, "combiner": "sum"},
    {"embedding": "store", "dimension": 3},
    {"embedding": "age_b", "dimension": 3, "combiner": "sqrtn"},
]
MODELS = [
    ("wide_deep", {"type": "wide_deep", "linear_feature_columns": LINEAR,
                   "dnn_feature_columns": DEEP, "dnn_hidden_units": [5, 4], "head": "binary"}),
    ("wide_deep_multiclass", {"type": "wide_deep", "linear_feature_columns": LINEAR,
                              "dnn_feature_columns": DEEP, "dnn_hidden_units": [5],
                              "head": "multiclass:3"}),
    ("deepfm", {"type": "deepfm", "dnn_feature_columns": DEEPFM_FIELDS,
                "dnn_hidden_units": [4, 3], "head": "binary"}),
    ("dcn_v2_parallel", {"type": "dcn_v2", "dnn_feature_columns": DEEP,
                         "dnn_hidden_units": [5], "num_cross_layers": 2,
                         "structure": "parallel", "head": "multiclass:3"}),
    ("dcn_v2_stacked_low_rank", {"type": "dcn_v2", "dnn_feature_columns": DEEP,
                                 "dnn_hidden_units": [4], "num_cross_layers": 2,
                                 "projection_dim": 3, "structure": "stacked",
                                 "head": "binary"}),
]


# ---- The transform ----

def column(name):
    return next(c for c in COLUMNS if c["name"] == name)


def is_categorical(c):
    return c["type"] != "numeric"


def buckets(c):
    t = c["type"]
    if t == "bucketized":
        return len(c["boundaries"]) + 1
    if t == "vocabulary_list":
        return len(c["vocabulary"])
    if t == "identity":
        return c["num_buckets"]
    if t == "weighted":
        return buckets(column(c["categorical"]))
    raise ValueError(t)


def values_of(cell, sep):
    """A text cell's values: split at the separator, empty pieces dropped; "" is missing."""
    if sep is None:
        return [cell] if cell else []
    return [p for p in cell.split(sep) if p]


def raw_number(c, row):
    cell = row[c.get("key", c["name"])]
    return float(cell) if cell.strip() else float(c["default_value"])


def numeric_value(c, row):
    x = raw_number(c, row)
    n = c.get("normalizer")
    if n:
        x = (x - n["mean"]) / n["std"]
    return x


def categorical(c, row):
    """[(id, weight)] of column c in row, in the order of the values."""
    t = c["type"]
    if t == "bucketized":
        x = raw_number(column(c["source"]), row)
        return [(bisect.bisect_right(c["boundaries"], x), 1.0)]
    if t == "weighted":
        cat = column(c["categorical"])
        sep = cat.get("separator")
        values = values_of(row[cat.get("key", cat["name"])], sep)
        weights = values_of(row[c["weight_key"]], sep)
        assert len(weights) == len(values)
        out = []
        for v, w in zip(values, weights):
            i = one_id(cat, v)
            if i is not None:  # a dropped value takes its weight with it
                out.append((i, float(w)))
        return out
    values = values_of(row[c.get("key", c["name"])], c.get("separator"))
    return [(i, 1.0) for i in (one_id(c, v) for v in values) if i is not None]


def one_id(c, v):
    if c["type"] == "vocabulary_list":
        return c["vocabulary"].index(v) if v in c["vocabulary"] else None
    if c["type"] == "identity":
        i = int(v)
        return i if 0 <= i < c["num_buckets"] else None
    raise ValueError(c["type"])


def transform(row):
    """(dense float32 values, [(slot << 48 | id, weight)]), per docs/FEATURES.md."""
    dense, entries, slot = [], [], 0
    for c in COLUMNS:
        if not is_categorical(c):
            dense.append(np.float32(numeric_value(c, row)))
            continue
        for i, w in categorical(c, row):
            entries.append(((slot << 48) | i, np.float32(w)))
        slot += 1
    return np.array(dense, dtype=np.float32), entries


# ---- The models ----

class Params:
    """Named tensors in creation order, with their kind and the rows a batch reads."""

    def __init__(self, model_index):
        self.m = model_index
        self.items = []  # (name, kind, tensor)
        self.by_name = {}
        self.touched = {}

    def get(self, name, shape, kind, scale):
        if name in self.by_name:
            t = self.by_name[name]
            assert tuple(t.shape) == tuple(shape), name
            return t
        t_index = len(self.items)
        v = formula_param(100 * self.m + t_index, shape, scale).astype(np.float64)
        t = torch.tensor(v, requires_grad=True)
        self.items.append((name, kind, t))
        self.by_name[name] = t
        if kind == 1:
            self.touched[name] = set()
        return t

    def touch(self, name, ids):
        self.touched[name].update(int(i) for i in ids)


def glorot(fan_in, fan_out):
    return 2.0 * math.sqrt(6.0 / (fan_in + fan_out))


def lookup(P, name, table, ids_weights, combiner):
    """One example's combined embedding of (id, weight) pairs."""
    P.touch(name, [i for i, _ in ids_weights])
    dim = table.shape[1]
    if not ids_weights:
        return torch.zeros(dim, dtype=torch.float64)
    ids = torch.tensor([i for i, _ in ids_weights])
    w = torch.tensor([float(x) for _, x in ids_weights], dtype=torch.float64)
    s = (w.unsqueeze(1) * table[ids]).sum(0)
    if combiner == "mean":
        s = s / w.sum()
    elif combiner == "sqrtn":
        s = s / torch.sqrt((w * w).sum())
    return s


def deep_inputs(P, spec, numeric, cats, field_dim):
    """x0 (B, D) and, for deepfm, the fields (B, F, K)."""
    rows = []
    for b in range(B):
        parts = []
        for e in spec["dnn_feature_columns"]:
            if isinstance(e, str):
                if field_dim:
                    name = f"dnn/{e}_embedding/embedding_weights"
                    t = P.get(name, (1, field_dim), 1, 1.0)
                    P.touch(name, [0])
                    parts.append(numeric[b][e] * t[0])
                else:
                    parts.append(torch.tensor([numeric[b][e]], dtype=torch.float64))
            elif "indicator" in e:
                c = column(e["indicator"])
                v = torch.zeros(buckets(c), dtype=torch.float64)
                for i, w in cats[b][c["name"]]:
                    v[i] += float(w)
                parts.append(v)
            elif "embedding" in e:
                c = column(e["embedding"])
                name = f"dnn/{c['name']}_embedding/embedding_weights"
                t = P.get(name, (buckets(c), e["dimension"]), 1, 1.0)
                parts.append(lookup(P, name, t, cats[b][c["name"]], e.get("combiner", "mean")))
            else:
                cols = e["shared_embedding"]
                name = "dnn/" + "_".join(cols) + "_shared_embedding/embedding_weights"
                t = P.get(name, (buckets(column(cols[0])), e["dimension"]), 1, 1.0)
                for cn in cols:
                    parts.append(lookup(P, name, t, cats[b][cn], e.get("combiner", "mean")))
        rows.append(torch.cat(parts))
    return torch.stack(rows)


def linear_logits(P, columns, numeric, cats, N):
    bias = P.get("linear/bias", (1, N), 1, 0.8)
    num_cols = [c for c in columns if not is_categorical(column(c))]
    kernel = P.get("linear/numeric/kernel", (len(num_cols), N), 1, 0.8) if num_cols else None
    out = []
    for b in range(B):
        z = bias[0].clone()
        P.touch("linear/bias", [0])
        for c in columns:
            if c in num_cols:
                r = num_cols.index(c)
                z = z + numeric[b][c] * kernel[r]
                P.touch("linear/numeric/kernel", [r])
            else:
                name = f"linear/{c}/weights"
                t = P.get(name, (buckets(column(c)), N), 1, 0.8)
                pairs = cats[b][c]
                P.touch(name, [i for i, _ in pairs])
                for i, w in pairs:
                    z = z + float(w) * t[i]
        out.append(z)
    return torch.stack(out)


def mlp(P, x, hidden, N, pre_acts):
    h = x
    widths = [x.shape[1]] + list(hidden)
    for li, units in enumerate(hidden):
        k = P.get(f"dnn/hiddenlayer_{li}/kernel", (widths[li], units), 0, glorot(widths[li], units))
        bb = P.get(f"dnn/hiddenlayer_{li}/bias", (units,), 0, 0.2)
        a = h @ k + bb
        pre_acts.append(a.detach().numpy().ravel())
        h = torch.relu(a)
    k = P.get("dnn/logits/kernel", (widths[-1], N), 0, glorot(widths[-1], N))
    bb = P.get("dnn/logits/bias", (N,), 0, 0.2)
    return h @ k + bb


def cross(P, x0, L, R, D):
    x = x0
    for l in range(L):
        if R == 0:
            W = P.get(f"cross/layer_{l}/kernel", (D, D), 0, glorot(D, D))
            u = x @ W.T
        else:
            U = P.get(f"cross/layer_{l}/u", (D, R), 0, glorot(D, R))
            V = P.get(f"cross/layer_{l}/v", (R, D), 0, glorot(R, D))
            u = (x @ V.T) @ U.T
        bb = P.get(f"cross/layer_{l}/bias", (D,), 0, 0.2)
        x = x0 * (u + bb) + x
    return x


def model_forward(P, spec, numeric, cats):
    head = spec.get("head", "binary")
    N = int(head.split(":")[1]) if head.startswith("multiclass:") else 1
    kind = spec["type"]
    pre = []
    if kind == "wide_deep":
        x0 = deep_inputs(P, spec, numeric, cats, 0)
        logits = linear_logits(P, spec["linear_feature_columns"], numeric, cats, N)
        logits = logits + mlp(P, x0, spec["dnn_hidden_units"], N, pre)
    elif kind == "deepfm":
        K = next(e["dimension"] for e in spec["dnn_feature_columns"] if isinstance(e, dict))
        first = [e if isinstance(e, str) else e["embedding"] for e in spec["dnn_feature_columns"]]
        logits = linear_logits(P, first, numeric, cats, N)
        x0 = deep_inputs(P, spec, numeric, cats, K)
        v = x0.reshape(B, -1, K)
        s = v.sum(1)
        fm = 0.5 * (s * s - (v * v).sum(1)).sum(1, keepdim=True)
        logits = logits + fm + mlp(P, x0, spec["dnn_hidden_units"], N, pre)
    elif kind == "dcn_v2":
        x0 = deep_inputs(P, spec, numeric, cats, 0)
        D = x0.shape[1]
        xl = cross(P, x0, spec["num_cross_layers"], spec.get("projection_dim", 0), D)
        if spec["structure"] == "stacked":
            logits = mlp(P, xl, spec["dnn_hidden_units"], N, pre)
        else:
            wout = P.get("cross/logits/kernel", (D, N), 0, glorot(D, N))
            logits = mlp(P, x0, spec["dnn_hidden_units"], N, pre) + xl @ wout
    else:
        raise ValueError(kind)
    return logits, N, pre


def loss_of(logits, labels, N):
    if N == 1:
        y = torch.tensor(labels, dtype=torch.float64)
        return torch.nn.functional.binary_cross_entropy_with_logits(logits[:, 0], y)
    return torch.nn.functional.cross_entropy(logits, torch.tensor(labels, dtype=torch.int64))


# ---- The fixture ----

def pstr(s):
    b = s.encode()
    return struct.pack("<I", len(b)) + b


def main(path):
    out = bytearray(b"DTGOLDCL")
    out += struct.pack("<II", 1, len(MODELS))
    for m, (name, model) in enumerate(MODELS):
        N = int(model["head"].split(":")[1]) if model["head"].startswith("multiclass:") else 1
        labels = [(3 * b + m) % (3 if N > 1 else 2) for b in range(B)]
        rows = [dict(r, y=str(labels[b])) for b, r in enumerate(ROWS)]
        numeric = [{c["name"]: float(numeric_value(c, r)) for c in COLUMNS
                    if not is_categorical(c)} for r in rows]
        # The model reads the float32 values the transform stores.
        numeric = [{k: float(np.float32(v)) for k, v in d.items()} for d in numeric]
        cats = [{c["name"]: categorical(c, r) for c in COLUMNS if is_categorical(c)} for r in rows]

        P = Params(m)
        logits, N2, pre = model_forward(P, model, numeric, cats)
        assert N2 == N
        margin = min(float(np.min(np.abs(a))) for a in pre)
        assert margin > 1e-3, f"{name}: a ReLU input within {margin} of 0"
        loss = loss_of(logits, labels, N)
        loss.backward()

        spec = {"label": "y", "columns": COLUMNS, "model": model}
        out += pstr(name) + pstr(json.dumps(spec))
        out += struct.pack("<II", B, len(KEYS))
        for k in KEYS:
            out += pstr(k)
        for r in rows:
            for k in KEYS:
                out += pstr(r[k])
        n_dense = sum(1 for c in COLUMNS if not is_categorical(c))
        n_slots = sum(1 for c in COLUMNS if is_categorical(c))
        out += struct.pack("<II", n_dense, n_slots)
        transformed = [transform(r) for r in rows]
        for dense, _ in transformed:
            out += dense.astype("<f4").tobytes()
        for _, entries in transformed:
            out += struct.pack("<I", len(entries))
            for e, w in entries:
                out += struct.pack("<qf", e, w)
        out += struct.pack(f"<{B}i", *labels)
        out += struct.pack("<I", N) + logits.detach().numpy().astype("<f8").tobytes()
        out += struct.pack("<d", loss.item())
        out += struct.pack("<I", len(P.items))
        for tname, kind, t in P.items:
            shape = tuple(t.shape)
            rows_, cols_ = (shape[0], shape[1]) if len(shape) == 2 else (shape[0], 1)
            g = t.grad if t.grad is not None else torch.zeros_like(t)
            out += pstr(tname) + struct.pack("<III", kind, rows_, cols_)
            out += t.detach().numpy().astype("<f4").tobytes()
            out += g.numpy().astype("<f8").tobytes()
            if kind == 1:
                ids = sorted(P.touched[tname])
                out += struct.pack("<I", len(ids)) + struct.pack(f"<{len(ids)}q", *ids)
        print(f"{name}: N {N}, loss {loss.item():.17g}, {len(P.items)} tensors, "
              f"ReLU margin {margin:.3g}")
    out += struct.pack("<I", crc32c(bytes(out)))
    with open(path, "wb") as f:
        f.write(out)
    print(f"{path}: {len(out)} bytes")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: make_golden_columns.py OUT", file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1])
