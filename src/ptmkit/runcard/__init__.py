"""Run cards (``README.md`` in every run directory) and the listing of runs: see :mod:`ptmkit.runcard.card`."""

from ptmkit.runcard.card import CARD_FILE, card_text, find_runs, render, runs_table, write_run_card
from ptmkit.runcard.facts import Card, card_json, describe

__all__ = ["CARD_FILE", "Card", "card_json", "card_text", "describe", "find_runs", "render", "runs_table",
           "write_run_card"]
