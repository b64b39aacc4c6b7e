"""hfncl: learning cross-modal retrieval from noisy correspondence, with methods as plugins.

Importing hfncl is light, as importing transformers is: the names below are imported on
first use, and neither torch, Accelerate nor the training engine is loaded. When transformers
loads ``AutoConfig``, hfncl's model types are registered with it by name, so that
``AutoModel.from_pretrained`` loads an hfncl checkpoint without ``trust_remote_code``: the
first checkpoint of an hfncl type that ``AutoConfig`` reads imports :mod:`hfncl.models`, which
registers the real config and model classes with ``AutoConfig`` and ``AutoModel``
(transformers' own model code then loads Accelerate where it is installed). The texts of
the model cards are found the same way, in :mod:`hfncl.tasks` on first use.
``evaluate.load(hfncl.metrics_path("retrieval"))`` loads its retrieval metrics (and ``"map"``).
"""

import sys
from importlib import import_module
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from importlib.util import find_spec
from types import ModuleType
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "CategoryConfig": "hfncl.models",
    "CategoryModel": "hfncl.models",
    "Division": "hfncl.types",
    "MatchingNetwork": "hfncl.models",
    "NCLConfig": "hfncl.models",
    "NCLModel": "hfncl.models",
    "PairOutputs": "hfncl.types",
    "Retriever": "hfncl.retrieval",
    "TrainConfig": "hfncl.config",
    "audit": "hfncl.audit",
    "hookimpl": "hfncl.hookspecs",
    "metrics_path": "hfncl.metrics",
}

MODEL_TYPES = {"hfncl": "NCLConfig", "hfncl_category": "CategoryConfig"}
"""hfncl's model types (a checkpoint's ``config.json`` ``model_type``) and their config classes in
:mod:`hfncl.models`."""

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'hfncl' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)


class _ConfigOnFirstUse:
    """What ``AutoConfig`` finds for an hfncl model type until :mod:`hfncl.models` is imported: the first attribute
    asked of it (``from_dict``, ``from_pretrained``, a call) imports :mod:`hfncl.models`, which registers the real
    config class in its place, and is that attribute of the real class."""

    def __init__(self, name: str) -> None:
        self.__name__ = name  # what transformers compares to find a config class's model type

    def _resolved(self) -> Any:
        return getattr(import_module("hfncl.models"), self.__name__)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._resolved(), attribute)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._resolved()(*args, **kwargs)


def _register_model_types(auto_config: ModuleType) -> None:
    """Register every model type of :data:`MODEL_TYPES` that no class is registered for yet with ``AutoConfig``
    (``auto_config``: transformers' module of it)."""
    for model_type, name in MODEL_TYPES.items():
        if model_type not in auto_config.CONFIG_MAPPING:
            auto_config.CONFIG_MAPPING.register(model_type, _ConfigOnFirstUse(name))


def _card_texts_on_first_use(config: Any, model_id: str) -> Any:
    """The card texts of ``config``'s model type, from the task that trains it: importing :mod:`hfncl.tasks`
    registers them in place of this function.

    Raises:
        LookupError: :mod:`hfncl.tasks` was imported and registers none for the model type.
    """
    if "hfncl.tasks" in sys.modules:
        raise LookupError(f"no task of hfncl.tasks registers card texts for model type {config.model_type!r}")
    import_module("hfncl.tasks")
    return import_module("hfncl.hub.card").card_texts(config, model_id)


def _register_card_texts(card: ModuleType) -> None:
    """Make :func:`_card_texts_on_first_use` the card texts of every model type (``card``: :mod:`hfncl.hub.card`,
    which :mod:`hfncl.tasks` imports before it registers its own)."""
    for model_type in MODEL_TYPES:
        card.register_card_texts(model_type, _card_texts_on_first_use)


_ON_IMPORT = {
    "transformers.models.auto.configuration_auto": _register_model_types,
    "hfncl.hub.card": _register_card_texts,
}
"""Registrations made right after a module is imported, by the module's name."""


class _RegisterWhenImported(MetaPathFinder):
    """Runs the registration of :data:`_ON_IMPORT` of a module right after the module is imported, so that importing
    hfncl imports neither transformers nor torch (the ``hfncl`` command's ``--help`` waits for no framework)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> ModuleSpec | None:
        register = _ON_IMPORT.get(fullname)
        if register is None:
            return None
        sys.meta_path.remove(self)  # finding the module's own spec without this finder
        try:
            spec = find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def execute_and_register(module: ModuleType) -> None:
            execute(module)
            register(module)
            del _ON_IMPORT[fullname]  # once: a module imported again (a reload) keeps what was registered since
            if not _ON_IMPORT:
                sys.meta_path.remove(self)

        spec.loader.exec_module = execute_and_register  # type: ignore[method-assign]
        return spec


for _imported in [name for name in _ON_IMPORT if name in sys.modules]:
    _ON_IMPORT.pop(_imported)(sys.modules[_imported])
if _ON_IMPORT:
    sys.meta_path.insert(0, _RegisterWhenImported())
