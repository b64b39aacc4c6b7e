"""docs/reproduction.md's hfncl column is each recipe's effective configuration (``--print-config``)."""

from __future__ import annotations

import json
import re
import runpy
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "reproduction.md"


def documented() -> dict[str, dict[str, object]]:
    """The hfncl column of every recipe's table: {recipe: {setting: value}}."""
    tables: dict[str, dict[str, object]] = {}
    recipe = None
    for line in DOC.read_text().splitlines():
        if heading := re.fullmatch(r"## recipes/(\w+)\.py", line):
            recipe = heading.group(1)
            tables[recipe] = {}
        elif recipe and (row := re.fullmatch(r"\| `([\w.]+)` \|.*\| `(.*)` \|", line)):
            tables[recipe][row.group(1)] = json.loads(row.group(2))
    return tables


def printed_config(recipe: str, *args: str, capsys: pytest.CaptureFixture) -> dict:
    argv = sys.argv
    sys.argv = [str(REPO / "recipes" / f"{recipe}.py"), "--print-config", *args]
    try:
        with pytest.raises(SystemExit) as exited:
            runpy.run_path(sys.argv[0], run_name="__main__")
    finally:
        sys.argv = argv
    assert exited.value.code == 0
    return json.loads(capsys.readouterr().out)


def differences(table: dict[str, object], config: dict) -> list[str]:
    """Settings whose documented value is not the effective one, and plugin options the table leaves out."""
    wrong = []
    for key, value in table.items():
        part, name = key.split(".", 1)
        if config[part].get(name, "<absent>") != value:
            wrong.append(f"{key}: documented {value!r}, effective {config[part].get(name, '<absent>')!r}")
    wrong += [f"options.{name}: not documented" for name in config["options"] if f"options.{name}" not in table]
    return wrong


TABLES = documented()


def test_every_pair_recipe_has_a_table_and_every_table_a_recipe():
    recipes = {path.stem: path.read_text() for path in (REPO / "recipes").glob("*.py")}
    assert {name for name, text in recipes.items() if "--data-dir" in text} <= set(TABLES) <= set(recipes)
    assert "dmcm_wiki" in TABLES


@pytest.mark.parametrize("recipe", sorted(TABLES))
def test_documented_settings_are_the_recipe_s(recipe, capsys):
    assert differences(TABLES[recipe], printed_config(recipe, capsys=capsys)) == []


def test_a_changed_setting_is_caught(capsys):
    changed = printed_config("ncr_f30k", "--epochs", "44", "--options", '{"ncr.alpha": 0.3}', capsys=capsys)
    assert differences(TABLES["ncr_f30k"], changed) == [
        "training.epochs: documented 45, effective 44",
        "options.ncr.alpha: documented 0.2, effective 0.3",
    ]
