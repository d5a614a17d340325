"""amorgp_experiments: the paper's experiments, the ship check and the campaign reports.

Not part of any wheel: these modules live in the repository's ``experiments/`` folder and
import the installed packages (``amorgp-training``, ``amorgp-cli`` and its siblings).  Install
them from a source checkout with ``pip install -e experiments`` (the ``paper`` nox session
puts the folder on ``PYTHONPATH``).

================================  ==============================================================
module                            what
================================  ==============================================================
``paper``                         ``amorgp benchmark paper``: every experiment of the paper
``ship_check``                    ``python -m amorgp_experiments.ship_check``: candidate vs default
``campaign_report``               ``amorgp campaign --report-only``: the campaign's report
================================  ==============================================================
"""
