"""The CPU recipe script's settings: the command parses, and it trains what the README says."""

import pathlib
import re
import shlex

from keras_transformer.cli import build_parser
from keras_transformer.config import get_preset

REPO = pathlib.Path(__file__).resolve().parents[1]


def _run_arguments(script, member="0"):
    """The arguments of the ``keras-transformer run --data-dir ...`` command in ``scripts/<script>``, its
    variables filled in (``$DATA_DIR``: data, ``$OUT``: out, ``$member``: ``member``; ``"$@"`` dropped)."""
    text = (REPO / "scripts" / script).read_text(encoding="utf-8")
    command = re.search(r"keras-transformer (run --data-dir .+?)(?<!\\)\n", text, flags=re.S).group(1)
    command = command.split(' "$@"')[0].replace("\\\n", " ")
    return shlex.split(command.replace("$DATA_DIR", "data").replace("$OUT", "out").replace("$member", member))


def test_cpu_recipe_command_parses_to_the_documented_settings():
    args = build_parser().parse_args(_run_arguments("multi30k_cpu.sh"))
    assert args.command == "run"
    assert (args.preset, args.batch_tokens, args.dropout_rate, args.precision) == ("compact", 4096, 0.2, "auto")
    assert args.length_penalty == 1.0
    assert args.average_span == 0.3
    assert (args.max_train_minutes, args.average_last, args.beam_size) == (57, 10, 4)
    # Subword regularization: 1 + 8 segmentations, a checkpoint about every pass of Multi30k's 4k-token batches.
    assert (args.subword_samples, args.subword_alpha, args.save_freq) == (8, 0.4, 135)
    assert (args.data_dir, args.output_dir) == ("data", "out")


def _ensemble_text():
    return (REPO / "scripts" / "multi30k_cpu_ensemble.sh").read_text(encoding="utf-8")


def _ensemble_arguments(member="0"):
    return _run_arguments("multi30k_cpu_ensemble.sh", member)


def test_ensemble_recipe_member_command_parses_to_the_documented_settings():
    args = build_parser().parse_args(_ensemble_arguments())
    assert args.command == "run"
    assert (args.data_dir, args.output_dir) == ("data", "out/model0")
    # Each member trains with the CPU recipe's settings (seed 0 is the recipe's): only the folder, the seed
    # and the printed examples differ.
    recipe = vars(build_parser().parse_args(_run_arguments("multi30k_cpu.sh")))
    for name, expected in (("0", {"output_dir", "num_examples"}), ("1", {"output_dir", "num_examples", "seed"})):
        member = vars(build_parser().parse_args(_ensemble_arguments(name)))
        assert {key for key in recipe if recipe[key] != member[key]} == expected
        assert (member["seed"], member["num_examples"]) == (int(name), 0)


def test_ensemble_recipe_decodes_and_exports_with_the_recipes_search():
    """The ensemble's validation, test2016 and export commands parse, with beam 4 and alpha 1.0 as the members."""
    text = _ensemble_text().replace("\\\n", " ")
    commands = re.findall(r"keras-transformer ((?:evaluate|export) --model-dir \$M[^\n]*)", text)
    assert len(commands) == 3
    for command in commands:
        command = command.split(" |")[0].replace("$M", "out/model0 out/model1").replace("$OUT", "out")
        args = build_parser().parse_args(shlex.split(command.replace("$DATA_DIR", "data")))
        assert (args.beam_size, args.length_penalty) == (4, 1.0)
        assert args.model_dir == ["out/model0", "out/model1"]


def test_ensemble_recipe_trains_two_members_with_different_seeds_and_ensembles_them():
    """Two members, seeds 0 and 1, in folders of their own; the ensemble of both is scored and exported."""
    first, second = (build_parser().parse_args(_ensemble_arguments(m)) for m in ("0", "1"))
    assert (first.seed, second.seed) == (0, 1)
    assert first.output_dir != second.output_dir
    text = _ensemble_text()
    assert "for member in 0 1; do" in text
    assert text.count('--model-dir $M') == 3  # validation, test2016, export
    assert 'M="$OUT/model0 $OUT/model1"' in text


def test_cpu_recipe_is_described_in_the_readme():
    """The README's recipe section names the script's dropout and checkpoint average."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## BLEU", 1)[1].split("\n## ", 1)[0]
    assert "scripts/multi30k_cpu.sh" in section
    assert "dropout\n0.2" in section or "dropout 0.2" in section
    assert "last 10 checkpoints" in section
    assert "--subword-samples 8" in section


def test_compact_preset_is_the_recipes_architecture():
    """The recipe changes training settings only: the `compact` preset keeps Transformer-Tiny's architecture."""
    compact = get_preset("compact")
    assert (compact.num_layers, compact.d_model, compact.num_heads, compact.dff) == (4, 128, 4, 256)
    assert (compact.norm_first, compact.tie_embeddings, compact.vocab_size) == (True, True, 8000)
