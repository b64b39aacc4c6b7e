r"""DECL on CC152K (Conceptual Captions subset with real noise; one caption per image).

    accelerate launch recipes/decl_cc152k.py --data-dir /data/cc152k_precomp --output-dir runs/decl_cc152k_sgr
    accelerate launch recipes/decl_cc152k.py --data-dir /data/cc152k_precomp --similarity saf \
        --output-dir runs/decl_cc152k_saf
    hfncl evaluate runs/decl_cc152k_sgr/best runs/decl_cc152k_saf/best --data-dir /data/cc152k_precomp

The noise is real, so no synthetic noise is added (``--noise-ratio 0``) and division
quality cannot be measured against a hidden mask (every pair counts as clean). Captions
are read from ``{split}_caps.tsv``; 150,000 training, 1,000 validation and 1,000 test pairs
(NCR's subset). Defaults follow Supp. Table 1 for CC152K and the authors' ``train_cc152k.sh``:
the SGR head (``--similarity saf`` for DECL-SAF; Table 2's DECL-SGRAF is the two checkpoints' mean
similarity), batch 128, Adam lr 2e-4 decayed x0.1 after 20 of the 40 epochs that follow 5 warmup
epochs, grad clip 2. The DECL options are the plugin's defaults, as in ``recipes/decl_f30k.py``.
"""

import sys

from hfncl.recipe import run_recipe

if __name__ == "__main__":
    sys.exit(
        run_recipe(
            __doc__,
            plugins=["decl"],
            paper="cc152k",
            defaults={
                "epochs": 45,
                "warmup_epochs": 5,
                "lr_decay_epochs": [25],
                "similarity": "sgr",
                "output_dir": "runs/decl_cc152k",
            },
        )
    )
