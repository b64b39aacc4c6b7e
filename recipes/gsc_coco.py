r"""GSC on MS-COCO (SCAN precomp features) with noisy correspondence.

    accelerate launch recipes/gsc_coco.py --data-dir /data/coco_precomp --noise-ratio 0.4 \
        --output-dir runs/gsc_coco_40

Defaults follow the paper (Sec. 4.2, the same for all datasets): batch 128, Adam lr
2e-4 decayed x0.2 every 15 epochs, 60 epochs (the official script's count), two
networks, no warmup. The test split is ``testall`` (5K images) reported on the whole
set and averaged over 5 folds of 1K (``fold_*`` keys), as Table 1 reports it.
"""

import sys

from hfncl.recipe import run_recipe

if __name__ == "__main__":
    sys.exit(
        run_recipe(
            __doc__,
            plugins=["gsc"],
            paper="coco",
            defaults={
                "similarity": "sgr",
                "epochs": 60,
                "warmup_epochs": 0,
                "lr_decay_epochs": [15, 30, 45],
                "lr_decay_factor": 0.2,
                "test_split": "testall",
                "test_folds": 5,
                "output_dir": "runs/gsc_coco",
            },
        )
    )
