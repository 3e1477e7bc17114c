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


def test_the_python_api_example_names_what_the_package_exports():
    """The README's Python example uses the Runner's real names (it is not run here: `run` trains for minutes)."""
    import ast

    import keras_transformer
    from keras_transformer.runner import Runner

    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## The Python API", 1)[1].split("\n## ", 1)[0]
    code = re.findall(r"```python\n(.+?)\n```", section, flags=re.S)[0]
    tree = ast.parse(code)
    imported = [a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for a in node.names]
    assert imported and all(hasattr(keras_transformer, name) for name in imported)
    called = {node.func.attr for node in ast.walk(tree) if isinstance(node, ast.Call)
              and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
              and node.func.value.id == "runner"}
    assert called == {"run", "translate"} and all(callable(getattr(Runner, name)) for name in called)
    for name in re.findall(r"`runner\.([a-z_]+)\(", section):
        assert callable(getattr(Runner, name)), name
    assert len(code.splitlines()) <= 10
