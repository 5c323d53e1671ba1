"""WordCount's input: words streamed from real text files, or a seeded Zipf/uniform stream,
split among mappers, and partitioned among reducers.

Tokenisation (Unicode-aware, the same for the mappers and for the reference Counter):
a *word* is a maximal run of Unicode letters (L*), marks (M*, so Devanagari vowel signs or
Arabic harakat stay inside their word), numbers (N*) and underscores, possibly joined by
single internal apostrophes (``'`` or ``’``: "don't", "l’homme"). Case is kept and nothing
is normalised or truncated: a key is the word's UTF-8 bytes exactly as it appears in the
text, however long. Files are decoded as UTF-8 (invalid bytes become U+FFFD, which is not
a word character) and read in chunks, never whole.

A file is split among mappers at ASCII whitespace bytes: no UTF-8 sequence contains one
and no word spans one, so every word is read by exactly one mapper and the union of the
mappers' words is exactly the file's words.
"""

from __future__ import annotations

import codecs
import os
import re
import sys
import unicodedata
import zlib
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

CHUNK = 1 << 20  # bytes read at a time
_WS = b" \t\n\r\x0b\x0c"


def _mark_ranges() -> str:
    """A regex class body of every Unicode mark (M*) code point. `re`'s `\\w` already covers
    letters, numbers and `_` but not marks; computing them scans the whole code space (about
    a second), so the result is cached on disk per Unicode database version."""
    cache_dir = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "inswitch"
    cache = cache_dir / f"marks-{unicodedata.unidata_version}.txt"
    try:
        return cache.read_text(encoding="utf-8")
    except OSError:
        pass
    ranges: list[tuple[int, int]] = []
    for cp in range(sys.maxunicode + 1):
        if unicodedata.category(chr(cp))[0] == "M":
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1] = (ranges[-1][0], cp)
            else:
                ranges.append((cp, cp))
    body = "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f".{cache.name}.{os.getpid()}")
        tmp.write_text(body, encoding="utf-8")
        os.replace(tmp, cache)
    except OSError:
        pass  # read-only home: compute again next time
    return body


@lru_cache(maxsize=1)
def word_re() -> re.Pattern[str]:
    w = f"[\\w{_mark_ranges()}]"
    return re.compile(f"{w}+(?:['\u2019]{w}+)*")


def tokenize(text: str) -> list[str]:
    """The words of `text` (see the module docs)."""
    return word_re().findall(text)


def iter_words_range(path: str | Path, start: int = 0, end: int | None = None) -> Iterator[str]:
    """The words of bytes [start, end) of a file, streamed. `start` and `end` must be split
    points from [`split_points`] (0, EOF, or just after an ASCII whitespace byte)."""
    rx = word_re()
    dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
    with open(path, "rb") as f:
        f.seek(start)
        left = None if end is None else end - start
        carry = ""
        while left is None or left > 0:
            raw = f.read(CHUNK if left is None else min(CHUNK, left))
            if not raw:
                break
            if left is not None:
                left -= len(raw)
            text = carry + dec.decode(raw)
            # Words never span whitespace: tokenise up to the last whitespace, carry the rest.
            cut = max(text.rfind(c) for c in (" ", "\n", "\t", "\r", "\x0b", "\x0c"))
            if cut < 0:
                carry = text
                continue
            yield from rx.findall(text, 0, cut)
            carry = text[cut:]
        carry += dec.decode(b"", final=True)
        yield from rx.findall(carry)


def split_points(path: str | Path, parts: int) -> list[int]:
    """`parts + 1` byte offsets cutting the file into about equal ranges, each cut just after
    an ASCII whitespace byte (or at EOF), so no word and no UTF-8 sequence is cut."""
    size = os.path.getsize(path)
    cuts = [0]
    with open(path, "rb") as f:
        for i in range(1, parts):
            pos = max(size * i // parts, cuts[-1])
            f.seek(pos)
            while True:
                buf = f.read(4096)
                if not buf:
                    pos = size
                    break
                hit = min((j for j in (buf.find(bytes([c])) for c in _WS) if j >= 0), default=-1)
                if hit >= 0:
                    pos += hit + 1
                    break
                pos += len(buf)
            cuts.append(min(pos, size))
    cuts.append(size)
    return cuts


@dataclass(frozen=True)
class FileRange:
    path: str
    start: int
    end: int


def assign_files(paths: list[str], mappers: int) -> list[list[FileRange]]:
    """Each mapper's share of the input: every file cut into `mappers` ranges by bytes, and
    mapper i takes the i-th range of every file (so each mapper gets about 1/M of the bytes
    of every file, whatever the mix of sizes)."""
    shares: list[list[FileRange]] = [[] for _ in range(mappers)]
    for p in paths:
        cuts = split_points(p, mappers)
        for i in range(mappers):
            if cuts[i + 1] > cuts[i]:
                shares[i].append(FileRange(str(p), cuts[i], cuts[i + 1]))
    return shares


def count_files(paths: Iterable[str | Path]) -> Counter[str]:
    """The reference: a Counter over every word of every file, streamed."""
    c: Counter[str] = Counter()
    for p in paths:
        c.update(iter_words_range(p))
    return c


# ----- synthetic input -------------------------------------------------------------------

_LETTERS = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)


@lru_cache(maxsize=8)
def vocabulary(vocab: int, seed: int = 0, min_len: int = 3, max_len: int = 12) -> tuple[str, ...]:
    """`vocab` distinct lowercase words, lengths uniform in [min_len, max_len], seeded.
    Rank 1 (the most frequent under Zipf) is index 0."""
    rng = np.random.default_rng([seed, 0x766F63])
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < vocab:
        n = vocab - len(out)
        lens = rng.integers(min_len, max_len + 1, size=n)
        letters = _LETTERS[rng.integers(0, 26, size=int(lens.sum()))].tobytes()
        pos = 0
        for ln in lens.tolist():
            w = letters[pos:pos + ln].decode()
            pos += ln
            if w not in seen:
                seen.add(w)
                out.append(w)
    return tuple(out)


#: Draws made at a time: a synthetic stream of any length needs memory for one chunk only.
ZIPF_CHUNK = 1 << 20


def _zipf_cdf(alpha: float, vocab: int) -> np.ndarray:
    w = 1.0 / np.power(np.arange(1, vocab + 1, dtype=np.float64), alpha)
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    return cdf


def iter_zipf_ranks(alpha: float, words: int, vocab: int, seed: int, part: int,
                    chunk: int | None = None) -> Iterator[np.ndarray]:
    """[`zipf_ranks`]'s stream in chunks of at most `chunk` draws (default `ZIPF_CHUNK`).
    The generator's draws do not depend on how they are cut, so the concatenated chunks are
    the same stream."""
    step = chunk or ZIPF_CHUNK
    rng = np.random.default_rng([seed, part])
    cdf = None if alpha == 0 else _zipf_cdf(alpha, vocab)
    left = words
    while left > 0:
        n = min(step, left)
        left -= n
        if cdf is None:
            yield rng.integers(0, vocab, size=n, dtype=np.int64)
        else:
            yield np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), vocab - 1)


def zipf_ranks(alpha: float, words: int, vocab: int, seed: int, part: int) -> np.ndarray:
    """Word indices (0 = most frequent) of part `part` of a seeded stream: `words` draws from
    a Zipf law of exponent `alpha` over `vocab` ranks (P(rank r) ~ 1/r^alpha; alpha 0 is
    uniform). The same (seed, part) gives the same stream in every process."""
    chunks = list(iter_zipf_ranks(alpha, words, vocab, seed, part))
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)


def zipf_share(words: int, mappers: int, i: int) -> int:
    """How many of the `words` words mapper i generates."""
    return words // mappers + (1 if i < words % mappers else 0)


def zipf_counts(alpha: float, words: int, vocab: int, seed: int, mappers: int, i: int) -> np.ndarray:
    """Mapper i's count of every vocabulary index (length `vocab`), counted chunk by chunk:
    memory for the vocabulary and one chunk, whatever the number of words."""
    total = np.zeros(vocab, dtype=np.int64)
    for ranks in iter_zipf_ranks(alpha, zipf_share(words, mappers, i), vocab, seed, i):
        total += np.bincount(ranks, minlength=vocab)
    return total


def count_zipf(alpha: float, words: int, vocab: int, seed: int, mappers: int) -> Counter[str]:
    """The reference Counter over every mapper's synthetic stream."""
    voc = vocabulary(vocab, seed)
    total = np.zeros(vocab, dtype=np.int64)
    for i in range(mappers):
        total += zipf_counts(alpha, words, vocab, seed, mappers, i)
    return Counter({voc[j]: int(n) for j, n in enumerate(total.tolist()) if n})


# ----- partitioning ----------------------------------------------------------------------

def reducer_of(key: bytes, reducers: int) -> int:
    """A stable hash of the key's bytes mod R (CRC-32: the same in every process and run,
    unlike Python's salted `hash`)."""
    return zlib.crc32(key) % reducers
