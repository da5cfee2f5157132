"""Reads an export's model card for tests: the metrics of its model-index (with huggingface_hub's own parser), and
the checks every demo run's export must pass."""

from __future__ import annotations

from pathlib import Path

import pytest
from huggingface_hub import ModelCard

from sapiens2_ft.training.model_card import CARD_FILE, LICENCE_FILE


def card_metrics(export: Path) -> dict[str, dict[str, float]]:
    """Dataset name -> metric -> value of an export's card."""
    found: dict[str, dict[str, float]] = {}
    for result in ModelCard.load(Path(export) / CARD_FILE).data.eval_results or []:
        found.setdefault(result.dataset_name, {})[result.metric_name] = result.metric_value
    return found


def check_demo_card(summary: dict) -> None:
    """A demo run's export (one validation, at the last step: the best is the last): a card whose metadata parses
    and holds the run's final metrics, and the Sapiens2 licence beside it."""
    export = Path(summary["export"])
    card = ModelCard.load(export / CARD_FILE)
    assert (card.data.license, card.data.license_name) == ("other", "sapiens2-license")
    assert list(card_metrics(export).values()) == [pytest.approx(summary["metrics"], rel=1e-6)]
    assert (export / LICENCE_FILE).read_text().startswith("# Sapiens2 License")
