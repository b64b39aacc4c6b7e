"""Triplet losses against values worked out by hand on a 3 x 3 similarity matrix."""

import pytest
import torch

from hfncl.equations.losses import triplet_hardest_negative, triplet_sum_negatives

# S[i, j] = S(I_i, T_j); with margin 0.2 every hinge below was computed by hand.
S = torch.tensor([[0.5, 0.6, 0.4], [0.3, 0.2, 0.5], [0.1, 0.3, 0.4]])


def test_sum_of_negatives_per_sample_by_hand():
    # pair 0: image negatives 0.3 + 0.1, text negatives 0 + 0          -> 0.4
    # pair 1: image negatives 0.3 + 0.5, text negatives 0.6 + 0.3      -> 1.7
    # pair 2: image negatives 0 + 0.1,   text negatives 0.2 + 0.3      -> 0.6
    torch.testing.assert_close(triplet_sum_negatives(S, 0.2), torch.tensor([0.4, 1.7, 0.6]))


def test_hardest_negative_per_sample_by_hand():
    torch.testing.assert_close(triplet_hardest_negative(S, 0.2), torch.tensor([0.3, 1.1, 0.4]))


def test_per_sample_margin_by_hand():
    # margins 0, 0.2, 0.1: pair 0 -> [0.6-0.5]+ + 0 = 0.1; pair 2 -> 0 + [0.1-0.4+0.5]+ = 0.2
    torch.testing.assert_close(
        triplet_hardest_negative(S, torch.tensor([0.0, 0.2, 0.1])), torch.tensor([0.1, 1.1, 0.2])
    )


def test_margin_matrix_by_hand():
    """A (B, B) margin: cell (i, j) takes M_ij both for image i against caption j and for caption j against image i."""
    margins = torch.tensor([[9.0, 0.0, 0.3], [0.1, 9.0, 0.2], [0.2, 0.0, 9.0]])  # the diagonal is never a negative
    # image 0: captions 1, 2 -> [0 - 0.5 + 0.6]+ = 0.1, [0.3 - 0.5 + 0.4]+ = 0.2 (a scalar 0.2 would pick caption 1)
    # image 1: [0.1 - 0.2 + 0.3]+ = 0.2, [0.2 - 0.2 + 0.5]+ = 0.5; image 2: [0.2 - 0.4 + 0.1]+ = 0, [0 - 0.4 + 0.3]+ = 0
    # caption 0: images 1, 2 -> [0.1 - 0.5 + 0.3]+ = 0, [0.2 - 0.5 + 0.1]+ = 0
    # caption 1: [0 - 0.2 + 0.6]+ = 0.4, [0 - 0.2 + 0.3]+ = 0.1;
    # caption 2: [0.3 - 0.4 + 0.4]+ = 0.3, [0.2 - 0.4 + 0.5]+ = 0.3
    torch.testing.assert_close(triplet_hardest_negative(S, margins), torch.tensor([0.2, 0.9, 0.3]))
    with pytest.raises(ValueError, match=r"\(3, 3\) as the similarity, got \(2, 2\)"):
        triplet_hardest_negative(S, torch.zeros(2, 2))


def test_gradient_flows_only_through_violating_entries():
    s = S.clone().requires_grad_(True)
    triplet_hardest_negative(s, 0.2).sum().backward()
    # pair 0's hardest caption (0,1) and pair 1's hardest caption (1,2) / image (0,1) violate
    assert s.grad[0, 1] > 0 and s.grad[2, 0] == 0
    assert s.grad[1, 1] == -2  # positive of pair 1 appears in both of its violated hinges


def test_rejects_non_square():
    with pytest.raises(ValueError, match="square"):
        triplet_sum_negatives(torch.zeros(2, 3))
