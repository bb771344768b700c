"""The ``isocompute`` subcommands: argument parsing and printing over library functions (``cli`` dispatches).

Layer: commands.
"""
