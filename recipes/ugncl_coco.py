r"""UGNCL on MS-COCO (SCAN precomp features) with noisy correspondence.

    accelerate launch recipes/ugncl_coco.py --data-dir /data/coco_precomp --noise-ratio 0.2 \
        --output-dir runs/ugncl_coco_20

Defaults follow Sec. 4.2 of the paper for MS-COCO: 2 warmup epochs then 20 epochs, W = 2
image views, otherwise NCR's COCO settings (lr 2e-4 decayed x0.1 at epoch 15); the test
split is ``testall`` (5K images), reported whole and averaged over 5 folds of 1K.
"""

import sys

from hfncl.recipe import run_recipe

if __name__ == "__main__":
    sys.exit(
        run_recipe(
            __doc__,
            plugins=["ugncl"],
            defaults={
                "epochs": 22,
                "warmup_epochs": 2,
                "lr_decay_epochs": [15],
                "test_split": "testall",
                "test_folds": 5,
                "output_dir": "runs/ugncl_coco",
            },
        )
    )
