"""The pluggy markers of hfncl's hooks: ``@hookspec`` declares a hook, ``@hookimpl`` marks a plugin's function
that implements one (``from hfncl.hookspecs import hookimpl``)."""

from __future__ import annotations

import pluggy

PROJECT = "hfncl"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
