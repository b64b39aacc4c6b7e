"""Data types that cross the boundary between the core and the plugins.

A *batch* is a plain ``dict`` produced by :func:`hfncl.data.collate_pairs`:

``images``       float tensor (B, R, D) region features or (B, C, H, W) pixel values: the
                 input of the image each pair shows.
``captions``     long tensor (B, L): token ids, padded with 0.
``lengths``      long tensor (B,): number of tokens of each caption.
``index``        long tensor (B,): position of each pair in the training set; divisions,
                 ledgers and noise masks are indexed by it.
``image_index``  long tensor (B,): the split image each pair shows (as given, i.e. possibly
                 the wrong one); pairs with the same image share it. A plugin that changes
                 a pair's image input in place may keep it: rows are only treated as one
                 image when their inputs are also equal.

Label-noise data (samples with a category label per modality; see
:class:`hfncl.tasks.labels.CategoryTask`) travel in batches of :func:`hfncl.data.noisy_labels.collate_labelled`:

``image``, ``text``              float tensors (B, D_image), (B, D_text): the features.
``image_label``, ``text_label``  long tensors (B,): the (possibly wrong) training labels.
``index``                        long tensor (B,): position of each sample in the training set.

The hidden clean/noisy mask never travels in a batch: methods cannot see it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

Batch = dict[str, torch.Tensor]


@dataclass
class PairOutputs:
    """What one network says about a batch of pairs.

    ``similarity[i, j]`` is S(I_i, T_j): rows are the images of the batch, columns its
    captions, and pair ``i`` is the diagonal entry. ``view_similarity`` (W, B, B) holds
    it per image view (``NCLConfig.image_views``); ``similarity`` is its mean. ``view_scores`` (W, B, B)
    are the unbounded scores the view similarities squash (an SGR / SAF head's raw output before its
    sigmoid; a cosine head's cosine and a SCAN head's score, the similarity itself). Under data parallelism the tensors
    cover the *global* batch (gathered from every process, with gradients), so a loss
    computed from them is the same on every rank and equals the single-process loss.
    """

    image_embeds: torch.Tensor
    text_embeds: torch.Tensor
    similarity: torch.Tensor
    index: torch.Tensor
    view_similarity: torch.Tensor | None = None
    view_scores: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.view_similarity is None:
            self.view_similarity = self.similarity.unsqueeze(0)
        if self.view_scores is None:
            self.view_scores = self.view_similarity


@dataclass
class CategoryOutputs:
    """What one network says about a batch of category-labelled samples (label-noise data).

    Sample ``j`` of the batch has one feature vector per modality (image and text, its
    two modalities), each with its own, possibly wrong, category label. ``image_embeds``
    and ``text_embeds`` (B, c) are the modalities' L2-normalised embeddings z_j^i in the
    common space; ``prototypes`` (K, c) are the network's L2-normalised class prototypes
    c_k, shared by the modalities, so ``logits(m)[j, k] = c_k . z_j^m`` is a cosine in
    [-1, 1]. As with :class:`PairOutputs`, the per-sample tensors cover the global batch
    (gathered over processes, with gradients) and ``index`` holds the samples' positions
    in the training set.
    """

    image_embeds: torch.Tensor
    text_embeds: torch.Tensor
    prototypes: torch.Tensor
    index: torch.Tensor

    def embeds(self, modality: str) -> torch.Tensor:
        """The (B, c) embeddings of ``modality`` (``"image"`` or ``"text"``)."""
        if modality not in ("image", "text"):
            raise ValueError(f"modality must be 'image' or 'text', got {modality!r}")
        return self.image_embeds if modality == "image" else self.text_embeds

    def logits(self, modality: str) -> torch.Tensor:
        """(B, K) prototype scores c_k . z_j of ``modality``'s samples."""
        return self.embeds(modality) @ self.prototypes.t()


@dataclass
class Division:
    """A method's verdict on every training pair, indexed by dataset position.

    ``clean_prob``  (N,) float: probability that the pair is correctly matched (w_i). For
                    label-noise data N counts (modality, sample) units, modality-major
                    (:mod:`hfncl.engine.tasks`).
    ``clean``       (N,) bool: the predicted clean set (the rest is the noisy set).
    ``extras``      named (N, ...) tensors a method wants to carry into ``rectify``
                    (soft labels, uncertainty, a three-way partition, ...). Under
                    ``"statistic"``, the (N,) per-sample value the division was made
                    from: the trainer then plots it against the hidden mask. Under
                    ``"set/NAME"``, an (N,) boolean mask of a named subset (e.g. a
                    three-way partition's hard set): the trainer reports each set's
                    share of the data and its purity (share truly clean) every epoch.
                    Under ``"mixture"`` (the one entry not indexed by pair), a (K, 3)
                    tensor: weight, mean and standard deviation of each Gaussian
                    component of a mixture fitted to the min-max normalised
                    statistic (:func:`hfncl.equations.division.fit_loss_mixture`); the division
                    plot draws its density over the histogram.
    ``statistic_name`` what ``extras["statistic"]`` is, in words (``"per-pair loss L_w (Eq. 2)"``):
                    the division plot's axis names it.
    """

    clean_prob: torch.Tensor
    clean: torch.Tensor
    extras: dict[str, torch.Tensor] = field(default_factory=dict)
    statistic_name: str = ""

    def __post_init__(self) -> None:
        if self.clean_prob.shape != self.clean.shape or self.clean_prob.dim() != 1:
            raise ValueError(
                f"Division.clean_prob {tuple(self.clean_prob.shape)} and Division.clean "
                f"{tuple(self.clean.shape)} must be 1-D tensors of the same length"
            )
        self.clean = self.clean.bool()

    def __len__(self) -> int:
        return self.clean.numel()

    def state(self, prefix: str) -> dict[str, torch.Tensor]:
        """Flat tensor dict for a safetensors checkpoint."""
        out = {f"{prefix}.clean_prob": self.clean_prob, f"{prefix}.clean": self.clean.to(torch.uint8)}
        out.update({f"{prefix}.extras.{k}": v for k, v in self.extras.items()})
        return {k: v.detach().cpu().clone().contiguous() for k, v in out.items()}

    @classmethod
    def from_state(cls, tensors: dict[str, torch.Tensor], prefix: str) -> "Division":
        extras_prefix = f"{prefix}.extras."
        extras = {k[len(extras_prefix):]: v for k, v in tensors.items() if k.startswith(extras_prefix)}
        return cls(tensors[f"{prefix}.clean_prob"], tensors[f"{prefix}.clean"].bool(), extras)


@dataclass
class BatchPlan:
    """How a pass over the training data draws its batches, when a method chooses them (the ``batch_plan`` hook).

    ``parts`` maps a name to an (N,) boolean mask of the training samples (dataset positions,
    ``trainer.num_train``) the part draws from; the order of the dict matters. The first part
    *leads*: the pass is one seeded shuffle of it cut into batches of ``config.batch_size`` (the
    last partial batch dropped; a part smaller than a batch is one batch), so every sample of it
    is trained once. Every later part gives one batch beside each lead batch, of
    ``config.batch_size`` samples (all of them when it has fewer), drawn from seeded shuffles of
    its own, a new one each time it runs out (it cycles). An empty later part is left out; an
    empty lead part makes a pass without steps. Each part's batch reaches the hooks on its own,
    with ``trainer.batch_part`` naming the part.

    ``keep_last`` trains every shuffle's last partial batch too, as a ``DataLoader`` without
    ``drop_last`` does: the lead's pass and each cycle of a later part then end with it, unless it
    has fewer than two samples per process (BatchNorm in training mode needs two).
    """

    parts: dict[str, torch.Tensor]
    keep_last: bool = False

    def __post_init__(self) -> None:
        if not self.parts:
            raise ValueError("BatchPlan.parts must name at least one part (its first part leads the pass)")
        for name, mask in self.parts.items():
            if not isinstance(name, str) or not name or "/" in name:
                raise ValueError(f"BatchPlan.parts: a part's name must be a non-empty string without '/', got {name!r}")
            if mask.dim() != 1 or mask.dtype != torch.bool:
                got = f"{mask.dtype} {tuple(mask.shape)}"
                raise ValueError(f"BatchPlan.parts[{name!r}] must be an (N,) boolean mask, got {got}")

    @property
    def lead(self) -> str:
        """The name of the part whose one shuffle makes the pass."""
        return next(iter(self.parts))


@dataclass(frozen=True)
class NoiseProtocol:
    """A published noise protocol: the kind of noise it draws (one of :data:`hfncl.choices.NOISE_KINDS`) and the
    paper that set it. The method that published it registers it in the entry-point group
    ``hfncl.noise_protocols``; the entry point's name is the protocol's name as ``results.json``, the model card and
    the benchmark tables write it (:func:`hfncl.data.noise.protocol_names`)."""

    kind: str
    source: str
