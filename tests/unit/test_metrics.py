"""Metrics against values computed by hand."""

import numpy as np
import pytest

from ptmkit.errors import PtmError
from ptmkit.tasks.metrics import (
    accuracy,
    binary_f1,
    classification_metrics,
    confusion_matrix,
    macro_f1,
    per_class_f1,
)


def test_accuracy_by_hand():
    assert accuracy([0, 1, 1, 0, 1], [0, 1, 0, 0, 0]) == pytest.approx(3 / 5)
    assert accuracy([2, 2], [2, 2]) == 1.0


def test_binary_f1_by_hand():
    # gold 1 1 1 0 0 0, pred 1 1 0 1 0 0: TP=2 FP=1 FN=1 -> P=2/3 R=2/3 F1=2/3
    t = [1, 1, 1, 0, 0, 0]
    p = [1, 1, 0, 1, 0, 0]
    assert binary_f1(t, p) == pytest.approx(2 / 3)
    # gold 1 0 0 0, pred 1 1 1 0: TP=1 FP=2 FN=0 -> P=1/3 R=1 F1=0.5
    assert binary_f1([1, 0, 0, 0], [1, 1, 1, 0]) == pytest.approx(0.5)
    # class 0 as positive in the same example: TP=1 FP=0 FN=2 -> P=1 R=1/3 F1=0.5
    assert binary_f1([1, 0, 0, 0], [1, 1, 1, 0], positive=0) == pytest.approx(0.5)


def test_macro_f1_three_classes_by_hand():
    t = [0, 0, 1, 1, 2, 2]
    p = [0, 1, 1, 1, 2, 0]
    # class 0: TP=1 FP=1 FN=1 -> 0.5 ; class 1: TP=2 FP=1 FN=0 -> 0.8 ; class 2: TP=1 FP=0 FN=1 -> 2/3
    np.testing.assert_allclose(per_class_f1(t, p), [0.5, 0.8, 2 / 3])
    assert macro_f1(t, p) == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)


def test_absent_class_counts_zero_and_num_labels():
    # a third class that never occurs contributes F1=0 to the macro average over 3 labels
    assert macro_f1([0, 1], [0, 1], num_labels=3) == pytest.approx(2 / 3)
    assert binary_f1([0, 0], [0, 0]) == 0.0


def test_confusion_matrix_layout():
    c = confusion_matrix([0, 0, 1], [1, 0, 1], num_labels=2)
    assert c.tolist() == [[1, 1], [0, 1]]


def test_classification_metrics_keys():
    m = classification_metrics([0, 1, 1], [0, 1, 0], num_labels=2)
    assert set(m) == {"accuracy", "macro_f1", "f1"}
    assert "f1" not in classification_metrics([0, 1, 2], [0, 1, 2], num_labels=3)


def test_bad_input():
    with pytest.raises(PtmError):
        accuracy([0, 1], [0])
    with pytest.raises(PtmError):
        accuracy([], [])
