"""TcVSE's equations (plugins/tcvse.py) against torch.distributions, Monte Carlo and hand values."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch.distributions import Dirichlet, kl_divergence

from hfncl.data.augment import drop_regions, perturb_words
from hfncl.data.vocab import Vocabulary
from hfncl.engine.randomness import per_sample_uniform, purpose_key
from hfncl.equations.evidential import opinion
from hfncl.equations.evidential import scaled_evidence as evidence
from hfncl_plugins import tcvse
from hfncl_plugins.tcvse import (
    consistency_loss,
    kl_to_uniform,
    kl_weight,
    uncertainty_aware_loss,
    uncertainty_cross_entropy,
)

UNK = Vocabulary.unk_id


# ----------------------------------------------------------------------------- Eq. 2-3
def test_evidence_eq2_exp_and_relu_by_hand():
    s = torch.tensor([[0.1, -0.05], [0.0, 0.2]])
    torch.testing.assert_close(evidence(s, 0.05, "exp"), torch.tensor([[2.0, -1.0], [0.0, 4.0]]).double().exp())
    torch.testing.assert_close(evidence(s, 0.05, "relu"), torch.tensor([[2.0, 0.0], [0.0, 4.0]]).double())
    with pytest.raises(ValueError, match="evidence function"):
        evidence(s, 0.05, "softplus")


def test_evidence_stays_finite_for_small_temperatures():
    assert torch.isfinite(evidence(torch.ones(2, 2), 0.005, "exp")).all()


def test_opinion_eq3_by_hand():
    belief, uncertainty = opinion(torch.tensor([[1.0, 2.0, 0.0], [0.0, 0.0, 0.0]]))
    # S = (1 + 1) + (2 + 1) + (0 + 1) = 6; an empty opinion has S = K and u = 1
    torch.testing.assert_close(belief, torch.tensor([[1 / 6, 2 / 6, 0.0], [0.0, 0.0, 0.0]]))
    torch.testing.assert_close(uncertainty, torch.tensor([3 / 6, 1.0]))
    torch.testing.assert_close(belief.sum(dim=1) + uncertainty, torch.ones(2))


# ----------------------------------------------------------------------------- Eq. 5-9
def test_uncertainty_cross_entropy_eq5_matches_monte_carlo_of_the_expected_cross_entropy():
    """psi(S) - psi(alpha_y) = E_{p ~ Dir(alpha)}[-log p_y], estimated from Dirichlet samples."""
    alpha = torch.tensor([[4.0, 1.5, 2.0], [1.2, 3.0, 0.7], [2.5, 2.5, 1.0]], dtype=torch.float64)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        samples = Dirichlet(alpha).sample((200_000,))  # (N, K queries, K items)
    per_query = -samples.diagonal(dim1=1, dim2=2).log().mean(dim=0)
    expected = torch.digamma(alpha.sum(dim=1)) - torch.digamma(alpha.diagonal())
    torch.testing.assert_close(per_query, expected, atol=0.01, rtol=0)
    torch.testing.assert_close(uncertainty_cross_entropy(alpha), per_query.mean(), atol=0.01, rtol=0)


def test_kl_eq7_matches_torch_distributions():
    alpha = torch.tensor([[4.0, 1.5, 2.0, 1.0], [1.2, 3.0, 0.7, 9.0], [2.5, 2.5, 1.0, 1.1], [1.0, 5.0, 2.0, 3.0]])
    alpha = alpha.double()
    tilde = alpha.clone()
    tilde.fill_diagonal_(1.0)  # the positive's evidence removed
    expected = kl_divergence(Dirichlet(tilde), Dirichlet(torch.ones_like(tilde))).mean()
    torch.testing.assert_close(kl_to_uniform(alpha), expected)


def test_kl_is_zero_without_evidence_on_the_negatives():
    alpha = torch.tensor([[7.0, 1.0], [1.0, 3.0]], dtype=torch.float64)
    torch.testing.assert_close(kl_to_uniform(alpha), torch.tensor(0.0, dtype=torch.float64))


def test_kl_weight_grows_with_the_epoch_up_to_one():
    assert [kl_weight(epoch, 0.005) for epoch in (0, 10, 200, 300)] == [0.0, 0.05, 1.0, 1.0]


def test_uncertainty_aware_loss_eq8_by_hand():
    # relu, tau = 0.05: evidence [[2, 0], [0, 2]] -> alpha [[3, 1], [1, 3]]; psi(4) - psi(3) = 1/3; alpha~ = 1 -> KL = 0
    terms = uncertainty_aware_loss(torch.tensor([[0.1, -0.3], [0.0, 0.1]]), 0.05, "relu", kl_lambda=0.5)
    torch.testing.assert_close(terms["uce"], torch.tensor(1 / 3, dtype=torch.float64))
    torch.testing.assert_close(terms["kl"], torch.tensor(0.0, dtype=torch.float64))
    # one negative with evidence 2: alpha~_0 = [1, 3], KL(Dir(1, 3) || Dir(1, 1)) from torch, weighted by lambda
    terms = uncertainty_aware_loss(torch.tensor([[0.1, 0.1], [0.0, 0.1]]), 0.05, "relu", kl_lambda=0.5)
    one = kl_divergence(Dirichlet(torch.tensor([1.0, 3.0]).double()), Dirichlet(torch.ones(2).double()))
    torch.testing.assert_close(terms["kl"], 0.5 * one / 2)


def test_uncertainty_losses_need_a_square_batch_matrix():
    with pytest.raises(ValueError, match="square"):
        uncertainty_cross_entropy(torch.ones(2, 3))
    with pytest.raises(ValueError, match="square"):
        kl_to_uniform(torch.ones(1, 1))


# ----------------------------------------------------------------------------- Eq. 10-11
S_I2T = torch.tensor([[1.0, 0.0], [0.5, 1.0]])
S_T2I = torch.tensor([[1.0, 0.5], [0.0, 0.5]])


def test_consistency_loss_eq10_11_on_a_hand_made_example():
    # relu, tau = 0.5: evidence = 2 s.
    # image queries: i2t rows [2, 0], [1, 2] -> b = [.5, 0], [.2, .4]; t2i rows [2, 1], [0, 1] -> [.4, .2], [0, 1/3]
    #   mean |b - b^| = (.1 + .2 + .2 + (.4 - 1/3)) / 4
    # caption queries: t2i columns [2, 0], [1, 1] -> [.5, 0], [.25, .25];
    #   i2t columns [2, 1], [0, 2] -> [.4, .2], [0, .5]
    #   mean |b - b^| = (.1 + .2 + .25 + .25) / 4
    expected = (0.1 + 0.2 + 0.2 + (0.4 - 1 / 3)) / 4 + (0.1 + 0.2 + 0.25 + 0.25) / 4
    torch.testing.assert_close(consistency_loss(S_I2T, S_T2I, 0.5, "relu"), torch.tensor(expected, dtype=torch.float64))
    assert consistency_loss(S_I2T, S_I2T, 0.5, "relu") == 0


def test_consistency_loss_moves_each_branch_towards_the_other_in_the_direction_it_was_not_trained_for():
    """Image queries train only the t2i branch, caption queries only the i2t branch."""
    s_i2t, s_t2i = torch.tensor([[0.9, 0.1], [0.4, 0.8]]), torch.tensor([[0.7, 0.3], [0.2, 0.6]])
    i2t, t2i = s_i2t.clone().requires_grad_(), s_t2i.clone().requires_grad_()
    grad_i2t, grad_t2i = torch.autograd.grad(consistency_loss(i2t, t2i, 0.5, "relu"), (i2t, t2i))

    def beliefs(rows):
        e = 2 * rows
        return e / (e + 1).sum(dim=1, keepdim=True)

    i2t, t2i = s_i2t.clone().requires_grad_(), s_t2i.clone().requires_grad_()
    caption_term = (beliefs(s_t2i.t()) - beliefs(i2t.t())).abs().mean()
    image_term = (beliefs(s_i2t) - beliefs(t2i)).abs().mean()
    torch.testing.assert_close(grad_i2t.float(), torch.autograd.grad(caption_term, i2t)[0])
    torch.testing.assert_close(grad_t2i.float(), torch.autograd.grad(image_term, t2i)[0])


def test_consistency_loss_rejects_mismatched_branches():
    with pytest.raises(ValueError, match="same shape"):
        consistency_loss(torch.ones(3, 3), torch.ones(2, 2), 0.05, "exp")


# ----------------------------------------------------------------------------- augmentation
def test_drop_regions_keeps_only_copies_of_the_image_own_regions():
    images = torch.randn(64, 8, 5, generator=torch.Generator().manual_seed(0))
    draws = torch.rand(64, 8, generator=torch.Generator().manual_seed(1))
    dropped = drop_regions(images, 0.5, draws)
    assert torch.equal(drop_regions(images, 0.5, draws.clone()), dropped)
    matches = (dropped[:, :, None, :] == images[:, None, :, :]).all(dim=-1)  # (B, R out, R in)
    assert matches.any(dim=2).all(), "every output region is one of the image's own regions"
    unchanged = (dropped == images).all(dim=-1)
    assert unchanged.any(dim=1).all(), "at least one region is kept per image"
    assert 0.4 < 1 - unchanged.float().mean() < 0.6, "about half of the regions are dropped"
    fc = torch.nn.Linear(5, 7)
    kept_max = torch.stack([fc(images[b][unchanged[b]]).amax(dim=0) for b in range(64)])
    torch.testing.assert_close(fc(dropped).amax(dim=1), kept_max)  # = discarding them under max pooling
    assert drop_regions(images, 0.0) is images


def test_drop_regions_at_a_rate_near_one_leaves_one_region_per_image():
    dropped = drop_regions(torch.randn(16, 6, 3), 0.999, torch.rand(16, 6, generator=torch.Generator().manual_seed(0)))
    assert (dropped == dropped[:, :1]).all()


def test_drop_regions_refuses_pixel_batches():
    with pytest.raises(ValueError, match=r"needs region features \(B, R, D\), got images of shape \(2, 3, 4, 4\)"):
        drop_regions(torch.zeros(2, 3, 4, 4), 0.2)
    assert drop_regions(torch.zeros(2, 3, 4, 4), 0.0).shape == (2, 3, 4, 4)


def test_drop_regions_by_hand_and_rejects_draws_of_the_wrong_shape():
    images = torch.arange(6.0).reshape(1, 3, 2)  # regions [0, 1], [2, 3], [4, 5]
    dropped = drop_regions(images, 0.5, torch.tensor([[0.2, 0.9, 0.1]]))  # drop regions 0 and 2, keep 1
    assert torch.equal(dropped, torch.tensor([[[2.0, 3.0], [2.0, 3.0], [2.0, 3.0]]]))
    with pytest.raises(ValueError, match=r"\(images, regions\) shape \(1, 3\)"):
        drop_regions(images, 0.5, torch.rand(1, 2))


CAPTIONS = torch.tensor([[1, 10, 11, 12, 2], [1, 13, 2, 0, 0]])
LENGTHS = torch.tensor([5, 3])


def test_perturb_words_mask_discard_swap_touch_only_the_words():
    masked, lengths = perturb_words(CAPTIONS, LENGTHS, mask=1.0)
    assert torch.equal(masked, torch.tensor([[1, UNK, UNK, UNK, 2], [1, UNK, 2, 0, 0]]))
    assert torch.equal(lengths, LENGTHS)
    discarded, lengths = perturb_words(CAPTIONS, LENGTHS, discard=1.0)
    assert torch.equal(discarded, torch.tensor([[1, 2, 0, 0, 0], [1, 2, 0, 0, 0]]))
    assert torch.equal(lengths, torch.tensor([2, 2]))
    swapped, lengths = perturb_words(CAPTIONS, LENGTHS, swap=1.0, vocab_size=6)
    words = torch.tensor([[False, True, True, True, False], [False, True, False, False, False]])
    assert ((swapped[words] >= 4) & (swapped[words] < 6)).all()
    assert torch.equal(swapped[~words], CAPTIONS[~words]) and torch.equal(lengths, LENGTHS)


def test_perturb_words_discard_closes_the_caption_up():
    captions = torch.tensor([[1, 10, 11, 12, 13, 14, 15, 2]] * 200)
    draws = torch.rand(200, 8, 2, generator=torch.Generator().manual_seed(0))
    out, lengths = perturb_words(captions, torch.full((200,), 8), discard=0.5, draws=draws)
    for row, length in zip(out, lengths, strict=True):
        words = row[1 : length - 1]
        assert row[0] == 1 and row[length - 1] == 2 and (row[length:] == 0).all()
        assert torch.equal(words, words.sort().values), "the kept words stay in order"
    assert 0.4 < 1 - (lengths - 2).float().mean() / 6 < 0.6


def test_perturb_words_by_hand_from_given_draws():
    # fate draws with mask 0.25, swap 0.25, discard 0.25: [0, 0.25) mask, [0.25, 0.5) swap, [0.5, 0.75) discard
    # swapped-in word: 4 + floor(u * (8 - 4)) with vocab_size 8
    fate = torch.tensor([[0.9, 0.1, 0.3, 0.6, 0.9], [0.0, 0.8, 0.0, 0.0, 0.0]])
    word = torch.tensor([[0.0, 0.0, 0.99, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
    out, lengths = perturb_words(
        CAPTIONS, LENGTHS, mask=0.25, swap=0.25, discard=0.25, vocab_size=8, draws=torch.stack([fate, word], dim=-1)
    )
    assert torch.equal(out, torch.tensor([[1, UNK, 7, 2, 0], [1, 13, 2, 0, 0]]))
    assert torch.equal(lengths, torch.tensor([4, 3]))
    with pytest.raises(ValueError, match=r"\(captions, words, 2\)"):
        perturb_words(CAPTIONS, LENGTHS, mask=0.5, draws=fate)


def test_perturb_words_rejects_bad_probabilities():
    with pytest.raises(ValueError, match="sum to <= 1"):
        perturb_words(CAPTIONS, LENGTHS, mask=0.7, discard=0.5)
    with pytest.raises(ValueError, match="vocab_size"):
        perturb_words(CAPTIONS, LENGTHS, swap=0.1)


# ----------------------------------------------------------------------------- options
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("tcvse.tau", 0.0),
        ("tcvse.tau", 1.5),
        ("tcvse.evidence", "softplus"),
        ("tcvse.max_times", -1),
        ("tcvse.max_times", 2.5),
        ("tcvse.region_drop", 1.0),
        ("tcvse.inference_branch", "both"),
        ("tcvse.kl_step", -1),
    ],
)
def test_settings_reject_bad_values_naming_the_option(name, value):
    with pytest.raises(ValueError, match=name.replace(".", r"\.")):
        tcvse.TcVSEOptions.read({name: value})


# ----------------------------------------------------------------------------- train step
class _Branch(torch.nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.image, self.text = torch.nn.Linear(3, 4), torch.nn.Embedding(20, 4)

    def forward(self, batch):
        images = torch.nn.functional.normalize(self.image(batch["images"]).amax(dim=1), dim=-1)
        texts = torch.nn.functional.normalize(self.text(batch["captions"]).sum(dim=1), dim=-1)
        return images @ texts.t()


class _Trainer:
    """What train_step uses of the trainer: options_of, epoch, model config, forward, optimize,
    sample_uniform and compute_loss (here: TcVSE's own loss hook, as the trainer would call it)."""

    def __init__(self, seed: int = 0, **options) -> None:
        self.options = dict(options)
        self.epoch = 3
        self.seed = seed
        self.model = SimpleNamespace(config=SimpleNamespace(vocab_size=20))
        self.branches = [_Branch(0), _Branch(1)]
        self.optimizer = torch.optim.SGD([p for b in self.branches for p in b.parameters()], lr=0.1)
        self.steps = 0
        self.seen = []

    def options_of(self, kind):
        return kind.read(self.options)

    def forward(self, net, batch):
        self.seen.append(batch)
        return SimpleNamespace(similarity=self.branches[net](batch))

    def optimize(self, loss, networks):
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.steps += 1

    def sample_uniform(self, index, shape, purpose):
        return per_sample_uniform(index, shape, (self.seed, self.epoch, purpose_key(purpose)))

    def compute_loss(self, batch, networks):
        terms = {}
        for net in networks:
            outputs = self.forward(net, batch)
            answer = tcvse.loss(trainer=self, batch=batch, outputs=outputs, targets=None, net=net)
            terms.update({f"{name}/net{net}": value for name, value in answer.items()})
        return sum(terms.values()), {name: float(value.detach()) for name, value in terms.items()}


BATCH = {
    "images": torch.randn(6, 4, 3, generator=torch.Generator().manual_seed(0)),
    "captions": torch.tensor([[1, 5 + i, 6 + i, 2] for i in range(6)]),
    "lengths": torch.full((6,), 4),
    "index": torch.arange(6),
}


def test_train_step_updates_once_then_max_times_for_consistency_on_one_augmented_batch():
    trainer = _Trainer(**{"tcvse.max_times": 3})
    metrics = tcvse.train_step(trainer=trainer, batch=BATCH, networks=[0, 1])
    assert trainer.steps == 1 + 3
    assert set(metrics) == {"uce/net0", "kl/net0", "uce/net1", "kl/net1", "consistency"}
    assert metrics["kl/net0"] > 0 and metrics["consistency"] > 0
    assert all(seen is trainer.seen[0] for seen in trainer.seen), "every forward pass sees the same x'"
    assert not torch.equal(trainer.seen[0]["captions"], BATCH["captions"]) or not torch.equal(
        trainer.seen[0]["images"], BATCH["images"]
    ), "the batch is augmented"
    trainer = _Trainer(**{"tcvse.max_times": 0})
    assert tcvse.train_step(trainer=trainer, batch=BATCH, networks=[0, 1])["consistency"] == 0
    assert trainer.steps == 1


def test_loss_hook_trains_the_i2t_branch_on_rows_and_the_t2i_branch_on_columns():
    similarity = torch.tensor([[0.9, 0.1, 0.0], [0.5, 0.2, 0.4], [0.3, 0.3, 0.6]])
    trainer, outputs = _Trainer(), SimpleNamespace(similarity=similarity)
    kl_lambda = tcvse.kl_weight(trainer.epoch, tcvse.TcVSEOptions.kl_step)
    for net, queries in ((0, similarity), (1, similarity.t())):
        answer = tcvse.loss(trainer=trainer, batch=None, outputs=outputs, targets=None, net=net)
        expected = uncertainty_aware_loss(queries, 0.05, "exp", kl_lambda)
        assert answer.keys() == expected.keys()
        for name in expected:
            torch.testing.assert_close(answer[name], expected[name])
        warmup = tcvse.warmup_loss(trainer=trainer, batch=None, outputs=outputs, net=net)
        torch.testing.assert_close(warmup["uce"], expected["uce"])


def test_augmentation_depends_on_each_pair_not_on_the_batch_it_is_in():
    """What makes 1 and 2 processes (or a resumed run) see the same x': each pair's draws follow its index."""
    settings = tcvse.TcVSEOptions.read({"tcvse.region_drop": 0.5, "tcvse.word_augment": 0.5})
    trainer = _Trainer()
    whole = tcvse.augment(trainer, BATCH, settings)
    halves = [
        tcvse.augment(trainer, {k: v[part] for k, v in BATCH.items()}, settings) for part in (slice(0, 3), slice(3, 6))
    ]
    for name in ("images", "captions", "lengths"):
        assert torch.equal(torch.cat([half[name] for half in halves]), whole[name])
    order = torch.tensor([5, 2, 0, 4, 1, 3])
    shuffled = tcvse.augment(trainer, {k: v[order] for k, v in BATCH.items()}, settings)
    assert torch.equal(shuffled["images"], whole["images"][order])
    trainer.epoch += 1
    assert not torch.equal(tcvse.augment(trainer, BATCH, settings)["images"], whole["images"]), "new draws each epoch"


def test_train_step_is_deterministic_under_the_same_seed():
    runs = []
    for seed in (5, 5, 6):
        trainer = _Trainer(seed=seed)
        metrics = tcvse.train_step(trainer=trainer, batch=BATCH, networks=[0, 1])
        runs.append((metrics, torch.cat([p.detach().flatten() for b in trainer.branches for p in b.parameters()])))
    assert runs[0][0] == runs[1][0]
    assert torch.equal(runs[0][1], runs[1][1])
    assert not torch.equal(runs[0][1], runs[2][1]), "another seed draws another augmentation"


def test_train_step_needs_both_branches_in_one_pass():
    with pytest.raises(ValueError, match="jointly"):
        tcvse.train_step(trainer=_Trainer(), batch=BATCH, networks=[0])


# ----------------------------------------------------------------------------- inference hooks
SIMILARITIES = torch.tensor(
    [[[0.5, 0.0, -0.5], [0.25, 0.25, 0.0]], [[0.0, 1.0, 0.5], [0.5, 0.0, 0.0]]]
)  # (K = 2 branches, n = 2 images, m = 3 captions)


def _model(branch: str, networks: int = 2, **options):
    return SimpleNamespace(
        config=SimpleNamespace(plugin_options={"tcvse.inference_branch": branch, **options}),
        networks=[None] * networks,
        network_similarities=lambda image_embeds, text_embeds: SIMILARITIES,
    )


@pytest.mark.parametrize(
    ("branch", "expected"),
    [("i2t", SIMILARITIES[0]), ("t2i", SIMILARITIES[1]), ("ensemble", (SIMILARITIES[0] + SIMILARITIES[1]) / 2)],
)
@pytest.mark.parametrize("direction", ["i2t", "t2i"])
def test_inference_similarity_ranks_with_the_chosen_branch_in_both_directions(branch, expected, direction):
    answer = tcvse.inference_similarity(model=_model(branch), image_embeds=None, text_embeds=None, direction=direction)
    torch.testing.assert_close(answer, expected)


def test_inference_hooks_reject_bad_inputs():
    with pytest.raises(ValueError, match="direction"):
        tcvse.inference_similarity(model=_model("i2t"), image_embeds=None, text_embeds=None, direction="both")
    with pytest.raises(ValueError, match="2 networks"):
        tcvse.query_uncertainty(model=_model("i2t", networks=1), image_embeds=None, text_embeds=None, direction="i2t")
    with pytest.raises(ValueError, match=r"tcvse\.inference_branch"):
        tcvse.inference_similarity(model=_model("mean"), image_embeds=None, text_embeds=None, direction="i2t")


def test_query_uncertainty_is_k_over_s_by_hand():
    # relu, tau = 0.25: evidence = 4 s
    #   i2t branch, image queries:   rows [2, 0, 0], [1, 1, 0] -> S = 5, 5  -> u = 3/5, 3/5
    #   t2i branch, image queries:   rows [0, 4, 2], [2, 0, 0] -> S = 9, 5  -> u = 3/9, 3/5
    #   i2t branch, caption queries: cols [2, 1], [0, 1], [0, 0] -> S = 5, 3, 2 -> u = 2/5, 2/3, 1
    #   t2i branch, caption queries: cols [0, 2], [4, 0], [2, 0] -> S = 4, 6, 4 -> u = 2/4, 2/6, 2/4
    options = {"tcvse.evidence": "relu", "tcvse.tau": 0.25}
    expected = {
        ("i2t", "i2t"): [3 / 5, 3 / 5],
        ("t2i", "i2t"): [3 / 9, 3 / 5],
        ("ensemble", "i2t"): [(3 / 5 + 3 / 9) / 2, 3 / 5],
        ("i2t", "t2i"): [2 / 5, 2 / 3, 1.0],
        ("t2i", "t2i"): [2 / 4, 2 / 6, 2 / 4],
        ("ensemble", "t2i"): [(2 / 5 + 2 / 4) / 2, (2 / 3 + 2 / 6) / 2, (1 + 2 / 4) / 2],
    }
    for (branch, direction), values in expected.items():
        model = _model(branch, **options)
        u = tcvse.query_uncertainty(model=model, image_embeds=None, text_embeds=None, direction=direction)
        torch.testing.assert_close(u, torch.tensor(values), msg=f"{branch} branch, {direction}")


def test_query_uncertainty_of_a_real_model_has_one_value_in_0_1_per_query():
    from hfncl.models import NCLConfig, NCLModel

    torch.manual_seed(0)
    config = NCLConfig(
        image_dim=6,
        embed_dim=8,
        word_dim=4,
        vocab_size=30,
        num_networks=2,
        plugins=["tcvse"],
        plugin_options=tcvse.TcVSEOptions.defaults(),
        **tcvse.model_defaults(),
    )
    model = NCLModel(config).eval()
    images = model.encode_image(torch.randn(5, 3, 6))
    texts = model.encode_text(torch.randint(4, 30, (7, 4)), torch.full((7,), 4))
    for direction, queries in (("i2t", 5), ("t2i", 7)):
        u = tcvse.query_uncertainty(model=model, image_embeds=images, text_embeds=texts, direction=direction)
        assert u.shape == (queries,) and ((u > 0) & (u <= 1)).all()


# ----------------------------------------------------------------------------- end to end
@pytest.mark.slow
def test_on_clean_data_the_ensemble_is_at_least_as_good_as_either_branch_and_as_vsepp(tmp_path):
    """Table 1 / 3 at small scale: rSum of i2t+t2i >= i2t, t2i, and >= VSE++ trained on the same data.

    1000 training images, 32 concepts (so test captions often fit several images and
    rSum stays below its ceiling), a 128-d joint space, batch 64: TcVSE 3 epochs, VSE++
    its 10 demo epochs.
    """
    from hfncl.data.synthetic import SyntheticConfig, generate_precomp
    from hfncl.demo import DemoRun, demo_runs, demo_train_config
    from hfncl.engine.encoding import evaluate_retrieval
    from hfncl.experiment import DataArguments, ModelArguments, run_experiment
    from hfncl.models import NCLModel
    from hfncl.plugins import build_plugin_manager
    from hfncl.tasks.pair_data import prepare_data

    data = DataArguments(
        data_dir=str(
            generate_precomp(
                tmp_path / "data", SyntheticConfig(num_train=1000, num_dev=100, num_test=300, num_concepts=32)
            )
        )
    )
    epochs = {"tcvse": 3, "vsepp": 10}
    rsum = {}
    for run in demo_runs((0.0,), ["tcvse", "vsepp"]):
        run = DemoRun(run.plugin, 0.0, {**run.settings, "epochs": epochs[run.plugin], "batch_size": 64})
        config = demo_train_config(run, tmp_path / run.plugin, seed=0, progress=False)
        rsum[run.plugin] = run_experiment(data, config, ModelArguments(embed_dim=128, word_dim=64))["test"]["rsum"]
    model = NCLModel.from_pretrained(str(tmp_path / "tcvse" / "best"))
    test = prepare_data(data, tmp_path / "reload").test
    hook = build_plugin_manager(model.config.plugins).hook
    for branch in tcvse.BRANCHES:
        model.config.plugin_options["tcvse.inference_branch"] = branch
        rsum[branch] = evaluate_retrieval(model, test, hook=hook)["rsum"]
    print(rsum)
    assert rsum["ensemble"] == pytest.approx(rsum["tcvse"]), "the default branch is the ensemble"
    assert rsum["ensemble"] >= max(rsum["i2t"], rsum["t2i"])
    assert rsum["ensemble"] >= rsum["vsepp"]
