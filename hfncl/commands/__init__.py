"""The ``hfncl`` subcommands, a module each: ``add_parser(subparsers)`` adds its parser and sets ``func``, the
handler that returns the exit status. Each imports its library code when it runs, so ``--help`` stays quick."""
