"""A release is one version in two places that must agree: pyproject.toml
names the package's (mailroom --version reads it from the installed
metadata) and sqitch.plan's newest tag names the schema's. A database
deployed to @vX.Y.Z is what mailroom X.Y.Z expects."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from click.testing import CliRunner

import mailroom
from mailroom.cli import main

ROOT = Path(__file__).resolve().parent.parent


def newest_plan_tag(plan: Path = ROOT / "sqitch.plan") -> str:
    tags = [line.split()[0] for line in plan.read_text().splitlines() if line.startswith("@")]
    assert tags, "sqitch.plan has no tag"
    return tags[-1]


def test_the_newest_plan_tag_names_the_package_version():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), version
    assert newest_plan_tag() == f"@v{version}"


def test_mailroom_version_is_the_pyproject_version():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert mailroom.__version__ == version
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"mailroom, version {version}"
