"""VSE++ (Faghri et al. 2018): hinge triplet loss on the hardest negatives, no division.

The baseline every noisy-correspondence paper starts from; hard negatives make it
collapse when many pairs are wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hfncl.equations.losses import triplet_hardest_negative
from hfncl.equations.toolkit import bibtex_citation, same_terms_in_warmup
from hfncl.hookspecs import hookimpl
from hfncl.options import MethodOptions


@dataclass(frozen=True)
class VSEPPOptions(MethodOptions, namespace="vsepp"):
    """``vsepp.margin``: the hinge margin of the triplet loss."""

    margin: float = 0.2


@hookimpl
def options() -> type[VSEPPOptions]:
    return VSEPPOptions


@hookimpl
def demo_settings() -> dict[str, Any]:
    return {"epochs": 10}


def _hardest_negative_loss(trainer, batch, outputs, net) -> dict[str, torch.Tensor]:
    margin = trainer.options_of(VSEPPOptions).margin
    return {"triplet_hardest": triplet_hardest_negative(outputs.similarity, margin).sum()}


loss, warmup_loss = same_terms_in_warmup(_hardest_negative_loss)


citation = bibtex_citation(Path(__file__).with_name("bibtex") / "vsepp.bib")
