r"""Co-teaching (Han et al. 2018) on Flickr30K: VSE++'s model and schedule, each network trained on the
pairs its peer finds small-loss, the kept share falling to 1 - tau over the first 10 epochs (T_k = 10).
tau is the noise rate the run injects, as Han et al. set it; ``--options '{"coteaching.forget_rate": 0.3}'``
fixes another, and ``--options '{"coteaching.estimate_forget_rate": true}'`` estimates it each epoch by a GMM
on the per-pair losses (as for data whose noise rate is unknown).

    accelerate launch recipes/coteaching_f30k.py --data-dir /data/f30k_precomp --noise-ratio 0.5 \
        --output-dir runs/coteaching_f30k_50
"""

import sys

from hfncl.recipe import run_recipe

if __name__ == "__main__":
    sys.exit(
        run_recipe(
            __doc__,
            plugins=["coteaching"],
            paper="f30k",
            defaults={"epochs": 30, "lr_decay_epochs": [15], "output_dir": "runs/coteaching_f30k"},
        )
    )
