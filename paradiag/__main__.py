"""``python -m paradiag``: the same command line as the ``paradiag`` script."""

from paradiag.cli import main

main()
