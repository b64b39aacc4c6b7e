r"""NCR on MS-COCO (SCAN precomp features) with noisy correspondence.

    accelerate launch recipes/ncr_coco.py --data-dir /data/coco_precomp --noise-ratio 0.2 \
        --output-dir runs/ncr_coco_20

Defaults follow the paper's official code for COCO: the SGR head, 2 warmup epochs, then
20 co-training epochs with lr 2e-4 decayed x0.1 after 15 of them (``--epochs 22
--warmup-epochs 2 --lr-decay-epochs 17``: hfncl counts from the first warmup epoch); the
test split is ``testall`` (5K images) reported on the whole set and averaged over 5 folds
of 1K (``fold_*`` keys), as Table 1 reports it.
"""

import sys

from hfncl.recipe import run_recipe

if __name__ == "__main__":
    sys.exit(
        run_recipe(
            __doc__,
            plugins=["ncr"],
            defaults={
                "epochs": 22,
                "warmup_epochs": 2,
                "lr_decay_epochs": [17],
                "similarity": "sgr",
                "test_split": "testall",
                "test_folds": 5,
                "output_dir": "runs/ncr_coco",
            },
        )
    )
