"""Built-in hfncl methods, installed as the ``hfncl_plugins`` package.

Each module is one method, registered in ``pyproject.toml`` under the ``hfncl``
entry-point group exactly as a third-party plugin would be.
"""
