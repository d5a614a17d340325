"""``python -m amorgp.amortizer.cli`` (e.g. ``torchrun -m amorgp.amortizer.cli train ...``)."""

from amorgp.amortizer.cli import main

main()
