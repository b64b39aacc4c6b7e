"""The ``hfncl`` subcommands, one module each: ``add_parser(subparsers)`` adds its parser and sets its handler
(``set_defaults(func=...)``, which returns the exit status); :mod:`hfncl.cli` lists the modules."""
