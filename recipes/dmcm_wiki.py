r"""DMCM on Wikipedia (category-labelled features) with noisy labels; mAP over the full ranking.

    accelerate launch recipes/dmcm_wiki.py --data-path /data/wiki_clip.h5 --label-base 1 \
        --noise-ratio 0.6 --output-dir runs/dmcm_wiki_60

Defaults follow the paper (Sec. 3.2): Adam lr 1e-4, batch 100, 100 epochs with 3 warmup
epochs, beta 0.85, tau1 = tau2 = 1, common space 512, symmetric noise with the rate
known to the division. The features file may be MRL's h5 (``train_imgs_deep`` ...),
a ``tr_img`` / ``te_img`` .mat, or a DSCMR-style directory; Wikipedia's files count
classes from 1 (``--label-base 1``). The paper tests on all 462 test samples (Table 1)
and reports no validation set or model selection: ``--valid-size 0`` (the default here)
reads no validation split and tests the last epoch's model on the whole test split
(``--valid-size 231`` is MRL's rule: the first 231 test samples validate, the other 231 test).
Table 3's ablations: ``--options '{"dmcm.robust_terms": "ngce"}'`` (w/o MAE) or ``"mae"``
(w/o NGCE); ``'{"dmcm.lam": 1.0}'`` (without mixing augmentation).
"""

import sys

from hfncl.recipe import run_recipe
from hfncl_plugins.dmcm import paper_training

if __name__ == "__main__":
    sys.exit(
        run_recipe(
            __doc__,
            plugins=["dmcm"],
            defaults={**paper_training("wikipedia"), "valid_size": 0, "output_dir": "runs/dmcm_wiki"},
        )
    )
