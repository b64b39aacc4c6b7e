r"""RCL on CC152K (Conceptual Captions subset with real noise; one caption per image).

    accelerate launch recipes/rcl_cc152k.py --data-dir /data/cc152k_precomp --output-dir runs/rcl_cc152k

The noise is real, so none is added (``--noise-ratio 0``). The official code has no CC152K
command; the settings are its Flickr30K ones (``train_f30k.sh``): the SGR head (Table 4's
RCL-SGR), batch 128, Adam lr 2e-4 decayed x0.1 after 15 of 30 epochs, grad clip 2, tau 0.05,
the L_log penalty, no warmup.
"""

import sys

from hfncl.recipe import run_recipe

if __name__ == "__main__":
    sys.exit(
        run_recipe(
            __doc__,
            plugins=["rcl"],
            paper="cc152k",
            defaults={
                "epochs": 30,
                "warmup_epochs": 0,
                "lr_decay_epochs": [15],
                "similarity": "sgr",
                "output_dir": "runs/rcl_cc152k",
            },
        )
    )
