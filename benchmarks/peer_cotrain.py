"""NCR's co-training from one start: the official NCR code and hfncl continue from the official warmup's weights.

    python benchmarks/peer_cotrain.py --peer-dir /tmp/peer/NCR --proxy-dir DIR --images 1000 --warmup-epochs 3 \\
        --cotrain-epochs 2 --seeds 2 3 --work-dir W --output-dir W --options '{"ncr.label_layout": "broadcast"}'

``peer_parity.py`` compares two whole runs, each co-training from its own warmup. Where their co-training curves
part, the cause may lie in the co-training code or in the networks the warmups left. This script takes that
second cause away: both programs co-train from the same weights, those of the official run's checkpoint at the end
of its warmup (``WORK/official_seedS/warmup_model_{W-1}.pth.tar``, which ``peer_parity.py --programs official``
with the same arguments writes; it is read with ``weights_only=True``), each with a fresh Adam:

- the official code runs its own ``run.py`` with ``--warmup_model_path`` (it loads the weights, validates them and
  co-trains ``--cotrain-epochs`` epochs), in ``WORK/official_cotrain_seedS/``;
- hfncl's ``recipes/ncr_f30k.py`` runs with ``init_weights`` set to the same two networks copied into hfncl's
  (``peer_parity.hfncl_name`` maps every layer; ``WORK/cotrain_start_seedS/``), no warmup and ``--cotrain-epochs``
  epochs, in ``WORK/hfncl_cotrain_seedS/``; its first division is an eval-mode pass, as the official one.

Takes ``peer_parity.py``'s arguments (``--head``: the head both train, SGR or SAF; ``--programs`` chooses which
programs train now; ``--transplant-check`` is not used). Writes ``peer_cotrain.md`` (per co-training epoch:
validation rSum, network A's division AUC and clean share, mean ± spread over the seeds; the official validation of
the start weights in the header) and ``peer_cotrain.json`` to ``--output-dir``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from common import write_report
from peer_parity import (
    CAPTIONS_PER_IMAGE,
    HEADS,
    OFFICIAL_PARTS,
    PROGRAMS,
    device_name,
    hfncl_state,
    noise_file,
    parse_args,
    prepare_data,
    prepare_peer,
    program_args,
    run_hfncl,
    run_official,
    table,
)

from hfncl.models import NCLConfig, NCLModel


def official_warmup(args: argparse.Namespace, seed: int) -> Path:
    """The official run's checkpoint at the end of its warmup."""
    path = args.work_dir / f"official_seed{seed}" / f"warmup_model_{args.warmup_epochs - 1}.pth.tar"
    if not path.is_file():
        raise SystemExit(
            f"{path}: no official warmup checkpoint; run peer_parity.py --programs official --seeds {seed} with the "
            "same arguments first"
        )
    return path


def start_weights(checkpoint: Path, regions: int, target: Path) -> Path:
    """The official checkpoint's two networks as one hfncl model (network 0 = ``model_A``, 1 = ``model_B``), saved to
    ``target`` (once) for ``init_weights``; its widths, head and vocabulary size are the checkpoint's ``opt``."""
    if (target / "config.json").is_file():
        return target
    with torch.serialization.safe_globals([argparse.Namespace]):
        saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    opt = saved["opt"]
    config = NCLConfig(image_dim=opt.img_dim, embed_dim=opt.embed_size, word_dim=opt.word_dim,
                       vocab_size=opt.vocab_size, similarity=opt.module_name.lower(), sim_dim=opt.sim_dim,
                       num_networks=2, image_regions=regions, reasoning_steps=opt.sgr_step, plugins=["ncr"])
    model = NCLModel(config)
    for network, name in zip(model.networks, ("model_A", "model_B"), strict=True):
        network.load_state_dict(hfncl_state(dict(zip(OFFICIAL_PARTS, saved[name], strict=True))), strict=True)
    model.save_pretrained(str(target))
    return target


def cotrain_curves(args: argparse.Namespace, peer: Path, seed: int, regions: int) -> dict[str, Any]:
    """Both programs' co-training from the official warmup of ``seed`` (each trained now if in ``--programs``, else
    read from what exists): their curves, the official ones without the validation of the start weights, which is
    returned apart (``None`` before the official run validated)."""
    noise = noise_file(args, peer, seed)
    checkpoint = official_warmup(args, seed)
    start = start_weights(checkpoint, regions, args.work_dir / f"cotrain_start_seed{seed}")
    official = run_official(program_args(args, "official", warmup_epochs=0), peer, seed, noise, name="official_cotrain",
                            extra=("--warmup_model_path", str(checkpoint.resolve())))
    hfncl = run_hfncl(program_args(args, "hfncl", warmup_epochs=0), seed, noise, name="hfncl_cotrain",
                      settings={"init_weights": str(start.resolve())})
    rsums = official["val_rsum"]
    return {"start": rsums[0] if rsums else None, "official": {**official, "val_rsum": rsums[1:]}, "hfncl": hfncl}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv, __doc__)
    data = prepare_data(args)
    regions, args.image_dim = np.load(data / "train_ims.npy", mmap_mode="r").shape[1:]
    peer = prepare_peer(args, regions)
    curves: dict[str, list[dict[str, Any]]] = {program: [] for program in PROGRAMS}
    starts, reached = [], []
    for seed in args.seeds:
        runs = cotrain_curves(args, peer, seed, regions)
        if runs["hfncl"] is not None and runs["official"]["val_rsum"]:
            reached.append(seed)
            starts.append(runs["start"])
            for program in PROGRAMS:
                curves[program].append(runs[program])
    header = (
        f"NCR-{HEADS[args.head]} co-training from the official warmup's weights, official code vs recipes/ncr_f30k.py "
        f"({device_name()}, 1 thread each, fresh Adam both): the first {args.images} training images x "
        f"{CAPTIONS_PER_IMAGE} captions of the real-text proxy, {args.noise_ratio:.0%} noise, 256/64, batch 128, "
        f"lr 2e-4, clip 2, the weights after {args.warmup_epochs} official warmup epochs, then "
        f"{args.cotrain_epochs} co-training epochs; seeds {reached}; the official validation rSum of the start "
        f"weights: {', '.join(f'{s:.1f}' for s in starts) or '-'}."
        + (f" hfncl's options: {json.dumps(args.options)}." if args.options else "")
    )
    report = header + "\n\n" + table(curves, 0, args.cotrain_epochs) + "\n"
    args.output_dir.mkdir(parents=True, exist_ok=True)
    write_report(args.output_dir / "peer_cotrain.md", report)
    (args.output_dir / "peer_cotrain.json").write_text(
        json.dumps({"seeds": reached, "start_rsum": starts, "curves": curves}, indent=1)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
