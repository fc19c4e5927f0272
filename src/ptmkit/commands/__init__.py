"""Sub-commands of the ``ptm`` CLI, one module each.

Each module defines ``register(subparsers)`` which adds its parser and sets
``func=callable(args) -> int | None`` as the default.  Modules are listed in
:data:`ptmkit.cli.COMMANDS` in the order ``ptm --help`` shows them.
"""
