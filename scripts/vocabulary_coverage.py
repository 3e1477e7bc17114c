"""How well a shared SentencePiece vocabulary covers a corpus's validation text, per vocabulary size and coverage.

For each ``--vocab-sizes`` x ``--character-coverage`` it trains the shared
vocabulary on the training split (both languages, as ``run`` does) and reports,
on the validation split: the share of characters the vocabulary has no piece
for (spelled as byte pieces, or ``<unk>``), the sentences holding one, and the
mean pieces per sentence of each language (shorter sequences train and decode
faster; a vocabulary too small for a script spends its pieces on characters).

    KERAS_TRANSFORMER_DATA=../shared/data python scripts/vocabulary_coverage.py \\
        --dataset tatoeba_cmn_eng --vocab-sizes 4000,8000,16000 --character-coverage 1.0,0.9995
"""

from __future__ import annotations

import argparse
import tempfile

import numpy as np


def _measure(tokenizer, sentences: list[str]) -> dict:
    unknown = tokenizer.unknown_piece_mask
    ids = tokenizer.encode(sentences)
    characters = [c for s in sentences for c in s if not c.isspace()]
    uncovered = sum(1 for c in characters if any(unknown[i] for i in tokenizer.encode([c])[0]))
    return {
        "pieces_per_sentence": float(np.mean([len(row) for row in ids])),
        "uncovered_characters": uncovered / max(len(characters), 1),
        "sentences_with_unknown": float(np.mean([any(unknown[i] for i in row) for row in ids])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="tatoeba_cmn_eng")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--source-lang", default=None)
    parser.add_argument("--vocab-sizes", default="4000,8000,16000")
    parser.add_argument("--character-coverage", default="1.0,0.9995")
    args = parser.parse_args()

    from keras_transformer.data.corpus import load_corpus
    from keras_transformer.data.tokenizer import SubwordTokenizer, train_sentencepiece

    corpus = load_corpus(args.dataset, data_dir=args.data_dir, source_lang=args.source_lang)
    print(f"{corpus.name} {corpus.source_lang}-{corpus.target_lang}: {len(corpus.train)} training pairs, "
          f"{len(corpus.valid)} validation pairs")
    print("vocab  coverage  | " + " | ".join(
        f"{lang}: pieces/sent, uncovered chars, sents with unknown" for lang in (corpus.source_lang, corpus.target_lang)))
    for vocab_size in (int(v) for v in args.vocab_sizes.split(",")):
        for coverage in (float(c) for c in args.character_coverage.split(",")):
            with tempfile.TemporaryDirectory() as folder:
                path = train_sentencepiece([corpus.train.sources, corpus.train.targets], folder, vocab_size,
                                           character_coverage=coverage)
                tokenizer = SubwordTokenizer(path)
            cells = []
            for sentences in (corpus.valid.sources, corpus.valid.targets):
                m = _measure(tokenizer, list(sentences))
                cells.append(f"{m['pieces_per_sentence']:5.2f}, {100 * m['uncovered_characters']:.3f}%, "
                             f"{100 * m['sentences_with_unknown']:.1f}%")
            print(f"{vocab_size:5d}  {coverage:<8g}  | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
