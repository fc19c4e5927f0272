"""SVD-PPMI: PPMI with context-distribution smoothing, randomized SVD, end to end."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from ptmkit.static.svd_ppmi import SVDPPMIConfig, ppmi, randomized_svd, train_svd_ppmi, truncated_svd


def test_ppmi_matches_dense_formula():
    rng = np.random.default_rng(0)
    x = rng.poisson(0.8, size=(12, 12)).astype(float)
    got = ppmi(sp.csr_matrix(x), cds=0.75).toarray()
    pw = x.sum(1) / x.sum()
    pc = x.sum(0) ** 0.75 / (x.sum(0) ** 0.75).sum()
    with np.errstate(divide="ignore"):
        pmi = np.log((x / x.sum()) / np.outer(pw, pc))
    np.testing.assert_allclose(got, np.where(x > 0, np.maximum(pmi, 0), 0), atol=1e-12)


@pytest.mark.parametrize("method", ["randomized", "arpack"])
def test_truncated_svd_matches_dense_svd(method):
    rng = np.random.default_rng(0)
    # a matrix with a decaying spectrum
    u, _ = np.linalg.qr(rng.standard_normal((80, 80)))
    v, _ = np.linalg.qr(rng.standard_normal((60, 60)))
    s = 0.7 ** np.arange(60)
    a = (u[:, :60] * s) @ v.T
    k = 8
    U, S, Vt = truncated_svd(sp.csr_matrix(a), k, method=method)
    U0, S0, Vt0 = np.linalg.svd(a)
    np.testing.assert_allclose(S, S0[:k], rtol=1e-8)
    # same subspaces (signs are arbitrary)
    np.testing.assert_allclose(np.abs(np.sum(U * U0[:, :k], axis=0)), 1, atol=1e-6)
    np.testing.assert_allclose(np.abs(np.sum(Vt * Vt0[:k], axis=1)), 1, atol=1e-6)


def test_randomized_svd_dense_input_reconstruction():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((30, 5)) @ rng.standard_normal((5, 40))  # rank 5
    U, S, Vt = randomized_svd(a, 5)
    np.testing.assert_allclose((U * S) @ Vt, a, atol=1e-9)


def test_train_svd_ppmi_returns_word_vectors(tmp_path):
    rng = np.random.default_rng(0)
    lines = []
    for _ in range(300):
        base = rng.integers(0, 2) * 10
        lines.append(" ".join(f"w{base + k}" for k in rng.integers(0, 10, size=8)))
    path = tmp_path / "c.txt"
    path.write_text("\n".join(lines) + "\n")
    wv, stats = train_svd_ppmi(str(path), SVDPPMIConfig(dim=4, window=3, min_count=1), progress=False)
    assert wv.vectors.shape == (20, 4)
    assert stats["singular_values"] == sorted(stats["singular_values"], reverse=True)
    assert wv.similarity("w1", "w2") > wv.similarity("w1", "w13")
