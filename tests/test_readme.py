"""The README's quickstart commands and .ci/run stay in step."""

import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[1]


def quickstart_commands():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    quickstart = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", quickstart, flags=re.S)


def test_quickstart_has_exactly_two_commands():
    commands = quickstart_commands()
    assert len(commands) == 2, commands
    assert "keras-transformer run" in commands[0]
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command_verbatim():
    ci_lines = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert quickstart_commands()[1] in ci_lines
