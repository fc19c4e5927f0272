"""InfoNCE against the formula computed in float64 by hand, and its gradient."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ptmkit.nn.info_nce import info_nce


def reference(q: np.ndarray, k: np.ndarray, tau: float) -> float:
    """-1/N Σ_i log( exp(cos(q_i, k_i)/τ) / Σ_j exp(cos(q_i, k_j)/τ) ), written out in float64."""
    q = q.astype(np.float64)
    k = k.astype(np.float64)
    total = 0.0
    for i in range(len(q)):
        cos = np.array([q[i] @ k[j] / (np.linalg.norm(q[i]) * np.linalg.norm(k[j])) for j in range(len(k))])
        total += -(cos[i] / tau - np.log(np.sum(np.exp(cos / tau))))
    return total / len(q)


@pytest.mark.parametrize("n,m,tau", [(4, 4, 0.05), (5, 10, 0.05), (3, 7, 1.0)])
def test_matches_the_formula_in_float64(n, m, tau):
    rng = np.random.default_rng(n * m)
    q, k = rng.normal(size=(n, 6)), rng.normal(size=(m, 6))
    got = info_nce(torch.from_numpy(q), torch.from_numpy(k), tau)
    assert got.dtype == torch.float64
    assert float(got) == pytest.approx(reference(q, k, tau), rel=1e-12)
    # float32 inputs: the same within float32 precision
    assert float(info_nce(torch.from_numpy(q).float(), torch.from_numpy(k).float(), tau)) == pytest.approx(
        reference(q, k, tau), rel=1e-5)


def test_hard_negatives_are_extra_keys_and_scale_does_not_matter():
    rng = np.random.default_rng(0)
    q, p = torch.from_numpy(rng.normal(size=(4, 8))), torch.from_numpy(rng.normal(size=(4, 8)))
    hard = q + 0.01 * torch.from_numpy(rng.normal(size=(4, 8)))  # nearly the queries themselves
    assert float(info_nce(q, torch.cat([p, hard]))) > float(info_nce(q, p))  # a close negative costs more
    assert float(info_nce(3.0 * q, 0.5 * p)) == pytest.approx(float(info_nce(q, p)), rel=1e-12)  # cosine: lengths drop out


def test_the_gradient_matches_finite_differences():
    rng = np.random.default_rng(1)
    q = torch.tensor(rng.normal(size=(3, 4)), requires_grad=True)
    k = torch.tensor(rng.normal(size=(5, 4)), requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: info_nce(a, b, 0.5), (q, k))


def test_identical_pairs_far_from_each_other_give_the_minimum():
    # orthogonal queries, each key equal to its query: the loss is log(1 + (N-1) e^{-1/τ}), near 0
    q = torch.eye(4, dtype=torch.float64)
    assert float(info_nce(q, q.clone())) == pytest.approx(np.log(1 + 3 * np.exp(-1 / 0.05)), rel=1e-12)


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="positive key per query"):
        info_nce(torch.zeros(4, 3), torch.zeros(3, 3))
    with pytest.raises(ValueError, match=r"queries \[N, D\]"):
        info_nce(torch.zeros(4, 3), torch.zeros(4, 2))
    with pytest.raises(ValueError, match="temperature"):
        info_nce(torch.ones(2, 3), torch.ones(2, 3), 0.0)
