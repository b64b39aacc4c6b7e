"""Per-sample statistics recorded during training steps, by dataset index.

Methods that divide from what they saw during the epoch (instead of a second pass over
the data) record values here from the batch outputs. Outputs cover the global batch on
every process, so every process records the same values and the ledger needs no
communication; it is saved with each checkpoint.
"""

from __future__ import annotations

import torch


class Ledger:
    """Named (N, ...) tensors, NaN until recorded."""

    def __init__(self, num_samples: int) -> None:
        self.num_samples = num_samples
        self.columns: dict[str, torch.Tensor] = {}

    def record(self, index: torch.Tensor, name: str, values: torch.Tensor) -> None:
        """Store ``values[j]`` as sample ``index[j]``'s value of ``name``."""
        values = values.detach().float().cpu()
        index = index.detach().cpu().long()
        if values.shape[0] != index.shape[0]:
            raise ValueError(f"ledger column {name!r}: {values.shape[0]} values for {index.shape[0]} indices")
        column = self.columns.get(name)
        if column is None or column.shape[1:] != values.shape[1:]:
            column = torch.full((self.num_samples, *values.shape[1:]), float("nan"))
            self.columns[name] = column
        column[index] = values

    def get(self, name: str) -> torch.Tensor:
        """The column ``name``; raises with the recorded names if it is missing."""
        if name not in self.columns:
            raise KeyError(f"ledger has no column {name!r} (recorded: {sorted(self.columns) or 'none'})")
        return self.columns[name]

    def __contains__(self, name: object) -> bool:
        return name in self.columns

    def clear(self) -> None:
        self.columns.clear()

    def state(self) -> dict[str, torch.Tensor]:
        return {f"ledger.{k}": v.contiguous() for k, v in self.columns.items()}

    def load_state(self, tensors: dict[str, torch.Tensor]) -> None:
        self.columns = {k[len("ledger.") :]: v for k, v in tensors.items() if k.startswith("ledger.")}
