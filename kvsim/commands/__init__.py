"""The subcommands of `kvsim`, one module per group; kvsim/cli.py builds the parser from them.

Each module has ``register(subparsers)`` that adds its commands; heavy libraries are imported inside the
command functions, so `kvsim --help` and argument errors stay fast.
"""
