"""What retrieval with a trained model asks the plugins it was trained with: the similarity of a query
with the candidates and the query's uncertainty (:mod:`hfncl.hookspecs`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hfncl.hookspecs.markers import hookspec

if TYPE_CHECKING:
    import torch

    from hfncl.models import NCLModel


@hookspec(firstresult=True)
def inference_similarity(
    model: "NCLModel", image_embeds: "torch.Tensor", text_embeds: "torch.Tensor", direction: str
) -> "torch.Tensor | None":
    """Score images against captions for retrieval in one direction (first result).

    ``image_embeds`` (K, n, W * d) and ``text_embeds`` (K, m, d) come from
    ``model.encode_image`` / ``model.encode_text``; ``direction`` is ``"i2t"`` (images
    query captions) or ``"t2i"`` (captions query images). Return the (n, m) similarity
    to rank with; ``None`` keeps ``model.similarity`` (the mean over networks and
    views). Evaluation calls it on blocks of image rows, so a row's scores must not
    depend on the other rows. The options the model was trained with are in
    ``model.config.plugin_options``.

    When: whenever a trained model ranks: validation, test evaluation, and ``hfncl.retrieval`` on a loaded
        checkpoint (the plugins named in its ``config.json`` are registered).
    Arguments: ``model`` (``NCLModel``), ``image_embeds`` (K, n, W·d), ``text_embeds`` (K, m, d), ``direction``
        (``"i2t"``: images query captions, ``"t2i"``: captions query images).
    Built-in methods: TcVSE ranks with its i2t branch, its t2i branch or their ensemble.
    """


@hookspec(firstresult=True)
def query_uncertainty(
    model: "NCLModel", image_embeds: "torch.Tensor", text_embeds: "torch.Tensor", direction: str
) -> "torch.Tensor | None":
    """How unsure the model is of each query's ranking, in [0, 1] (first result).

    Same inputs as :func:`inference_similarity`; the candidates are all the other
    modality's embeddings given. Return (n,) for ``"i2t"`` (one value per image query)
    or (m,) for ``"t2i"``; ``None`` when the method has no uncertainty. Evidential
    methods return the Dirichlet uncertainty mass u = K / sum(alpha).

    When: when ``hfncl.retrieval`` ranks a set of queries against a gallery.
    Arguments: as ``inference_similarity``.
    Built-in methods: UGNCL and TcVSE return the Dirichlet uncertainty mass u = K / Σα.
    """
