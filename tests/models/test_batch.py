"""pad_rows: the one helper behind every supervised batch built from token lists."""

import pytest
import torch

from posttrain.models.batch import pad_rows


def test_rows_are_right_padded_and_weights_align_with_next_token_targets():
    ids, w = pad_rows([[5, 6, 7, 8], [9, 10]], [[0.0, 1.0, 1.0], [2.0]], pad_id=0)
    assert ids.dtype == torch.long and w.dtype == torch.float
    assert ids.tolist() == [[5, 6, 7, 8], [9, 10, 0, 0]]
    assert w.tolist() == [[0.0, 1.0, 1.0], [2.0, 0.0, 0.0]]


def test_a_row_of_one_token_has_no_targets():
    ids, w = pad_rows([[3], [4, 5]], [[], [1.0]], pad_id=1)
    assert ids.tolist() == [[3, 1], [4, 5]] and w.tolist() == [[0.0], [1.0]]


def test_mismatched_or_empty_inputs_are_one_line_errors():
    with pytest.raises(ValueError, match="at least one row"):
        pad_rows([], [], pad_id=0)
    with pytest.raises(ValueError):
        pad_rows([[1, 2]], [], pad_id=0)
