"""bertlook.attention.host_memory: the model steps keep freed map-sized blocks in the heap (glibc mallopt)."""

from __future__ import annotations

import ctypes.util
import platform

import pytest

from bertlook.attention import host_memory


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(host_memory, "_DONE", [])
    monkeypatch.delenv(host_memory.ENV, raising=False)
    return host_memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt (this machine: Debian, glibc)")
def test_glibc_thresholds_set_once(fresh, monkeypatch):
    assert fresh.reuse_freed_memory() == "heap reuse on (mmap and trim thresholds 2 GiB)"
    monkeypatch.setenv(host_memory.ENV, "system")  # once per process: a later call says what was done
    assert fresh.reuse_freed_memory().startswith("heap reuse on")


def test_opt_out_and_no_glibc(fresh, monkeypatch):
    monkeypatch.setenv(host_memory.ENV, "System")
    assert fresh.reuse_freed_memory() == "glibc defaults kept (BERTLOOK_HOST_MALLOC=system)"
    monkeypatch.setattr(host_memory, "_DONE", [])
    monkeypatch.delenv(host_memory.ENV)
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: "/nonexistent/libc-none.so")
    assert fresh.reuse_freed_memory().startswith("no glibc mallopt in /nonexistent/libc-none.so")


def test_model_loading_turns_it_on(fresh, tiny_bert_dir):
    from bertlook.attention.modeling import load_model, resolve_model

    load_model(resolve_model(str(tiny_bert_dir)), "cpu")
    assert fresh._DONE  # load_model called it
