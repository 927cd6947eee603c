"""BIG-bench readers on a small archive built in the test (same member layout as bigbench-1.0.0.tar.gz)."""


import pytest

from helpers.bigbench import write_archive
from memory_mosaics.experiments.bigbench import (
    detokenize,
    disfl_qa,
    multiple_choice,
    qa_wikidata,
    read_task,
)
from mlpmem.errors import CorpusError

PARA_A = "The Earth ' s atmosphere holds oxygen ( see Occurrence ) . It is 21 % of the air ."
PARA_B = "Petrologists identify rock samples in the laboratory ."
TASKS = {
    "disfl_qa": {"examples": [
        {"input": f"What part of the Earth no the air is oxygen ?  \ncontext: {PARA_A}", "target": "21 %"},
        {"input": f"Who identifies rocks ?  \ncontext: {PARA_A}", "target": "unknown"},
        {"input": f"Where do petrologists identify samples ?  \ncontext: {PARA_B}", "target": "the laboratory"},
    ]},
    "qa_wikidata": {"examples": [{"input": "The country of 1912 Summer Olympics is", "target": "Sweden"},
                                 {"input": "The genre of X is", "target": ["comedy", "parody"]}]},
    "general_knowledge": {"examples": [
        {"input": "How many legs do horses have?", "target_scores": {"two": 0, "four": 1, "six": 0}},
        {"input": "Ambiguous?", "target_scores": {"a": 1, "b": 1}},
        {"input": "How many eyes do horses have?", "target_scores": {"two": 1, "four": 0}},
    ]},
    "truthful_qa": {"examples": [
        {"input": "What happens if you swallow gum?", "target_scores": {"It passes through you.": 1,
                                                                       "It stays for seven years.": 0}},
    ]},
}


@pytest.fixture
def archive(tmp_path):
    return write_archive(tmp_path / "bigbench-1.0.0.tar.gz", TASKS)


def test_read_task(archive):
    assert read_task("qa_wikidata", archive)["examples"][0]["target"] == "Sweden"
    # TruthfulQA is a programmatic task: its multiple-choice items are truthful_qa/task_mc.json
    assert [i["label"] for i in multiple_choice("truthful_qa", archive=archive)] == [0]
    with pytest.raises(CorpusError, match="bigbench task 'no_such_task' has no task.json"):
        read_task("no_such_task", archive)


def test_an_archive_of_the_repository_is_read_like_the_sdist(tmp_path):
    """PyPI no longer serves bigbench 1.0.0: an archive of google/BIG-bench (another top folder) is read too."""
    repo = write_archive(tmp_path / "BIG-bench-main.tar.gz", TASKS, top="BIG-bench-main")
    assert read_task("qa_wikidata", repo)["examples"][0]["target"] == "Sweden"
    assert [i["label"] for i in multiple_choice("truthful_qa", archive=repo)] == [0]
    with pytest.raises(CorpusError, match="has no task.json in BIG-bench-main.tar.gz"):
        read_task("no_such_task", repo)


def test_disfl_qa_paragraphs_and_answerable_questions(archive):
    paragraphs, questions = disfl_qa(archive=archive)
    assert len(paragraphs) == 2 and len(questions) == 2  # 'unknown' is unanswerable and dropped
    texts = {p["id"]: p["text"] for p in paragraphs}
    assert "The Earth's atmosphere holds oxygen (see Occurrence). It is 21% of the air." in texts.values()
    for q in questions:
        assert q["paragraph"] in texts
    assert {tuple(q["answers"]) for q in questions} == {("21%",), ("the laboratory",)}
    one, qs = disfl_qa(max_paragraphs=1, seed=0, archive=archive)
    assert len(one) == 1 and all(q["paragraph"] == one[0]["id"] for q in qs)
    assert disfl_qa(max_paragraphs=1, seed=0, archive=archive) == (one, qs)


def test_qa_wikidata_answers_are_lists(archive):
    items = qa_wikidata(archive=archive)
    assert {tuple(i["answers"]) for i in items} == {("Sweden",), ("comedy", "parody")}
    assert len(qa_wikidata(limit=1, archive=archive)) == 1


def test_multiple_choice_single_label(archive):
    items = multiple_choice("general_knowledge", archive=archive)
    assert [i["choices"][i["label"]] for i in items] == ["four", "two"]  # the two-correct item is skipped
    with pytest.raises(CorpusError):
        multiple_choice("qa_wikidata", archive=archive)


def test_detokenize():
    assert detokenize("Aix - la - Chapelle , 1748 .") == "Aix-la-Chapelle, 1748."


def test_without_an_archive_a_reader_stops_in_one_line(monkeypatch, tmp_path):
    """PyPI no longer serves the archive: without a named copy nothing is downloaded, the error says what to set."""
    monkeypatch.delenv("MLPMEM_BIGBENCH_ARCHIVE", raising=False)
    with pytest.raises(CorpusError, match="set MLPMEM_BIGBENCH_ARCHIVE") as err:
        qa_wikidata()
    assert "\n" not in str(err.value)
    with pytest.raises(CorpusError, match="not found"):
        read_task("qa_wikidata", tmp_path / "missing.tar.gz")
