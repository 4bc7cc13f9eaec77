"""A small generated text-acceptability set in CoLA's file format (``train.tsv``, ``dev.tsv``).

What it is: English-like sentences from a tiny seeded grammar (a fixed lexicon of 48 word forms:
determiners, adjectives, nouns, transitive and intransitive verbs in three forms, adverbs,
modals, prepositional phrases), half of them kept as acceptable (label 1) and half corrupted by
one rule and labelled unacceptable (0): a subject-verb agreement error ("the dogs sleeps"), a
determiner-noun number error ("a dogs"), an inflected verb after a modal ("will sees"), two
adjacent words swapped, or an obligatory word dropped (the verb, a preposition, the determiner
of a singular noun). Each corrupted sentence is checked to differ from every acceptable one
generated, dev sentences never occur in train, and the same seed gives the same files byte for
byte.

What it is not: CoLA, or a sample of it. Its labels come from the rules above, not from
linguists' judgements; it has no idioms, clauses, questions or long-range phenomena, and a
model can reach a high MCC on it from local cues (word pairs) alone. It exists so the CoLA
importer, the text networks and the runtime can be tested and run locally without
downloading anything; numbers measured on it say nothing about CoLA.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fasdl.contract.errors import DatasetError

SOURCE = "fasdl-textset"  # CoLA's first column names the sentence's source
# (singular, plural) nouns and (3rd person singular, base, past) verbs. The lexicon is
# deliberately tiny: each word pair recurs often enough in 2,000 sentences that a small
# network learns number agreement from it in a few epochs (a larger lexicon left a bigram
# logistic regression far below; measured: docs/results.md, "Measurements behind design
# choices")
NOUNS = (("dog", "dogs"), ("cat", "cats"), ("teacher", "teachers"), ("child", "children"))
OBJECTS = (("book", "books"), ("apple", "apples"))
TRANSITIVE = (("sees", "see", "saw"), ("likes", "like", "liked"))
INTRANSITIVE = (("sleeps", "sleep", "slept"), ("laughs", "laugh", "laughed"))
ADJECTIVES = ("small", "old")
ADVERBS = ("quickly", "often", "quietly")
PREPOSITIONS = ("in", "near", "behind")
PLACES = ("garden", "river")
MODALS = ("will", "can", "must")
SINGULAR_DETERMINERS = ("the", "a", "this", "every", "that")
PLURAL_DETERMINERS = ("the", "these", "some", "many", "those", "two")
# determiners a number error can be made with: "the" and "some" fit both numbers
NUMBERED = {"a", "this", "every", "that", "these", "many", "those", "two"}

Rng = np.random.Generator
Sentence = list[str]
Corruption = Callable[[Sentence, dict[str, int], Rng], Sentence | None]


def _pick(rng: Rng, options: tuple[str, ...]) -> str:
    return options[int(rng.integers(len(options)))]


def _noun_phrase(rng: Rng, nouns: tuple[tuple[str, str], ...], plural: bool) -> Sentence:
    determiner = _pick(rng, PLURAL_DETERMINERS if plural else SINGULAR_DETERMINERS)
    words = [determiner]
    if rng.random() < 0.4:
        words.append(_pick(rng, ADJECTIVES))
    words.append(nouns[int(rng.integers(len(nouns)))][1 if plural else 0])
    return words


def _sentence(rng: Rng) -> tuple[Sentence, dict[str, int]]:
    """An acceptable sentence and where its parts are (for the corruptions)."""
    plural = bool(rng.random() < 0.5)
    words = _noun_phrase(rng, NOUNS, plural)
    marks = {"subject_det": 0, "subject_noun": len(words) - 1, "plural": int(plural)}
    transitive = bool(rng.random() < 0.6)
    verb = (TRANSITIVE if transitive else INTRANSITIVE)[
        int(rng.integers(len(TRANSITIVE if transitive else INTRANSITIVE)))]
    tense = rng.random()
    if tense < 0.25:  # modal + base form
        marks["modal"] = len(words)
        words.append(_pick(rng, MODALS))
        marks["verb"], marks["verb_kind"] = len(words), 3
        words.append(verb[1])
    else:  # present (agreeing) or past
        present = tense < 0.8
        marks["verb"], marks["verb_kind"] = len(words), (0 if not plural else 1) if present else 2
        words.append(verb[(1 if plural else 0) if present else 2])
    if transitive:
        words += _noun_phrase(rng, OBJECTS, bool(rng.random() < 0.5))
    if rng.random() < 0.3:
        words.append(_pick(rng, ADVERBS))
    if rng.random() < 0.4:
        marks["preposition"] = len(words)
        words += [_pick(rng, PREPOSITIONS), "the", _pick(rng, PLACES)]
    marks["verb_index"] = [TRANSITIVE, INTRANSITIVE][0 if transitive else 1].index(verb)
    marks["transitive"] = int(transitive)
    return words, marks


def _agreement(words: Sentence, marks: dict[str, int], rng: Rng) -> Sentence | None:
    if marks["verb_kind"] not in (0, 1):  # only the present tense agrees
        return None
    verbs = TRANSITIVE if marks["transitive"] else INTRANSITIVE
    wrong = verbs[marks["verb_index"]][1 if marks["verb_kind"] == 0 else 0]
    return [*words[:marks["verb"]], wrong, *words[marks["verb"] + 1:]]


def _determiner(words: Sentence, marks: dict[str, int], rng: Rng) -> Sentence | None:
    if words[marks["subject_det"]] not in NUMBERED:
        return None
    wrong = PLURAL_DETERMINERS if not marks["plural"] else SINGULAR_DETERMINERS
    choice = _pick(rng, tuple(d for d in wrong if d in NUMBERED))
    return [choice, *words[1:]]


def _modal(words: Sentence, marks: dict[str, int], rng: Rng) -> Sentence | None:
    if "modal" not in marks:
        return None
    verbs = TRANSITIVE if marks["transitive"] else INTRANSITIVE
    inflected = verbs[marks["verb_index"]][0 if rng.random() < 0.5 else 2]
    return [*words[:marks["verb"]], inflected, *words[marks["verb"] + 1:]]


def _swap(words: Sentence, marks: dict[str, int], rng: Rng) -> Sentence | None:
    at = int(rng.integers(len(words) - 1))
    # an adverb may move before its verb and stay acceptable ("the dog often sleeps")
    if words[at] == words[at + 1] or {words[at], words[at + 1]} & set(ADVERBS):
        return None
    return [*words[:at], words[at + 1], words[at], *words[at + 2:]]


def _drop(words: Sentence, marks: dict[str, int], rng: Rng) -> Sentence | None:
    # only words English cannot do without: a plural subject without its determiner
    # ("dogs sleep") or a sentence without an optional adverb would still be acceptable
    # ("the dog will." is an acceptable ellipsis: a last verb is kept)
    candidates = [marks["verb"]] if marks["verb"] < len(words) - 1 else []
    if "preposition" in marks:
        candidates.append(marks["preposition"])
    if not marks["plural"]:
        candidates.append(marks["subject_det"])
    if not candidates:
        return None
    at = candidates[int(rng.integers(len(candidates)))]
    return [*words[:at], *words[at + 1:]]


CORRUPTIONS: tuple[Corruption, ...] = (_agreement, _determiner, _modal, _swap, _drop)


def _render(words: Sentence) -> str:
    # "a" before a vowel is "an" in acceptable and corrupted sentences alike, so the
    # article's spelling is no cue to the label
    words = ["an" if word == "a" and following[0] in "aeiou" else word
             for word, following in zip(words, [*words[1:], "."], strict=True)]
    text = " ".join(words)
    return text[0].upper() + text[1:] + "."


def generate(rng: Rng, count: int, exclude: set[str]) -> list[tuple[int, str]]:
    """``count`` distinct (label, sentence) pairs, none in ``exclude``, about half
    unacceptable; ``exclude`` gains them."""
    rows: list[tuple[int, str]] = []
    seen = set(exclude)
    attempts = 0
    while len(rows) < count:
        attempts += 1
        if attempts > 200 * count + 1000:
            raise DatasetError(f"the grammar cannot make {count} distinct sentences; ask for "
                               "fewer (--sentences)")
        words, marks = _sentence(rng)
        label, text = 1, _render(words)
        if rng.random() < 0.5:
            corrupt = CORRUPTIONS[int(rng.integers(len(CORRUPTIONS)))]
            changed = corrupt(words, marks, rng)
            if changed is None:
                continue
            label, text = 0, _render(changed)
        if text in seen:  # a duplicate, or a corruption that made a sentence already seen
            continue
        seen.add(text)
        rows.append((label, text))
    exclude |= seen
    return rows


def _tsv(rows: list[tuple[int, str]]) -> str:
    # CoLA's four columns: source, label, the original '*' mark of unacceptable ones, text
    return "".join(f"{SOURCE}\t{label}\t{'' if label else '*'}\t{text}\n"
                   for label, text in rows)


def write_textset(out_dir: str | Path, *, seed: int = 0, sentences: int = 2000,
                  force: bool = False) -> dict[str, int]:
    """Write ``train.tsv`` (``sentences`` rows) and ``dev.tsv`` (a quarter as many, at least
    one) into ``out_dir``; returns rows per file."""
    if not 8 <= sentences <= 20000:
        raise ValueError(f"sentences must be in [8, 20000], got {sentences}")
    out = Path(out_dir)
    targets = {"train": out / "train.tsv", "dev": out / "dev.tsv"}
    existing = [str(path) for path in targets.values() if path.exists()]
    if existing and not force:
        raise DatasetError(f"{', '.join(existing)}: exists; pass --force to replace")
    rng = np.random.default_rng(seed)
    seen: set[str] = set()
    splits = {"train": generate(rng, sentences, seen),
              "dev": generate(rng, max(1, sentences // 4), seen)}
    out.mkdir(parents=True, exist_ok=True)
    for split, path in targets.items():
        handle, temporary = tempfile.mkstemp(dir=out, suffix=".part")
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as stream:
            stream.write(_tsv(splits[split]))
        os.replace(temporary, path)  # no half-written file under the final name
    return {split: len(rows) for split, rows in splits.items()}
