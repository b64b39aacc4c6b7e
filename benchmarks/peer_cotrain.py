"""NCR's co-training from one start: the official NCR code and hfncl continue from the same warmup's end.

    python benchmarks/peer_cotrain.py --peer-dir /tmp/peer/NCR --proxy-dir DIR --images 1000 --warmup-epochs 3 \\
        --cotrain-epochs 2 --seeds 2 3 --work-dir W --output-dir W --options '{"ncr.label_layout": "broadcast"}'

``peer_parity.py`` compares two whole runs, each co-training from its own warmup. Where their co-training curves
part, the cause may lie in the co-training code or in the networks the warmups left. This script takes that
second cause away. With ``--start official`` (the default) both programs co-train from the same weights, those of
the official run's checkpoint at the end of its warmup (``WORK/official_seedS/warmup_model_{W-1}.pth.tar``, which
``peer_parity.py --programs official`` with the same arguments writes; it is read with ``weights_only=True``), each
with a fresh Adam:

- the official code runs its own ``run.py`` with ``--warmup_model_path`` (it loads the weights, validates them and
  co-trains ``--cotrain-epochs`` epochs), in ``WORK/official_cotrain_seedS/``;
- hfncl's ``recipes/ncr_f30k.py`` runs with ``init_weights`` set to the same two networks copied into hfncl's
  (``peer_parity.hfncl_name`` maps every layer; ``WORK/cotrain_start_seedS/``), no warmup and ``--cotrain-epochs``
  epochs, in ``WORK/hfncl_cotrain_seedS/``; its first division is an eval-mode pass, as the official one.

With ``--start hfncl`` both continue from hfncl's warmup, its weights *and* its Adam moments, as a whole run does:

- hfncl's side is its whole run (``peer_parity.py``'s ``WORK/hfncl_seedS/``, trained now if missing);
- its warmup is trained again alone (``WORK/hfncl_warmup_seedS/``, no co-training epoch); its last checkpoint is the
  state the whole run continued from, when training is deterministic (the header gives both validations of it);
- the official code loads that state (``official_from_hfncl``: each network's weights and each parameter's Adam
  moments, in the official parameter order; ``WORK/official_from_hfncl_start_seedS.pth.tar``) and co-trains, in
  ``WORK/official_from_hfncl_seedS/``.

Takes ``peer_parity.py``'s arguments (``--head``: the head both train, SGR or SAF; ``--programs`` chooses which
programs train now) and ``--start``. Writes ``peer_cotrain.md`` (per
co-training epoch: validation rSum, network A's division AUC and clean share, mean ± spread over the seeds; the
official validation of the start in the header) and ``peer_cotrain.json`` to ``--output-dir``.
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
    hfncl_name,
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
from safetensors.torch import load_file

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


def official_checkpoint(path: Path) -> dict[str, Any]:
    """An official warmup checkpoint (``model_A`` / ``model_B``: the state dicts of :data:`OFFICIAL_PARTS`, ``opt``:
    its arguments), read with ``weights_only=True``."""
    with torch.serialization.safe_globals([argparse.Namespace]):
        return torch.load(path, map_location="cpu", weights_only=True)


def hfncl_model(opt: argparse.Namespace, regions: int) -> NCLModel:
    """A fresh hfncl model of two networks with the widths, head and vocabulary size of the official run's ``opt``."""
    config = NCLConfig(image_dim=opt.img_dim, embed_dim=opt.embed_size, word_dim=opt.word_dim,
                       vocab_size=opt.vocab_size, similarity=opt.module_name.lower(), sim_dim=opt.sim_dim,
                       num_networks=2, image_regions=regions, reasoning_steps=opt.sgr_step, plugins=["ncr"])
    return NCLModel(config)


def start_weights(checkpoint: Path, regions: int, target: Path) -> Path:
    """The official checkpoint's two networks as one hfncl model (network 0 = ``model_A``, 1 = ``model_B``), saved to
    ``target`` (once) for ``init_weights``; its widths, head and vocabulary size are the checkpoint's ``opt``."""
    if (target / "config.json").is_file():
        return target
    saved = official_checkpoint(checkpoint)
    model = hfncl_model(saved["opt"], regions)
    for network, name in zip(model.networks, ("model_A", "model_B"), strict=True):
        network.load_state_dict(hfncl_state(dict(zip(OFFICIAL_PARTS, saved[name], strict=True))), strict=True)
    model.save_pretrained(str(target))
    return target


OPTIMIZER_PARTS = ("txt_enc", "img_enc", "sim_enc")
"""The order in which the official ``SGRAF`` hands its modules' parameters to its Adam."""


def official_from_hfncl(checkpoint: Path, template: dict[str, Any], regions: int, target: Path) -> Path:
    """hfncl's checkpoint (both networks' weights and the Adam moments of each parameter) as an official warmup
    checkpoint at ``target`` (once): ``model_A`` / ``model_B`` list the state dicts of :data:`OFFICIAL_PARTS`, laid out
    as in the official ``template`` checkpoint, then each network's Adam state in the official parameter order
    (:data:`OPTIMIZER_PARTS`), which ``peer_parity.OFFICIAL_CHILD`` loads into that network's optimizer.

    Raises:
        SystemExit: hfncl's optimizer does not hold one entry per parameter of the model of the template's ``opt``.
    """
    if target.is_file():
        return target
    model = hfncl_model(template["opt"], regions)
    names = [name for name, _ in model.named_parameters()]
    buffers = {name for name, _ in model.networks[0].named_buffers()}
    saved = torch.load(checkpoint / "optimizer.bin", map_location="cpu", weights_only=True)
    (group,) = saved["param_groups"]
    if len(group["params"]) != len(names):
        raise SystemExit(f"{checkpoint}/optimizer.bin: {len(group['params'])} parameters, expected {len(names)}")
    index = dict(zip(names, group["params"], strict=True))
    hyper = {key: value for key, value in group.items() if key not in ("params", "lr_scale")}
    converted: dict[str, Any] = {"epoch": template["epoch"], "opt": template["opt"]}
    for network, (key, file) in enumerate((("model_A", "model.safetensors"), ("model_B", "model_1.safetensors"))):
        weights = load_file(checkpoint / file)
        layout = dict(zip(OFFICIAL_PARTS, template[key], strict=True))
        parts = [{name: weights[hfncl_name(f"{part}.{name}")] for name in layout[part]} for part in OFFICIAL_PARTS]
        order = [f"{part}.{name}" for part in OPTIMIZER_PARTS for name in layout[part]]
        order = [name for name in order if hfncl_name(name) not in buffers]
        moments = [saved["state"].get(index[f"networks.{network}.{hfncl_name(name)}"]) for name in order]
        state = {position: entry for position, entry in enumerate(moments) if entry is not None}
        converted[key] = [*parts, {"state": state, "param_groups": [{**hyper, "params": list(range(len(order)))}]}]
    target.parent.mkdir(parents=True, exist_ok=True)
    torch.save(converted, target)
    return target


def cotrain_curves(args: argparse.Namespace, peer: Path, seed: int, regions: int) -> dict[str, Any]:
    """Both programs' co-training from one start of ``seed`` (each trained now if in ``--programs``, else read from
    what exists): their curves, the official ones without the validation of the start weights, which is returned
    apart (``start``, ``None`` before the official run validated); with ``--start hfncl`` also ``hfncl_start``, the
    validation rSum of hfncl's warmup that was handed on."""
    noise = noise_file(args, peer, seed)
    checkpoint = official_warmup(args, seed)
    if args.start == "official":
        start = start_weights(checkpoint, regions, args.work_dir / f"cotrain_start_seed{seed}")
        official = run_official(program_args(args, "official", warmup_epochs=0), peer, seed, noise,
                                name="official_cotrain", extra=("--warmup_model_path", str(checkpoint.resolve())))
        hfncl = run_hfncl(program_args(args, "hfncl", warmup_epochs=0), seed, noise, name="hfncl_cotrain",
                          settings={"init_weights": str(start.resolve())})
        rsums = official["val_rsum"]
        return {"start": rsums[0] if rsums else None, "official": {**official, "val_rsum": rsums[1:]}, "hfncl": hfncl}
    warmup = run_hfncl(program_args(args, "hfncl", cotrain_epochs=0), seed, noise, name="hfncl_warmup")
    hfncl = run_hfncl(program_args(args, "hfncl"), seed, noise)
    official: dict[str, Any] = {"val_rsum": [], "division": [], "test_rsum": None}
    if warmup is not None:
        root = args.work_dir / f"hfncl_warmup_seed{seed}" / "ncr_f30k" / "checkpoints"
        start = official_from_hfncl(root / (root / "latest").read_text().strip(), official_checkpoint(checkpoint),
                                    regions, args.work_dir / f"official_from_hfncl_start_seed{seed}.pth.tar")
        official = run_official(program_args(args, "official", warmup_epochs=0), peer, seed, noise,
                                name="official_from_hfncl", extra=("--warmup_model_path", str(start.resolve())))
    rsums = official["val_rsum"]
    return {
        "start": rsums[0] if rsums else None,
        "hfncl_start": None if warmup is None else warmup["val_rsum"][-1],
        "official": {**official, "val_rsum": rsums[1:]},
        "hfncl": None if hfncl is None else {**hfncl, "val_rsum": hfncl["val_rsum"][args.warmup_epochs :]},
    }


def start_choice(parser: argparse.ArgumentParser) -> None:
    """This script's own argument: where both programs start."""
    parser.add_argument(
        "--start", choices=("official", "hfncl"), default="official",
        help="official: the official warmup's weights, a fresh Adam each; hfncl: hfncl's warmup, weights and Adam "
        "moments, which hfncl's whole run (peer_parity.py) continues from.",
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv, __doc__, start_choice)
    data = prepare_data(args)
    regions, args.image_dim = np.load(data / "train_ims.npy", mmap_mode="r").shape[1:]
    peer = prepare_peer(args, regions)
    curves: dict[str, list[dict[str, Any]]] = {program: [] for program in PROGRAMS}
    starts, hfncl_starts, reached = [], [], []
    for seed in args.seeds:
        runs = cotrain_curves(args, peer, seed, regions)
        if runs["hfncl"] is not None and runs["official"]["val_rsum"]:
            reached.append(seed)
            starts.append(runs["start"])
            hfncl_starts.append(runs.get("hfncl_start"))
            for program in PROGRAMS:
                curves[program].append(runs[program])
    start = (
        f"the weights after {args.warmup_epochs} official warmup epochs (fresh Adam both)"
        if args.start == "official"
        else f"hfncl's weights and Adam moments after its {args.warmup_epochs} warmup epochs (hfncl: its whole run, "
        f"which continues from them; validation rSum of that state in hfncl: "
        f"{', '.join(f'{s:.1f}' for s in hfncl_starts) or '-'})"
    )
    header = (
        f"NCR-{HEADS[args.head]} co-training from one start, official code vs recipes/ncr_f30k.py "
        f"({device_name()}, 1 thread each): the first {args.images} training images x "
        f"{CAPTIONS_PER_IMAGE} captions of the real-text proxy, {args.noise_ratio:.0%} noise, 256/64, batch 128, "
        f"lr 2e-4, clip 2, {start}, then "
        f"{args.cotrain_epochs} co-training epochs; seeds {reached}; the official validation rSum of the start: "
        f"{', '.join(f'{s:.1f}' for s in starts) or '-'}."
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
