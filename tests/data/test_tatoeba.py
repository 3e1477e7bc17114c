"""The Tatoeba Spanish-English corpus: the seeded split without shared sentences, its direction, load_corpus."""

from __future__ import annotations

import collections
import warnings

import pytest

from keras_transformer.data.corpus import DATASETS, load_corpus
from keras_transformer.data.tatoeba import disjoint_split, load_tatoeba


@pytest.fixture(scope="module")
def lines(tatoeba_dir):
    """(English, Spanish) of every line of spa.txt, read here without the library."""
    with open(tatoeba_dir / "spa.txt", encoding="utf-8") as f:
        return [tuple(line.rstrip("\n").split("\t")[:2]) for line in f]


@pytest.fixture(scope="module")
def splits(tatoeba_dir):
    """The documented split, Spanish -> English."""
    return {split: load_tatoeba(split, data_dir=tatoeba_dir.parent) for split in ("train", "valid", "test")}


def test_split_sizes_and_nothing_lost(splits, lines):
    assert len(lines) == 118_121
    assert [len(splits[s]) for s in ("train", "valid", "test")] == [114_121, 2_000, 2_000]
    # Every line of the file is in exactly one split, as (Spanish source, English target).
    together = collections.Counter()
    for pairs in splits.values():
        together.update(zip(pairs.sources, pairs.targets))
    assert together == collections.Counter((es, en) for en, es in lines)
    report = splits["test"].report
    assert report.pairs_read == 118_121 and report.pairs_kept == 2_000 and "es->en" in report.source


def test_no_held_out_sentence_occurs_in_train(splits):
    train = splits["train"]
    seen = set(train.sources) | set(train.targets)
    for name in ("valid", "test"):
        held_out = splits[name]
        assert not seen & (set(held_out.sources) | set(held_out.targets)), name
    valid, test = splits["valid"], splits["test"]
    assert not (set(valid.sources) | set(valid.targets)) & (set(test.sources) | set(test.targets))


def test_the_direction_swaps_the_sides_of_the_same_split(splits, tatoeba_dir, lines):
    english = {en for en, _ in lines}
    spanish = {es for _, es in lines}
    test = splits["test"]
    assert all(s in spanish for s in test.sources) and all(t in english for t in test.targets)
    reverse = load_tatoeba("test", data_dir=tatoeba_dir, source_lang="en")
    assert reverse.sources == test.targets and reverse.targets == test.sources
    assert load_tatoeba("dev", data_dir=tatoeba_dir.parent, source_lang="en", target_lang="es").sources == (
        splits["valid"].targets
    )


def test_the_split_is_deterministic_and_seeded(splits, tatoeba_dir):
    again = load_tatoeba("test", data_dir=tatoeba_dir.parent)
    assert again.sources == splits["test"].sources and again.targets == splits["test"].targets
    other = load_tatoeba("test", data_dir=tatoeba_dir.parent, seed=1)
    assert len(other) == 2_000 and len(set(other.sources) & set(splits["test"].sources)) < 200
    # The documented split (seed 0), pinned: its first test pairs.
    assert list(zip(splits["test"].sources[:2], splits["test"].targets[:2])) == [
        ("Tenéis que quedaros.", "You must stay."),
        ("Estoy cuidando a mi abuelo.", "I'm taking care of my grandfather."),
    ]


def test_disjoint_split_keeps_groups_of_shared_sentences_together():
    # Pairs 0-2 are linked by shared sentences (a with x and y, b with y): one group of 3; 3 and 4 stand alone.
    sources = ["a", "a", "b", "c", "d"]
    targets = ["x", "y", "y", "z", "w"]
    for seed in range(5):
        split = disjoint_split(sources, targets, valid_size=1, test_size=1, seed=seed)
        assert sorted(split["valid"] + split["test"]) == [3, 4]
        assert split["train"] == [0, 1, 2]
    with pytest.raises(ValueError, match="exactly 2 valid and 2 test"):  # the group of 3 fits in neither
        disjoint_split(sources, targets, valid_size=2, test_size=2)
    with pytest.raises(ValueError, match="align"):
        disjoint_split(["a"], [], 0, 0)


def test_missing_file_and_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        load_tatoeba("train", data_dir=tmp_path)
    message = str(info.value)
    assert str(tmp_path / "tatoeba_spa_eng") in message and "spa.txt" in message and "spa-eng.zip" in message
    with pytest.raises(ValueError, match="unknown Tatoeba split"):
        load_tatoeba("test2016", data_dir=tmp_path)
    with pytest.raises(ValueError, match="'es' and 'en'"):
        load_tatoeba("train", data_dir=tmp_path, source_lang="fr")


def test_another_copy_of_the_file_warns_that_the_split_differs(tmp_path):
    folder = tmp_path / "tatoeba_spa_eng"
    folder.mkdir()
    rows = [(f"Sentence {i}.", f"Frase {i}.") for i in range(20)]
    (folder / "spa.txt").write_text("".join(f"{en}\t{es}\tCC-BY 2.0 (France)\n" for en, es in rows), encoding="utf-8")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        test = load_tatoeba("test", data_dir=tmp_path, valid_size=3, test_size=2)
    assert any("not the 2018-04-07 export" in str(w.message) for w in caught)
    assert len(test) == 2 and all((en, es) in rows for es, en in zip(test.sources, test.targets))


def test_load_corpus_by_name(tatoeba_dir, data_root):
    corpus = load_corpus("tatoeba_spa_eng", data_dir=data_root)
    assert (corpus.source_lang, corpus.target_lang, corpus.test_name) == ("es", "en", "test")
    assert [len(corpus.train), len(corpus.valid), len(corpus.test)] == [114_121, 2_000, 2_000]
    assert load_corpus("tatoeba_spa_eng", data_dir=data_root, target_lang="es").source_lang == "en"
    with pytest.raises(ValueError, match="unknown dataset 'wmt14'.*multi30k, tatoeba_spa_eng"):
        load_corpus("wmt14")


def test_load_corpus_multi30k(multi30k_dir):
    corpus = load_corpus("multi30k", data_dir=multi30k_dir.parent, download=False)
    assert (corpus.source_lang, corpus.target_lang, corpus.test_name) == ("en", "de", "test2016")
    assert [len(corpus.train), len(corpus.valid), len(corpus.test)] == [29_000, 1_014, 1_000]


def test_the_cli_lists_the_same_datasets():
    from keras_transformer.cli import DATASET_NAMES

    assert tuple(DATASETS) == DATASET_NAMES
