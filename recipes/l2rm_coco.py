r"""L2RM on MS-COCO (SCAN precomp features) with image-level noisy correspondence.

    accelerate launch recipes/l2rm_coco.py --data-dir /data/coco_precomp --noise-ratio 0.2 \
        --output-dir runs/l2rm_coco_sgr_20

Image-level noise as in ``recipes/l2rm_f30k.py``. Defaults follow the authors' ``tarin_coco.sh``: the
SGR head, batch 128, Adam lr 2e-4 decayed x0.1 after 10 of the 20 epochs that follow 10 RCE warmup
epochs, grad clip 2, Sinkhorn reg 0.07 (the plugin's default), tau 0.05, rho 0.1, margin 0.2, the
noisy pairs' own diagonal masked out.
"""

import sys

from hfncl.recipe import run_recipe

if __name__ == "__main__":
    sys.exit(
        run_recipe(
            __doc__,
            plugins=["l2rm"],
            paper="coco",
            defaults={
                "epochs": 30,
                "warmup_epochs": 10,
                "lr_decay_epochs": [20],
                "similarity": "sgr",
                "noise_kind": "image",
                "output_dir": "runs/l2rm_coco",
            },
        )
    )
