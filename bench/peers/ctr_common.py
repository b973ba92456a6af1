"""What the CTR peers share: reading field-positional LibSVM and the exact AUC."""
import numpy as np


def load_libsvm(path, fields, every=1, first=0):
    """labels (n,), ids (n, F) int64, values (n, F) float32 of rows first, first + every, ..."""
    text = open(path, "rb").read().replace(b":", b" ")
    rows = np.array(text.split(), dtype=np.float64).reshape(-1, 1 + 2 * fields)[first::every]
    return (rows[:, 0].astype(np.float32), rows[:, 1::2].astype(np.int64),
            rows[:, 2::2].astype(np.float32))


def auc(scores, labels):
    """Exact, ties counted half (average ranks)."""
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[i:j + 1] = (i + j) / 2.0 + 1.0
        i = j + 1
    r = np.empty(len(s))
    r[order] = ranks
    pos = labels == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return (r[pos].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)
