"""NPC's weights on clean and on noisy pairs, the memory bank's purity and the validation rSum, for the paper's
and the authors' code's readings, on the tests' tiny benchmark (160 images x 5 captions, 40% caption noise,
1 warmup epoch + 3): ``python benchmarks/npc_weights.py`` (a few minutes on 2 cores)."""

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import numpy as np
from conftest import TINY_DATA, noisy_trainer, tiny_config

from hfncl.data.synthetic import generate_precomp

tmp = Path(tempfile.mkdtemp())
data = generate_precomp(tmp / "data", TINY_DATA)
for options in ({}, {"npc.weighting": "batch_mean", "npc.bank_loss": False}):
    config = tiny_config(
        tmp / f"run{len(options)}", ["npc"], epochs=4, warmup_epochs=1, lr_decay_epochs=[], options=options
    )
    trainer = noisy_trainer(data, config)
    summary = trainer.train()
    clean = np.concatenate(list(trainer.task.clean_masks(trainer.train_data).values()))
    w = trainer.ledger.get("npc_weight").numpy()
    bank = trainer.divisions[0].clean.numpy()
    print(
        options or "defaults",
        f"| weight clean {np.nanmean(w[clean]):.3f} noisy {np.nanmean(w[~clean]):.3f}",
        f"| share w<1: clean {np.nanmean(w[clean] < 1):.2f} noisy {np.nanmean(w[~clean] < 1):.2f}",
        f"| bank size {bank.sum():d} purity {clean[bank].mean():.3f}",
        "| val rsum",
        [round(h.get("val/rsum", float("nan")), 1) for h in summary["history"]],
        flush=True,
    )
