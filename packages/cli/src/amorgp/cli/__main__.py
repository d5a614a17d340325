"""``python -m amorgp.cli`` (e.g. ``torchrun -m amorgp.cli train ...``)."""

from amorgp.cli import main

main()
